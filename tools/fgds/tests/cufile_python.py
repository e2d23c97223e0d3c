# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Real cuFile users under `fgds run`, on host memory, every byte checked.

    fgds run -- python cufile_python.py cufile-python DIR
    fgds run -- python cufile_python.py lmcache DIR

cufile-python (PyPI) loads cuFile with ctypes.CDLL("libcufile.so"), a name
only fgds run's audit module and library path reach; LMCache's cuFile GDS
backend (lmcache.v1.gpu_connector.gds_backends.cufile) goes through it. Each
mode checks that the library cufile-python loaded is fgds's (it exports
cuFileBufRegisterDmabufFGDS, which NVIDIA's lacks), then writes and reads
back a file in DIR through the package's own API. Exit status: 0 passed,
1 failed, 77 skipped (the package is not installed; the reason on stdout).
tools/testing/fgds-vm/host-tests.sh runs it with build/python-venv.
"""
import ctypes
import mmap
import os
import sys

SKIP = 77


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def pattern(n, seed):
    return bytes((i * 131 + seed * 7 + (i >> 12)) & 0xFF for i in range(n))


_maps = []


def buffer(n):
    """n bytes of page-aligned host memory (an anonymous mapping)."""
    m = mmap.mmap(-1, n)
    _maps.append(m)
    return (ctypes.c_char * n).from_buffer(m)


def is_fgds(libcufile):
    try:
        libcufile.cuFileBufRegisterDmabufFGDS
    except AttributeError:
        return False
    return True


def cufile_python(d):
    try:
        from cufile import CuFile
        from cufile.bindings import libcufile
    except ModuleNotFoundError as e:
        if e.name != "cufile":
            raise
        print("skip: cufile-python is not installed (run-tests.sh installs it)")
        sys.exit(SKIP)
    if not is_fgds(libcufile):
        fail(f"cufile-python's CDLL('libcufile.so') loaded {libcufile._name}, not fgds's")
    path = os.path.join(d, "cufile-python.bin")
    # An aligned run (page-aligned buffers: O_DIRECT) and an unaligned one
    # (bounced edges).
    for size, foff, boff in ((1 << 20, 0, 0), (300007, 4099, 513)):
        data = pattern(size, size)
        src = buffer(boff + size)
        ctypes.memmove(ctypes.addressof(src) + boff, data, size)
        with CuFile(path, "w+", use_direct_io=True) as f:
            n = f.write(ctypes.c_void_p(ctypes.addressof(src)), size, foff, boff)
            if n != size:
                fail(f"CuFile.write({size}, file offset {foff}) returned {n}")
        dst = buffer(boff + size)
        with CuFile(path, "r", use_direct_io=True) as f:
            n = f.read(ctypes.c_void_p(ctypes.addressof(dst)), size, foff, boff)
            if n != size:
                fail(f"CuFile.read({size}, file offset {foff}) returned {n}")
        got = bytes(dst[boff:boff + size])
        if got != data:
            i = next(i for i in range(size) if got[i] != data[i])
            fail(f"byte {i} of {size} read back through cufile-python differs")
        with open(path, "rb") as f:
            f.seek(foff)
            if f.read(size) != data:
                fail("the file does not hold what CuFile.write wrote")
    print("ok: cufile-python on fgds's libcufile, every byte checked")


def lmcache(d):
    try:
        import lmcache.v1.gpu_connector.gds_backends.cufile as lm
        from cufile.bindings import libcufile
    except ModuleNotFoundError as e:
        if e.name not in ("lmcache", "torch", "cufile"):
            raise
        print(f"skip: {e.name} is not installed (run-tests.sh installs it unless FGDS_PY_TORCH=0)")
        sys.exit(SKIP)
    if not is_fgds(libcufile):
        fail(f"LMCache's cufile backend loaded {libcufile._name}, not fgds's")
    b = lm.Backend()
    b.validate_environment()
    size = 1 << 20
    slab = b.open_slab(d, 2 * size, True)
    try:
        data = pattern(size, 3)
        src = ctypes.create_string_buffer(data, size)
        dst = ctypes.create_string_buffer(size)
        # Host memory on the NULL stream: cuFile{Write,Read}Async run before
        # they return (fgds's libcufile without CUDA).
        s = slab.write_async(ctypes.addressof(src), size, size, 0, 0)
        if s.bytes_done != size:
            fail(f"LMCache write_async returned {s.bytes_done}")
        s = slab.read_async(ctypes.addressof(dst), size, size, 0, 0)
        if s.bytes_done != size:
            fail(f"LMCache read_async returned {s.bytes_done}")
        if dst.raw != data:
            fail("bytes read back through LMCache's cufile backend differ")
    finally:
        slab.close()
        b.close_driver()
    print("ok: LMCache's cufile GDS backend on fgds's libcufile, every byte checked")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("cufile-python", "lmcache"):
        print(__doc__)
        sys.exit(2)
    {"cufile-python": cufile_python, "lmcache": lmcache}[sys.argv[1]](sys.argv[2])
