#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Boot the fgds test VM and run one guest mode (guest/<mode>.sh).
#
#   run-vm.sh MODE      MODE: check, demo, shell-less modes under guest/
#
# Mode iommu boots the same machine with QEMU's intel-iommu in front of
# every PCI device and intel_iommu=on (a translating IOMMU, strict
# invalidation): vfio-pci then has real IOMMU groups and type1 containers
# instead of its no-IOMMU mode (without interrupt remapping, which TCG's
# two vCPUs do not need: vfio_iommu_type1.allow_unsafe_interrupts=1), and
# every DMA the NVMe does goes through the IOMMU. The vCPUs say they are AMD
# family 0x17 (Zen), whose root complexes the kernel lets carry P2P
# (cpu_supports_p2pdma()), so that "fgdsfar", on its own root port, reaches
# the stand-ins through the root complex and the IOMMU, as on such a host.
# (Below the switch QEMU cannot stand for hardware with an IOMMU: its
# x3130 has no ACS, so the kernel uses bus addresses the switch would route,
# but QEMU sends every DMA through the IOMMU.) Results: build/vm-<cfg>-iommu/.
#
# Mode mpath boots it with NVMe multipath heads (nvme_core.multipath=Y; the
# other modes boot with N, so their namespaces have none): every namespace is
# then reached through a head, and "fgdsmp" through one of two controllers.
# Results: build/vm-<cfg>-mpath/.
#
# Environment:
#   FGDS_KCONFIG     release (default) or debug
#   FGDS_VM_TIMEOUT  watchdog in seconds (default 2700): the VM is killed then
#   FGDS_ACCEL       tcg (default) or kvm; kvm is used only if asked for and
#                    a probe boot with it succeeds (nested KVM hangs on some hosts)
#   FGDS_TCG_THREAD  multi (default) or single: TCG's vCPU threading
#   FGDS_VM_BOOT_TIMEOUT  seconds for the kernel to start init (default 600)
#   FGDS_VM_STALL_TIMEOUT seconds without console or guest output, QEMU all
#                    but idle, after which the guest counts as stalled
#                    (default 300; 0: never)
#   FGDS_TESTS       a,b: run only those selftests in check mode (for developers)
#   FGDS_STRESS      1: check mode runs the bounded tests longer (make stress)
#   FGDS_VM_BUILT    path of a bzImage built for FGDS_KCONFIG together with
#                    the test programs: skips both builds (check.sh sets it)
#
# The topology (q35, TCG):
#   root port - x3130 switch -+- dn1: NVMe "fgds0" (data: raw, ext4, xfs)
#                             +- dn2: ivshmem-plain, BAR2 = /dev/shm/fgds-vram-* (the GPU stand-in)
#                             +- dn3: NVMe "fgdscmb" with a 64 MiB CMB (upstream p2pmem)
#                             +- dn4: ivshmem-plain, BAR2 = 64 MiB (a second GPU stand-in)
#                             +- dn5: NVMe "fgdsslow", reads throttled to 8 MiB/s
#                                     (I/O that is surely in flight for the teardown tests:
#                                     the debug guest spent 130 to 170 ms submitting 32
#                                     reads of 128 KiB, in which 16 MiB/s, after QEMU's
#                                     burst of a tenth of it, had served nearly all)
#                             +- dn6, dn7: NVMes "fgdsmd0" and "fgdsmd1", an md raid0
#                                     array in the guest (/dev/md_fgds)
#                             +- dn8, dn9: two NVMe controllers "fgdsmp" of one
#                                     subsystem ("fgdsmp") sharing one namespace: an NVMe
#                                     multipath head in the guest (CONFIG_NVME_MULTIPATH)
#   root port 2 --------------- NVMe "fgdsfar" (shares no switch with the stand-ins:
#                                     P2P to them is refused)
# The host checks (barcheck) serve the first stand-in's BAR in out/ and the
# second's in out/bar2/.
# The console is logged to build/vm-<cfg>/console.log, the guest's output to
# build/vm-<cfg>/out/guest.log (shown as it grows), QEMU's CPU resets (a
# triple fault) and shutdown requests to build/vm-<cfg>/qemu.log. The run fails when the
# guest does not finish, or when the log holds an oops, a BUG, a WARN, a KASAN,
# lockdep or hung-task report.
#
# A guest that stops without a word (it stalls: every vCPU halted and no
# interrupt comes; QEMU ends, crashes or the guest resets with nothing on
# the console) is shown, its logs are kept as *.attempt-N, and the mode
# boots again on fresh disks and VRAM, up to three boots in all;
# build/vm-<cfg>/retried says why. So does a guest whose vCPU missed its
# timer interrupts (RCU's "timer wakeup didn't happen"), which TCG was seen
# to cause on a loaded host. In check mode a boot after the first runs only
# the selftest programs that had not finished: a program whose TAP output
# has all its planned results keeps them (its kernel log was clean, or there
# would be no other boot). A guest that stops after a kernel report, or that
# outlives FGDS_VM_TIMEOUT, is not booted again.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

