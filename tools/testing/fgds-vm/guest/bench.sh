# SPDX-License-Identifier: GPL-2.0
# make bench: the driver's figures (tools/testing/selftests/fgds/fgds_bench.c),
# the device requests a vectored or boundary-crossing read becomes
# (fgds_vecsplit.c), then the in-VM suite (tools/testing/fgds-vm/guest-programs/fgds_vmbench.c):
# every path, same NVMe, same file, table on the console, rows in
# /fgds/out/vm-suite.json; then unregistered against registered CUDA memory
# of the stand-in through libcufile.so.0 (guest-programs/cufile_unreg_bench.c:
# per-call times, REG_BUFFER calls per run), rows in /fgds/out/unreg-bench.json.
. /fgds/src/tools/testing/fgds-vm/guest/setup.sh
cd /fgds/tests-bin-$FGDS_KCONFIG || exit 1
./fgds_bench "$FGDS_EXT4/bench.bin" /fgds/out/vm-driver.json
echo
./fgds_vecsplit "$FGDS_EXT4/vecsplit.bin" | tee /fgds/out/vecsplit.txt
echo
echo "fgds-guest: in-VM suite (NVMe -> GPU stand-in, every path)"
./fgds_vmbench "$FGDS_EXT4/vmbench.bin" /fgds/out/vm-suite.json "$FGDS_CMB_BDF"
echo
echo "fgds-guest: unregistered vs registered GPU memory (libcufile.so.0)"
if [ -x ./cufile_unreg_bench ]; then
	./cufile_unreg_bench "$FGDS_EXT4/unreg-bench.bin" /fgds/out/unreg-bench.json
else
	echo "fgds-guest: cufile_unreg_bench not built (no libcufile)"
fi
if [ -x ./fgds_python_unreg_bench ]; then
	FGDS_BENCH_JSON=/fgds/out/unreg-bench-python.json ./fgds_python_unreg_bench
fi
