#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Vectored calls against plain ones on the GPU machine (not a test): one
`File.readv`/`writev` of N segments against one `pread`/`pwrite` of the same
bytes and a Batch, into and out of CUDA memory (the page-cache bounce path
where no fgds node serves the GPU) and into host memory (O_DIRECT), page
cache warm. Small calls (64 KiB and 1 MiB in 4 segments, each segment its
own allocation, as in the VM suite's fgds-vec rows, and the same 4
segments side by side in one allocation) are repeated and timed together. Every result is compared with the file. Prints a line per row and
writes JSON (--json); report.py renders it under section 3.

    gpu-vec.py [--dir DIR] [--file-gib N] [--json OUT] [--parts big,small,write]

Carry and install as gpu-suite.py's header says.
"""
import argparse
import importlib.util
import json
import os
import statistics
import time

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("gpu_suite", os.path.join(_here, "gpu-suite.py"))
gs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gs)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    gs.file_options(ap)
    ap.add_argument("--parts", default="big,small,write", help="which of big, small, write to run")
    a = ap.parse_args()
    parts = a.parts.split(",")
    import torch
    import fgds

    os.makedirs(a.dir, exist_ok=True)
    path, n = gs.bench_file(a.dir, a.file_gib)
    gs.warm(path)
    with open(path, "rb") as f:
        ref = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).cuda()
    rows = []

    def row(kind, api, nbytes, fn, check, rounds=3):
        rates, ok = [], None
        try:
            for i in range(rounds):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = fn()
                torch.cuda.synchronize()
                rates.append(nbytes / (time.perf_counter() - t0) / (1 << 20))
                if i == 0:
                    ok = bool(check(out))
            d = dict(kind=kind, api=api, bytes=nbytes, mib_per_s=statistics.median(rates),
                     mib_per_s_min=min(rates), mib_per_s_max=max(rates), identical=ok)
        except Exception as e:  # recorded
            d = dict(kind=kind, api=api, bytes=nbytes, error=f"{type(e).__name__}: {e}"[:300])
        rows.append(d)
        print(f"{kind:<28} {api:<34} " + (f"{d['mib_per_s']:>8.0f} MiB/s ({d['mib_per_s_min']:.0f}-"
              f"{d['mib_per_s_max']:.0f}) identical {d['identical']}" if "error" not in d else d["error"]),
              flush=True)

    # 1. the whole file into CUDA memory
    t = torch.empty(n, dtype=torch.uint8, device="cuda")

    def one():
        t.zero_()
        with fgds.File(path, "r") as f:
            assert f.pread(t) == n
        return t

    def vec(k):
        def fn():
            t.zero_()
            seg = n // k
            with fgds.File(path, "r") as f:
                assert f.readv([t[i * seg : (i + 1) * seg] for i in range(k)]) == n
            return t

        return fn

    def batch():
        t.zero_()
        with fgds.File(path, "r") as f, fgds.Buffer(t) as b:
            gs.fgds_batch(f, b, n)
        return t

    same = lambda out: torch.equal(out, ref)  # noqa: E731
    big = f"{n >> 30} GiB into CUDA"
    if "big" in parts:
        row(big, "pread", n, one, same)
        row(big, "readv, 4 segments", n, vec(4), same)
        row(big, "readv, 64 segments", n, vec(64), same)
        row(big, "batch 64 x 32 MiB", n, batch, same)
    del t

    # 2. small calls, 4 segments in 4 allocations, repeated
    for size, reps in ((64 << 10, 2000), (1 << 20, 500)) if "small" in parts else ():
        for target in ("cuda", "host"):
            if target == "cuda":
                whole = torch.empty(size, dtype=torch.uint8, device="cuda")
                segs = [torch.empty(size // 4, dtype=torch.uint8, device="cuda") for _ in range(4)]
                bufs = [fgds.Buffer(whole)] + [fgds.Buffer(s) for s in segs]
            else:
                bufs = [fgds.Buffer.alloc(size)] + [fgds.Buffer.alloc(size // 4) for _ in range(4)]
            offs = [(i * 7919 * size) % (n - size) // 4096 * 4096 for i in range(reps)]

            def got(b, k):
                return torch.frombuffer(bytearray(b.read_bytes(0, k)), dtype=torch.uint8).cuda()

            def plain():
                with fgds.File(path, "r") as f:
                    for o in offs:
                        f.pread(bufs[0], size, o)
                return offs[-1]

            def vector():
                with fgds.File(path, "r") as f:
                    for o in offs:
                        f.readv(bufs[1:], o)
                return offs[-1]

            def vector_one():
                q = size // 4
                with fgds.File(path, "r") as f:
                    for o in offs:
                        f.readv([(bufs[0], i * q, q) for i in range(4)], o)
                return offs[-1]

            def check_plain(o):
                return torch.equal(got(bufs[0], size), ref[o : o + size])

            def check_vec(o):
                return torch.equal(torch.cat([got(b, size // 4) for b in bufs[1:]]), ref[o : o + size])

            kind = f"{size >> 10} KiB x {reps} into {target}"
            row(kind, "pread", size * reps, plain, check_plain)
            row(kind, "readv, 4 segments in 4 buffers", size * reps, vector, check_vec)
            # the same segments side by side in one buffer: one copy where
            # 4 buffers take 4 (what an extra segment costs beyond its copy)
            row(kind, "readv, 4 segments in 1 buffer", size * reps, vector_one, check_plain)
            for b in bufs:
                b.close()

    # 3. writes from CUDA memory into the page cache
    wn = min(n, 2 << 30)
    src = ref[:wn]
    wpath = os.path.join(a.dir, "vec-write.bin")

    def written(_):
        with open(wpath, "rb") as f:
            return torch.equal(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).cuda(), src)

    def wr(k):
        def fn():
            if os.path.exists(wpath):
                os.unlink(wpath)
            with fgds.File(wpath, "w") as f:
                if k == 1:
                    assert f.pwrite(src) == wn
                else:
                    seg = wn // k
                    assert f.writev([src[i * seg : (i + 1) * seg] for i in range(k)]) == wn

        return fn

    if "write" in parts:
        row(f"{wn >> 30} GiB from CUDA", "pwrite", wn, wr(1), written, rounds=2)
        row(f"{wn >> 30} GiB from CUDA", "writev, 4 segments", wn, wr(4), written, rounds=2)
        os.unlink(wpath)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "config": fgds.config()}, f, indent=1)


if __name__ == "__main__":
    main()
