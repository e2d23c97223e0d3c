#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR MIT
#
# Stages, on the development machine, what the GPU machine's second proof
# (gpu-run.sh: KvikIO over libcufile, LMCache's KV round trip) needs and
# that machine lacks: fgds's wheel, libcufile.so and the fgds binary (built
# here), and wheels for its Python 3.12: KvikIO 26.10 (kvikio-cu13,
# libkvikio-cu13, rapids-logger; cupy, numpy and cuda-pathfinder are there),
# lmcache 0.5.6 and the few of its needs the machine's image has not
# (installed with --no-deps, as tools/python/run-tests.sh does). About 36 MB.
#
#   tools/lib/cufile/examples/gpu-stage.sh [DIR]     (default build/gpu)
#
# Then, from the repository root on the GPU machine (DIR carried along):
#   bash tools/lib/cufile/examples/gpu-run.sh DIR OUTDIR
set -euo pipefail
top=$(cd "$(dirname "$0")/../../../.." && pwd)
dir=${1:-$top/build/gpu}
mkdir -p "$dir/whl"
(cd "$top/tools" && CARGO_TARGET_DIR="$top/build/target" cargo build --release -q \
	-p fgds-cufile -p fgds-cli)
cp "$top/build/target/release/libcufile.so" "$top/build/target/release/fgds" "$dir/"
# fgds's wheel (abi3): built by tools/python/run-tests.sh.
ls "$top"/build/python-wheels/fgds-*.whl >/dev/null ||
	{ echo "no fgds wheel: run tools/python/run-tests.sh first" >&2; exit 1; }
cp "$top"/build/python-wheels/fgds-*.whl "$dir/whl/"
plat=
for p in manylinux_2_17 manylinux2014 manylinux_2_24 manylinux_2_26 manylinux_2_27 \
	manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux_2_35; do
	plat="$plat --platform ${p}_x86_64"
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
	--implementation cp $plat -d "$dir/whl" \
	kvikio-cu13==26.10.0 libkvikio-cu13==26.10.0 rapids-logger==0.3.0 \
	lmcache==0.5.6 aiofile==3.12.3 caio==0.12.10 cachetools==8.0.2 msgspec==0.23.0 \
	pyzmq==27.3.0 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
du -sh "$dir"
