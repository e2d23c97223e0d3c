#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""How the one-call path's defaults were chosen (not a test): one
`File.pread`/`pwrite` of a large file into/from GPU memory (the page-cache
bounce path where no fgds node serves the GPU) and into host memory (the
O_DIRECT path) for a grid of `parallel`, `split_size`, `chunk_size` and
`queue_depth`, beside the Batch API (64 x 32 MiB) and a pread pool, in one
run. Warm rows read a file the page cache holds; cold rows drop the cache
before every round (root). Prints one line per setting and writes JSON.

    gpu-tune.py [--dir DIR] [--file-gib N] [--json OUT] [--only grid|bounce]

`--only bounce`: the bounce path's piece size (`bounce_chunk_size`) against
the part size (`split_size`), warm and cold reads into CUDA memory and
writes from it, beside KvikIO with 16 threads and a batch, the numbers the
default `bounce_chunk_size` was chosen from (tools/lib/fgds/README.md).

Carry and install as gpu-suite.py's header says.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "gpu_suite", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu-suite.py")
)
gs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gs)

M = 1 << 20


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    gs.file_options(ap)
    ap.add_argument("--budget-s", type=float, default=200, help="stop starting new rows after this")
    ap.add_argument("--only", default="grid", choices=("grid", "bounce"))
    a = ap.parse_args()
    import torch
    import fgds

    t_start = time.time()
    os.makedirs(a.dir, exist_ok=True)
    path, n = gs.bench_file(a.dir, a.file_gib)
    can_drop = gs.drop_caches()
    rows = []
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    host = fgds.Buffer.alloc(n)

    def timed(fn, nbytes, rounds, cache):
        rates = []
        for i in range(rounds):
            if cache == "cold":
                gs.drop_caches()
            elif i == 0:
                gs.warm(path)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            rates.append(nbytes / (time.perf_counter() - t0) / M)
        return rates

    def row(kind, cache, cfg, fn, nbytes, rounds):
        if time.time() - t_start > a.budget_s:
            return None
        r = timed(fn, nbytes, rounds, cache)
        d = dict(kind=kind, cache=cache, bytes=nbytes, mib_per_s=statistics.median(r), rounds=r, **cfg)
        rows.append(d)
        print(f"{kind:<12} {cache:<4} {json.dumps(cfg):<80} {d['mib_per_s']:>8.0f} MiB/s  {[round(x) for x in r]}",
              flush=True)
        return d

    def one(target, nbytes, op="read", **cfg):
        def fn():
            with fgds.File(path if op == "read" else wpath, "r" if op == "read" else "w", **cfg) as f:
                got = (f.pread if op == "read" else f.pwrite)(target, nbytes)
                assert got == nbytes, got

        return fn

    def batch(target, nbytes, op="read"):
        def fn():
            with fgds.File(path if op == "read" else wpath, "r" if op == "read" else "w") as f:
                if isinstance(target, fgds.Buffer):
                    gs.fgds_batch(f, target, nbytes, op=op)
                else:
                    with fgds.Buffer(target) as buf:
                        gs.fgds_batch(f, buf, nbytes, op=op)

        return fn

    wpath = os.path.join(a.dir, "tune-write.bin")
    print(f"config {fgds.config()} drop_caches {can_drop} cpus {os.cpu_count()}", flush=True)
    if a.only == "bounce":
        bounce_grid(a, row, one, batch, dev, n, path, wpath, can_drop, fgds.config())
        if os.path.exists(wpath):
            os.unlink(wpath)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"rows": rows, "drop_caches": can_drop, "config": fgds.config()}, f, indent=1)
        return
    # 1. warm, into GPU memory: the grid
    row("gpu-read", "warm", {"api": "batch"}, batch(dev, n), n, 3)
    row("gpu-read", "warm", {"api": "pool"}, lambda: gs.pool_read(path, n, 16, direct=False), n, 3)
    best = None
    for par in (1, 4, 8, 16, 17):
        for split in (4 * M, 16 * M, 64 * M):
            if par == 1 and split != 16 * M:
                continue
            for chunk in (M, 4 * M):
                cfg = dict(parallel=par, split_size=split, chunk_size=chunk)
                d = row("gpu-read", "warm", cfg, one(dev, n, **cfg), n, 3)
                if d and (best is None or d["mib_per_s"] > best["mib_per_s"]):
                    best = d
    if best:
        for chunk in (512 << 10, M, 2 * M, 4 * M, 8 * M):
            for qd in (4, 8, 16, 32):
                cfg = dict(parallel=best["parallel"], split_size=best["split_size"], chunk_size=chunk, queue_depth=qd)
                row("gpu-read", "warm", cfg, one(dev, n, **cfg), n, 3)
    # 2. warm writes from GPU memory (page cache)
    row("gpu-write", "warm", {"api": "batch"}, batch(dev, n, "write"), n, 2)
    for par in (1, 8, 16, 17):
        for split in (16 * M, 64 * M):
            cfg = dict(parallel=par, split_size=split)
            row("gpu-write", "warm", cfg, one(dev, n, "write", **cfg), n, 2)
    if can_drop:
        # 3. cold: the disk. Size the reads to the disk's speed.
        t0 = time.perf_counter()
        gs.drop_caches()
        gs.pool_read(path, 1 << 30, 16, direct=True)
        rate = (1 << 30) / (time.perf_counter() - t0)
        cn = max(1 << 30, min(n, int(rate * 1.5) // (64 * M) * 64 * M))
        print(f"disk ~{rate / M:.0f} MiB/s: cold rows read {cn >> 20} MiB", flush=True)
        row("host-read", "cold", {"api": "pool", "direct": True}, lambda: gs.pool_read(path, cn, 16), cn, 2)
        row("host-read", "cold", {"api": "batch"}, batch(host, cn), cn, 2)
        for par in (1, 4, 16):
            for split in (16 * M, 64 * M):
                for chunk in (M, 4 * M):
                    cfg = dict(parallel=par, split_size=split, chunk_size=chunk)
                    row("host-read", "cold", cfg, one(host, cn, **cfg), cn, 1)
        row("gpu-read", "cold", {"api": "batch"}, batch(dev, cn), cn, 2)
        row("gpu-read", "cold", {"api": "pool", "direct": False}, lambda: gs.pool_read(path, cn, 16, direct=False),
            cn, 2)
        for par in (1, 8, 16):
            for split in (16 * M, 64 * M):
                for chunk in (M, 4 * M):
                    cfg = dict(parallel=par, split_size=split, chunk_size=chunk)
                    row("gpu-read", "cold", cfg, one(dev, cn, **cfg), cn, 1)
    if os.path.exists(wpath):
        os.unlink(wpath)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "drop_caches": can_drop, "config": fgds.config()}, f, indent=1)


