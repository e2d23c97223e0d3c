#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The slow check of the generated series (make series-check, after make
# series): apply build/series/fixes/ and then build/series/ to pristine
# Linux 7.2 one patch at a time and build the kernel incrementally after
# each (the release configuration of tools/testing/fgds-vm/configs, which
# sets CONFIG_FGDS=m, plus series-check.config: the sample), run
# checkpatch.pl --strict --codespell on each patch, and at the end
# rustfmtcheck, CLIPPY=1 and rustdoc. One line per patch.
#
# The GPU drivers the series changes (amdgpu, xe) are too big to build whole
# after every patch: a second object directory, configured with
# tools/testing/fgds-vm/configs/exporters.config as build-exporters.sh does,
# compiles after each patch every drivers/gpu/ object the series has changed
# so far (nothing before the first patch that touches one).
#
# The builds run in the toolchain root (build/root, or FGDS_ROOT) through
# chroot, in a private mount namespace so that nothing is mounted for anyone
# else. The tree and the object directory live in FGDS_SERIES_CHECK_DIR
# (default: the root's /fgds/series-check), which must be inside the root;
# the object directory is kept between runs, so that a second run rebuilds
# only what the series changes. Logs: FGDS_SERIES_CHECK_DIR/logs/.
#
# FGDS_SERIES_JOBS (default 1) is make's -j. On two shared cores the first
# run adds a cold kernel build (24 minutes here) to the per-patch builds;
# a later run took 17 minutes (1009 s: 18 patches, then rustfmtcheck,
# CLIPPY=1 and rustdoc).
set -uo pipefail
root_env=${FGDS_ROOT:-}
. "$(dirname "$0")/../fgds-vm/lib.sh"
# FGDS_ROOT names a toolchain root other than build/root (read-only use).
[ -z "$root_env" ] || FGDS_ROOT=$root_env

