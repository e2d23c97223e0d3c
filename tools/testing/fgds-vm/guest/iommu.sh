# SPDX-License-Identifier: GPL-2.0
#
# Guest side of make check's IOMMU boot (run-vm.sh iommu: QEMU's intel-iommu,
# intel_iommu=on): check mode with the selftests of fgds behind a
# translating IOMMU as its list. FGDS_TESTS runs only those.
FGDS_GUEST_TESTS=fgds_iommu_test
. /fgds/src/tools/testing/fgds-vm/guest/check.sh
