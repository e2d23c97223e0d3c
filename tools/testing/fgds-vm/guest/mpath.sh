# SPDX-License-Identifier: GPL-2.0
#
# Guest side of make check's multipath boot (run-vm.sh mpath:
# nvme_core.multipath=Y): check mode with fgds_io_test as its list, every
# data test through NVMe multipath heads, and its nvme_multipath variant on
# the head of two controllers sharing a namespace. FGDS_TESTS runs only those.
FGDS_GUEST_TESTS=fgds_io_test
. /fgds/src/tools/testing/fgds-vm/guest/check.sh
