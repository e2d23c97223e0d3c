#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Host benchmark suite: the fgds library's engine against fio (io_uring
# engine), a bare io_uring loop without the library (the floor of the
# Batch API's ring path) and a pool of pread/pwrite threads, all O_DIRECT
# on one file of at least 4 GiB, at equal request size and equal number of
# I/Os in flight (see `fgds bench --help`). One command:
#
#   tools/testing/fgds-bench/host-suite.sh
#
# Rows: 1 MiB sequential and 4 KiB random, read and write, at queue depths
# 1, 8 and 32; then a request-size sweep of sequential and random reads at
# queue depth 8. Every row runs all engines in one `fgds bench` invocation,
# FGDS_BENCH_REPEAT rounds with the engine order rotated, every engine on
# the same CPU (FGDS_BENCH_CPUS): on a virtual machine the vCPU that takes
# the disk's interrupt completes a thread waiting on it without waking
# another vCPU, and 4 KiB reads one at a time ran at 63-68 MiB/s there and
# 40-45 on the other vCPU (a bare io_uring loop on this project's 2-core
# host), so engines the scheduler placed freely were compared across a coin
# toss. Prints a table,
# writes build/bench/host-suite.json (rows + host information) and PNG
# plots in build/bench/plots (plot.py). This is a measurement, not a test:
# nothing passes or fails on the figures.
#
# Environment (defaults in brackets):
#   FGDS_BENCH_FILE      the file [build/bench/host-4g.bin], created if needed
#   FGDS_BENCH_SIZE      its size, at least 4G [4G]
#   FGDS_BENCH_SEQ       bytes per sequential round [512M]
#   FGDS_BENCH_RAND_IOS  requests per random round, spread over the whole
#                        file [32768, i.e. 128 MiB of 4 KiB]
#   FGDS_BENCH_QDS       queue depths [1 8 32]
#   FGDS_BENCH_REPEAT    rounds per row [5]
#   FGDS_BENCH_CPUS      CPUs every engine runs on (a taskset -c list; fio
#                        inherits it), empty for none [0]
#   FGDS_BENCH_WRITES    0: skip the write rows [1]
#   FGDS_BENCH_SWEEP     0: skip the request size sweep [1]
#   FGDS_BENCH_OUT       output directory [build/bench]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../.." && pwd)
out=${FGDS_BENCH_OUT:-$top/build/bench}
file=${FGDS_BENCH_FILE:-$out/host-4g.bin}
fsize=${FGDS_BENCH_SIZE:-4G}
seq_total=${FGDS_BENCH_SEQ:-512M}
rand_ios=${FGDS_BENCH_RAND_IOS:-32768}
qds=${FGDS_BENCH_QDS:-1 8 32}
repeat=${FGDS_BENCH_REPEAT:-5}
cpus=${FGDS_BENCH_CPUS-0}
writes=${FGDS_BENCH_WRITES:-1}
sweep=${FGDS_BENCH_SWEEP:-1}
json=$out/host-suite.json
plots=$out/plots

log() { printf 'host-suite: %s\n' "$*" >&2; }
die() { printf 'host-suite: error: %s\n' "$*" >&2; exit 1; }

# "4G", "512M", "4KiB", "4096" -> bytes
bytes() {
	local v=${1^^}
	v=${v%IB}
	v=${v%B}
	case $v in
	*K) echo $((${v%K} << 10)) ;;
	*M) echo $((${v%M} << 20)) ;;
	*G) echo $((${v%G} << 30)) ;;
	*T) echo $((${v%T} << 40)) ;;
	*[!0-9]* | '') die "bad size '$1'" ;;
	*) echo "$v" ;;
	esac
}

min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
max() { if [ "$1" -gt "$2" ]; then echo "$1"; else echo "$2"; fi; }

fsize_b=$(bytes "$fsize")
seq_b=$(bytes "$seq_total")
[ "$fsize_b" -ge $((4 << 30)) ] ||
	log "warning: FGDS_BENCH_SIZE=$fsize is below the 4 GiB the suite is specified for"

# --- tools -----------------------------------------------------------------
if ! command -v fio >/dev/null; then
	[ "$(id -u)" -eq 0 ] ||
		die "fio is not installed; install it as root (apt-get install fio) or rerun with sudo"
	log "fio is not installed: installing it with apt-get (needs root)"
	apt-get install -y fio >&2 || { apt-get update >&2 && apt-get install -y fio >&2; } ||
		die "apt-get install fio failed"
fi
command -v python3 >/dev/null || die "python3 is needed (apt-get install python3)"
pin=()
if [ -n "$cpus" ]; then
	command -v taskset >/dev/null ||
		die "taskset is needed to pin the engines (apt-get install util-linux), or set FGDS_BENCH_CPUS="
	taskset -c "$cpus" true 2>/dev/null ||
		die "FGDS_BENCH_CPUS=$cpus: not a list of CPUs this process may run on (allowed: $(taskset -pc $$ | sed 's/.*: //')); give a taskset -c list such as 0 or 0-1, or empty for no pinning"
	pin=(taskset -c "$cpus")
fi

