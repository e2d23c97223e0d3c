#!/bin/sh
# Builds the fgds Python package and runs its tests (no GPU needed; real torch).
# Needs python3 (with venv/pip) and a Rust toolchain; everything else comes
# from PyPI into build/python-venv. Exits non-zero on failure.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv="$root/build/python-venv"
export CARGO_TARGET_DIR="$root/build/python-target"
jobs=${CARGO_BUILD_JOBS:-1}

if [ ! -x "$venv/bin/python" ]; then
	python3 -m venv "$venv"
fi
# cufile-python (pure Python, 5 kB): for tools/fgds/tests/cufile_python.py,
# which host-tests.sh runs under fgds run with this venv.
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
	"maturin>=1.5,<2" pytest numpy safetensors cufile-python==0.2.0

# --- Packages the adapters are tested against (one block, one install each) ---
# torch: PyPI's only Linux x86_64 wheel is the CUDA build, which imports (and
# runs on the CPU) without a GPU but not without its CUDA wheels (libcudart,
# cuBLAS, cuDNN, ...: about 3 GB to download, 4.3 GB installed; a no-op once
# the venv has it). Pinned: fgds.torch follows torch.cuda.gds of this release.
# torch goes in with --no-deps, then each of its requirements in a pip call of
# its own, so that pip's downloads in $TMPDIR (freed at the end of each call)
# never hold more than one package's wheels: at most a GB, not 3. Triton, the
# compiler of torch.compile's GPU kernels (1 GB installed), is left out: no
# test compiles, and import torch does not load it. FGDS_PY_TORCH=0 skips torch
# (the torch and lmcache tests are then skipped, with FGDS_PY_TORCH_WHY as the
# reason where it is set: check.sh sets both when the disk is too small).
# $venv/.torch-2.15.0 says that all of it went in and imports.
if [ "${FGDS_PY_TORCH:-1}" != 0 ] && [ ! -f "$venv/.torch-2.15.0" ]; then
	pip_q() { "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@"; }
	pip_q --no-deps "torch==2.15.0"
	"$venv/bin/python" - <<-'EOF' | while IFS= read -r req; do pip_q "$req"; done
		from importlib.metadata import requires
		for r in requires("torch"):
		    if "extra ==" not in r and not r.startswith("triton"):
		        print(r)
	EOF
	"$venv/bin/python" -c 'import torch' || { echo "run-tests.sh: torch does not import" >&2; exit 1; }
	touch "$venv/.torch-2.15.0"
fi
# lmcache: the real lmcache 0.5.6 (tests/test_lmcache.py). Its wheel declares
# torch, CUDA-only wheels (cupy-cuda13x, nvtx, cufile-python, cuda-python)
# and ~40 other packages; the modules fgds.lmcache and its tests import
# (lmcache.v1.storage_backend, lmcache.v1.distributed.l2_adapters,
# lmcache.v1.config, ...; aiofiles for LMCache's own fs L2 adapter, which
# benchmarks/lmcache_kv_bench.py compares with; opentelemetry-api for its MP
# storage manager, which LMCache's own tests below build) need only torch
# (above) and the packages below,
# installed without their own dependencies (17 s). FGDS_SKIP_LMCACHE=1, or
# FGDS_PY_TORCH=0, leaves it out (the lmcache tests are then skipped).
if [ "${FGDS_PY_TORCH:-1}" != 0 ] && [ "${FGDS_SKIP_LMCACHE:-0}" != 1 ]; then
	"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
		lmcache==0.5.6 sortedcontainers==2.4.0 numba==0.68.1 llvmlite==0.50.0 \
		prometheus_client==0.24.1 py-cpuinfo==9.0.0 psutil==7.2.2 \
		aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 \
		frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1 \
		idna==3.20 requests==2.34.2 urllib3==2.8.0 certifi==2026.10.19.post1 \
		cachetools==8.0.2 PyYAML==6.0.4 cryptography==50.0.2 cffi==2.1.1 \
		pycparser==3.12 aiofile==3.12.3 caio==0.12.10 msgspec==0.23.0 aiofiles==25.1.0 \
		pyzmq==27.3.0 transformers==5.24.0 packaging==26.4 \
		regex==2026.11.19 huggingface_hub==2.4.0 tqdm==4.70.1 httpx2==2.16.2 \
		httpcore2==2.16.2 truststore==0.10.5 h11==0.16.0 \
		opentelemetry-api==1.40.0 importlib-metadata==8.7.1 zipp==4.1.2
fi
# LMCache's own tests (tests/test_lmcache_upstream.py runs its test files of
# L2 adapters, controllers, the MP storage manager and storage plugins
# against fgds): they are
# in lmcache 0.5.6's sdist on PyPI, not in its wheel. The sdist (9.4 MB) is
# fetched once from the address pip resolves for it (pip download itself
# cannot: it would build the package's metadata, which needs its CUDA build
# requirements), its sha256 checked, and only its tests/ kept, in
# build/lmcache-0.5.6-tests (never in this repository).
lmc_tests="$root/build/lmcache-0.5.6-tests"
if [ "${FGDS_PY_TORCH:-1}" != 0 ] && [ "${FGDS_SKIP_LMCACHE:-0}" != 1 ] &&
	[ ! -f "$lmc_tests/.complete" ]; then
	rm -rf "$lmc_tests"
	"$venv/bin/python" - "$lmc_tests" <<-'EOF'
		import hashlib, io, os, ssl, sys, tarfile, urllib.request
		url = ("https://files.pythonhosted.org/packages/84/25/"
		       "3ccd46844c94e08897aa8d72716a538c07e4583410d84dbc6cd12cb60dc1/lmcache-0.5.6.tar.gz")
		sha = "d6951e60ce8818a76aa42d0866a4ba85f1c95cd919355fff30ff24dcc3243f1e"
		ctx = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
		with urllib.request.urlopen(url, timeout=180, context=ctx) as r:
		    data = r.read()
		if hashlib.sha256(data).hexdigest() != sha:
		    sys.exit(f"run-tests.sh: {url}: sha256 is not {sha}")
		dest = sys.argv[1]
		with tarfile.open(fileobj=io.BytesIO(data)) as t:
		    members = []
		    for m in t.getmembers():
		        if m.name.startswith("lmcache-0.5.6/tests/") and ".." not in m.name.split("/"):
		            m.name = m.name.split("/", 1)[1]
		            members.append(m)
		    kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
		    t.extractall(dest, members=members, **kw)
		open(os.path.join(dest, ".complete"), "w").close()
	EOF
fi
export FGDS_LMCACHE_TESTS="$lmc_tests/tests"
# --- end of that block ---

# The CLI and libcufile.so go into the wheel (stage-native.sh).
CARGO_BUILD_JOBS=$jobs "$here/stage-native.sh"
rm -rf "$root/build/python-wheels"
(cd "$here" && "$venv/bin/maturin" build --release -j "$jobs" \
	--compatibility off -o "$root/build/python-wheels" -i "$venv/bin/python")
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
	--force-reinstall --no-deps "$root"/build/python-wheels/fgds-*.whl

cd "$here/tests"
# Run from tests/ so the installed package (not python/fgds) is imported.
"$venv/bin/python" -m pytest -ra -p no:cacheprovider --rootdir="$here" \
	-c "$here/pyproject.toml" "$here/tests" "$@"
