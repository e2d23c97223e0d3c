#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# probe-kvm.sh BZIMAGE: exit 0 when a KVM guest boots to user space within
# 60 s. Nested KVM hangs right after the decompressor on some hosts, so KVM is
# used only after this proof. The answer is cached per kernel image.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

bz=${1:?usage: probe-kvm.sh BZIMAGE}
[ -w /dev/kvm ] || exit 1
cache=$FGDS_BUILD/kvm-probe
key=$(stat -c %Y-%s "$bz")
if [ -f "$cache" ] && [ "$(cut -d' ' -f1 "$cache")" = "$key" ]; then
	[ "$(cut -d' ' -f2 "$cache")" = ok ]
	exit
fi
log=$(mktemp)
mkdir -p "$FGDS_ROOT/fgds/out"
cp "$FGDS_VM/guest/init" "$FGDS_ROOT/fgds/init"
timeout -k 5 60 qemu-system-x86_64 -M q35 -accel kvm -cpu host -smp 1 -m 512M \
	-display none -monitor none -no-reboot -serial "file:$log" -kernel "$bz" \
	-append "console=ttyS0 root=fgdsroot rootfstype=9p ro rootflags=trans=virtio,version=9p2000.L init=/fgds/init panic=-1 fgdsvm.mode=probe" \
	-fsdev local,id=root,path="$FGDS_ROOT",security_model=none,readonly=on \
	-device virtio-9p-pci,fsdev=root,mount_tag=fgdsroot \
	-fsdev local,id=src,path="$FGDS_TOP",security_model=none,readonly=on \
	-device virtio-9p-pci,fsdev=src,mount_tag=fgdssrc \
	-fsdev local,id=out,path="$(mktemp -d)",security_model=none \
	-device virtio-9p-pci,fsdev=out,mount_tag=fgdsout </dev/null >/dev/null 2>&1
if grep -qa 'fgds-guest: probe ok' "$log"; then res=ok; else res=fail; fi
rm -f "$log"
echo "$key $res" >"$cache"
[ $res = ok ]
