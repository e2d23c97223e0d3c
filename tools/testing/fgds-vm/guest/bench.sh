# SPDX-License-Identifier: GPL-2.0
# make bench: the driver's figures (tools/testing/selftests/fgds/fgds_bench.c).
. /fgds/src/tools/testing/fgds-vm/guest/setup.sh
cd /fgds/tests-bin-$FGDS_KCONFIG && ./fgds_bench "$FGDS_EXT4/bench.bin"
