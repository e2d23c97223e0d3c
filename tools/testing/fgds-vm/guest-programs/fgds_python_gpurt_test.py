#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The Python package (tools/python) on CUDA memory, P2P, in the VM.

The guest's python3 imports the package built on the host (abi3, next to
this program in python/); the CUDA runtime is the GPU stand-in's
(tools/testing/fgds-gpurt, in gpurt/cuda/). Memory from its cuMemAlloc goes
to fgds.File as a Buffer.from_cuda and as an object with
__cuda_array_interface__ (torch's and CuPy's way): the buffer must be P2P,
reads and a stream-ordered read land in the BAR (checked by the host),
a write from a range the host filled reaches the file, and the statistics
count every byte direct, none bounced.

Memory it is not given as a Buffer goes through the library's staging
buffers and cached registrations: no REG_BUFFER per call (its own count,
fgds.gpucache_counters()).

--bench, or run as fgds_python_unreg_bench (make bench; a copy of this
program): per-call time of fgds.File.pread of 64 KiB, 1 MiB
and 16 MiB, unregistered against registered, rows as TAP comments and in
$FGDS_BENCH_JSON (/fgds/out/unreg-bench-python.json).

Output: TAP. Needs the fgds VM (FGDS_GPU_BDF, FGDS_EXT4).
"""
import ctypes
import os
import subprocess
import sys
import time
import traceback

from guest_util import Fail, expect, host_req, pattern, tap

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA_DIR = os.path.join(HERE, "gpurt", "cuda")
HIP_DIR = os.path.join(HERE, "gpurt", "hip")
MIB = 1 << 20

# The library dlopens libcuda.so.1 and libamdhip64.so by name: the search
# path must hold the stand-in's before the interpreter starts.
if CUDA_DIR not in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
    os.environ["LD_LIBRARY_PATH"] = CUDA_DIR + ":" + HIP_DIR
    os.execv(sys.executable, [sys.executable, *sys.argv])


BENCH = "--bench" in sys.argv or os.path.basename(sys.argv[0]).endswith("_bench")


class Cuda:
    """The stand-in's driver API through ctypes: the calls the test needs."""

    def __init__(self, bdf):
        os.environ["FGDS_GPURT_DEVICES"] = bdf
        self.lib = ctypes.CDLL(os.path.join(CUDA_DIR, "libcuda.so.1"))
        ctx = ctypes.c_void_p()
        self.call("cuInit", 0)
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), 0)
        self.call("cuCtxSetCurrent", ctx)

    def call(self, name, *args):
        r = getattr(self.lib, name)(*args)
        expect(r == 0, f"{name} returned {r}")

    def alloc(self, size):
        p = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(size))
        return p.value

    def bar_offset(self, dptr):
        ordinal, off = ctypes.c_int(), ctypes.c_uint64()
        r = self.lib.fgds_gpurt_bar_offset(ctypes.c_uint64(dptr), ctypes.byref(ordinal),
                                           ctypes.byref(off))
        expect(r == 0 and ordinal.value == 0, f"{dptr:#x} is in no allocation")
        return off.value

    def stream(self):
        s = ctypes.c_void_p()
        self.call("cuStreamCreate", ctypes.byref(s), 0)
        return s


class CudaArray:
    """What torch and CuPy hand over: __cuda_array_interface__, bytes."""

    def __init__(self, ptr, size):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3}


def batch_results(bt, n):
    """The results of the n requests submitted to the batch bt: (tag, status, result)."""
    out = []
    while len(out) < n:
        out += [ev for ev in bt.wait(n - len(out)) if ev[1] not in ("pending", "timeout")]
    return out


def setup(e):
    import fgds  # noqa: F401 (the guest's interpreter imports it, or the test fails)
    path = os.path.join(e["FGDS_EXT4"], "fgds-python-gpurt")
    with open(path, "wb") as f:
        f.write(pattern(0x77, 2 * MIB))
        f.flush()
        os.fsync(f.fileno())
    return path


def test_buffer_from_cuda_reads_p2p(e, cu, dptr, path):
    import fgds
    off = cu.bar_offset(dptr)
    with fgds.Buffer.from_cuda(dptr, 4 * MIB) as buf, fgds.File(path, "r", strict=True) as f:
        expect(buf.kind == "cuda", buf.kind)
        expect(buf.is_p2p, f"not P2P: {buf.p2p_unavailable_reason}")
        expect(f.pread(buf, MIB, file_offset=MIB, buf_offset=2 * MIB) == MIB, "short read")
        ans = host_req("check", 0x77, off + 2 * MIB, MIB, MIB)
        expect(ans == "ok", f"host: {ans}")
        st = f.stats()
        expect(st["direct_bytes"] == MIB and st["bounce_bytes"] == 0, st)


