#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""What a copy from a pinned bounce buffer into CUDA memory costs the CPU
thread that queues it (not a test): the bounce path of a small vectored
read into N separate CUDA allocations queues N copies where a pread of the
same bytes queues one. Times, on the driver API as the engine calls it
(cuMemcpyHtoDAsync_v2 on a non-blocking stream, then cuStreamSynchronize):
one copy of SIZE and a wait; SEGS copies of SIZE/SEGS into SEGS allocations
and a wait; the same SEGS copies in one cuMemcpyBatchAsync (CUDA 12.8 and
later; checked against the source); the queueing alone (many copies, one
wait at the end); and a buffered pread of SIZE from the page cache into the
pinned buffer, for scale. Prints microseconds per call (median of 5 runs of --reps) and
writes JSON.

    gpu-copy-cost.py [--size 65536] [--segs 4] [--reps 2000] [--file F] [--json OUT]
"""
import argparse
import ctypes
import json
import os
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=int, default=64 << 10)
    ap.add_argument("--segs", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--file", default=None, help="a file in the page cache, for the pread row")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch

    torch.cuda.init()
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    cu.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    host = torch.empty(a.size, dtype=torch.uint8).pin_memory()
    src = host.data_ptr()
    whole = torch.empty(a.size, dtype=torch.uint8, device="cuda")
    q = a.size // a.segs
    parts = [torch.empty(q, dtype=torch.uint8, device="cuda") for _ in range(a.segs)]
    stream = torch.cuda.Stream()
    s = ctypes.c_void_p(stream.cuda_stream)
    torch.cuda.synchronize()

    def check(r):
        if r != 0:
            raise RuntimeError(f"CUDA driver error {r}")

    def one():
        check(cu.cuMemcpyHtoDAsync_v2(whole.data_ptr(), src, a.size, s))
        check(cu.cuStreamSynchronize(s))

    def many():
        for i, p in enumerate(parts):
            check(cu.cuMemcpyHtoDAsync_v2(p.data_ptr(), src + i * q, q, s))
        check(cu.cuStreamSynchronize(s))

    def queue_only():
        check(cu.cuMemcpyHtoDAsync_v2(parts[0].data_ptr(), src, q, s))

    # cuMemcpyBatchAsync (CUDA 12.8+): the SEGS copies in one driver call
    class Loc(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

    class Attrs(ctypes.Structure):
        _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", Loc), ("dstLocHint", Loc),
                    ("flags", ctypes.c_uint)]

    n = a.segs
    dsts = (ctypes.c_uint64 * n)(*[p.data_ptr() for p in parts])
    srcs = (ctypes.c_uint64 * n)(*[src + i * q for i in range(n)])
    sizes = (ctypes.c_size_t * n)(*([q] * n))
    attrs = Attrs(1, Loc(0, 0), Loc(0, 0), 0)  # CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
    idx = (ctypes.c_size_t * 1)(0)
    fail = ctypes.c_size_t(0)
    batch = None
    try:
        f2 = cu.cuMemcpyBatchAsync_v2  # CUDA 13: no failIdx
        batch = lambda: f2(dsts, srcs, sizes, ctypes.c_size_t(n), ctypes.byref(attrs), idx,  # noqa: E731
                           ctypes.c_size_t(1), s)
    except AttributeError:
        try:
            f1 = cu.cuMemcpyBatchAsync  # CUDA 12.8
            batch = lambda: f1(dsts, srcs, sizes, ctypes.c_size_t(n), ctypes.byref(attrs), idx,  # noqa: E731
                               ctypes.c_size_t(1), ctypes.byref(fail), s)
        except AttributeError:
            pass

    def batched():
        check(batch())
        check(cu.cuStreamSynchronize(s))

    if batch is not None:
        try:
            batched()
            torch.cuda.synchronize()
            for i, p in enumerate(parts):
                if not torch.equal(p.cpu(), host[i * q : (i + 1) * q]):
                    raise RuntimeError("cuMemcpyBatchAsync copied wrong bytes")
        except Exception as e:  # noqa: BLE001 - recorded
            print(f"cuMemcpyBatchAsync: {e}", flush=True)
            batch = None

    fd = os.open(a.file, os.O_RDONLY) if a.file else None
    mv = memoryview((ctypes.c_ubyte * a.size).from_address(src)).cast("B")

    def pread():
        os.preadv(fd, [mv], 0)

    def timed(fn, reps, end=None):
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            if end:
                end()
            runs.append((time.perf_counter() - t0) / reps * 1e6)
        return statistics.median(runs), min(runs), max(runs)

    # the Python loop's own cost, to subtract
    empty = timed(lambda: None, a.reps)
    torch.manual_seed(3)
    host.copy_(torch.randint(0, 256, (a.size,), dtype=torch.uint8))
    rows = {
        "loop": ("python loop", empty),
        "one_copy": (f"1 copy of {a.size >> 10} KiB + wait", timed(one, a.reps)),
        "copies": (f"{a.segs} copies of {q >> 10} KiB into {a.segs} allocations + wait", timed(many, a.reps)),
        "queue_one": (f"queueing one copy of {q >> 10} KiB (no wait)",
                      timed(queue_only, a.reps, lambda: cu.cuStreamSynchronize(s))),
    }
    if batch is not None:
        rows["batch"] = (f"cuMemcpyBatchAsync of the {a.segs} copies + wait", timed(batched, a.reps))
    if fd is not None:
        rows["pread"] = (f"buffered pread of {a.size >> 10} KiB (page cache)", timed(pread, a.reps))
        os.close(fd)
    for k, (label, (med, lo, hi)) in rows.items():
        print(f"{label:<60} {med:7.2f} us ({lo:.2f}-{hi:.2f})", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"size": a.size, "segs": a.segs, "reps": a.reps,
                       "rows": {k: {"label": lb, "us": v[0], "min": v[1], "max": v[2]} for k, (lb, v) in rows.items()}},
                      f, indent=1)


if __name__ == "__main__":
    main()
