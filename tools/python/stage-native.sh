#!/bin/sh
# Puts the fgds CLI, fgds's libcufile.so and its LD_AUDIT module
# (tools/fgds, tools/lib/cufile, tools/lib/audit; built here with cargo,
# release) into fgds.data/, which maturin packs into the wheel (pyproject's
# [tool.maturin] data): pip installs scripts/fgds as <prefix>/bin/fgds
# (DIR/bin/fgds with --target) and platlib/fgds/_native/* into the package,
# as site-packages/fgds/_native/* (DIR/fgds/_native with --target), where
# `fgds run` looks for the library and the module. That folder is private
# on purpose: no library path or ld.so.conf names it, so the library is
# offered to a program only under `fgds run` (or --lib, --audit,
# FGDS_CUFILE_LIB). In <prefix>/lib instead, ldconfig would make it the
# machine's libcufile.so.0 for every program (a pip install into /usr/local
# would take over the machine's cuFile), and pip install --target would drop
# it. So one `pip install` of the wheel gives `fgds run` and `fgds check`.
# CARGO_BUILD_JOBS sets the build's jobs (default 1); tools/target is the
# workspace's own target folder, so after `cargo test --release` there this
# only copies.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tools=$(cd "$here/.." && pwd)
jobs=${CARGO_BUILD_JOBS:-1}
# The workspace's rust-version (tools/Cargo.toml). Debian 12's rustc is 1.63:
# say so before cargo fails on the first crate that needs a newer one.
need=1.82
have=$(cd "$tools" && rustc --version 2>/dev/null | awk '{ print $2 }') || have=
if [ -z "$have" ]; then
	echo "stage-native.sh: no rustc: fgds's native parts need Rust $need or later;" \
		"install it with rustup (https://rustup.rs)" >&2
	exit 1
fi
if ! printf '%s\n%s\n' "$need" "$have" | sort -V -C; then
	echo "stage-native.sh: rustc $have is older than $need, which fgds needs;" \
		"install a newer one with rustup (https://rustup.rs)" >&2
	exit 1
fi
out=$tools/target/release
(cd "$tools" && env -u CARGO_TARGET_DIR cargo build --release -j "$jobs" \
	-p fgds-cli -p fgds-cufile -p fgds-audit)
rm -rf "$here/fgds.data"
mkdir -p "$here/fgds.data/scripts" "$here/fgds.data/platlib/fgds/_native"
install -m 0755 "$out/fgds" "$here/fgds.data/scripts/fgds"
install -m 0755 "$out/libcufile.so" "$out/libfgds_audit.so" \
	"$here/fgds.data/platlib/fgds/_native/"