need_root
SERIES=$FGDS_TOP/tools/testing/fgds-series
OUT=$FGDS_BUILD/series
WORK=${FGDS_SERIES_CHECK_DIR:-$FGDS_ROOT/fgds/series-check}
JOBS=${FGDS_SERIES_JOBS:-1}
case $WORK in
"$FGDS_ROOT"/*) ;;
*) die "FGDS_SERIES_CHECK_DIR ($WORK) must be inside the toolchain root $FGDS_ROOT" ;;
esac
[ -f "$FGDS_ROOT/.fgds-toolchain" ] || die "no toolchain root at $FGDS_ROOT: run make toolchain"
ls "$OUT"/0001-*.patch >/dev/null 2>&1 || die "no series in $OUT: run make series first"
IN=${WORK#"$FGDS_ROOT"}
TREE=$WORK/linux
OBJ=$WORK/kbuild
LOGS=$WORK/logs
mkdir -p "$WORK" "$LOGS" "$WORK/cfg"

# Run "$@" in the root, with its own /proc, visible to no one else.
inroot_private() {
	unshare -m --propagation private sh -c \
		'mount --bind /proc "$0/proc" && exec chroot "$0" /usr/bin/env -i \
			PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"' \
		"$FGDS_ROOT" "$@"
}

# The tree: a repository of its own (its objects borrowed from the pristine
# one), reset to pristine 7.2. Only files that differ are rewritten, so the
# object directory stays valid between runs.
pristine=$("$SERIES/fgds-series.py" pristine) || die "no pristine tree"
dict=$("$SERIES/fgds-series.py" codespell-dict) || die "no codespell dictionary"
todos=$("$SERIES/fgds-series.py" todos) || die "cannot read the plan"
if ! git -C "$TREE" rev-parse --git-dir >/dev/null 2>&1 ||
	[ "$(git -C "$TREE" rev-parse --show-toplevel 2>/dev/null)" != "$TREE" ]; then
	log "setting up $TREE"
	mkdir -p "$TREE"
	rm -rf "$TREE/.git"
	git -C "$TREE" init -q
	echo "$pristine/.git/objects" >"$TREE/.git/objects/info/alternates"
	git -C "$TREE" fetch -q --no-tags "$pristine" fgds-pristine ||
		die "cannot fetch the pristine commit"
	git -C "$TREE" reset -q FETCH_HEAD
	git -C "$TREE" tag -f fgds-pristine FETCH_HEAD >/dev/null
fi
# The objects may come from another checkout's pristine repository than
# last time (the import is reproducible: same tarball, same commit).
echo "$pristine/.git/objects" >"$TREE/.git/objects/info/alternates"
git -C "$TREE" fetch -q --no-tags "$pristine" fgds-pristine &&
	git -C "$TREE" tag -f fgds-pristine FETCH_HEAD >/dev/null
git -C "$TREE" am --abort >/dev/null 2>&1
git -C "$TREE" checkout -q -f --detach fgds-pristine && git -C "$TREE" clean -q -f -d -x ||
	die "cannot reset $TREE to pristine 7.2"

# Configuration: tinyconfig + the release fragment + the series' own; redone
# after each patch (olddefconfig), so that CONFIG_FGDS=m and the sample take
# effect once their Kconfig exists.
cp "$FGDS_VM/configs/fgds.config" "$SERIES/series-check.config" "$WORK/cfg/"
K="make -s -C $IN/linux O=$IN/kbuild LLVM=1"
configure() {
	inroot_private sh -c "cd $IN/kbuild &&
		$IN/linux/scripts/kconfig/merge_config.sh -m -O . .config \
			$IN/cfg/fgds.config $IN/cfg/series-check.config >/dev/null &&
		$K olddefconfig >/dev/null"
}
if [ ! -f "$OBJ/.config" ]; then
	mkdir -p "$OBJ"
	inroot_private sh -c "$K tinyconfig >/dev/null" || die "tinyconfig failed"
fi
configure || die "configuration failed"

# The GPU drivers' object directory (see the top).
cp "$FGDS_VM/configs/exporters.config" "$WORK/cfg/"
GOBJ=$WORK/kbuild-gpu
KG="make -s -C $IN/linux O=$IN/kbuild-gpu LLVM=1"
configure_gpu() {
	[ -f "$GOBJ/.config" ] || { mkdir -p "$GOBJ" && inroot_private sh -c "$KG tinyconfig >/dev/null"; } ||
		return 1
	inroot_private sh -c "cd $IN/kbuild-gpu &&
		$IN/linux/scripts/kconfig/merge_config.sh -m -O . .config \
			$IN/cfg/fgds.config $IN/cfg/exporters.config >/dev/null &&
		$KG olddefconfig >/dev/null" || return 1
	local l
	for l in $(grep -E '^CONFIG_[A-Z0-9_]+=[ym]$' "$WORK/cfg/exporters.config"); do
		grep -qx "$l" "$GOBJ/.config" || { echo "config lost: $l"; return 1; }
	done
}

# A patch whose Kconfig symbol exists must have it set as asked.
config_ok() {
	local missing=
	grep -q '^config FGDS$' "$TREE/drivers/misc/fgds/Kconfig" 2>/dev/null &&
		! grep -qx CONFIG_FGDS=m "$OBJ/.config" && missing+=" CONFIG_FGDS=m"
	grep -q '^config SAMPLE_FGDS$' "$TREE/samples/Kconfig" 2>/dev/null &&
		! grep -qx CONFIG_SAMPLE_FGDS=y "$OBJ/.config" && missing+=" CONFIG_SAMPLE_FGDS=y"
	[ -z "$missing" ] || { echo "config lost:$missing"; return 1; }
}

# Compiler, clippy and rustdoc diagnostics: all of them, and those located
# in a file the series touches (C: "path:line:col: warning", Rust: "--> path").
all_warnings() {
	grep -cE '^(warning|error)(\[[^]]*\])?: |^[^ ]+:[0-9]+:[0-9]+: (warning|error):' "$1"
}
ours_warnings() {
	local files; files=$(git -C "$TREE" diff --name-only fgds-pristine HEAD)
	[ -n "$files" ] || { echo 0; return; }
	grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error):|^ *--> ' "$1" |
		sed -E 's/^ *--> //; s/:[0-9]+:[0-9]+.*//; s|^'"$IN"'/linux/||' |
		grep -cxF -f <(echo "$files")
}

# A copy of the series as it is now: make series may run again meanwhile.
rm -rf "$WORK/series" && cp -r "$OUT" "$WORK/series" || die "cannot copy $OUT"
OUT=$WORK/series
patches=()
for p in "$OUT"/fixes/[0-9][0-9][0-9][0-9]-*.patch "$OUT"/[0-9][0-9][0-9][0-9]-*.patch; do
	case $p in */0000-cover-letter.patch) continue ;; esac
	patches+=("$p")
done

