#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""How the GPU suite's settings were chosen (not a test): each safetensors
peer's documented knobs, and fgds's one call against its other settings,
measured on the GPU machine in one run, cold and warm, side by side.

1. The suite's file (file.bin, --file-gib) into CUDA memory: fgds one call
   with its defaults beside `parallel=` 1, 2, 4 and 8, larger bounce parts
   and the Batch API (64 x 32 MiB), the settings taking turns round by
   round (cold: the page cache dropped before each read), so that the
   virtual disk's drift between rows falls on every setting alike.
2. A safetensors file of --st-gib (float16 4096 x 4096 tensors, as the
   suite's): safetensors (mmap, pread), InstantTensor (its default direct
   I/O, BUFFERED, larger io_depth and chunk_size), Run:ai's streamer
   (RUNAI_STREAMER_CONCURRENCY x RUNAI_STREAMER_CHUNK_BYTESIZE) and
   fgds.safetensors.load_file, also taking turns; every result compared
   with the tensors written.

Prints a table per part (median MiB/s, lowest-highest, CPU s/GiB, and x
the first row of the part, the defaults) and writes JSON.

    gpu-peer-tune.py [--dir DIR] [--file-gib N] [--st-gib N] [--rounds N]
                     [--json OUT] [--only file,peers]

