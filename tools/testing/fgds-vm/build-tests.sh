#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the in-guest test programs (tools/testing/selftests/fgds) against the
# kernel's installed UAPI headers, inside the toolchain root. Output:
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
inroot sh -c "make -s -C /fgds/linux O=/fgds/kbuild-$cfg LLVM=1 headers >/dev/null &&
	mkdir -p $out &&
	make -s -C /fgds/src/tools/testing/selftests/fgds \
		KSFT=/fgds/linux/tools/testing/selftests \
		KHDR=/fgds/kbuild-$cfg/usr/include LIBFGDS=$libfgds LIBCUFILE=$libcufile \
		FGDS_CLI=$cli O=$out" ||
	die "building the selftests failed"
