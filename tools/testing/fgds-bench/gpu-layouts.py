#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Cold safetensors loads at every loader's defaults, on checkpoint layouts
the GPU suite does not have (not a test): how fgds.safetensors stands
against each peer when the tensors are many and small, a few MiB each, a
few and huge, or spread over many small shards.

Layouts (bf16, seeded, --gib each, --only picks):
  few-mib   tensors of 1 to 8 MiB (what a review measured Run:ai's
            streamer ahead on: 0.87x)
  small     tensors of 16 to 512 KiB (--small-gib)
  huge      four tensors of a quarter each
  shards    tensors of 1 to 8 MiB in files of at most --shard-mib

Rows, each layout, page cache dropped before every round, rows taking turns
round by round (gpu-peer-tune.py's turns(): the virtual disk's drift falls
on every row alike): the disk's ceilings (16 O_DIRECT and 16 buffered pread
threads of 8 MiB into host memory, file by file), fgds.safetensors
(load_file, load_files for several files) at its defaults, and each peer at
its defaults and at what its documentation offers (gpu-suite.py's
peer_settings()). Every loader's first round is compared, tensor by
tensor, with the tensors written; what the disk served during each row
(/sys/dev/block/.../stat: requests, their average size, how many were in
flight) is recorded beside its figures. Prints a table per layout (median
MiB/s, lowest-highest, CPU s/GiB, x fgds) and writes JSON (--json, after
every layout), which report.py shows in docs/benchmarks.md.

    gpu-layouts.py [--dir DIR] [--gib N] [--small-gib N] [--shard-mib N]
                   [--rounds N] [--only few-mib,small,huge,shards]
                   [--warm] [--tune] [--peers NAME,...] [--json OUT]

