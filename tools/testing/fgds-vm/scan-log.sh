#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Fail (exit 1, listing them) when a kernel console log holds a report that
# means the kernel misbehaved, whatever the tests said: oops, BUG, WARN,
# KASAN, UBSAN, lockdep, hung task, soft lockup, RCU stall, panic, and a DMA
# fault (a DMA the IOMMU blocked).
#
# One exception: a report whose call trace runs in a KUnit doctest of the
# kernel crate other than those of fgds's abstractions is upstream's (7.2's
# time::hrtimer doctests put an hrtimer on the stack without telling
# DEBUG_OBJECTS); it is listed, and does not fail the run.
set -u
log=${1:?usage: scan-log.sh CONSOLE_LOG}
ours='rust_doctest_kernel_(dma_buf|miscdevice|pci|pci_p2pdma)_rs_'
pat='(Oops|BUG:|WARNING:|KASAN:|UBSAN:|general protection fault|Kernel panic|'
pat+='possible circular locking|possible recursive locking|inconsistent lock state|'
pat+='suspicious RCU usage|blocked for more than|soft lockup|hard LOCKUP|rcu_.*detected stalls|'
pat+='kernel BUG at|Unable to handle|DEBUG_LOCKS_WARN_ON|ODEBUG:|unreferenced object|'
# a DMA the IOMMU blocked (Intel, AMD)
pat+='DMAR: \[DMA|IO_PAGE_FAULT)'
# Split the log into reports (from an ODEBUG line or "cut here" to "end trace",
# 150 lines at most) and the rest; the reports of upstream doctests go to
# $upstream.
upstream=$(mktemp)
trap 'rm -f "$upstream"' EXIT
kept=$(grep -aE '^\[ *[0-9]+\.[0-9]+\] ' "$log" | awk -v ours="$ours" -v up="$upstream" '
	function flush() {
		if (n == 0) return
		if (block ~ /rust_doctest_kernel_/ && block !~ ours)
			for (i = 1; i <= n; i++) print lines[i] > up
		else
			for (i = 1; i <= n; i++) print lines[i]
		n = 0; block = ""
	}
	/ODEBUG:|-+\[ cut here \]-+/ { if (!inblock) { flush(); inblock = 1 } }
	{ if (inblock) { lines[++n] = $0; block = block "\n" $0 } else print }
	/---\[ end trace/ || n >= 150 { if (inblock) { inblock = 0; flush() } }
	END { flush() }')
hits=$(echo "$kept" | grep -aE "$pat")
if [ -s "$upstream" ]; then
	echo "fgds-vm: reports in upstream doctests (not failing the run):" >&2
	grep -aE "$pat" "$upstream" | head -n 5 >&2
fi
if [ -n "$hits" ]; then
	echo "fgds-vm: kernel reports in $log:" >&2
	echo "$hits" | head -n 20 >&2
	exit 1
fi
exit 0
