#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Build Linux 7.2 with the fgds tree laid over it, in the toolchain root.
#
#   build-kernel.sh [release|debug]     (default: $FGDS_KCONFIG or release)
#
# The pristine source is the root's linux-source-7.2 tarball. The tree is
# (re)extracted when the tarball, the patch series (patches/) or the set of
# overlaid files changes; otherwise only changed overlay files are copied, so
# rebuilds are incremental. Each configuration has its own object directory.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

need_root
cfg=$(fgds_kconfig "${1:-}")

"$FGDS_VM/toolchain.sh"

SRC=$FGDS_ROOT/fgds/linux
OBJ=$FGDS_ROOT/fgds/kbuild-$cfg
MODS=$FGDS_ROOT/fgds/mods-$cfg
OVERLAY_DIRS=(drivers include lib rust samples Documentation)

cd "$FGDS_TOP"
tarball=$(ls "$FGDS_ROOT"/usr/src/linux-source-7.2.tar.* | head -n1)
overlay=$(git ls-files --cached --others --exclude-standard -- "${OVERLAY_DIRS[@]}" |
	while read -r f; do [ -f "$f" ] && echo "$f"; done | sort)
series_id=$( {
	basename "$tarball"
	stat -c %s "$tarball"
	# The patches' diffs, not their messages: a reworded commit message
	# changes no source file and rebuilds nothing.
	if [ -d patches ]; then
		cat patches/series
		for p in patches/*.patch; do sed -n '/^--- a\//,$p' "$p"; done
	fi
	echo "$overlay"
} | sha256sum | cut -d' ' -f1)

if [ ! -f "$SRC/.fgds-tree" ] || [ "$(cat "$SRC/.fgds-tree")" != "$series_id" ]; then
	log "extracting $(basename "$tarball") and applying patches/"
	rm -rf --one-file-system "$SRC"
	mkdir -p "$SRC"
	tar -xf "$tarball" -C "$SRC" --strip-components=1
	if [ -f patches/series ]; then
		while read -r p; do
			case $p in ''|'#'*) continue ;; esac
			patch -d "$SRC" -p1 -s --no-backup-if-mismatch <"patches/$p" ||
				die "patches/$p does not apply to $(basename "$tarball")"
		done <patches/series
	fi
	echo "$series_id" >"$SRC/.fgds-tree"
fi

# Lay the overlay: copy what differs only, keeping make's view incremental.
while read -r f; do
	[ -n "$f" ] || continue
	if ! cmp -s "$f" "$SRC/$f"; then
		mkdir -p "$SRC/$(dirname "$f")"
		cp "$f" "$SRC/$f"
	fi
done <<<"$overlay"

frags=(fgds.config)
[ "$cfg" = release ] || frags+=(debug.config)
mkdir -p "$FGDS_ROOT/fgds/cfg" "$OBJ"
cp "$FGDS_VM"/configs/*.config "$FGDS_ROOT/fgds/cfg/"

K="make -s -C /fgds/linux O=/fgds/kbuild-$cfg LLVM=1 -j$(nproc)"
cfg_id=$(cd "$FGDS_VM/configs" && cat "${frags[@]}" | sha256sum | cut -d' ' -f1)
if [ ! -f "$OBJ/.config" ] || [ "$(cat "$OBJ/.fgds-config" 2>/dev/null)" != "$cfg_id" ]; then
	log "configuring $cfg kernel"
	inroot sh -c "$K tinyconfig >/dev/null &&
		cd /fgds/kbuild-$cfg &&
		/fgds/linux/scripts/kconfig/merge_config.sh -m -O . .config ${frags[*]/#//fgds/cfg/} >/dev/null &&
		$K olddefconfig" || die "kernel configuration failed"
	# Every y/m the fragments ask for must have survived (a dependency
	# missing silently drops a symbol), and every symbol they turn off
	# must be off (a select silently keeps one).
	lost=$(cd "$FGDS_VM/configs" && cat "${frags[@]}" |
		grep -E '^CONFIG_[A-Z0-9_]+=[ym]$' | while read -r l; do
			grep -qx "$l" "$OBJ/.config" || echo "$l"
		done)
	[ -z "$lost" ] || die "kernel config dropped: $(echo $lost)"
	kept=$(cd "$FGDS_VM/configs" && cat "${frags[@]}" |
		sed -nE 's/^# (CONFIG_[A-Z0-9_]+) is not set$/\1/p; s/^(CONFIG_[A-Z0-9_]+)=n$/\1/p' |
		while read -r s; do
			! grep -qE "^$s=[ym]$" "$OBJ/.config" || echo "$s"
		done)
	[ -z "$kept" ] || die "kernel config kept what the fragments turn off: $(echo $kept)"
	echo "$cfg_id" >"$OBJ/.fgds-config"
fi

log "building $cfg kernel (incremental; a cold build takes 15 to 30 minutes on 2 cores)"
inroot sh -c "$K bzImage modules >/fgds/kbuild-$cfg/build.log 2>&1" ||
	{ tail -n 40 "$OBJ/build.log" >&2; die "kernel build failed: see $OBJ/build.log"; }
rm -rf --one-file-system "$MODS"
inroot sh -c "$K modules_install INSTALL_MOD_PATH=/fgds/mods-$cfg INSTALL_MOD_STRIP=1 >/dev/null" ||
	die "modules_install failed"
echo "$OBJ/arch/x86/boot/bzImage"
