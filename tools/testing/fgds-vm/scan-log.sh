#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Fail (exit 1, listing them) when a kernel console log holds a report that
# means the kernel misbehaved, whatever the tests said: oops, BUG, WARN,
# KASAN, UBSAN, lockdep, hung task, soft lockup, RCU stall, panic.
set -u
log=${1:?usage: scan-log.sh CONSOLE_LOG}
pat='(Oops|BUG:|WARNING:|KASAN:|UBSAN:|general protection fault|Kernel panic|'
pat+='possible circular locking|possible recursive locking|inconsistent lock state|'
pat+='suspicious RCU usage|blocked for more than|soft lockup|hard LOCKUP|rcu_.*detected stalls|'
pat+='kernel BUG at|Unable to handle|DEBUG_LOCKS_WARN_ON|ODEBUG:|unreferenced object)'
hits=$(grep -aE '^\[ *[0-9]+\.[0-9]+\] ' "$log" | grep -aE "$pat")
if [ -n "$hits" ]; then
	echo "fgds-vm: kernel reports in $log:" >&2
	echo "$hits" | head -n 20 >&2
	exit 1
fi
exit 0