def bounce_grid(a, row, one, batch, dev, n, path, wpath, can_drop, defaults):
    """The bounce path's piece size against the part size (see the header)."""
    import torch

    def kvikio16():
        import kvikio
        import kvikio.defaults

        with kvikio.defaults.set({"num_threads": 16}):
            with kvikio.CuFile(path, "r") as f:
                f.pread(dev).get()

    # warm reads into CUDA memory: the peers, the defaults, then the grid
    row("gpu-read", "warm", {"api": "kvikio", "threads": 16}, kvikio16, n, 3)
    row("gpu-read", "warm", {"api": "batch"}, batch(dev, n), n, 3)
    row("gpu-read", "warm", {"api": "one", "defaults": True}, one(dev, n), n, 3)
    grid = [(1, 16, 16), (2, 4, 16), (2, 8, 16), (4, 4, 16), (4, 8, 16), (4, 16, 16), (8, 8, 16), (8, 16, 16),
            (1, 16, 1), (2, 8, 1), (4, 8, 1), (4, 16, 1), (8, 16, 1)]
    for piece, split, qd in grid:
        cfg = dict(bounce_chunk_size=piece * M, bounce_split_size=split * M, queue_depth=qd)
        row("gpu-read", "warm", cfg, one(dev, n, **cfg), n, 3)
    row("gpu-read", "warm", {"parallel": 17}, one(dev, n, parallel=17), n, 3)
    # a batch of 32 MiB requests (what fgds.torch and fgds.safetensors do), by piece size
    for piece, qd in ((1, 16), (2, 16), (4, 16), (4, 1)):
        def b(piece=piece, qd=qd):
            fgds = fgds_mod()
            with fgds.File(path, "r", bounce_chunk_size=piece * M, queue_depth=qd) as f, fgds.Buffer(dev) as buf:
                gs.fgds_batch(f, buf, n)

        row("gpu-read", "warm", {"api": "batch", "bounce_chunk_size": piece * M, "queue_depth": qd}, b, n, 3)
    # writes from CUDA memory into the page cache, by piece size
    wn = min(n, 2 << 30)
    for piece in (1, 4):
        cfg = dict(bounce_chunk_size=piece * M)

        def w(cfg=cfg):
            if os.path.exists(wpath):
                os.unlink(wpath)
            with fgds_mod().File(wpath, "w", **cfg) as f:
                assert f.pwrite(dev[:wn]) == wn

        row("gpu-write", "warm", cfg, w, wn, 2)
    if can_drop:
        cn = 1 << 30
        row("gpu-read", "cold", {"api": "one", "defaults": True}, one(dev[:cn], cn), cn, 3)
        for piece, split in ((1, 16), (1, 1), (4, 16)):
            cfg = dict(bounce_chunk_size=piece * M, bounce_split_size=split * M)
            row("gpu-read", "cold", cfg, one(dev[:cn], cn, **cfg), cn, 3)
    torch.cuda.synchronize()


def fgds_mod():
    import fgds

    return fgds


if __name__ == "__main__":
    main()