def test_cuda_array_interface_both_ways(e, cu, dptr, path):
    import fgds
    off = cu.bar_offset(dptr)
    arr = CudaArray(dptr + 3 * MIB, MIB)
    with fgds.File(path, "r+", strict=True) as f:
        expect(f.pread(arr, MIB, file_offset=0) == MIB, "short read")
        ans = host_req("check", 0x77, off + 3 * MIB, MIB, 0)
        expect(ans == "ok", f"host: {ans}")
        ans = host_req("fill", 0x78, off + 3 * MIB, MIB, 0)
        expect(ans == "ok", f"host fill: {ans}")
        expect(f.pwrite(arr, MIB, file_offset=MIB) == MIB, "short write")
        st = f.stats()
        expect(st["direct_bytes"] == 2 * MIB and st["bounce_bytes"] == 0, st)
    with open(path, "rb") as f:
        f.seek(MIB)
        expect(f.read(MIB) == pattern(0x78, MIB), "the file does not hold the BAR's bytes")


def test_read_on_stream(e, cu, dptr, path):
    import fgds
    off = cu.bar_offset(dptr)
    s = cu.stream()
    with fgds.Buffer.from_cuda(dptr, 4 * MIB) as buf, fgds.File(path, "r", strict=True) as f:
        fut = f.read_on_stream(buf, MIB, file_offset=0, buf_offset=0, stream=s.value)
        cu.call("cuStreamSynchronize", s)
        expect(fut.done() and fut.result() == MIB, "the stream passed an unfinished read")
        ans = host_req("check", 0x77, off, MIB, 0)
        expect(ans == "ok", f"host: {ans}")
        st = f.stats()
        expect(st["direct_bytes"] == MIB and st["bounce_bytes"] == 0, st)
    cu.call("cuStreamDestroy_v2", s)


def test_no_registration_per_call(e, cu, dptr, path):
    """fgds.File on CUDA memory it was not given as a Buffer (a
    __cuda_array_interface__ object, a bare pointer): 64 KiB into an
    allocation that never sees a larger request through the library's
    staging buffers (at an address 256 bytes into a page), 1 MiB into its
    cached registration of the allocation, then 64 KiB into that one (cached
    already); no REG_BUFFER per call."""
    import fgds
    off = cu.bar_offset(dptr)
    sm = cu.alloc(MIB)
    sm_off = cu.bar_offset(sm)
    small = 64 << 10
    with fgds.File(path, "r+", strict=True) as f:
        # the first of each kind sets up (a staging buffer, a cached registration)
        expect(f.pread(CudaArray(sm + 256, small), file_offset=0) == small, "short read")
        expect(f.pread_device(dptr + MIB, MIB, 0) == MIB, "short read")
        c0 = fgds.gpucache_counters()
        for i in range(8):
            at = 256 + (i % 4) * 2 * small
            expect(f.pread(CudaArray(sm + at, small), file_offset=i * small) == small, "short")
            ans = host_req("check", 0x77, sm_off + at, small, i * small)
            expect(ans == "ok", f"host (staged {i}): {ans}")
            # (the file's second MiB holds what test_cuda_array_interface wrote)
            expect(f.pread_device(dptr + 2 * MIB, MIB, 0) == MIB, "short read")
            ans = host_req("check", 0x77, off + 2 * MIB, MIB, 0)
            expect(ans == "ok", f"host (cached {i}): {ans}")
        expect(f.pread(CudaArray(dptr + 4096, small), file_offset=small) == small, "short")
        ans = host_req("check", 0x77, off + 4096, small, small)
        expect(ans == "ok", f"host (small, cached): {ans}")
        ans = host_req("fill", 0x79, sm_off + 512 * 1024, small, 0)
        expect(ans == "ok", f"host fill: {ans}")
        expect(f.pwrite(CudaArray(sm + 512 * 1024, small), file_offset=MIB) == small, "short")
        c1 = fgds.gpucache_counters()
        expect(c1["registrations"] == c0["registrations"],
               f"registered per call: {c0} -> {c1}")
        expect(c1["staged"] - c0["staged"] == 9 and c1["cached"] - c0["cached"] == 9,
               f"routes: {c0} -> {c1}")
        st = f.stats()
        expect(st["bounce_bytes"] == 0, st)
    with open(path, "rb") as fh:
        fh.seek(MIB)
        expect(fh.read(small) == pattern(0x79, small), "the file does not hold the BAR's bytes")
    cu.call("cuMemFree_v2", ctypes.c_uint64(sm))


