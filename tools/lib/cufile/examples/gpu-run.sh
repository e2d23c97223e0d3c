#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR MIT
#
# The GPU machine's second proof, from the repository root there, with the
# folder gpu-stage.sh made (carried along):
#
#   bash tools/lib/cufile/examples/gpu-run.sh DIR OUTDIR [KVIKIO_MIB] [LMCACHE_MIB] [PARTS]
#
# (PARTS: kvikio,lmcache by default.)
# 1. KvikIO's CuFile, unmodified, writing and reading every byte of a file
#    from and into GPU memory (kvikio_bench.py): KvikIO's own POSIX path
#    (KVIKIO_COMPAT_MODE=ON), cuFile on fgds's libcufile.so.0 (compat mode
#    OFF under `fgds run`), and cuFile on NVIDIA's (compat mode OFF), each
#    with KvikIO's default thread count and with 8 threads; and the same
#    program on fgds's own API (--api fgds), the baseline.
# 2. LMCache's GPU-resident KV chunks: tools/python's GPU test of the L2
#    adapter (test_lmcache.py) and lmcache_kv_bench.py, fgds's L2 adapter
#    against LMCache's own local-disk (fs) adapter.
# Logs and JSON lines go to OUTDIR (six files: machine.txt, kvikio.txt,
# kvikio.err, pytest-gpu.txt, lmcache-bench.txt, lmcache-bench.err).
set -uo pipefail
dir=$1 out=$2 kmib=${3:-2048} lmib=${4:-1024} parts=${5:-kvikio,lmcache}
top=$(pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
	--target /tmp/fgds-gpu-site "$dir"/whl/*.whl || exit 1
export PYTHONPATH=/tmp/fgds-gpu-site
work=$(mktemp -d /var/tmp/fgds-gpu.XXXXXX)
{
	uname -r
	nvidia-smi -L
	df -hT "$work" | tail -1
	python3 -c 'import torch, kvikio, lmcache, fgds; print("torch", torch.__version__, "kvikio", kvikio.__version__, "lmcache", lmcache.__version__ if hasattr(lmcache, "__version__") else "0.5.6")'
	ls -d /run/udev 2>&1
} 2>&1 | tee "$out/machine.txt"
# KvikIO's is_cufile_available() also asks that /run/udev exist (where
# NVIDIA's cuFile reads the PCIe topology); this image has none.
[ -d /run/udev ] || { mkdir -p /run/udev && echo "created /run/udev for KvikIO's check"; }

bench=$top/tools/lib/cufile/examples/kvikio_bench.py
case ,$parts, in *,kvikio,*) kthreads="default 8" ;; *) kthreads= ;; esac
for threads in $kthreads; do
	libs="posix fgds nvidia"
	[ "$threads" = default ] && libs="$libs fgds-api"
	for lib in $libs; do
		env=(KVIKIO_COMPAT_MODE=OFF)
		pre=() api=()
		case $lib in
		posix) env=(KVIKIO_COMPAT_MODE=ON) ;;
		fgds) pre=("$dir/fgds" run --lib "$dir/libcufile.so" --) ;;
		fgds-api) api=(--api fgds) ;;
		esac
		[ "$threads" = default ] || env+=(KVIKIO_NTHREADS=$threads)
		t=$((60 + kmib / 32)); [ $lib = nvidia ] && t=45
		r=$(env "${env[@]}" timeout $t "${pre[@]}" python3 "$bench" "$work/kvikio.bin" \
			"$kmib" "${api[@]}" 2>"$work/err")
		echo "kvikio $lib threads=$threads: exit $?: $r" | tee -a "$out/kvikio.txt"
		{ echo "== kvikio $lib threads=$threads"; tail -c 4000 "$work/err"; } >>"$out/kvikio.err"
	done
done

case ,$parts, in *,lmcache,*) ;; *) rm -rf "$work"; exit 0 ;; esac
cd "$top/tools/python/tests" &&
	timeout 120 python3 -m pytest -q -ra -p no:cacheprovider --rootdir="$top/tools/python" \
		-c "$top/tools/python/pyproject.toml" \
		test_lmcache.py::test_l2_gpu_resident_chunks_round_trip 2>&1 | tail -15 | tee "$out/pytest-gpu.txt"
cd "$top"
timeout 150 python3 tools/python/benchmarks/lmcache_kv_bench.py "$work/lmcache" --mib "$lmib" \
	2>"$out/lmcache-bench.err" | tee "$out/lmcache-bench.txt"
rm -rf "$work"
