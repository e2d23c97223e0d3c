#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Boot the fgds test VM and run one guest mode (guest/<mode>.sh).
#
#   run-vm.sh MODE      MODE: check, demo, shell-less modes under guest/
#
# Environment:
#   FGDS_KCONFIG     release (default) or debug
#   FGDS_VM_TIMEOUT  watchdog in seconds (default 2700): the VM is killed then
#   FGDS_ACCEL       tcg (default) or kvm; kvm is used only if asked for and
#                    a probe boot with it succeeds (nested KVM hangs on some hosts)
#   FGDS_TCG_THREAD  multi (default) or single: TCG's vCPU threading
#   FGDS_VM_BOOT_TIMEOUT  seconds for the kernel to start init (default 600)
#   FGDS_VM_BUILT    path of a bzImage built for FGDS_KCONFIG together with
#                    the test programs: skips both builds (check.sh sets it)
#
# The topology (q35, TCG):
#   root port - x3130 switch -+- dn1: NVMe "fgds0" (data: raw, ext4, xfs)
#                             +- dn2: ivshmem-plain, BAR2 = /dev/shm/fgds-vram-* (the GPU stand-in)
#                             +- dn3: NVMe "fgdscmb" with a 64 MiB CMB (upstream p2pmem)
#                             +- dn4: ivshmem-plain, BAR2 = 64 MiB (a second GPU stand-in)
# The console is logged to build/vm-<cfg>/console.log, the guest's output to
# build/vm-<cfg>/out/guest.log (shown as it grows). The run fails when the
# guest does not finish, or when the log holds an oops, a BUG, a WARN, a KASAN,
# lockdep or hung-task report.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

need_root
mode=${1:?usage: run-vm.sh MODE}
[ -f "$FGDS_VM/guest/$mode.sh" ] || die "no guest mode '$mode' (see $FGDS_VM/guest/)"
cfg=$(fgds_kconfig)
timeout_s=${FGDS_VM_TIMEOUT:-2700}

if [ -n "${FGDS_VM_BUILT:-}" ]; then
	# check.sh has just built both (it sets this to the bzImage's path).
	bzimage=$FGDS_VM_BUILT
else
	bzimage=$("$FGDS_VM/build-kernel.sh" "$cfg" | tail -n1)
	"$FGDS_VM/build-tests.sh" "$cfg"
fi

vm=$FGDS_BUILD/vm-$cfg
out=$vm/out
rm -rf "$out"
mkdir -p "$out/req" "$out/resp" "$out/tap"
cp "$FGDS_VM/guest/init" "$FGDS_ROOT/fgds/init"
chmod 755 "$FGDS_ROOT/fgds/init"
mkdir -p "$FGDS_ROOT/fgds/src" "$FGDS_ROOT/fgds/out" "$FGDS_ROOT/lib/modules"

# Fresh sparse disks and VRAM every boot.
rm -f "$vm/nvme0.img" "$vm/nvme1.img"
truncate -s 4G "$vm/nvme0.img"
truncate -s 256M "$vm/nvme1.img"
vram=/dev/shm/fgds-vram-$$
vram2=/dev/shm/fgds-vram2-$$
truncate -s 512M "$vram"
truncate -s 64M "$vram2"
gcc -O2 -Wall -o "$vm/barcheck" "$FGDS_VM/barcheck.c"

log=$vm/console.log
: >"$log"
"$vm/barcheck" "$vram" serve "$out" &
checker=$!
cleanup() {
	touch "$out/stop"
	wait "$checker" 2>/dev/null || true
	rm -f "$vram" "$vram2"
}
trap cleanup EXIT

# Multi-threaded TCG. On a two-core host loaded by a kernel build a halted
# vCPU was once seen to take no interrupt for minutes (RCU stalls, I/O that
# never completed); the run then fails on the report. FGDS_TCG_THREAD=single
# runs the vCPUs on one thread (much slower here).
accel=tcg,thread=${FGDS_TCG_THREAD:-multi}
if [ "${FGDS_ACCEL:-tcg}" = kvm ]; then
	if "$FGDS_VM/probe-kvm.sh" "$bzimage"; then
		accel=kvm
	else
		log "KVM probe boot failed: using TCG"
	fi