def test_for_device_shares_the_cached_registration(e, cu, dptr, path):
    """Buffer.for_device (fgds.lmcache's chunks outside its arena): the
    cached registration of the allocation and the pointer's offset in it,
    the same registration for every chunk, a batch into it P2P."""
    import fgds
    off = cu.bar_offset(dptr)
    small = 64 << 10
    bufs = []
    c0 = None
    with fgds.File(path, "r", strict=True) as f:
        for i in range(4):
            b, o = fgds.Buffer.for_device(dptr + (i + 1) * MIB - small, small)
            expect(b.is_p2p and o == (i + 1) * MIB - small and len(b) == 4 * MIB,
                   f"chunk {i}: offset {o}, {len(b)} bytes, p2p {b.is_p2p}")
            if c0 is None:
                c0 = fgds.gpucache_counters()
            bufs.append((b, o))
        with fgds.Batch(4) as bt:
            bt.submit([("read", f, b, small, i * small, o, i) for i, (b, o) in enumerate(bufs)])
            for tag, status, res in batch_results(bt, 4):
                expect(status == "complete" and res == small, f"chunk {tag}: {status} {res}")
        c1 = fgds.gpucache_counters()
        for b, _ in bufs:
            b.close()
    for i in range(4):
        ans = host_req("check", 0x77, off + (i + 1) * MIB - small, small, i * small)
        expect(ans == "ok", f"host (chunk {i}): {ans}")
    expect(c1["registrations"] == c0["registrations"], f"registered per chunk: {c0} -> {c1}")


def test_hip_memory_without_registration_per_call(e, cu, dptr, path):
    """File.pread_device(..., hip=True) on hipMalloc'd memory: 64 KiB into an
    allocation that sees nothing larger, staged (a HIP staging pool of its
    own: hipMalloc, hipMemcpyDtoD), 1 MiB into another, cached (HIP's buffer
    id); the second round registers nothing."""
    import fgds

    def hip_alloc(n):
        p = ctypes.c_void_p()
        cu.call("hipMalloc", ctypes.byref(p), ctypes.c_size_t(n))
        return p.value

    hs, hp = hip_alloc(MIB), hip_alloc(2 * MIB)
    soff, off = cu.bar_offset(hs), cu.bar_offset(hp)
    small = 64 << 10
    before = fgds.gpucache_counters()
    with fgds.File(path, "r", strict=True) as f:
        for rnd in range(2):
            if rnd == 1:
                c0 = fgds.gpucache_counters()
            expect(f.pread_device(hs + 256, small, rnd * small, True) == small, "short read")
            ans = host_req("check", 0x77, soff + 256, small, rnd * small)
            expect(ans == "ok", f"host (HIP, staged, round {rnd}): {ans}")
            expect(f.pread_device(hp + MIB, MIB, 0, True) == MIB, "short read")
            ans = host_req("check", 0x77, off + MIB, MIB, 0)
            expect(ans == "ok", f"host (HIP, cached, round {rnd}): {ans}")
        c1 = fgds.gpucache_counters()
    expect(c1["pool_buffers"] > before["pool_buffers"], f"no HIP staging buffer: {before} -> {c1}")
    expect(c1["registrations"] == c0["registrations"], f"registered per call: {c0} -> {c1}")
    expect(c1["staged"] - c0["staged"] == 1 and c1["cached"] - c0["cached"] == 1,
           f"routes: {c0} -> {c1}")
    cu.call("hipFree", ctypes.c_void_p(hs))
    cu.call("hipFree", ctypes.c_void_p(hp))