Carry and install as gpu-suite.py's header says.
"""
import argparse
import importlib.util
import json
import os
import statistics
import time

_spec = importlib.util.spec_from_file_location(
    "gpu_suite", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu-suite.py")
)
gs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gs)


def turns(settings, nbytes, rounds, cache, path, check):
    """Runs every (name, fn) of `settings` once per round, in turn; returns
    rows (median, lowest, highest MiB/s; CPU s/GiB)."""
    import torch

    res = {name: ([], []) for name, _ in settings}
    ok = {}
    err = {}
    paths = [path] if isinstance(path, str) else path
    if cache == "warm":
        for p in paths:
            gs.warm(p)
    for i in range(rounds):
        for name, fn in settings:
            if name in err:
                continue
            if cache == "cold":
                gs.drop_caches()
            torch.cuda.synchronize()
            c0, t0 = gs.cpu_seconds(), time.perf_counter()
            try:
                out = fn()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - a setting that fails is a result
                err[name] = f"{type(e).__name__}: {e}"[:300]
                continue
            secs, cpu = time.perf_counter() - t0, gs.cpu_seconds() - c0
            res[name][0].append(nbytes / secs / 2**20)
            res[name][1].append(cpu / (nbytes / 2**30))
            if i == 0:
                ok[name] = bool(check(out))
            del out
    rows = []
    for name, _ in settings:
        if name in err:
            rows.append({"cache": cache, "setting": name, "error": err[name]})
            continue
        r, c = res[name]
        rows.append({"cache": cache, "setting": name, "mib_per_s": statistics.median(r), "min": min(r),
                     "max": max(r), "rounds": r, "cpu_s_per_gib": statistics.median(c), "identical": ok.get(name)})
    base = rows[0].get("mib_per_s")
    for r in rows:
        tag = f"  {cache:<4} {r['setting']:<58}"
        if "error" in r:
            print(f"{tag} FAILED: {r['error']}", flush=True)
            continue
        r["x_first"] = r["mib_per_s"] / base if base else None
        print(f"{tag} {r['mib_per_s']:>8.0f} ({r['min']:.0f}-{r['max']:.0f}) {r['cpu_s_per_gib']:6.3f} CPU s/GiB"
              f"  x{r['x_first']:.2f}  identical: {r['identical']}", flush=True)
    return rows


def part_file(a, caches):
    import torch
    import fgds

    n = a.file_gib << 30
    path = os.path.join(a.dir, "file.bin")
    if not os.path.exists(path) or os.path.getsize(path) != n:
        gs.write_file(path, n)
    with open(path, "rb") as f:
        head = torch.frombuffer(bytearray(f.read(64 << 20)), dtype=torch.uint8).cuda()

    def check(t):
        return torch.equal(t[: 64 << 20], head)

    def one(**kw):
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        with fgds.File(path, "r", **kw) as f:
            assert f.pread(t) == n
        return t

    def batch():
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        with fgds.File(path, "r") as f, fgds.Buffer(t) as b:
            gs.fgds_batch(f, b, n)
        return t

    settings = [
        ("fgds one call (defaults)", one),
        ("parallel=1", lambda: one(parallel=1)),
        ("parallel=2", lambda: one(parallel=2)),
        ("parallel=4", lambda: one(parallel=4)),
        ("parallel=8", lambda: one(parallel=8)),
        ("bounce_split_size=32M", lambda: one(bounce_split_size=32 << 20)),
        ("bounce_chunk_size=8M, bounce_split_size=32M", lambda: one(bounce_chunk_size=8 << 20, bounce_split_size=32 << 20)),
        ("batch 64 x 32 MiB", batch),
    ]
    rows = []
    for cache in caches:
        rows += [dict(r, part="file") for r in turns(settings, n, a.rounds, cache, path, check)]
    return rows


def part_peers(a, caches):
    import torch
    import safetensors.torch as st

    count = max(1, (a.st_gib << 30) // (32 << 20))
    g = torch.Generator(device="cuda").manual_seed(11)
    sd = {f"layers.{i}.weight": torch.randn(4096, 4096, dtype=torch.float16, device="cuda", generator=g)
          for i in range(count)}
    path = os.path.join(a.dir, "tune.safetensors")
    st.save_file(sd, path, metadata={"format": "pt"})
    n = count * (32 << 20)

    def check(out):
        got = out[0] if isinstance(out, tuple) else out
        return got.keys() == sd.keys() and all(torch.equal(got[k], v) for k, v in sd.items())

    from instanttensor import BackendPolicy

    settings = [
        ("safetensors load_file(cuda)", lambda: gs.load_safetensors([path])),
        ("safetensors load_file(cuda), backend=pread", lambda: gs.load_safetensors([path], "pread")),
        ("InstantTensor", lambda: gs.load_instanttensor([path])),
        ("InstantTensor, io_depth=1024", lambda: gs.load_instanttensor([path], io_depth=1024)),
        ("InstantTensor, chunk_size=32M", lambda: gs.load_instanttensor([path], chunk_size=32 << 20)),
        ("InstantTensor, BUFFERED", lambda: gs.load_instanttensor([path], backend=BackendPolicy.BUFFERED)),
        ("InstantTensor, BUFFERED, io_depth=32", lambda: gs.load_instanttensor([path], backend=BackendPolicy.BUFFERED, io_depth=32)),
    ]
    for conc, chunk in ((16, 2), (32, 2), (16, 8), (32, 8), (64, 8), (32, 32)):
        env = {"RUNAI_STREAMER_CONCURRENCY": str(conc), "RUNAI_STREAMER_CHUNK_BYTESIZE": str(chunk << 20)}
        settings.append((f"Run:ai streamer, concurrency={conc}, chunk={chunk}M",
                         lambda env=env: gs.load_runai([path], env)))
    settings.append(("fgds.safetensors.load_file", lambda: gs.load_fgds([path])))
    rows = []
    for cache in caches:
        rows += [dict(r, part="peers") for r in turns(settings, n, a.rounds, cache, path, check)]
    os.unlink(path)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/root/gpu-suite")
    ap.add_argument("--file-gib", type=int, default=4)
    ap.add_argument("--st-gib", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="file,peers")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    caches = ["warm"] + (["cold"] if gs.drop_caches() else [])
    rows = []
    t0 = time.time()
    for part, fn in (("file", part_file), ("peers", part_peers)):
        if part in a.only.split(","):
            print(f"{part}: {a.rounds} rounds, settings in turn", flush=True)
            rows += fn(a, caches)
            print(f"  ({time.time() - t0:.0f} s so far)", flush=True)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump({"tune": "peers", "rounds": a.rounds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
