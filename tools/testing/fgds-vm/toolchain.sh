#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Build (or reuse) the Debian forky root that holds the kernel toolchain
# (linux-source-7.2, rustc + rust-src, bindgen, clang/lld/llvm) and the guest
# user space (fio, python3, xfsprogs, liburing...). The guest boots this very
# root read-only over 9p, so the tools the tests use are the ones built here.
#
# The root is rebuilt when its recipe (suite, packages) changes or when
# a previous run did not finish (no stamp). --status prints ready, stale or
# missing and changes nothing; --recipe prints the recipe's hash.
set -euo pipefail
. "$(dirname "$0")/lib.sh"


PACKAGES=(
	# kernel build
	linux-source-7.2 rustc rust-src rustfmt rust-clippy bindgen clang lld llvm
	make flex bison bc libelf-dev libssl-dev xz-utils cpio kmod perl
	gcc libc6-dev python3
	# guest user space and test programs
	busybox-static fio xfsprogs e2fsprogs fdisk util-linux liburing-dev
	pciutils procps iproute2
)
stamp=$FGDS_ROOT/.fgds-toolchain
SUITE=forky
# The recipe: what goes into the root. Its hash is the stamp.
want=$(printf '%s\n' "$SUITE" "${PACKAGES[@]}" | sha256sum | cut -d' ' -f1)
status_only=0
case ${1:-} in
--recipe) echo "$want"; exit 0 ;;
--status) status_only=1 ;;
esac

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	[ $status_only = 1 ] && echo ready
	exit 0
fi
if [ $status_only = 1 ]; then
	if [ -e "$FGDS_ROOT" ]; then echo stale; else echo missing; fi
	exit 0
fi

need_root
"$FGDS_VM/host-deps.sh"

if [ -e "$FGDS_ROOT" ]; then
	log "toolchain root is stale or half-built: rebuilding $FGDS_ROOT"
	umount -R "$FGDS_ROOT/proc" 2>/dev/null || true
	rm -rf --one-file-system "$FGDS_ROOT"
fi
mkdir -p "$FGDS_BUILD"
tmp=$FGDS_ROOT.tmp
umount -R "$tmp/proc" 2>/dev/null || true
rm -rf --one-file-system "$tmp"

log "debootstrap $SUITE into $FGDS_ROOT (about a minute)"
debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$tmp" \
	>"$FGDS_BUILD/debootstrap.log" 2>&1 ||
	die "debootstrap failed: see $FGDS_BUILD/debootstrap.log"
# The archive's forky Release file can be past its Valid-Until date.
echo 'Acquire::Check-Valid-Until "false";' >"$tmp/etc/apt/apt.conf.d/99no-valid-until"

mount --bind /proc "$tmp/proc"
trap 'umount "$tmp/proc" 2>/dev/null || true' EXIT
log "installing ${#PACKAGES[@]} packages into the root"
{
	chroot "$tmp" apt-get update &&
	DEBIAN_FRONTEND=noninteractive chroot "$tmp" apt-get install -y \
		--no-install-recommends "${PACKAGES[@]}" &&
	chroot "$tmp" apt-get clean
} >"$FGDS_BUILD/apt.log" 2>&1 || die "apt-get in the root failed: see $FGDS_BUILD/apt.log"
umount "$tmp/proc"
trap - EXIT

src=$(ls "$tmp"/usr/src/linux-source-7.2.tar.* 2>/dev/null | head -n1)
[ -n "$src" ] || die "linux-source-7.2 installed no tarball in /usr/src"

mv "$tmp" "$FGDS_ROOT"
echo "$want" >"$stamp"
log "toolchain root ready"