need_root
mode=${1:?usage: run-vm.sh MODE}
[ -f "$FGDS_VM/guest/$mode.sh" ] || die "no guest mode '$mode' (see $FGDS_VM/guest/)"
cfg=$(fgds_kconfig)
timeout_s=${FGDS_VM_TIMEOUT:-2700}
boot_s=${FGDS_VM_BOOT_TIMEOUT:-600}
stall_s=${FGDS_VM_STALL_TIMEOUT:-300}
for v in FGDS_VM_TIMEOUT=$timeout_s FGDS_VM_BOOT_TIMEOUT=$boot_s FGDS_VM_STALL_TIMEOUT=$stall_s; do
	[[ ${v#*=} =~ ^[0-9]+$ ]] || die "${v%%=*} is '${v#*=}': give a number of seconds"
done

if [ -n "${FGDS_VM_BUILT:-}" ]; then
	# check.sh has just built both (it sets this to the bzImage's path).
	bzimage=$FGDS_VM_BUILT
else
	bzimage=$("$FGDS_VM/build-kernel.sh" "$cfg" | tail -n1)
	"$FGDS_VM/build-tests.sh" "$cfg"
fi

iommu_dev=()
iommu_args=
# No 5-level paging (TCG's "max" has LA57). In 7.2, identify_cpu() clears
# boot_cpu_data's capabilities with interrupts on, before the alternatives
# are patched: an interrupt in that window reads LA57 as off, KASAN then
# takes the direct map (at 0xff11... with LA57) for an address without
# shadow, and reports a wild-memory-access in handle_edge_irq() at 0.004 s
# uptime, before anything of fgds runs. Seen in 2 of about 17 debug boots.
cpu=max,la57=off
vm=$FGDS_BUILD/vm-$cfg
# NVMe multipath heads only in mode mpath: QEMU's controllers all report a
# subsystem of several controllers, so with heads on every namespace would
# be reached through one, and the other boots test namespaces without.
mpath_args=" nvme_core.multipath=N"
if [ "$mode" = mpath ]; then
	mpath_args=" nvme_core.multipath=Y"
	vm=$FGDS_BUILD/vm-$cfg-mpath
fi
if [ "$mode" = iommu ]; then
	# Interrupt remapping off: TCG delivers MSIs without it, and with two
	# vCPUs no x2APIC is needed.
	iommu_dev=(-device intel-iommu,intremap=off)
	iommu_args=" intel_iommu=on iommu.passthrough=0 iommu.strict=1"
	iommu_args+=" vfio_iommu_type1.allow_unsafe_interrupts=1"
	cpu=max,family=23,la57=off
	vm=$FGDS_BUILD/vm-$cfg-iommu
fi
out=$vm/out
log=$vm/console.log
qlog=$vm/qemu.log
qerr=$vm/qemu.stderr
vram=/dev/shm/fgds-vram-$$
vram2=/dev/shm/fgds-vram2-$$
rm -rf "$vm/retried" "$vm/failed" "$vm"/*.attempt-[0-9] "$vm/finished"
mkdir -p "$vm"
cp "$FGDS_VM/guest/init" "$FGDS_ROOT/fgds/init"
chmod 755 "$FGDS_ROOT/fgds/init"
mkdir -p "$FGDS_ROOT/fgds/src" "$FGDS_ROOT/fgds/out" "$FGDS_ROOT/lib/modules"
gcc -O2 -Wall -o "$vm/barcheck" "$FGDS_VM/barcheck.c"

checker=
checker2=
stop_checker() {
	if [ -n "$checker" ]; then
		touch "$out/stop" "$out/bar2/stop"
		wait "$checker" "$checker2" 2>/dev/null || true
		checker= checker2=
	fi
}
cleanup() {
	stop_checker
	rm -f "$vram" "$vram2"
}
trap cleanup EXIT

# Fresh results, sparse disks and VRAM, and the host's BAR checker, for
# every boot.
prepare() {
	stop_checker
	rm -rf "$out"
	mkdir -p "$out/req" "$out/resp" "$out/tap" "$out/bar2/req" "$out/bar2/resp"
	rm -f "$vm"/nvme[0-6].img "$vram" "$vram2"
	truncate -s 4G "$vm/nvme0.img"
	truncate -s 256M "$vm/nvme1.img"
	truncate -s 64M "$vm/nvme2.img" "$vm/nvme3.img"
	truncate -s 192M "$vm/nvme4.img" "$vm/nvme5.img"
	truncate -s 384M "$vm/nvme6.img"
	truncate -s 512M "$vram"
	truncate -s 64M "$vram2"
	"$vm/barcheck" "$vram" serve "$out" &
	checker=$!
	"$vm/barcheck" "$vram2" serve "$out/bar2" &
	checker2=$!
}

# Multi-threaded TCG. On a two-core host loaded by a kernel build a halted
# vCPU was once seen to take no interrupt for minutes (RCU stalls, I/O that
# never completed); the run then fails on the report. On an idle host the
# whole guest has stalled so (see watch_guest). FGDS_TCG_THREAD=single runs
# the vCPUs on one thread (much slower here).
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
# The tick from the LAPIC's periodic mode, not one-shot TSC deadlines: under
# multi-threaded TCG a halted vCPU was seen to miss the wake-up of a timer
# interrupt ("timer wakeup didn't happen"), and a one-shot timer is never
# raised again, so the vCPU slept on; a periodic one is raised every tick.
append+=" highres=off lapic=notscdeadline"
append+=" fgdsvm.mode=$mode fgdsvm.kconfig=$cfg$iommu_args$mpath_args"
# FGDS_STRESS=1: the bounded tests run longer (make stress; guest/check.sh).
[ "${FGDS_STRESS:-0}" != 1 ] || append+=" fgdsvm.stress=1"
# FGDS_TESTS=a,b: only those selftests (a developer's shortcut; make check runs all).
# It stays last: a boot after the first replaces it with what is left to run.
[ -z "${FGDS_TESTS:-}" ] || append+=" fgdsvm.tests=$FGDS_TESTS"

boot() {
	: >"$log"
	: >"$qlog"
	timeout --foreground -k 10 "$timeout_s" qemu-system-x86_64 \
		-M q35 -accel "$accel" -cpu "$cpu" -smp 2 -m 3G \
		-display none -vga none -nic none -monitor none -no-reboot -serial "file:$log" \
		-d cpu_reset,trace:qemu_system_shutdown_request -D "$qlog" \
		-kernel "$bzimage" -append "$append" \
		"${iommu_dev[@]}" \
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
		-device xio3130-downstream,id=dn5,bus=up1,chassis=6,slot=5 \
		-drive file="$vm/nvme2.img",if=none,id=nvm2,format=raw,cache=unsafe,throttling.bps-read=8388608 \
		-device nvme,serial=fgdsslow,drive=nvm2,bus=dn5 \
		-device xio3130-downstream,id=dn6,bus=up1,chassis=8,slot=6 \
		-drive file="$vm/nvme4.img",if=none,id=nvm4,format=raw,cache=unsafe \
		-device nvme,serial=fgdsmd0,drive=nvm4,bus=dn6 \
		-device xio3130-downstream,id=dn7,bus=up1,chassis=9,slot=7 \
		-drive file="$vm/nvme5.img",if=none,id=nvm5,format=raw,cache=unsafe \
		-device nvme,serial=fgdsmd1,drive=nvm5,bus=dn7 \
		-device nvme-subsys,id=mpsub,nqn=fgdsmp \
		-device xio3130-downstream,id=dn8,bus=up1,chassis=10,slot=8 \
		-device nvme,id=mpc0,serial=fgdsmp,subsys=mpsub,bus=dn8 \
		-device xio3130-downstream,id=dn9,bus=up1,chassis=11,slot=9 \
		-device nvme,id=mpc1,serial=fgdsmp,subsys=mpsub,bus=dn9 \
		-drive file="$vm/nvme6.img",if=none,id=nvm6,format=raw,cache=unsafe \
		-device nvme-ns,drive=nvm6,bus=mpc0,nsid=1,shared=on \
		-device pcie-root-port,id=rp2,chassis=7,slot=2 \
		-drive file="$vm/nvme3.img",if=none,id=nvm3,format=raw,cache=unsafe \
		-device nvme,serial=fgdsfar,drive=nvm3,bus=rp2 \
		</dev/null 2> >(tee "$qerr" >&2) &
	qemu=$!
}

# SIGKILL, not timeout(1)'s SIGTERM: a stalled QEMU may not get to handle it.
kill_qemu() {
	pkill -KILL -P "$qemu"
}

# CPU time (clock ticks) QEMU has used so far, nothing once it is gone;
# $qemu is timeout(1)'s pid.
qemu_ticks() {
	local pid
	pid=$(pgrep -P "$qemu" | head -n1)
	[ -n "$pid" ] && sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }'
}

output_size() {
	echo $(($(stat -c %s "$log" 2>/dev/null || echo 0) + $(stat -c %s "$out/guest.log" 2>/dev/null || echo 0)))
}

# Watch a booted guest until QEMU ends. A guest silent for stall_s while
# QEMU used less than 5% of a CPU is stalled: a healthy idle guest under
# TCG keeps QEMU at 10% or more (timer ticks, the idle loop), every test
# prints within a minute or two, and a hung task is reported after 120 s.
# QEMU is then killed and $stalled set (1). A guest whose vCPU missed its
# timer interrupts (RCU says "timer wakeup didn't happen"; device
# completions then arrive only when the driver polls after a timeout), or a
# device's interrupt (NVMe: "I/O tag ... timeout, completion polled": the
# completion was posted and its MSI-X never came; the tasks behind it then
# hang), or a device's doorbell (NVMe: "I/O tag ... timeout, aborting", or
# a reset or disable of the controller: no command of these local,
# file-backed disks takes 30 s, but one whose doorbell write QEMU
# misrouted, see below, is never fetched), limps on for as long as the
# watchdog allows: it is killed at once, as stalled (2). So is a guest whose
# NVMe disk had requests in flight and completed none for 45 s without its
# driver's 30 s timeout firing (guest/io-watch.sh: "fgds-io-watch: ...
# none completed"): only a lost timer interrupt explains that silence (a
# make stress run hung so, its hung-task reports keeping the console busy
# until the 90-minute watchdog). These are TCG's faults, not the guest's,
# and the guest is booted again.
#
# The misrouted MMIO write is a race in QEMU 10.0's multi-threaded TCG: a
# BAR mapped or unmapped (vfio-pci's revocation turns a stand-in's memory
# decoding off and on) while the other vCPU writes MMIO. The writing vCPU's
# TLB entry still names a section of the old memory map, looked up in the
# new one: a guest's NVMe doorbell write (SQ 2 tail, BAR0 + 0x1010, the
# next value of a run of them) was seen to reach the NVMe's MSI-X table
# instead, at that offset, right after a stand-in's BAR was unmapped, and
# QEMU aborted on the table's bounds assertion (hw/pci/msix.c:228). When
# the wrong region takes the write without a word, a doorbell is lost.
watch_guest() {
	local size last=-1 quiet=0 t0 now hz
	hz=$(getconf CLK_TCK)
	stalled=0
	t0=$(qemu_ticks)
	while kill -0 "$qemu" 2>/dev/null; do
		sleep 5
		if grep -qaE "timer wakeup didn't happen|I/O tag [0-9]+ \([0-9a-f]+\) (opcode .* )?QID [0-9]+ timeout, (completion polled|aborting|reset controller|disable controller)|fgds-io-watch: .* none completed for" "$log"; then
			stalled=2
			kill_qemu
			return
		fi
		size=$(output_size)
		if [ "$size" != "$last" ]; then
			last=$size quiet=0 t0=$(qemu_ticks)
			continue
		fi
		quiet=$((quiet + 5))
		[ "$stall_s" -gt 0 ] && [ $quiet -ge "$stall_s" ] || continue
		now=$(qemu_ticks)
		[ -n "$now" ] || continue
		if [ -n "$t0" ] && [ $((now - t0)) -lt $((stall_s * hz / 20)) ]; then
			stalled=1
			kill_qemu
			return
		fi
		quiet=0 t0=$now
	done
}

# timeout(1) ended QEMU (TERM, or KILL 10 s later), not watch_guest.
watchdog_fired() {
	[ "$stalled" = 0 ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; }
}

# Why the guest of this boot did not finish, in words.
cause() {
	if [ "$stalled" = 1 ] && [ "$waited" -ge "$boot_s" ]; then
		echo "it did not reach init in ${boot_s}s"
	elif [ "$stalled" = 1 ]; then
		echo "it stalled: no output for ${stall_s}s and QEMU all but idle"
	elif [ "$stalled" = 2 ]; then
		echo "a vCPU missed its timer, or a device an interrupt or a doorbell (RCU: timer wakeup didn't happen; NVMe: a command timed out, or none completed nor timed out)"
	elif watchdog_fired; then
		echo "the watchdog killed it after ${timeout_s}s"
	elif grep -q "Triple fault" "$qlog"; then
		echo "it triple-faulted (QEMU reset the CPUs; see $qlog)"
	elif [ "$rc" -ne 0 ] && grep -q 'Assertion' "$qerr" 2>/dev/null; then
		echo "QEMU aborted on an assertion (status $rc): $(grep -m1 'Assertion' "$qerr")"
	elif [ "$rc" -ne 0 ]; then
		echo "QEMU exited with status $rc"
	elif grep -qE 'shutdown_request reason=6\b' "$qlog"; then
		echo "it powered off before finishing"
	else
		# -no-reboot: QEMU ends at a reset, without tracing the request.
		echo "it reset the machine (a reboot, or a panic) with nothing on the console"
	fi
}

# Whether TAP file $1 has all the results its plan announced.
tap_complete() {
	awk '/^1\.\.[0-9]+/ && !plan { plan = substr($0, 4) + 0 }
		/^(ok|not ok) / { n++ }
		END { exit !(plan > 0 && n >= plan) }' "$1" 2>/dev/null
}

# The selftest programs a check boot runs: FGDS_TESTS, or all of them.
programs() {
	if [ -n "${FGDS_TESTS:-}" ]; then
		echo "${FGDS_TESTS//,/ }"
	else
		cat "$FGDS_ROOT/fgds/tests-bin-$cfg/TESTS"
	fi
}

# The kernel reaches init in about a minute (debug kernel, TCG). A boot that
# has not reached it in boot_s stalled before fgds ran at all.
status=0
set +e
for attempt in 1 2 3; do
	prepare
	log "booting ($cfg kernel, $mode, console: $log)"
	boot
	waited=0 stalled=0 rc=0
	while kill -0 $qemu 2>/dev/null && ! grep -qaE '\] fgds-guest: mode' "$log"; do
		if [ $waited -ge "$boot_s" ]; then
			stalled=1
			kill_qemu
			break
		fi
		sleep 2
		waited=$((waited + 2))
	done
	if [ $stalled = 0 ]; then
		# Show the guest's output as it grows.
		tail -n +1 -F --pid=$qemu "$out/guest.log" 2>/dev/null &
		watch_guest
	fi
	# (Quiet: bash would print a QEMU killed by a signal with its command line.)
	wait $qemu 2>/dev/null
	rc=$?
	sleep 0.5
	grep -qaE '\] fgds-guest: done' "$log" && break

	why=$(cause)
	log "attempt $attempt: the guest did not finish: $why; its console ended with:"
	tail -n 40 "$log" | sed 's/^/fgds-vm: console: /' >&2
	status=1
	# For check.sh's summary: why, and what QEMU said (an assertion, say).
	{
		echo "attempt $attempt: $why"
		grep -v '^$' "$qerr" 2>/dev/null | tail -n 3 | sed 's/^/QEMU: /'
	} >>"$vm/failed"
	# Boot again only after a silent stop, a crash of QEMU or one of TCG's
	# faults (stalled 2): a kernel report (other than that of a missed timer),
	# or a guest that was still busy when the watchdog fired, fails the run
	# now.
	clean=1
	"$FGDS_VM/scan-log.sh" "$log" 2>/dev/null || clean=0
	if [ $attempt = 3 ] || watchdog_fired || { [ "$stalled" != 2 ] && [ $clean = 0 ]; }; then
		break
	fi
	for f in "$log" "$qlog" "$qerr" "$out/guest.log"; do
		cp "$f" "$vm/$(basename "$f").attempt-$attempt" 2>/dev/null
	done
	echo "attempt $attempt: $why (logs: $vm/*.attempt-$attempt)" >>"$vm/retried"
	if [ "$mode" = check ] && [ $clean = 1 ]; then
		# Keep what finished (under a clean kernel log); boot again for the rest.
		# A program finished when its TAP is whole and it exited: guest/check.sh
		# says how long it took once every process of it is gone. One whose
		# processes outlived its TAP into the stall ran on a guest that was
		# stalling (seen once in make check: a test that the harness killed on
		# its timeout never died, the later tests failed on the device it still
		# held, and the kernel said nothing, not even of a hung task, until
		# QEMU went idle): it runs again.
		mkdir -p "$vm/finished"
		left=
		for t in $(programs); do
			if [ -f "$vm/finished/$t.tap" ]; then
				continue
			elif tap_complete "$out/tap/$t.tap" &&
				grep -qx "fgds-guest: $t took [0-9]* s" "$out/guest.log" 2>/dev/null; then
				cp "$out/tap/$t.tap" "$vm/finished/"
			else
				left+=${left:+,}$t
			fi
		done
		if [ -n "$left" ]; then
			append="${append% fgdsvm.tests=*} fgdsvm.tests=$left"
			log "booting again, on fresh disks and VRAM, for what did not finish: $left"
		else
			log "booting again, on fresh disks and VRAM (every program had finished)"
		fi
	else
		log "running $mode once more, on fresh disks and VRAM"
	fi
	status=0
done
set -e
# The programs an earlier boot finished, with their results.
cp "$vm"/finished/*.tap "$out/tap/" 2>/dev/null || true

grep -aE '\] fgds-guest: exit' "$log" | sed 's/^\[[^]]*\] //' || true
if ! "$FGDS_VM/scan-log.sh" "$log" 2>"$vm/scan.txt"; then
	status=1
	sed -n '/^fgds-vm: kernel reports/,$p' "$vm/scan.txt" | head -n 8 >>"$vm/failed"
fi
cat "$vm/scan.txt" >&2
exit $status
