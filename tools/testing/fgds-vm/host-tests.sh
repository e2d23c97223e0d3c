#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Host-side tests (TAP): the harness itself, then the user-space library and
# CLI under tools/ (cargo test, fmt, clippy).
set -u
. "$(dirname "$0")/lib.sh"

n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n $*"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else notok "$name"; fi; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# barcheck: fill then check passes; a flipped byte, a wrong seed and a range
# outside the BAR are each reported.
gcc -O2 -Wall -Werror -o "$tmp/barcheck" "$FGDS_VM/barcheck.c" 2>"$tmp/cc.log"
check "barcheck builds without warnings" test -x "$tmp/barcheck"
truncate -s 1M "$tmp/bar"
check "barcheck fill" sh -c "'$tmp/barcheck' '$tmp/bar' fill 7 4099 100000 5 | grep -qx ok"
check "barcheck check of the same stream" \
	sh -c "'$tmp/barcheck' '$tmp/bar' check 7 4099 100000 5 | grep -qx ok"
printf '\x00' | dd of="$tmp/bar" bs=1 seek=$((4099 + 99999)) conv=notrunc status=none
check "barcheck finds a changed last byte" \
	sh -c "'$tmp/barcheck' '$tmp/bar' check 7 4099 100000 5 | grep -q 'mismatch at 0x1003+0x1869f'"
check "barcheck finds a wrong seed" \
	sh -c "! '$tmp/barcheck' '$tmp/bar' check 8 4099 100 5 >/dev/null"
check "barcheck refuses a range outside the BAR" \
	sh -c "'$tmp/barcheck' '$tmp/bar' check 7 1048000 1000 0 | grep -q 'outside'"

# serve answers a request written the way the guest writes it
mkdir -p "$tmp/srv/req" "$tmp/srv/resp"
"$tmp/barcheck" "$tmp/bar" serve "$tmp/srv" &
srv=$!
echo "fill 9 0 4096 0" >"$tmp/srv/req/1~" && mv "$tmp/srv/req/1~" "$tmp/srv/req/1"
for _ in $(seq 100); do [ -f "$tmp/srv/resp/1" ] && break; sleep 0.05; done
check "barcheck serve answers a request" grep -qx ok "$tmp/srv/resp/1"
touch "$tmp/srv/stop"
wait $srv
check "barcheck serve stops on request" test $? -eq 0

# tap-summary: counts, skips, and a crashed program's missing results
printf '1..3\nok 1 a\nnot ok 2 b\nok 3 c # SKIP no\n' >"$tmp/a.tap"
printf '1..4\nok 1 a\n' >"$tmp/b.tap"
check "tap-summary counts pass, fail, skip and missing results" \
	sh -c "python3 '$FGDS_VM/tap-summary.py' '$tmp/a.tap' '$tmp/b.tap' | tail -n1 | grep -qx '2 passed, 4 failed, 1 skipped'"

# Scripts refuse bad environments with one clear sentence.
if command -v setpriv >/dev/null; then
	out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$FGDS_VM/build-kernel.sh" 2>&1)
	check "not root: one clear sentence" sh -c "echo '$out' | grep -q 'must run as root'"
fi
out=$(FGDS_KCONFIG=bogus "$FGDS_VM/build-kernel.sh" 2>&1)
check "unknown kernel configuration is named" sh -c "echo \"\$1\" | grep -q \"unknown kernel configuration 'bogus'\"" _ "$out"
out=$("$FGDS_VM/run-vm.sh" nosuchmode 2>&1)
check "unknown guest mode is named" sh -c "echo \"\$1\" | grep -q \"no guest mode 'nosuchmode'\"" _ "$out"

# The toolchain cache: missing, stale (stamp from another recipe) or ready.
mkdir -p "$tmp/b1/root"
check "toolchain: missing root detected" \
	sh -c "FGDS_BUILD='$tmp/b0' '$FGDS_VM/toolchain.sh' --status | grep -qx missing"
check "toolchain: half-built root (no stamp) detected as stale" \
	sh -c "FGDS_BUILD='$tmp/b1' '$FGDS_VM/toolchain.sh' --status | grep -qx stale"
