# SPDX-License-Identifier: GPL-2.0
#
# Guest side of make check's IOMMU boot (run-vm.sh iommu: QEMU's intel-iommu,
# intel_iommu=on): the selftests of fgds behind a translating IOMMU, TAP to
# /fgds/out/tap/<name>.tap, then a kmemleak scan. FGDS_TESTS runs only those.
. /fgds/src/tools/testing/fgds-vm/guest/setup.sh

bin=/fgds/tests-bin-$FGDS_KCONFIG
mkdir -p /fgds/out/tap
for t in ${FGDS_TESTS:-fgds_iommu_test}; do
	echo "fgds-guest: running $t"
	(cd $bin && timeout 1800 ./$t) 2>&1 | tee /fgds/out/tap/$t.tap
done

if [ -e /sys/kernel/debug/kmemleak ]; then
	echo scan >/sys/kernel/debug/kmemleak
	echo scan >/sys/kernel/debug/kmemleak
	cat /sys/kernel/debug/kmemleak >/fgds/out/kmemleak.txt
fi