fails=0
total_t0=$(date +%s)
echo "series-check: ${#patches[@]} patches, make -j$JOBS, tree $TREE"
for p in "${patches[@]}"; do
	rel=${p#"$OUT"/}
	name=${rel//\//-}
	subject=$(awk '/^Subject:/ { s = $0; while ((getline l) > 0 && l ~ /^[ \t]/) s = s l; print s; exit }' "$p" |
		sed 's/^Subject: \[PATCH \([0-9]*\/[0-9]*\)\] */\1 /')
	series=fgds
	case $rel in fixes/*) series=fixes ;; esac
	status=ok
	note=
	if ! git -C "$TREE" am -q --whitespace=nowarn "$p" >"$LOGS/$name.am.log" 2>&1; then
		echo "FAIL $series $subject: git am failed (logs/$name.am.log)"
		fails=$((fails + 1))
		break
	fi
	# checkpatch; commit ids cannot be looked up: the pristine tree has no
	# history (see the report line).
	(cd "$TREE" && PATH=/usr/bin:$PATH perl scripts/checkpatch.pl --strict --codespell --color=never \
		--codespellfile "$dict" --ignore UNKNOWN_COMMIT_ID "$p") >"$LOGS/$name.checkpatch.log" 2>&1
	cp_total=$(sed -n 's/^total: \([0-9]*\) errors, \([0-9]*\) warnings, \([0-9]*\) checks.*/\1E\/\2W\/\3C/p' \
		"$LOGS/$name.checkpatch.log")
	if [ "$cp_total" != 0E/0W/0C ]; then
		# Findings the plan knows of ("todo checkpatch COUNT") are a TODO.
		found=$(echo "$cp_total" | tr -c '0-9\n' ' ' | awk '{ print $1 + $2 + $3 }')
		known=$(awk -v s="$series" -v n="$((10#${subject%%/*}))" \
			'$1 == s && $2 == n && $3 == "checkpatch" { print $4 }' <<<"$todos")
		if [ -n "$known" ] && [ "${found:-0}" -le "$known" ]; then
			note+=" (checkpatch: TODO, $found known findings of the plan)"
		else
			status=FAIL; note+=" checkpatch-findings"
		fi
	fi
	t0=$(date +%s)
	if configure >"$LOGS/$name.config.log" 2>&1 && config_ok >>"$LOGS/$name.config.log" &&
		inroot_private sh -c "$K -j$JOBS bzImage modules" >"$LOGS/$name.build.log" 2>&1; then
		build=ok
	else
		build=FAIL
		status=FAIL
		note+=" build(logs/$name.build.log)"
	fi
	# The GPU drivers' objects the series has changed up to here.
	gpu_objs=$(git -C "$TREE" diff --name-only fgds-pristine HEAD -- drivers/gpu |
		sed -n 's/\.c$/.o/p' | tr '\n' ' ')
	if [ -n "$gpu_objs" ]; then
		if configure_gpu >"$LOGS/$name.gpu-config.log" 2>&1 &&
			inroot_private sh -c "$KG -j$JOBS $gpu_objs" >"$LOGS/$name.gpu.log" 2>&1; then
			gours=$(ours_warnings "$LOGS/$name.gpu.log")
			[ "$gours" = 0 ] || { status=FAIL; note+=" gpu-warnings:$gours(logs/$name.gpu.log)"; }
			note+=" (gpu objects: $(echo $gpu_objs | wc -w) built)"
		else
			build=FAIL
			status=FAIL
			note+=" gpu-objects(logs/$name.gpu.log)"
		fi
	fi
	t=$(($(date +%s) - t0))
	ours=$(ours_warnings "$LOGS/$name.build.log")
	[ "$ours" = 0 ] || { status=FAIL; note+=" warnings-in-series-files:$ours"; }
	other=$(all_warnings "$LOGS/$name.build.log")
	[ "$other" = "$ours" ] || note+=" (upstream files: $((other - ours)) warnings)"
	[ $status = ok ] || fails=$((fails + 1))
	printf '%-4s %-5s %-6s build %-4s %4ss  checkpatch %-9s %s%s\n' "$status" "$series" \
		"${subject%% *}" "$build" "$t" "${cp_total:-?}" "${subject#* }" "$note"
done

# Whole-tree Rust checks on the top of the series.
final() {
	local what=$1; shift
	local t0; t0=$(date +%s)
	local rc=0 ours other
	inroot_private sh -c "$*" >"$LOGS/final-$what.log" 2>&1 || rc=$?
	if [ "$what" = rustfmtcheck ]; then
		# rustfmt's verdict is per file: "Diff in /path/file.rs:line:".
		ours=$(sed -nE 's|^Diff in '"$IN"'/linux/([^ :]+).*|\1|p' "$LOGS/final-$what.log" |
			sort -u | grep -cxF -f <(git -C "$TREE" diff --name-only fgds-pristine HEAD))
		other=$(sed -nE 's|^Diff in ([^ :]+).*|\1|p' "$LOGS/final-$what.log" | sort -u | wc -l)
		[ "$ours" != 0 ] || rc=0
	else
		ours=$(ours_warnings "$LOGS/final-$what.log")
		other=$(all_warnings "$LOGS/final-$what.log")
	fi
	if [ $rc -eq 0 ] && [ "$ours" = 0 ]; then
		printf 'ok   %-12s %5ss  %s warnings in series files, %s in all\n' "$what" \
			$(($(date +%s) - t0)) "$ours" "$other"
	else
		printf 'FAIL %-12s %5ss  rc %s, %s warnings in series files, %s in all (logs/final-%s.log)\n' \
			"$what" $(($(date +%s) - t0)) $rc "$ours" "$other" "$what"
		fails=$((fails + 1))
	fi
}
final rustfmtcheck "$K rustfmtcheck"
final clippy "$K -j$JOBS CLIPPY=1 bzImage modules"
final rustdoc "$K -j$JOBS rustdoc"
echo "series-check: $fails failed, $(($(date +%s) - total_t0)) s in all; logs in $LOGS"
exit $((fails > 0))