echo old >"$tmp/b1/root/.fgds-toolchain"
check "toolchain: root from another recipe detected as stale" \
	sh -c "FGDS_BUILD='$tmp/b1' '$FGDS_VM/toolchain.sh' --status | grep -qx stale"
"$FGDS_VM/toolchain.sh" --recipe >"$tmp/b1/root/.fgds-toolchain"
check "toolchain: current root detected as ready" \
	sh -c "FGDS_BUILD='$tmp/b1' '$FGDS_VM/toolchain.sh' --status | grep -qx ready"

# The log scanner fails on each kind of report, passes on a clean log.
printf '[    1.000000] hello\n[    1.000001] DMAR: IOMMU enabled\nfgds-guest: BUG: not a kernel line\n' >"$tmp/clean.log"
check "scan-log passes a clean log" "$FGDS_VM/scan-log.sh" "$tmp/clean.log"
for r in 'BUG: KASAN: slab-use-after-free in foo' 'WARNING: CPU: 0 PID: 1 at mm/gup.c:1 x' \
	 'INFO: task fio:12 blocked for more than 60 seconds.' \
	 'WARNING: possible circular locking dependency detected' 'Oops: 0000 [#1] SMP' \
	 'DMAR: [DMA Write NO_PASID] Request device [0000:03:00.0] fault addr 0xc020400000'; do
	printf '[    2.000000] %s\n' "$r" >"$tmp/bad.log"
	check "scan-log fails on '${r%% *}...'" sh -c "! '$FGDS_VM/scan-log.sh' '$tmp/bad.log' 2>/dev/null"
done
# A report whose trace runs in an upstream kernel-crate doctest is listed, not
# failed on; one in a doctest of fgds's abstractions fails the run.
printf '[    3.000000] %s\n' '------------[ cut here ]------------' \
	'WARNING: lib/debugobjects.c:672 at debug_object_is_on_stack+0x8f/0xa0' \
	' rust_doctest_kernel_time_hrtimer_rs_1+0x44/0xa8' \
	'---[ end trace 0000000000000000 ]---' >"$tmp/up.log"
check "scan-log passes a report of an upstream doctest" \
	sh -c "'$FGDS_VM/scan-log.sh' '$tmp/up.log' 2>/dev/null"
sed 's/time_hrtimer_rs_1/pci_p2pdma_rs_0/' "$tmp/up.log" >"$tmp/ours.log"
check "scan-log fails on a report of an fgds doctest" \
	sh -c "! '$FGDS_VM/scan-log.sh' '$tmp/ours.log' 2>/dev/null"
printf '[    5.000000]     %s\n' 'ok 1 rust_doctest_kernel_dma_buf_rs_0' \
	'not ok 2 rust_doctest_kernel_sync_rs_0' >"$tmp/k.log"
printf '[    6.000000] ok 1 rust_doctests_kernel\n' >>"$tmp/k.log"
echo CONFIG_RUST_KERNEL_DOCTESTS=y >"$tmp/k.config"
check "kunit-tap passes fgds's doctests and names a failed upstream one" \
	sh -c "python3 '$FGDS_VM/kunit-tap.py' '$tmp/k.log' '$tmp/k.config' >'$tmp/k.tap' &&
		grep -q '^ok 1 kunit: rust_doctest_kernel_dma_buf_rs_0' '$tmp/k.tap' &&
		grep -q '^not ok 2 .*1 failed: rust_doctest_kernel_sync_rs_0' '$tmp/k.tap'"
check "kunit-tap skips a kernel built without doctests" \
	sh -c "python3 '$FGDS_VM/kunit-tap.py' '$tmp/k.log' '$tmp/none' | grep -q '# SKIP'"

