#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Configure a kernel with fgds from a distribution's own configuration.
#
#   configure-kernel.sh [-c CONFIG] [-o OBJDIR] [--no-btf] [--] SRC [MAKE ARGS...]
#
# SRC is a Linux 7.2 tree with the fgds overlay and patches/ applied
# (tools/fgds/install/README.md). CONFIG is the distribution's configuration
# (default: /boot/config-$(uname -r)); OBJDIR gets the new .config (default:
# SRC). MAKE ARGS go to make (default: LLVM=1: Rust needs clang's bindgen
# and Linux 7.2 builds its Rust code best with an LLVM toolchain).
#
# The fgds fragment (fgds.config next to this script) is merged over CONFIG
# with scripts/kconfig/merge_config.sh, then `make olddefconfig` runs, and
# every value the fragment sets (y, m, a string) is checked to have survived: a dependency
# that is missing drops a symbol silently. For a lost CONFIG_RUST the
# reason is looked up (make rustavailable, DEBUG_INFO_BTF without pahole).
#
# --no-btf turns CONFIG_DEBUG_INFO_BTF off: Rust with BTF needs pahole 1.24
# or later (Debian's dwarves) at configuration time.
#
# Exit status: 0 configured, every symbol present; 1 a symbol was lost
# (named on stderr, with what to do); 2 bad usage or a failed step.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
frag=$here/fgds.config
config=/boot/config-$(uname -r)
obj=
btf=keep

die() { printf 'configure-kernel: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '4,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
	case $1 in
	-c) config=${2:?-c needs a file}; shift 2 ;;
	-o) obj=${2:?-o needs a directory}; shift 2 ;;
	--no-btf) btf=off; shift ;;
	-h|--help) usage ;;
	--) shift; break ;;
	-*) die "unknown option $1 (see --help)" ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || usage