fi

append="console=ttyS0 root=fgdsroot rootfstype=9p ro"
append+=" rootflags=trans=virtio,version=9p2000.L,msize=262144,cache=loose"
append+=" init=/fgds/init panic=-1 vfio.enable_unsafe_noiommu_mode=1 printk.devkmsg=on"
append+=" fgdsvm.mode=$mode fgdsvm.kconfig=$cfg"

# One boot: QEMU in the background, its pid in $qemu.
boot() {
	: >"$log"
	timeout --foreground -k 10 "$timeout_s" qemu-system-x86_64 \
		-M q35 -accel "$accel" -cpu max -smp 2 -m 3G \
		-display none -vga none -nic none -monitor none -no-reboot -serial "file:$log" \
		-kernel "$bzimage" -append "$append" \
		-fsdev local,id=root,path="$FGDS_ROOT",security_model=none,readonly=on \
		-device virtio-9p-pci,fsdev=root,mount_tag=fgdsroot \
		-fsdev local,id=src,path="$FGDS_TOP",security_model=none,readonly=on \
		-device virtio-9p-pci,fsdev=src,mount_tag=fgdssrc \
		-fsdev local,id=out,path="$out",security_model=none \
		-device virtio-9p-pci,fsdev=out,mount_tag=fgdsout \
		-device pcie-root-port,id=rp1,chassis=1,slot=1 \
		-device x3130-upstream,id=up1,bus=rp1 \
		-device xio3130-downstream,id=dn1,bus=up1,chassis=2,slot=1 \
		-device xio3130-downstream,id=dn2,bus=up1,chassis=3,slot=2 \
		-device xio3130-downstream,id=dn3,bus=up1,chassis=4,slot=3 \
		-device xio3130-downstream,id=dn4,bus=up1,chassis=5,slot=4 \
		-drive file="$vm/nvme0.img",if=none,id=nvm0,format=raw,cache=unsafe \
		-device nvme,serial=fgds0,drive=nvm0,bus=dn1 \
		-object memory-backend-file,id=vram,share=on,mem-path="$vram",size=512M \
		-device ivshmem-plain,memdev=vram,bus=dn2 \
		-drive file="$vm/nvme1.img",if=none,id=nvm1,format=raw,cache=unsafe \
		-device nvme,serial=fgdscmb,drive=nvm1,cmb_size_mb=64,bus=dn3 \
		-object memory-backend-file,id=vram2,share=on,mem-path="$vram2",size=64M \
		-device ivshmem-plain,memdev=vram2,bus=dn4 \
		</dev/null &
	qemu=$!
}

# The kernel reaches init in about a minute (debug kernel, TCG). A boot that
# has not reached it in boot_s stalled before fgds ran at all: it is shown,
# and retried once.
boot_s=${FGDS_VM_BOOT_TIMEOUT:-600}
log "booting ($cfg kernel, $mode, console: $log)"
set +e
for attempt in 1 2; do
	boot
	waited=0
	while kill -0 $qemu 2>/dev/null && ! grep -qaE '\] fgds-guest: mode' "$log"; do
		if [ $waited -ge "$boot_s" ]; then
			log "boot $attempt stalled: no init after ${boot_s}s"
			log "its console ended with:"
			tail -n 40 "$log" | sed 's/^/fgds-vm: console: /' >&2
			kill $qemu
			wait $qemu
			cp "$log" "$log.stalled-$attempt"
			continue 2
		fi
		sleep 2
		waited=$((waited + 2))
	done
	break
done
# Show the guest's output as it grows.
tail -n +1 -F --pid=$qemu "$out/guest.log" 2>/dev/null &
wait $qemu
rc=$?
sleep 0.5
set -e

status=0
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	log "watchdog: the VM did not finish in ${timeout_s}s and was killed"
	status=1
fi
grep -aE '\] fgds-guest: exit' "$log" | sed 's/^\[[^]]*\] //' || true
if ! grep -qaE '\] fgds-guest: done' "$log"; then
	log "the guest did not finish (see $log); its console ended with:"
	tail -n 60 "$log" | sed 's/^/fgds-vm: console: /' >&2
	status=1
fi
"$FGDS_VM/scan-log.sh" "$log" || status=1
exit $status