# The GPU stand-in's runtime (tools/testing/fgds-gpurt) over a file standing
# in for the BAR: each of its results, and that it builds warning-free.
if make -s -C "$FGDS_TOP/tools/testing/fgds-gpurt" O="$tmp/gpurt" >"$tmp/gpurt.log" 2>&1; then
	ok "fgds-gpurt builds without warnings"
	timeout 120 "$tmp/gpurt/gpurt_test" >"$tmp/gpurt.tap" 2>&1
	rc=$?
	while read -r line; do
		case $line in
		"ok "*) ok "fgds-gpurt: ${line#ok [0-9]* }" ;;
		"not ok "*) notok "fgds-gpurt: ${line#not ok [0-9]* }" ;;
		esac
	done <"$tmp/gpurt.tap"
	check "fgds-gpurt: gpurt_test ran every result and exited 0 (status $rc)" \
		sh -c "[ $rc -eq 0 ] && [ \$(grep -c '^ok ' '$tmp/gpurt.tap') -eq \$(sed -n 's/^1\.\.//p' '$tmp/gpurt.tap') ]"
	# What real CUDA answered (driver 580, H200: cuda-facts-580-h200.json),
	# asked of the stand-in: allocation, addresses, buffer ids, reuse.
	truncate -s 64M "$tmp/gpurt.bar"
	LD_LIBRARY_PATH="$tmp/gpurt/cuda" FGDS_GPURT_DEVICES="file:$tmp/gpurt.bar" \
		timeout 120 python3 "$FGDS_TOP/tools/testing/fgds-gpurt/cuda_facts.py" --no-torch \
		--compare "$FGDS_TOP/tools/testing/fgds-gpurt/cuda-facts-580-h200.json" \
		>"$tmp/facts.log" 2>&1
	rc=$?
	check "fgds-gpurt answers what CUDA 13 answered on an H200 (cuda_facts.py)" \
		sh -c "[ $rc -eq 0 ] && grep -q ' compared, 0 differ' '$tmp/facts.log'"
	grep '^cuda_facts:' "$tmp/facts.log" | sed 's/^/# /'
else
	notok "fgds-gpurt builds without warnings"
	sed 's/^/# /' "$tmp/gpurt.log" | tail -n 20
fi

# The user-space library and CLI (tools/): its own tests, lints and format.
if [ -f "$FGDS_TOP/tools/Cargo.toml" ] && [ "${FGDS_SKIP_CARGO:-0}" != 1 ]; then
	if ! command -v cargo >/dev/null; then
		notok "user space: cargo not found (install Rust with rustup)"
	else
		(cd "$FGDS_TOP/tools" && cargo test --workspace --release -j"$(nproc)" 2>&1) >"$tmp/cargo.log"
		rc=$?
		while read -r name res; do
			case $res in
			ok) ok "cargo: $name" ;;
			ignored) n=$((n + 1)); echo "ok $n cargo: $name # SKIP ignored" ;;
			*) notok "cargo: $name" ;;
			esac
		done < <(sed -n 's/^test \(.*\) \.\.\. \(ok\|FAILED\|ignored\)$/\1 \2/p' "$tmp/cargo.log")
		if [ $rc -ne 0 ] && ! grep -q FAILED "$tmp/cargo.log"; then
			notok "cargo test: build or run failed"; sed 's/^/# /' "$tmp/cargo.log" | tail -n 30
		fi
		check "user space: cargo fmt --check" sh -c "cd '$FGDS_TOP/tools' && cargo fmt --all --check >/dev/null 2>&1"
		if (cd "$FGDS_TOP/tools" && cargo clippy --workspace --all-targets --release \
			-j"$(nproc)" -- -D warnings) >"$tmp/clippy.log" 2>&1; then
			ok "user space: cargo clippy -D warnings"
		else
			notok "user space: cargo clippy -D warnings"
			sed 's/^/# /' "$tmp/clippy.log" | tail -n 20
		fi
	fi
fi