def test_every_entry_point_without_registration_per_call(e, cu, dptr, path):
    """CUDA arrays (not fgds.Buffer) given to read_async, read_on_stream,
    readv and Batch (plain and vectored) all resolve to the library's
    cached registration of their allocation: after one warm-up round, no
    REG_BUFFER at all; every byte checked by the host."""
    import fgds
    a = cu.alloc(4 * MIB)
    aoff = cu.bar_offset(a)
    piece = 128 << 10
    s = cu.stream()

    def round_(r):
        # (only the file's first MiB holds 0x77: the tests above wrote the second)
        at = lambda k: a + ((r * 8 + k) % 32) * piece  # noqa: E731
        fo = lambda k: ((r + k) % 6) * piece  # noqa: E731
        checks = []
        fut = f.read_async(CudaArray(at(0), piece), piece, file_offset=fo(0))
        expect(fut.wait() == piece, "read_async: short")
        checks.append((at(0), fo(0), piece))
        sf = f.read_on_stream(CudaArray(at(1), piece), piece, file_offset=fo(1), stream=s.value)
        cu.call("cuStreamSynchronize", s)
        expect(sf.done() and sf.result() == piece, "read_on_stream: unfinished or short")
        checks.append((at(1), fo(1), piece))
        n = f.readv([CudaArray(at(2), piece), CudaArray(at(3), piece)], file_offset=fo(2))
        expect(n == 2 * piece, f"readv: {n}")
        checks += [(at(2), fo(2), piece), (at(3), fo(2) + piece, piece)]
        with fgds.Batch(2) as bt:
            bt.submit([("read", f, CudaArray(at(4), piece), piece, fo(4), 0, 0),
                       ("read", f, [CudaArray(at(5), piece), CudaArray(at(6), piece)],
                        2 * piece, fo(5), 0, 1)])
            for tag, status, res in batch_results(bt, 2):
                expect(status == "complete", f"batch {tag}: {status} {res}")
        checks += [(at(4), fo(4), piece), (at(5), fo(5), piece), (at(6), fo(5) + piece, piece)]
        for ptr, foff, n in checks:
            ans = host_req("check", 0x77, aoff + ptr - a, n, foff)
            expect(ans == "ok", f"host (round {r}, {ptr - a:#x}): {ans}")

    with fgds.File(path, "r", strict=True) as f:
        round_(0)
        c0 = fgds.gpucache_counters()
        for r in range(1, 5):
            round_(r)
        c1 = fgds.gpucache_counters()
        st = f.stats()
    print(f"# 4 rounds of 7 requests on CUDA arrays: REG_BUFFER {c1['registrations'] - c0['registrations']}, "
          f"cached {c1['cached'] - c0['cached']}, uncached {c1['uncached'] - c0['uncached']}")
    expect(c1["registrations"] == c0["registrations"], f"registered per call: {c0} -> {c1}")
    expect(c1["uncached"] == c0["uncached"], f"a registration of its own: {c0} -> {c1}")
    expect(st["bounce_bytes"] == 0, st)
    cu.call("cuStreamDestroy_v2", s)
    cu.call("cuMemFree_v2", ctypes.c_uint64(a))


