# SPDX-License-Identifier: GPL-2.0
#
# Guest side of the test command: run every selftest binary, TAP to
# /fgds/out/tap/<name>.tap (and the console), then a kmemleak scan.
# FGDS_TESTS (from the host's FGDS_TESTS, comma separated) runs only those;
# FGDS_GUEST_TESTS is another mode's own list (guest/iommu.sh).
# FGDS_STRESS=1 (make stress) runs the bounded tests longer: the stress
# run 600 s (make check: 40), the fuzzer up to 800 s and 1,000,000 calls
# (100,000 or 300 s), 200 rebinds of the exporter (100), 100 rounds of each
# lifetime test with I/O in flight (30).
. /fgds/src/tools/testing/fgds-vm/guest/setup.sh

if [ "${FGDS_STRESS:-0}" = 1 ]; then
	export FGDS_STRESS_SECONDS=600 FGDS_FUZZ_SECONDS=800 FGDS_FUZZ_ITERS=1000000
	export FGDS_REBIND_ROUNDS=200 FGDS_LIFETIME_ROUNDS=100
fi

bin=/fgds/tests-bin-$FGDS_KCONFIG
mkdir -p /fgds/out/tap
for t in ${FGDS_TESTS:-${FGDS_GUEST_TESTS:-$(cat $bin/TESTS)}}; do
	echo "fgds-guest: running $t"
	t0=$(date +%s)
	(cd $bin && timeout 1800 ./$t) 2>&1 | tee /fgds/out/tap/$t.tap
	echo "fgds-guest: $t took $(($(date +%s) - t0)) s"
done

if [ -e /sys/kernel/debug/kmemleak ]; then
	echo scan >/sys/kernel/debug/kmemleak
	echo scan >/sys/kernel/debug/kmemleak
	cat /sys/kernel/debug/kmemleak >/fgds/out/kmemleak.txt
fi