pkg=$(sed -n 's/^name = "\(.*\)"/\1/p' "$top/tools/fgds/Cargo.toml" | head -n1)
log "building $pkg (release)"
cargo build --release -j1 --manifest-path "$top/tools/Cargo.toml" -p "$pkg" >&2
fgds=$top/tools/target/release/fgds
[ -x "$fgds" ] || die "$fgds was not built"

# --- the file --------------------------------------------------------------
mkdir -p "$out" "$(dirname "$file")"
log "preparing $file ($fsize)"
"$fgds" bench -f "$file" --file-size "$fsize_b" -s 4K -b 4K --prepare-only >&2

# --- host state ------------------------------------------------------------
# other CPU-heavy work known to share this host: kernel builds, QEMU guests
bg_pattern='kbuild|make .*-j|qemu-system'
bg_procs() { pgrep -fc "$bg_pattern" 2>/dev/null || true; }
bg_names() { { pgrep -lf "$bg_pattern" 2>/dev/null || true; } | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}'; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
export FGDS_BENCH_LOAD_START FGDS_BENCH_BG_START FGDS_BENCH_BG_NAMES_START FGDS_BENCH_START
export FGDS_BENCH_CPUS=$cpus
FGDS_BENCH_LOAD_START=$(load)
FGDS_BENCH_BG_START=$(bg_procs)
FGDS_BENCH_BG_NAMES_START=$(bg_names)
FGDS_BENCH_START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
[ "${FGDS_BENCH_BG_START:-0}" -eq 0 ] ||
	log "note: other heavy work is running ($FGDS_BENCH_BG_NAMES_START; load $FGDS_BENCH_LOAD_START): CPU and latency figures are perturbed"

# --- the matrix ------------------------------------------------------------
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
n=0
t_start=$SECONDS

# cell SECTION RW PATTERN REQUEST_BYTES QD
cell() {
	local section=$1 rw=$2 pat=$3 req=$4 qd=$5 total call args
	if [ "$pat" = seq ]; then
		# one thread, the engine splitting big calls into REQ chunks, QD in
		# flight. A call ends when its last chunk does, so with QD > 1 it
		# must be long (64 MiB) for the pipeline not to drain at every
		# call; one in flight needs no more than one chunk per call, and a
		# longer call would only move the data into more memory than the
		# other engines use (R x QD), which costs on its own (see
		# docs/benchmarks.md).
		total=$(min "$seq_b" $((rand_ios * req)))
		if [ "$qd" -eq 1 ]; then
			call=$req
		else
			call=$(min "$total" "$(max $((64 << 20)) $((req * qd)))")
		fi
		args=(-b "$call" --chunk "$req" -q "$qd" -t 1)
	else
		# a synchronous call of one request keeps one in flight: QD threads
		total=$(min "$seq_b" $((rand_ios * req)))
		args=(-b "$req" --chunk "$req" -q 1 -t "$qd")
	fi
	n=$((n + 1))
	local t0=$SECONDS id
	id=$runs/$(printf %03d "$n")
	printf 'host-suite: [%2d] %-5s %-4s %7s qd %-3s ' "$n" "$rw" "$pat" "$req" "$qd" >&2
	local cmd=("${pin[@]}" "$fgds" bench -f "$file" --file-size "$fsize_b" --rw "$rw" --pattern "$pat"
		"${args[@]}" -s "$total" --batch --uring --baseline --fio --repeat "$repeat" --json)
	printf '%s\n' "$section" "${cmd[*]}" >"$id.meta"
	"${cmd[@]}" >"$id.json"
	printf '%3ds\n' $((SECONDS - t0)) >&2
}

for rw in read write; do
	[ "$rw" = read ] || [ "$writes" != 0 ] || continue
	for qd in $qds; do
		cell matrix "$rw" seq $((1 << 20)) "$qd"
	done
	for qd in $qds; do
		cell matrix "$rw" rand 4096 "$qd"
	done
done
if [ "$sweep" != 0 ]; then
	# request sizes at queue depth 8 (the 1 MiB seq and 4 KiB rand points
	# come from the matrix when it has qd 8)
	for req in 4096 16384 65536 262144 1048576 4194304; do
		[ "$req" -eq $((1 << 20)) ] && [[ " $qds " == *" 8 "* ]] && continue
		cell sweep read seq "$req" 8
	done
	for req in 4096 16384 65536 262144 1048576; do
		[ "$req" -eq 4096 ] && [[ " $qds " == *" 8 "* ]] && continue
		cell sweep read rand "$req" 8
	done
fi

export FGDS_BENCH_LOAD_END FGDS_BENCH_BG_END FGDS_BENCH_BG_NAMES_END FGDS_BENCH_SECONDS
FGDS_BENCH_LOAD_END=$(load)
FGDS_BENCH_BG_END=$(bg_procs)
FGDS_BENCH_BG_NAMES_END=$(bg_names)
FGDS_BENCH_SECONDS=$((SECONDS - t_start))

# --- results ---------------------------------------------------------------
python3 "$here/collect.py" --file "$file" --out "$json" "$runs"
python3 "$here/plot.py" "$json" "$plots"
log "JSON: $json"
log "plots: $plots"
