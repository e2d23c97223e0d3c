# SPDX-License-Identifier: GPL-2.0
# Shared helpers for the fgds VM harness. Sourced, never run.

FGDS_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
FGDS_VM=$FGDS_TOP/tools/testing/fgds-vm
FGDS_BUILD=${FGDS_BUILD:-$FGDS_TOP/build}
FGDS_ROOT=$FGDS_BUILD/root

log() { printf 'fgds-vm: %s\n' "$*" >&2; }
die() { printf 'fgds-vm: error: %s\n' "$*" >&2; exit 1; }
need_root() {
	[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot and mounts need it): rerun with sudo"
}

# Run a command inside the toolchain root, with /proc and the repository
# (read-only, at /fgds/src) mounted for its duration.
inroot() {
	local rc=0
	mkdir -p "$FGDS_ROOT/fgds/src" "$FGDS_ROOT/fgds/out"
	mount --bind /proc "$FGDS_ROOT/proc"
	mount --bind "$FGDS_TOP" "$FGDS_ROOT/fgds/src"
	mount -o remount,bind,ro "$FGDS_ROOT/fgds/src"
	chroot "$FGDS_ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 "$@" || rc=$?
	umount "$FGDS_ROOT/fgds/src"
	umount "$FGDS_ROOT/proc"
	return $rc
}

# Free space on the file system of build/, in MiB.
disk_free_mb() {
	mkdir -p "$FGDS_BUILD" && df -Pm "$FGDS_BUILD" | awk 'NR == 2 { print $4 }'
}

fgds_kconfig() {
	local cfg=${1:-${FGDS_KCONFIG:-release}}
	case $cfg in
	release|debug) echo "$cfg" ;;
	*) die "unknown kernel configuration '$cfg': FGDS_KCONFIG is release or debug" ;;
	esac
}
