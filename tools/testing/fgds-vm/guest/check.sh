# SPDX-License-Identifier: GPL-2.0
#
# Guest side of the test command: run every selftest binary, TAP to
# /fgds/out/tap/<name>.tap (and the console), then a kmemleak scan.
# FGDS_TESTS (from the host's FGDS_TESTS, comma separated) runs only those;
# FGDS_GUEST_TESTS is another mode's own list (guest/iommu.sh).
. /fgds/src/tools/testing/fgds-vm/guest/setup.sh

bin=/fgds/tests-bin-$FGDS_KCONFIG
mkdir -p /fgds/out/tap
for t in ${FGDS_TESTS:-${FGDS_GUEST_TESTS:-$(cat $bin/TESTS)}}; do
	echo "fgds-guest: running $t"
	(cd $bin && timeout 1800 ./$t) 2>&1 | tee /fgds/out/tap/$t.tap
done

if [ -e /sys/kernel/debug/kmemleak ]; then
	echo scan >/sys/kernel/debug/kmemleak
	echo scan >/sys/kernel/debug/kmemleak
	cat /sys/kernel/debug/kmemleak >/fgds/out/kmemleak.txt
fi
