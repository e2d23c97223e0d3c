#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The test command: host-side tests, then every in-guest selftest in the VM
# (on FGDS_KCONFIG, default debug), then the IOMMU boot (fgds_iommu_test
# behind QEMU's intel-iommu), the multipath boot (fgds_io_test through NVMe
# multipath heads), then the summary line
#   N passed, N failed[, N skipped]
# Exit status 0 only when nothing failed.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

need_root
export FGDS_KCONFIG=$(fgds_kconfig "${FGDS_KCONFIG:-debug}")
results=$FGDS_BUILD/results-$FGDS_KCONFIG
rm -rf "$results"
mkdir -p "$results"
start=$(date +%s)

# Disk. A cold run writes some 13 GB under build/ and CI's machines have had
# less free (the run then fails wherever ENOSPC lands first: the kernel's
# link, pip, git). What this run still has to write, in MiB, from what build/
# lacks (measured on a cold run): the toolchain root 2.5 GB, the kernel tree
# 1.8 GB, the debug kernel's objects 0.9 GB (release 0.5) and the exporters'
# 0.2 GB, the Rust builds 0.5 GB, the series' pristine repository 0.3 GB (1.8
# while it is imported) and its checkout 1.8 GB while the series check runs,
# the VM's disks and logs 0.8 GB; and torch with lmcache 5 GB, with up to 1 GB
# of downloads while they go in. Where there is room for all but torch, the
# torch and lmcache tests are skipped and say why; the rest runs.
gb() { awk -v m="$1" 'BEGIN { printf "%.1f", m / 1024 }'; }
need=$((800 + 1900 + 1024))
[ "$("$FGDS_VM/toolchain.sh" --status 2>/dev/null)" = ready ] || need=$((need + 2600))
[ -f "$FGDS_ROOT/fgds/linux/.fgds-tree" ] || need=$((need + 1900))
[ -f "$FGDS_ROOT/fgds/kbuild-$FGDS_KCONFIG/vmlinux" ] || need=$((need + 1000))
[ -d "$FGDS_ROOT/fgds/kbuild-exporters" ] || need=$((need + 250))
[ -d "$FGDS_TOP/tools/target" ] || need=$((need + 500))
[ -d "$FGDS_BUILD/linux-7.2" ] || need=$((need + 400))
torch=0
[ "${FGDS_PY_TORCH:-1}" = 0 ] || [ -f "$FGDS_BUILD/python-venv/.torch-2.15.0" ] || torch=6000
free0=$(disk_free_mb)
log "build/'s file system has $(gb "$free0") GB free; this run writes up to $(gb $((need + torch))) GB (1 GB of it a margin)"
if [ "$torch" -gt 0 ] && [ "$free0" -lt $((need + torch)) ] && [ "$free0" -ge "$need" ]; then
	export FGDS_PY_TORCH=0
	export FGDS_PY_TORCH_WHY="not enough disk for torch: $(gb "$free0") GB free under build/, torch's CUDA wheels need $(gb $torch) GB beside the $(gb $need) GB of the rest"
	log "$FGDS_PY_TORCH_WHY; the torch and lmcache tests are skipped"
elif [ "$free0" -lt "$need" ]; then
	log "warning: less free than this run writes: it may fail with ENOSPC (No space left on device)"
fi
# The lowest free space seen, for the summary's disk line.
echo "$free0" >"$results/disk-low"
(
	low=$free0
	while sleep 10; do
		f=$(disk_free_mb) || continue
		[ "$f" -lt "$low" ] && low=$f && echo "$low" >"$results/disk-low"
	done
) </dev/null >/dev/null 2>&1 &
disk_watch=$!
trap 'kill $disk_watch 2>/dev/null' EXIT

# The host tests run while the kernel and the test programs build: the
# build leaves a core idle in its long single-threaded steps (rustc on the
# kernel crate and its doctests, the links), and the host tests, niced so
# that the build keeps the lead, fill it. Both end before the VM boots: on
# a loaded host TCG's vCPUs miss timer interrupts. A failed build is left
# to run-vm.sh, which builds again and reports it.
nice -n 10 "$FGDS_VM/host-tests.sh" >"$results/host.tap" 2>&1 &
host_tests=$!
if bzimage=$("$FGDS_VM/build-kernel.sh" "$FGDS_KCONFIG" | tail -n1) &&
	"$FGDS_VM/build-tests.sh" "$FGDS_KCONFIG"; then
	export FGDS_VM_BUILT=$bzimage
	# The GPU drivers' exporter changes in patches/ (no emulated device runs
	# them): they must compile, warning-free.
	{
		echo "1..1"
		if "$FGDS_VM/build-exporters.sh" >"$results/exporters.log" 2>&1; then
			echo "ok 1 exporters: the amdgpu and xe objects patches/ changes build"
		else
			echo "not ok 1 exporters: the amdgpu and xe objects patches/ changes build"
			sed 's/^/# /' "$results/exporters.log" | tail -n 20
		fi
	} >"$results/exporters.tap"
fi
wait $host_tests
log "host tests and build took $(( $(date +%s) - start ))s"
cat "$results/host.tap"
cat "$results/exporters.tap" 2>/dev/null

