#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Started by init beside the mode. Every 5 s it reads /proc/diskstats; an
# NVMe disk with requests in flight and no I/O completed for 45 s gets one
# line on the console:
#
#   fgds-io-watch: nvme0n1: 2 requests in flight, none completed for 45 s
#
# The NVMe driver times a request out at 30 s and says so ("I/O tag ...
# timeout"), so silence past 45 s means that the guest lost a timer
# interrupt besides the device's completion or doorbell: TCG's fault on a
# loaded host, not the guest's (run-vm.sh then boots again, as it does on
# the driver's own timeout lines). Requests held before the driver (io.max,
# a plug) are not in flight. Multipath heads are left out: they hold I/O
# while no path is usable, on purpose.
quiet_s=${1:-45}
state=/tmp/io-watch.state
: >"$state"
while sleep 5; do
	disks=
	for d in /sys/block/nvme*; do
		[ -e "$d" ] && [ ! -e "$d/multipath" ] && disks="$disks ${d##*/}"
	done
	awk -v disks="$disks" -v state="$state" -v quiet_s="$quiet_s" '
		BEGIN {
			n = split(disks, d, " ")
			for (i = 1; i <= n; i++) watched[d[i]] = 1
			while ((getline line < state) > 0) {
				split(line, f, " ")
				done[f[1]] = f[2]; quiet[f[1]] = f[3]; said[f[1]] = f[4]
			}
			close(state)
		}
		$3 in watched {
			# reads, writes, discards and flushes completed; requests in flight
			c = $4 + $8 + ($15 == "" ? 0 : $15) + ($19 == "" ? 0 : $19)
			q = ($12 > 0 && ($3 in done) && done[$3] == c) ? quiet[$3] + 5 : 0
			s = said[$3] + 0
			if (q >= quiet_s && !s) {
				printf "fgds-io-watch: %s: %d requests in flight, none completed for %d s\n",
					$3, $12, q > "/dev/kmsg"
				s = 1
			}
			out = out $3 " " c " " q " " s "\n"
		}
		END { printf "%s", out > state }
	' /proc/diskstats
done