Carry and install as gpu-suite.py's header says (the fgds wheel and the
peers' wheels); needs root for /proc/sys/vm/drop_caches.
"""
import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import time

_here = os.path.dirname(os.path.abspath(__file__))


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_here, file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gs = _load("gpu_suite", "gpu-suite.py")
tune = _load("gpu_peer_tune", "gpu-peer-tune.py")

LAYOUTS = ("few-mib", "small", "huge", "shards")

# fgds's knobs tried beside its defaults with --tune: one 512 KiB O_DIRECT
# read in flight per I/O thread (256 KiB bounce buffers, a cold read's
# pieces twice that; queue_depth=1), the pattern of fastsafetensors' no-GDS
# reader (16 threads, each one pread at a time, about 510 KiB a request at
# the disk).
FGDS_KNOBS = [
    ("queue_depth=1, bounce_chunk_size=256K", {"queue_depth": 1, "bounce_chunk_size": 256 << 10}),
]


def load_fgds(paths, **kw):
    """fgds.safetensors with the File settings `kw`."""
    import fgds.safetensors as fst

    if len(paths) == 1:
        return fst.load_file(paths[0], device="cuda", return_stats=True, **kw)
    return fst.load_files(paths, device="cuda", return_stats=True, **kw)


def shapes(layout, total, seed):
    """[(name, (rows, cols))] of bf16 tensors adding up to about `total`
    bytes, in the layout's sizes."""
    rnd = random.Random(seed)
    if layout == "huge":
        per = total // 4
        return [(f"huge.{i}.weight", (per // 2 // 4096, 4096)) for i in range(4)]
    lo, hi = (16 << 10, 512 << 10) if layout == "small" else (1 << 20, 8 << 20)
    out, size, i = [], 0, 0
    while size < total:
        cols = rnd.choice((256, 512, 1024, 2048, 4096))
        nbytes = rnd.randint(lo, hi)
        rows = max(1, nbytes // (2 * cols))
        out.append((f"layers.{i}.weight", (rows, cols)))
        size += rows * cols * 2
        i += 1
    return out


def disk_stat(path):
    """(requests, bytes, request-milliseconds) read so far from the block
    device under `path` (/sys/dev/block/MAJ:MIN/stat), or None."""
    st = os.stat(path).st_dev
    try:
        with open(f"/sys/dev/block/{os.major(st)}:{os.minor(st)}/stat") as f:
            v = f.read().split()
    except OSError:
        return None
    return int(v[0]), int(v[2]) * 512, int(v[3])


def counted(fn, path, seen):
    """`fn` with what the disk served during each call appended to `seen`:
    requests, their average size and how many were in flight on average
    (request-time over wall time)."""

    def run():
        a, t0 = disk_stat(path), time.perf_counter()
        out = fn()
        b, secs = disk_stat(path), time.perf_counter() - t0
        if a and b and b[0] > a[0]:
            reqs, nbytes, ms = (y - x for x, y in zip(a, b))
            seen.append({"requests": reqs, "avg_kib": nbytes / reqs / 1024, "in_flight": ms / 1000 / secs})
        return out

    return run


def write_layout(d, layout, total, shard):
    """Writes the layout's file(s) under d; returns (tensors on the GPU,
    paths in order)."""
    import torch

    os.makedirs(d, exist_ok=True)
    for n in os.listdir(d):
        os.unlink(os.path.join(d, n))
    g = torch.Generator(device="cuda").manual_seed(17)
    sd = {k: torch.randn(s, dtype=torch.bfloat16, device="cuda", generator=g)
          for k, s in shapes(layout, total, 19)}
    limit = shard if layout == "shards" else total * 2
    paths = [os.path.join(d, name) for name, _ in gs.save_shards(d, sd, limit)]
    os.sync()
    return sd, paths


def layout_rows(a, layout, caches):
    import torch

    total = (a.small_gib if layout == "small" else a.gib) << 30
    sd, paths = write_layout(os.path.join(a.dir, layout), layout, total, a.shard_mib << 20)
    n = sum(v.numel() * v.element_size() for v in sd.values())
    sizes = [os.path.getsize(p) for p in paths]
    print(f"{layout}: {len(sd)} tensors, {n / 2**30:.2f} GiB in {len(paths)} file(s), "
          f"{a.rounds} rounds, rows in turn", flush=True)

    def same(out):
        got = out[0] if isinstance(out, tuple) else out
        return got.keys() == sd.keys() and all(torch.equal(got[k], v) for k, v in sd.items())

    def ceiling(direct):
        for p, s in zip(paths, sizes):
            gs.pool_read(p, s - s % 4096 if direct else s, threads=16, direct=direct)

    settings = [("fgds.safetensors (defaults)", lambda: gs.load_fgds(paths))]
    if a.tune:
        settings += [(f"fgds.safetensors, {knobs}", lambda kw=kw: load_fgds(paths, **kw))
                     for knobs, kw in FGDS_KNOBS]
    peers = gs.peer_settings()
    for peer in a.peers.split(",") if a.peers else peers:
        settings += [(name, lambda fn=fn: fn(paths)) for name, fn in peers[peer]]
    settings += [
        ("ceiling: O_DIRECT pread pool (host)", lambda: ceiling(True)),
        ("ceiling: buffered pread pool (host)", lambda: ceiling(False)),
    ]
    def check(out):
        return None if out is None else same(out)

    rows = []
    for c in caches:
        seen = {name: [] for name, _ in settings}
        timed = [(name, counted(fn, paths[0], seen[name])) for name, fn in settings]
        for r in tune.turns(timed, n, a.rounds, c, paths, check):
            got = seen[r["setting"]]
            if got:
                r["disk"] = {k: statistics.median(g[k] for g in got) for k in got[0]}
            rows.append(r)
    info = {"tensors": len(sd), "bytes": n, "files": len(paths), "sizes": sizes}
    del sd
    return [dict(r, layout=layout, **info) for r in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/root/gpu-layouts")
    ap.add_argument("--gib", type=int, default=4)
    ap.add_argument("--small-gib", type=int, default=2)
    ap.add_argument("--shard-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(LAYOUTS))
    ap.add_argument("--warm", action="store_true", help="warm rows too")
    ap.add_argument("--tune", action="store_true", help="fgds's knobs beside its defaults (FGDS_KNOBS)")
    ap.add_argument("--peers", default=None, help="only these peers (gpu-suite.py's peer_settings() names)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if not gs.drop_caches():
        raise SystemExit("gpu-layouts.py: cold rows need /proc/sys/vm/drop_caches (root)")
    caches = ["cold"] + (["warm"] if a.warm else [])
    os.makedirs(a.dir, exist_ok=True)
    info = gs.machine(a.dir)
    rows, t0 = [], time.time()
    for layout in a.only.split(","):
        if layout not in LAYOUTS:
            raise SystemExit(f"gpu-layouts.py: no layout {layout!r}; the layouts: {', '.join(LAYOUTS)}")
        rows += layout_rows(a, layout, caches)
        print(f"  ({time.time() - t0:.0f} s so far)", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"machine": info, "command": " ".join(sys.argv[1:]), "rounds": a.rounds,
                           "layouts": rows}, f, indent=1)


if __name__ == "__main__":
    main()