src=$1; shift
margs=("$@")
[ ${#margs[@]} -gt 0 ] || margs=(LLVM=1)
obj=${obj:-$src}

[ -f "$src/Makefile" ] && [ -f "$src/scripts/kconfig/merge_config.sh" ] ||
	die "$src is not a kernel source tree"
[ -f "$src/drivers/misc/fgds/Kconfig" ] ||
	die "$src has no drivers/misc/fgds: lay the fgds overlay and patches/ over it first (tools/fgds/install/README.md)"
[ -r "$config" ] || die "cannot read the configuration $config (give one with -c)"
mkdir -p "$obj" || die "cannot make $obj"
obj=$(cd "$obj" && pwd)
if [ -e "$obj/.config" ] && ! cmp -s "$config" "$obj/.config"; then
	cp "$obj/.config" "$obj/.config.old-fgds" || die "cannot keep $obj/.config"
	echo "configure-kernel: kept the previous $obj/.config as .config.old-fgds" >&2
fi
cp "$config" "$obj/.config"
# Distribution configurations name their own signing certificates (Ubuntu:
# debian/canonical-certs.pem), which are not in the source tree: none;
# modules are signed with a key made at build time.
for k in SYSTEM_TRUSTED_KEYS SYSTEM_REVOCATION_KEYS; do
	if grep -q "^CONFIG_$k=\"..*\"" "$obj/.config"; then
		"$src/scripts/config" --file "$obj/.config" --set-str "$k" "" ||
			die "cannot clear CONFIG_$k"
		echo "configure-kernel: CONFIG_$k emptied (the distribution's certificates are not in the tree)" >&2
	fi
done

frags=("$frag")
if [ "$btf" = off ]; then
	printf '# CONFIG_DEBUG_INFO_BTF is not set\n' >"$obj/.fgds-no-btf.config"
	frags+=("$obj/.fgds-no-btf.config")
fi
(cd "$obj" && "$src/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config" "${frags[@]}" >/dev/null) ||
	die "merge_config.sh failed"
make -s -C "$src" O="$obj" "${margs[@]}" olddefconfig >/dev/null ||
	die "make olddefconfig failed"
rm -f "$obj/.fgds-no-btf.config"

value() { sed -n "s/^$1=\(.*\)$/\1/p" "$obj/.config"; }
lost=()
while read -r line; do
	sym=${line%%=*} want=${line#*=}
	got=$(value "$sym")
	[ "$got" = "$want" ] || lost+=("$sym=$want (now: ${got:-not set})")
done < <(grep -E '^CONFIG_[A-Z0-9_]+=([ym]|".*")$' "$frag")
if [ "$btf" = off ] && [ -n "$(value CONFIG_DEBUG_INFO_BTF)" ]; then
	lost+=("CONFIG_DEBUG_INFO_BTF=n (now: $(value CONFIG_DEBUG_INFO_BTF))")
fi

# What the distribution had on that this kernel still has but olddefconfig
# turned off (a dependency changed): warnings, with the usual causes.
syms=$(grep -rhoE --include='Kconfig*' '^[[:space:]]*(menu)?config [A-Z0-9_]+' "$src" |
	awk '{ print "CONFIG_" $2 }' | sort -u)
dropped=$(awk -F= 'NR == FNR { if ($0 ~ /^CONFIG_[A-Z0-9_]+=[ym]$/) on[$1] = 1; next }
	$0 ~ /^CONFIG_[A-Z0-9_]+=[ym]$/ && !($1 in on) { print $1 }' "$obj/.config" "$config" |
	sort -u | comm -12 - <(echo "$syms"))
if [ -n "$dropped" ]; then
	echo "configure-kernel: warning: $(echo "$dropped" | wc -l) options of $config are off now" \
		"(this kernel has them, their dependencies are not met):" >&2
	echo "$dropped" | tr '\n' ' ' | fold -s -w 76 | sed 's/^/  /' >&2
	echo >&2
	if [ "$btf" = keep ] && echo "$dropped" | grep -qx CONFIG_DEBUG_INFO_BTF; then
		echo "  CONFIG_DEBUG_INFO_BTF needs pahole at configuration time (apt install dwarves)," \
			"or keep it off with --no-btf" >&2
	fi
fi

if [ ${#lost[@]} -eq 0 ]; then
	echo "configure-kernel: $obj/.config has every symbol fgds needs:" \
		"$(grep -E '^CONFIG_[A-Z0-9_]+=[ym]$' "$frag" | tr '\n' ' ')"
	exit 0
fi
echo "configure-kernel: olddefconfig dropped what fgds needs:" >&2
for l in "${lost[@]}"; do echo "  $l" >&2; done
case " ${lost[*]} " in
*" CONFIG_RUST="*)
	why=$(make -s -C "$src" O="$obj" "${margs[@]}" rustavailable 2>&1 || true)
	echo "  why CONFIG_RUST was dropped:" >&2
	if [ -n "$(value CONFIG_DEBUG_INFO_BTF)" ] && [ -z "$(value CONFIG_PAHOLE_HAS_LANG_EXCLUDE)" ]; then
		echo "    CONFIG_DEBUG_INFO_BTF=y needs pahole 1.24 or later for Rust" \
			"(apt install dwarves), or rerun with --no-btf" >&2
	fi
	if [ -n "$(value CONFIG_MODVERSIONS)" ] && [ -z "$(value CONFIG_GENDWARFKSYMS)" ]; then
		echo "    CONFIG_MODVERSIONS=y needs CONFIG_GENDWARFKSYMS (CONFIG_DEBUG_INFO, not reduced or split, no LTO)" >&2
	fi
	case $why in
	*"is available"*) ;;
	*) echo "    make rustavailable: $(echo "$why" | head -n 3)" \
		"(install rustc, rust-src and bindgen as Documentation/rust/quick-start.rst says)" >&2 ;;
	esac
	;;
esac
exit 1
