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
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
	"maturin>=1.5,<2" pytest numpy safetensors

# --- Packages the adapters are tested against (one block, one install each) ---
# torch: PyPI's only Linux x86_64 wheel is the CUDA build, which imports (and
# runs on the CPU) without a GPU but not without its CUDA wheels (libcudart,
# cuBLAS, cuDNN, ...: about 3 GB to download, 5.3 GB installed, 95 s on a
# fresh Debian 12 machine; a no-op once the venv has it). Pinned: fgds.torch
# follows torch.cuda.gds of this release. FGDS_PY_TORCH=0 skips it (the torch
# tests are then skipped).
if [ "${FGDS_PY_TORCH:-1}" != 0 ]; then
	"$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==2.15.0"
fi
# lmcache is not installed: it requires torch, CUDA-only wheels (cupy-cuda13x,
# nvtx, cufile-python) and ~40 other packages; see README.md.
# --- end of that block ---

rm -rf "$root/build/python-wheels"
(cd "$here" && "$venv/bin/maturin" build --release -j "$jobs" \
	--compatibility off -o "$root/build/python-wheels" -i "$venv/bin/python")
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
	--force-reinstall --no-deps "$root"/build/python-wheels/fgds-*.whl

cd "$here/tests"
# Run from tests/ so the installed package (not python/fgds) is imported.
"$venv/bin/python" -m pytest -ra -p no:cacheprovider --rootdir="$here" \
	-c "$here/pyproject.toml" "$here/tests" "$@"
