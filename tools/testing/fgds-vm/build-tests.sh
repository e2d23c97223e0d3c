#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the in-guest test programs against the kernel's installed UAPI
# headers, inside the toolchain root: the kernel selftests
# (tools/testing/selftests/fgds) and the programs that are not
# (tools/testing/fgds-vm/guest-programs: the fixture's test, the user-space
# side's tests, the benchmark suite, the demo's program). Output:
# /fgds/tests-bin-<cfg> in the root, with TESTS listing what to run.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

need_root
cfg=$(fgds_kconfig "${1:-}")
out=/fgds/tests-bin-$cfg

# The user-space library, for its in-guest test (built on the host: the
# guest root's glibc is newer, so the static library links there).
# The fgds CLI likewise, for fgds_cli_test (glibc is backward compatible).
# Built in a target directory of their own: make check runs the host tests'
# cargo test in tools/target at the same time, and a cdylib rebuilt there
# under a running test (libcufile.so) fails it.
export CARGO_TARGET_DIR=$FGDS_BUILD/guest-target
libfgds= cli=
if [ -f "$FGDS_TOP/tools/Cargo.toml" ] && command -v cargo >/dev/null; then
	(cd "$FGDS_TOP/tools" && cargo build --release -q -p fgds --lib &&
		cargo build --release -q -p fgds-cli --bin fgds) ||
		die "building tools/lib/fgds and tools/fgds failed"
	cp "$CARGO_TARGET_DIR/release/libfgds.a" "$FGDS_ROOT/fgds/libfgds.a"
	cp "$CARGO_TARGET_DIR/release/fgds" "$FGDS_ROOT/fgds/fgds-cli"
	libfgds=/fgds/libfgds.a cli=/fgds/fgds-cli
fi
# libcufile.so.0 (tools/lib/cufile) for the cuFile program's in-guest test,
# linked by its soname from /fgds/lib (built on the host, as libfgds.a).
libcufile=
if [ -f "$FGDS_TOP/tools/Cargo.toml" ] && command -v cargo >/dev/null; then
	(cd "$FGDS_TOP/tools" && cargo build --release -q -p fgds-cufile) ||
		die "building tools/lib/cufile failed"
	mkdir -p "$FGDS_ROOT/fgds/lib"
	cp "$CARGO_TARGET_DIR/release/libcufile.so" "$FGDS_ROOT/fgds/lib/libcufile.so.0"
	ln -sf libcufile.so.0 "$FGDS_ROOT/fgds/lib/libcufile.so"
	libcufile=/fgds/lib
fi
# The Python package (tools/python: abi3, so the guest's newer python3
# imports it) for its in-guest test on the GPU stand-in's CUDA runtime:
# the package's Python files and the extension, in /fgds/python/fgds.
pyfgds=
if [ -f "$FGDS_TOP/tools/python/Cargo.toml" ] && command -v cargo >/dev/null; then
	(cd "$FGDS_TOP/tools/python" && cargo build --release -q --features extension-module) ||
		die "building tools/python's extension failed"
	rm -rf "$FGDS_ROOT/fgds/python"
	mkdir -p "$FGDS_ROOT/fgds/python"
	cp -r "$FGDS_TOP/tools/python/python/fgds" "$FGDS_ROOT/fgds/python/"
	cp "$CARGO_TARGET_DIR/release/lib_fgds.so" "$FGDS_ROOT/fgds/python/fgds/_fgds.abi3.so"
	pyfgds=/fgds/python
fi
# The selftests build where a kernel tree has them (their Makefile includes
# ../lib.mk): laid over the root's tree as build-kernel.sh lays the overlay,
# from what git has (not the output of an in-tree make), copying what
# differs only, so that make rebuilds only what changed.
kst=$FGDS_ROOT/fgds/linux/tools/testing/selftests
[ -f "$kst/lib.mk" ] || die "no $kst/lib.mk: build the kernel first (build-kernel.sh)"
st_files=$(cd "$FGDS_TOP" &&
	git ls-files --cached --others --exclude-standard -- tools/testing/selftests/fgds |
	while read -r f; do [ -f "$f" ] && echo "${f#tools/testing/selftests/fgds/}"; done)
mkdir -p "$kst/fgds"
for f in $st_files; do
	cmp -s "$FGDS_TOP/tools/testing/selftests/fgds/$f" "$kst/fgds/$f" ||
		cp "$FGDS_TOP/tools/testing/selftests/fgds/$f" "$kst/fgds/$f"
done
for f in "$kst"/fgds/* "$kst"/fgds/.[!.]*; do
	[ -f "$f" ] || continue
	case " $(echo $st_files) " in *" ${f##*/} "*) ;; *) rm -f "$f" ;; esac
done

# What guest/check.sh runs, in this order: the fixture's test first, then
# the kernel selftests, with the user-space side's tests (guest-programs/)
# where they were built before the lifetime, stress, fuzz and exporter runs.
tests="fixture_test fgds_api_test fgds_io_test fgds_module_test"
[ -z "$libfgds" ] || tests+=" libfgds_test gpurt_io_test"
[ -z "$libcufile" ] || tests+=" cufile_vm_test cufile_gpurt_test"
[ -z "$cli" ] || tests+=" fgds_cli_test"
[ -z "$pyfgds" ] || tests+=" fgds_python_gpurt_test"
tests+=" fgds_lifetime_test fgds_stress fgds_fuzz fgds_exporter_test"

inroot sh -c "make -s -C /fgds/linux O=/fgds/kbuild-$cfg LLVM=1 headers >/dev/null &&
	mkdir -p $out &&
	make -s -C /fgds/linux/tools/testing/selftests/fgds OUTPUT=$out \
		KHDR_INCLUDES='-isystem /fgds/kbuild-$cfg/usr/include' &&
	make -s -C /fgds/src/tools/testing/fgds-vm/guest-programs \
		KSFT=/fgds/linux/tools/testing/selftests \
		KHDR=/fgds/kbuild-$cfg/usr/include LIBFGDS=$libfgds LIBCUFILE=$libcufile \
		FGDS_CLI=$cli PYFGDS=$pyfgds O=$out" ||
	die "building the selftests failed"

# Every kernel selftest is in the list (fgds_iommu_test in the IOMMU boot's,
# guest/iommu.sh), and everything listed was built.
kselftests=$(make -s -C "$kst/fgds" emit_tests | sed 's/^.*://') ||
	die "make emit_tests of the selftests failed"
for t in $kselftests; do
	case " $tests fgds_iommu_test " in
	*" $t "*) ;;
	*) die "selftest $t is not in build-tests.sh's list" ;;
	esac
done
for t in $tests fgds_iommu_test; do
	[ -x "$FGDS_ROOT$out/$t" ] || die "test program $t was not built"
done
echo "$tests" >"$FGDS_ROOT$out/TESTS"