# The Python package (tools/python): pytest, one TAP line per test.
if [ -x "$FGDS_TOP/tools/python/run-tests.sh" ] && [ "${FGDS_SKIP_PYTHON:-0}" != 1 ]; then
	CARGO_BUILD_JOBS=$(nproc) "$FGDS_TOP/tools/python/run-tests.sh" -v >"$tmp/pytest.log" 2>&1
	rc=$?
	# Why test $1 skipped, from pytest's -ra summary ("SKIPPED [1]
	# test_torch.py:181: needs a CUDA GPU"): its file's reason, if it has one.
	skip_reason() {
		sed -n 's/^SKIPPED \[[0-9]*\] \([^:]*\):[0-9]*: \(.*\)$/\1 \2/p' "$tmp/pytest.log" |
			awk -v f="${1%%::*}" '{ p = $1; sub(/.*\//, "", p); $1 = ""; sub(/^ /, "") }
				p == f { r[$0] = 1 } END { for (k in r) { n++; s = k } if (n == 1) print s }'
	}
	# pytest -v says why on the test's own line ("... SKIPPED (needs a
	# CUDA GPU)  [ 50%]"); the -ra summary is the fallback.
	while read -r name res rest; do
		case $res in
		PASSED) ok "python: $name" ;;
		SKIPPED)
			n=$((n + 1))
			reason=$(printf '%s\n' "$rest" |
				sed -n 's/^ *(\(.*\)) *\(\[ *[0-9]*%\]\)\{0,1\} *$/\1/p')
			[ -n "$reason" ] || reason=$(skip_reason "$name")
			echo "ok $n python: $name # SKIP${reason:+ $reason}"
			;;
		*)
			notok "python: $name"
			# Why: pytest's short summary line of it (-ra), and the
			# last lines of its report.
			grep -F -- "${name#*/}" "$tmp/pytest.log" | grep -E '^(FAILED|ERROR) ' |
				cut -c1-600 | sed 's/^/# /'
			awk -v t="${name##*::}" 'index($0, "_ " t " _") { on = 1; n = 0 }
				on && /^(_____| *=====)/ && !index($0, t) { on = 0 }
				on { l[n++ % 25] = $0 }
				END { for (i = (n > 25 ? n - 25 : 0); i < n; i++) print "# " l[i % 25] }' \
				"$tmp/pytest.log"
			;;
		esac
	done < <(sed -n 's/^\([^ ]*\.py[^ ]*\) \(PASSED\|FAILED\|ERROR\|SKIPPED\)\(.*\)$/\1 \2\3/p' "$tmp/pytest.log")
	if [ $rc -ne 0 ] && ! grep -qE ' (FAILED|ERROR)' "$tmp/pytest.log"; then
		notok "python: build or install failed"; sed 's/^/# /' "$tmp/pytest.log" | tail -n 30
	fi
fi

# Real cuFile users under fgds run (tools/fgds/tests/cufile_python.py), on
# host memory, every byte checked: cufile-python's CDLL("libcufile.so") and
# LMCache's cufile GDS backend, with the fgds and libcufile.so cargo test
# built and the packages run-tests.sh installed in build/python-venv. A few
# seconds.
fgdsbin=$FGDS_TOP/tools/target/release/fgds
cflib=$FGDS_TOP/tools/target/release/deps/libcufile.so
pyvenv=$FGDS_TOP/build/python-venv/bin/python
for what in cufile-python lmcache; do
	if [ "${FGDS_SKIP_CARGO:-0}" = 1 ] || [ "${FGDS_SKIP_PYTHON:-0}" = 1 ] ||
		[ ! -x "$fgdsbin" ] || [ ! -f "$cflib" ] || [ ! -x "$pyvenv" ]; then
		n=$((n + 1)); echo "ok $n fgds run: $what on fgds's libcufile # SKIP no fgds, libcufile.so or build/python-venv (cargo or Python tests skipped)"
		continue
	fi
	# O_DIRECT: /var/tmp (on disk), not a tmpfs /tmp
	data=$(mktemp -d -p /var/tmp fgds-cufile.XXXXXX)
	out=$("$fgdsbin" run --lib "$cflib" -- "$pyvenv" "$FGDS_TOP/tools/fgds/tests/cufile_python.py" \
		"$what" "$data" 2>&1)
	rc=$?
	rm -rf "$data"
	echo "$out" | sed 's/^/# /'
	if [ $rc = 77 ]; then
		n=$((n + 1)); echo "ok $n fgds run: $what on fgds's libcufile # SKIP $(echo "$out" | sed -n 's/^skip: //p' | head -n1)"
	elif [ $rc = 0 ]; then
		ok "fgds run: $what on fgds's libcufile"
	else
		notok "fgds run: $what on fgds's libcufile"
	fi
done

# tap-summary: a "not ok ... # TODO" (a known failure, as the series check
# reports findings its plan knows of) is listed, not failed.
printf '1..2\nok 1 a\nnot ok 2 b # TODO known\n' >"$tmp/todo.tap"
check "tap-summary lists a TODO failure without failing" \
	sh -c "python3 '$FGDS_VM/tap-summary.py' '$tmp/todo.tap' | tail -n1 | grep -qx '1 passed, 0 failed, 1 to do'"