def pressure(e, path):
    """--pressure, in a process of its own (the cache's bounds come from the
    environment at first use): FGDS_REG_CACHE_SIZE=8M and
    FGDS_REG_CACHE_WINDOW=2M, a working set of 8 windows (16 MiB) read over
    and over. Prints the figures as "key value" lines."""
    import fgds
    cu = Cuda(e["FGDS_GPU_BDF"])
    big = cu.alloc(16 * MIB)
    allocs = [cu.alloc(8 * MIB) for _ in range(2)]
    out = {}
    with fgds.File(path, "r", strict=True) as f:
        # A 1 MiB read into a 16 MiB allocation registers its 2 MiB window.
        c0 = fgds.gpucache_counters()
        expect(f.pread_device(big + 5 * MIB, MIB, 0) == MIB, "short")
        c1 = fgds.gpucache_counters()
        out["window_bytes"] = c1["cache_bytes"] - c0["cache_bytes"]
        # A read across a window's end: one request per window.
        expect(f.pread_device(big + 7 * MIB + MIB // 2, MIB, 0) == MIB, "short")
        c2 = fgds.gpucache_counters()
        out["across_cached"] = c2["cached"] - c1["cached"]
        ans = host_req("check", 0x77, cu.bar_offset(big) + 7 * MIB + MIB // 2, MIB, 0)
        expect(ans == "ok", f"host (across): {ans}")
        # Those three entries idle past REG_CACHE_IDLE (5 s): room for new ones.
        time.sleep(5.5)
        # 8 windows, cache of 4: passes over them.
        spots = [a + w * 2 * MIB for a in allocs for w in range(4)]
        regs, ts = [], [time.monotonic()]
        for p in range(5):
            r0 = fgds.gpucache_counters()["registrations"]
            for i, at in enumerate(spots):
                expect(f.pread_device(at, MIB, 0) == MIB, "short")
            regs.append(fgds.gpucache_counters()["registrations"] - r0)
            ts.append(time.monotonic())
        for i, at in enumerate(spots):
            ans = host_req("check", 0x77, cu.bar_offset(at), MIB, 0)
            expect(ans == "ok", f"host (spot {i}): {ans}")
        c3 = fgds.gpucache_counters()
    out["regs_per_pass"] = ",".join(map(str, regs))
    out["cache_full"] = c3["cache_full"] - c2["cache_full"]
    out["staged"] = c3["staged"] - c2["staged"]
    # the first pass (registrations) apart from the four after it
    out["first_pass_s"] = round(ts[1] - ts[0], 3)
    out["mib_s"] = round(4 * len(spots) / (ts[5] - ts[1]), 1)
    for k, v in out.items():
        print(f"{k} {v}")


def test_cache_bounds_hold_under_pressure(e, cu, dptr, path):
    """The cache's bounds, in a process of its own with FGDS_REG_CACHE_SIZE=8M
    and FGDS_REG_CACHE_WINDOW=2M (pressure()): a read registers its 2 MiB
    window of a 16 MiB allocation; a read across a window's end is a
    request per window; a working set of 8 windows over a cache of 4 costs
    no registration after the first pass (the misses go to the staging
    pool), where least-recently-used eviction would register 8 per pass.
    Next to it, the same passes with no cache at all (staging pool only)."""
    got = {}
    for name, size in (("cache", "8M"), ("pool", "0")):
        env = dict(os.environ, FGDS_REG_CACHE_SIZE=size, FGDS_REG_CACHE_WINDOW="2M")
        # the parent holds the vfio device: the child opens it after the parent let go
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--pressure"], env=env,
                           capture_output=True, text=True, timeout=600)
        expect(r.returncode == 0, f"{name}: status {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}")
        got[name] = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    c, p = got["cache"], got["pool"]
    print(f"# cache of 4 x 2 MiB, 8 windows in use: REG per pass {c['regs_per_pass']}, "
          f"{c['cache_full']} misses to the pool, first pass {c['first_pass_s']} s, then "
          f"{c['mib_s']} MiB/s; pool only: REG per pass {p['regs_per_pass']}, first pass "
          f"{p['first_pass_s']} s, then {p['mib_s']} MiB/s")
    expect(c["window_bytes"] == str(2 * MIB), f"registered {c['window_bytes']} bytes for 1 MiB")
    expect(c["across_cached"] == "2", f"a read across a window: {c['across_cached']} cached requests")
    regs = [int(x) for x in c["regs_per_pass"].split(",")]
    expect(sum(regs[1:]) == 0, f"registrations in passes 2-5: {regs}")
    expect(regs[0] <= 4 + 2, f"first pass: {regs[0]} registrations for a cache of 4 (and the pool)")
    expect(int(c["cache_full"]) >= 4 * 5, f"misses not cached: {c['cache_full']}")


def bench(e, cu, dptr, path):
    """fgds.File.pread per call, unregistered (a __cuda_array_interface__
    object) against a registered fgds.Buffer of other memory: 64 KiB, 1 MiB,
    16 MiB; the library's REG_BUFFER calls during the timed calls."""
    import fgds
    size_file = 64 * MIB
    with open(path, "wb") as fh:
        fh.write(pattern(0x7a, MIB) * 64)
        fh.flush()
        os.fsync(fh.fileno())
    mem = 32 * MIB
    reg_ptr, un_ptr = cu.alloc(mem), cu.alloc(mem)
    rows = []
    with fgds.Buffer.from_cuda(reg_ptr, mem) as rbuf, fgds.File(path, "r") as f:
        for size, n in ((64 << 10, 200), (MIB, 60), (16 * MIB, 10)):
            slots = (size_file - size) // size
            f.pread(rbuf, size, file_offset=0)
            f.pread(CudaArray(un_ptr, size), file_offset=0)
            c0 = fgds.gpucache_counters()
            tr, tu = [], []
            for i in range(n):
                fo = ((i * 7 + 1) % slots) * size
                mo = (i % 2) * (mem - size)
                t0 = time.perf_counter()
                f.pread(rbuf, size, file_offset=fo, buf_offset=mo)
                tr.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                f.pread(CudaArray(un_ptr + mo, size), file_offset=fo)
                tu.append(time.perf_counter() - t0)
            c1 = fgds.gpucache_counters()
            mr, mu = sorted(tr)[n // 2] * 1e6, sorted(tu)[n // 2] * 1e6
            rows.append((size, n, mr, mu, c1["registrations"] - c0["registrations"],
                         c1["staged"] - c0["staged"], c1["cached"] - c0["cached"]))
    for size, n, mr, mu, regs, st, ca in rows:
        print(f"# python  {size >> 10:6d} KiB  registered {mr:9.1f} us {size / mr / 1.048576:7.1f} MiB/s"
              f"  unregistered {mu:9.1f} us {size / mu / 1.048576:7.1f} MiB/s  {mr / mu:.2f}x"
              f"  REG {regs} in {2 * n} calls  (staged {st}, cached {ca})")
    out = os.environ.get("FGDS_BENCH_JSON", "/fgds/out/unreg-bench-python.json")
    import json
    with open(out, "w") as fh:
        for size, n, mr, mu, regs, st, ca in rows:
            fh.write(json.dumps({"kconfig": os.environ.get("FGDS_KCONFIG", "?"),
                                 "mode": "python", "size": size, "calls": n,
                                 "registered_us": round(mr, 1), "unregistered_us": round(mu, 1),
                                 "ratio": round(mr / mu, 3), "reg_buffer_calls": regs,
                                 "staged": st, "cached": ca}) + "\n")


TESTS = [
    test_buffer_from_cuda_reads_p2p,
    test_cuda_array_interface_both_ways,
    test_read_on_stream,
    test_no_registration_per_call,
    test_for_device_shares_the_cached_registration,
    test_hip_memory_without_registration_per_call,
    test_every_entry_point_without_registration_per_call,
]


def main():
    if "--pressure" in sys.argv:
        e = {n: os.environ[n] for n in ("FGDS_GPU_BDF", "FGDS_EXT4")}
        sys.path.insert(0, os.path.join(HERE, "python"))
        pressure(e, os.path.join(e["FGDS_EXT4"], "fgds-python-gpurt"))
        return 0
    print("TAP version 13")
    print(f"1..{2 if BENCH else len(TESTS) + 2}")
    missing = [n for n in ("FGDS_GPU_BDF", "FGDS_EXT4") if not os.environ.get(n)]
    if missing:
        for i in range(len(TESTS) + 2):
            print(f"ok {i + 1} # SKIP {', '.join(missing)} not set: run in the fgds VM")
        return 0
    e = {n: os.environ[n] for n in ("FGDS_GPU_BDF", "FGDS_EXT4")}
    sys.path.insert(0, os.path.join(HERE, "python"))
    failed = 0
    try:
        path = setup(e)
        if not BENCH:
            # before this process opens the GPU (one opener of its vfio group at a time)
            try:
                test_cache_bounds_hold_under_pressure(e, None, None, path)
                pressure_result = "ok"
            except Exception as ex:
                failed += 1
                pressure_result = "not ok\n" + "\n".join(
                    "# " + line for line in (str(ex) if isinstance(ex, Fail) else traceback.format_exc()).splitlines())
        cu = Cuda(e["FGDS_GPU_BDF"])
        dptr = cu.alloc(4 * MIB)
        print(f"ok 1 import fgds ({sys.version.split()[0]}) and allocate with cuMemAlloc")
    except Exception:
        print("not ok 1 import fgds and allocate with cuMemAlloc")
        for line in traceback.format_exc().splitlines():
            print(f"# {line}")
        for i, t in enumerate(TESTS, 2):
            print(f"not ok {i} {t.__name__[5:]} # no set-up")
        print(f"not ok {len(TESTS) + 2} cache_bounds_hold_under_pressure # no set-up")
        return 1
    if BENCH:
        try:
            bench(e, cu, dptr, path)
            print("ok 2 bench")
        except Exception:
            print("not ok 2 bench")
            for line in traceback.format_exc().splitlines():
                print(f"# {line}")
            failed = 1
        os.unlink(path)
        return failed
    for i, t in enumerate(TESTS, 2):
        name = t.__name__[len("test_"):]
        failed += tap(i, name, lambda: t(e, cu, dptr, path))
    head, _, rest = pressure_result.partition("\n")
    print(f"{head} {len(TESTS) + 2} cache_bounds_hold_under_pressure")
    if rest:
        print(rest)
    os.unlink(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