# The TAP lines of a boot: NAME (vm, vm-iommu), its build/ directory, whether
# run-vm.sh succeeded; then its third line, given as "ok ..." or "not ok ...".
boot_tap() {
	local name=$1 dir=$2 ok=$3 third=$4 out=$2/out
	echo "1..3"
	if [ "$ok" = 1 ]; then echo "ok 1 $name: guest ran to completion, kernel log clean"
	else
		echo "not ok 1 $name: guest ran to completion, kernel log clean"
		# Why: the cause of each failed attempt, QEMU's last words, the reports.
		sed "s/^/# $name: /" "$dir/failed" 2>/dev/null
	fi
	# A first boot that stopped without a word, and was run again.
	sed "s/^/# $name: /" "$dir/retried" 2>/dev/null
	if grep -q . "$out/kmemleak.txt" 2>/dev/null; then
		echo "not ok 2 $name: kmemleak found leaks"; sed 's/^/# /' "$out/kmemleak.txt" | head -40
	elif [ -f "$out/kmemleak.txt" ]; then echo "ok 2 $name: kmemleak clean"
	else echo "ok 2 $name: kmemleak clean # SKIP kernel without kmemleak"; fi
	echo "${third/ok/ok 3}"
}

vm_ok=1
"$FGDS_VM/run-vm.sh" check || vm_ok=0
vm=$FGDS_BUILD/vm-$FGDS_KCONFIG
n=$(ls "$vm"/out/tap/*.tap 2>/dev/null | wc -l)
if [ "$n" -gt 0 ]; then third="ok vm: $n selftest programs ran"
else third="not ok vm: no selftest program ran"; fi
boot_tap vm "$vm" $vm_ok "$third" >"$results/vm.tap"
cp "$vm"/out/tap/*.tap "$results/" 2>/dev/null

# The IOMMU boot: the same kernel and machine behind QEMU's intel-iommu
# (run-vm.sh iommu), for the selftests of fgds behind a translating IOMMU.
# A developer's FGDS_TESTS runs it only when it names fgds_iommu_test.
case ",${FGDS_TESTS:-fgds_iommu_test}," in
*,fgds_iommu_test,*)
	iommu_ok=1
	FGDS_TESTS= "$FGDS_VM/run-vm.sh" iommu || iommu_ok=0
	ivm=$FGDS_BUILD/vm-$FGDS_KCONFIG-iommu
	itap=$ivm/out/tap/fgds_iommu_test.tap
	# Behind the IOMMU nothing may skip: a skip there means no IOMMU.
	third="fgds_iommu_test ran behind the IOMMU, nothing skipped"
	if grep -q . "$itap" 2>/dev/null && ! grep -q '# SKIP' "$itap"; then third="ok vm-iommu: $third"
	else third="not ok vm-iommu: $third"; fi
	boot_tap vm-iommu "$ivm" $iommu_ok "$third" >"$results/vm-iommu.tap"
	if [ -f "$itap" ]; then
		cp "$itap" "$results/"
	else
		printf '1..1\nnot ok 1 fgds_iommu_test did not run in the IOMMU boot\n' \
			>"$results/fgds_iommu_test.tap"
	fi
	;;
esac
# The multipath boot: the same kernel and machine with NVMe multipath heads
# (run-vm.sh mpath), for fgds_io_test through them. A developer's FGDS_TESTS
# runs it only when it names fgds_io_test.
case ",${FGDS_TESTS:-fgds_io_test}," in
*,fgds_io_test,*)
	mpath_ok=1
	FGDS_TESTS= "$FGDS_VM/run-vm.sh" mpath || mpath_ok=0
	mvm=$FGDS_BUILD/vm-$FGDS_KCONFIG-mpath
	mtap=$mvm/out/tap/fgds_io_test.tap
	# The two-controller head's variant must have run, not skipped.
	third="fgds_io_test's nvme_multipath variant ran through a head of two paths"
	if grep -q '^ok .* io\.nvme_multipath\.' "$mtap" 2>/dev/null &&
		! grep -q 'io\.nvme_multipath\..*# SKIP' "$mtap" &&
		! grep -q '^not ok' "$mtap"; then
		third="ok vm-mpath: $third"
	else
		third="not ok vm-mpath: $third"
	fi
	boot_tap vm-mpath "$mvm" $mpath_ok "$third" >"$results/vm-mpath.tap"
	if [ -f "$mtap" ]; then
		cp "$mtap" "$results/fgds_io_test-mpath.tap"
	else
		printf '1..1\nnot ok 1 fgds_io_test did not run in the multipath boot\n' \
			>"$results/fgds_io_test-mpath.tap"
	fi
	;;
esac
python3 "$FGDS_VM/kunit-tap.py" "$FGDS_BUILD/vm-$FGDS_KCONFIG/console.log" \
	"$FGDS_ROOT/fgds/kbuild-$FGDS_KCONFIG/.config" >"$results/kunit.tap"
cat "$results/kunit.tap"

# The disk: a run that filled it says so at the end (then its other
# failures may be ENOSPC, wherever it landed).
kill $disk_watch 2>/dev/null
low=$(cat "$results/disk-low")
{
	echo "1..1"
	if [ "$low" -ge 100 ]; then
		echo "ok 1 disk: build/'s file system never filled (lowest free: $(gb "$low") GB, $(gb "$free0") GB at the start)"
	else
		echo "not ok 1 disk: build/'s file system never filled (lowest free: $low MB, $(gb "$free0") GB at the start)"
		echo "# the disk filled: the failures above may be ENOSPC (No space left on device); make check needs $(gb $((need + torch))) GB free here"
	fi
} >"$results/disk.tap"
cat "$results/disk.tap"

python3 "$FGDS_VM/tap-summary.py" "$results"/*.tap
rc=$?
log "test command took $(( $(date +%s) - start ))s"
exit $rc