# The install path's kernel configuration step (tools/fgds/install/
# configure-kernel.sh) on a real distribution configuration: Debian's
# newest linux-image-*-amd64 (downloaded once with apt-get into
# build/debian-config/, or FGDS_DEBIAN_CONFIG_DIR), over the toolchain root's Linux 7.2 with the fgds
# overlay, olddefconfig in the root (rustc, bindgen, clang) in a private
# mount namespace, output in the root's /tmp. About 20 s per run. Skipped
# where the root or its kernel tree is not there yet (make check builds
# them while these tests run) or apt-get cannot download.
cfgsh=$FGDS_TOP/tools/fgds/install/configure-kernel.sh
mkdir -p "$tmp/linux/scripts/kconfig"
touch "$tmp/linux/Makefile" "$tmp/linux/scripts/kconfig/merge_config.sh"
out=$("$cfgsh" -c /nonexistent "$tmp/linux" 2>&1)
check "configure-kernel refuses a tree without the fgds overlay" \
	sh -c "echo \"\$1\" | grep -q 'no drivers/misc/fgds'" _ "$out"
if [ "${FGDS_SKIP_KCONFIG:-0}" = 1 ]; then
	:
elif [ ! -f "$FGDS_ROOT/fgds/linux/.fgds-tree" ] || [ ! -x "$FGDS_ROOT/usr/bin/rustc" ] ||
	[ "$(id -u)" -ne 0 ]; then
	n=$((n + 1)); echo "ok $n configure-kernel on Debian's configuration # SKIP no toolchain root with the kernel tree yet (or not root)"
