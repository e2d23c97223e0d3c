# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Downloads NVIDIA's cufile.h of each given nvidia-cufile version from PyPI
(the wheel ships it) into DEST/<version>/cufile.h, for tests/nvidia_abi.rs.
NVIDIA's header is not redistributable: it is fetched by the test, never
committed. A version already in DEST is not fetched again.

    python3 nvidia_headers.py DEST VERSION...
    python3 nvidia_headers.py --extract DEST PACKAGE==VERSION PREFIX

The second form downloads another wheel (tests/kvikio_compile.rs: KvikIO's
headers, CUDA's cuda.h) and extracts its members under PREFIX into
DEST/PACKAGE==VERSION/.
"""
import glob
import os
import subprocess
import sys
import tempfile
import zipfile


def wheel(spec, d):
    r = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--disable-pip-version-check", "--only-binary=:all:", spec, "-d", d],
        capture_output=True, text=True)
    wheels = glob.glob(os.path.join(d, "*.whl"))
    if r.returncode != 0 or not wheels:
        sys.exit(f"pip download {spec} failed: {r.stderr.strip()}")
    return wheels[0]


def extract(dest, spec, prefix):
    out = os.path.join(dest, spec)
    if os.path.isfile(os.path.join(out, ".done")):
        return
    with tempfile.TemporaryDirectory() as d:
        with zipfile.ZipFile(wheel(spec, d)) as z:
            names = [n for n in z.namelist() if n.startswith(prefix)]
            if not names:
                sys.exit(f"{spec}: nothing under {prefix}")
            z.extractall(out, names)
    open(os.path.join(out, ".done"), "w").close()


def main(dest, versions):
    for v in versions:
        out = os.path.join(dest, v, "cufile.h")
        if os.path.isfile(out):
            continue
        with tempfile.TemporaryDirectory() as d:
            with zipfile.ZipFile(wheel(f"nvidia-cufile=={v}", d)) as z:
                names = [n for n in z.namelist() if n.endswith("/cufile.h")]
                if not names:
                    sys.exit(f"nvidia-cufile=={v}: no cufile.h in {os.path.basename(wheels[0])}")
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with open(out + ".tmp", "wb") as f:
                    f.write(z.read(names[0]))
                os.rename(out + ".tmp", out)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--extract":
        extract(*sys.argv[2:])
    elif len(sys.argv) >= 3 and not sys.argv[1].startswith("-"):
        main(sys.argv[1], sys.argv[2:])
    else:
        sys.exit(__doc__)