else
	dc=${FGDS_DEBIAN_CONFIG_DIR:-$FGDS_BUILD/debian-config}
	if ! ls "$dc"/config-* >/dev/null 2>&1 && command -v apt-get >/dev/null; then
		pkg=$(apt-cache search --names-only '^linux-image-[0-9][^ ]*-amd64$' 2>/dev/null |
			awk '{ print $1 }' | grep -v -e '-rt-' -e '-cloud-' -e 'unsigned' | sort -V | tail -n1)
		mkdir -p "$dc/deb"
		if [ -n "$pkg" ] && (cd "$dc/deb" && apt-get download -q "$pkg" >/dev/null 2>&1); then
			dpkg-deb --fsys-tarfile "$dc"/deb/*.deb | tar -x -C "$dc" --strip-components=2 \
				--wildcards './boot/config-*'
		fi
		rm -rf "$dc/deb"
	fi
	dcfg=$(ls "$dc"/config-* 2>/dev/null | head -n1)
	if [ -z "$dcfg" ]; then
		n=$((n + 1)); echo "ok $n configure-kernel on Debian's configuration # SKIP could not download a Debian linux-image package"
	else
		kt=/tmp/fgds-host-tests-kconfig.$$
		mkdir -p "$FGDS_ROOT$kt/install"
		cp "$cfgsh" "$FGDS_TOP/tools/fgds/install/fgds.config" "$FGDS_ROOT$kt/install/"
		# plus the certificate Ubuntu's configuration names, not in the tree
		{ cat "$dcfg"; echo 'CONFIG_SYSTEM_TRUSTED_KEYS="debian/canonical-certs.pem"'; } \
			>"$FGDS_ROOT$kt/debian.config"
		# Without debug information MODVERSIONS leaves Rust nothing to version with.
		sed -e 's/^CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT=y/# CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT is not set/' \
			"$dcfg" >"$FGDS_ROOT$kt/nodebug.config"
		echo CONFIG_DEBUG_INFO_NONE=y >>"$FGDS_ROOT$kt/nodebug.config"
		kcfg() {
			unshare --mount --propagation private sh -c "mount -t proc proc '$FGDS_ROOT/proc' &&
				chroot '$FGDS_ROOT' /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
				LANG=C.UTF-8 $kt/install/configure-kernel.sh $*" 2>&1
		}
		out=$(kcfg -c "$kt/debian.config" -o "$kt/obj" /fgds/linux); rc=$?
		echo "$out" | grep -v 'warning: symbol value' | sed 's/^/# /'
		check "configure-kernel: $(basename "$dcfg") keeps every symbol fgds needs" \
			sh -c "[ $rc = 0 ] && grep -qx CONFIG_FGDS=m '$FGDS_ROOT$kt/obj/.config' &&
				grep -qx CONFIG_RUST=y '$FGDS_ROOT$kt/obj/.config' &&
				grep -qx CONFIG_PCI_P2PDMA=y '$FGDS_ROOT$kt/obj/.config' &&
				grep -qx CONFIG_ZONE_DEVICE=y '$FGDS_ROOT$kt/obj/.config' &&
				grep -qx 'CONFIG_SYSTEM_TRUSTED_KEYS=\"\"' '$FGDS_ROOT$kt/obj/.config'"
		out=$(kcfg -c "$kt/nodebug.config" -o "$kt/obj2" /fgds/linux); rc=$?
		echo "$out" | grep -v 'warning: symbol value' | sed 's/^/# /'
		check "configure-kernel names a lost CONFIG_RUST and why (exit 1)" \
			sh -c "[ $rc = 1 ] && echo \"\$1\" | grep -q 'CONFIG_RUST=y (now: not set)' &&
				echo \"\$1\" | grep -q 'CONFIG_MODVERSIONS=y needs CONFIG_GENDWARFKSYMS'" _ "$out"
		rm -rf --one-file-system "${FGDS_ROOT:?}$kt"
	fi
fi

# The patch series (tools/testing/fgds-series): the plan puts every overlay
# file in one patch, every generated patch is from and signed off by the
# sender with no placeholder identity, checkpatch --strict --codespell finds
# nothing in any, and the series applied to pristine 7.2 gives exactly the
# tree the overlay gives. About 2 minutes on two idle cores the first time
# (checkpatch's share is cached in build/series-work/ for unchanged
# patches), about a minute after; the first run also imports the pristine
# tree into build/linux-7.2 (some 30 s). The 1.8 GB checkout it works in is
# removed at the end, and made again by the next run. Without git's user.name/email the
# patches are made by a test identity, in a directory removed at the end.
if [ "${FGDS_SKIP_SERIES:-0}" != 1 ]; then
	# make check builds the toolchain root while these tests run: wait for
	# one that is being built (not ready, changed in the last 5 minutes), at
	# most 15 minutes; not for a missing or an abandoned one.
	for _ in $(seq 180); do
		[ -z "${FGDS_LINUX_TARBALL:-}" ] &&
			[ "$("$FGDS_VM/toolchain.sh" --status 2>/dev/null)" = stale ] &&
			[ -n "$(find "$FGDS_ROOT" -maxdepth 3 -newermt '-5 minutes' -print -quit 2>/dev/null)" ] ||
			break
		sleep 5
	done
	if [ -z "${FGDS_LINUX_TARBALL:-}" ] &&
		! ls "$FGDS_ROOT"/usr/src/linux-source-7.2.tar.* >/dev/null 2>&1; then
		n=$((n + 1)); echo "ok $n series # SKIP no Linux 7.2 source in $FGDS_ROOT (make toolchain)"
	else
		ident=()
		git -C "$FGDS_TOP" config user.email >/dev/null ||
			ident=(GIT_AUTHOR_NAME="fgds series check" GIT_AUTHOR_EMAIL=series-check@fgds.invalid)
		env "${ident[@]}" FGDS_ROOT="$FGDS_ROOT" \
			"$FGDS_TOP/tools/testing/fgds-series/fgds-series.py" check >"$tmp/series.log" 2>&1
		rc=$?
		while IFS= read -r line; do
			case $line in
			'ok '*) ok "${line#ok }" ;;
			'not ok '*'# TODO '*) n=$((n + 1)); echo "not ok $n ${line#not ok }" ;;
			'not ok '*) notok "${line#not ok }" ;;
			'#'*) echo "$line" ;;
			esac
		done <"$tmp/series.log"
		if [ $rc -ne 0 ] && ! grep -q '^not ok ' "$tmp/series.log"; then
			notok "series: fgds-series.py check failed"; sed 's/^/# /' "$tmp/series.log" | tail -n 20
		fi
	fi
fi

echo "1..$n"
exit $((fails > 0))
