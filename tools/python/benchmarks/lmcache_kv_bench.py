#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""A KV round trip of LMCache's GPU-resident chunks, side by side:

  fgds          fgds.lmcache.FgdsL2Adapter, given the GPU memory objects
                (fgds's GPU buffers: peer to peer where the fgds module
                serves the GPU, fgds's bounce path elsewhere);
  lmcache-fs    LMCache's own local-disk L2 adapter (``{"type": "fs"}``,
                lmcache/v1/distributed/l2_adapters/fs_l2_adapter.py), which
                takes host (L1) memory objects: each chunk is copied from
                the GPU into a pinned L1 object before the store and back
                after the load, as LMCache's MP server does around L2;
  lmcache-fs-odirect  the same with its ``use_odirect`` option;
  fgds-l1-arena  fgds.lmcache.FgdsL2Adapter on the same pinned L1 objects,
                given LMCache's ``L1MemoryDesc`` of the L1 arena, as
                LMCache's storage manager gives it: the arena is registered
                with fgds once and every chunk moves as an offset in it;
  fgds-l1-per-chunk  the same without the descriptor: each chunk's buffer
                is registered for its own transfer.

Every adapter is built as LMCache's MP server builds it (``--l2-adapter
<JSON>`` through LMCache's own parser and factory); the chunks are
LMCache memory objects from its ``TensorMemoryAllocator`` over GPU memory.
For each: store every chunk, drop the files from the page cache, load
every chunk into fresh GPU objects, compare every byte on the GPU.

    lmcache_kv_bench.py DIR [--mib 1024] [--chunk-kib 2048] [--device cuda|cpu]

Prints a table and one JSON line per adapter (MiB/s of the store, the
load and the whole round trip, CPU s/GiB, identical or not, and fgds's
statistics for fgds). ``--device cpu`` runs the same on host memory (a
check of the program without a GPU). Exit status 1 if any byte differs or
a chunk is missing.
"""

import argparse
import json
import os
import resource
import shutil
import sys
import time


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def adapter(spec, l1_memory_desc=None):
    """An L2 adapter exactly as LMCache's MP server builds it (and hands it
    its L1 arena)."""
    from lmcache.v1.distributed.l2_adapters.config import (
        add_l2_adapters_args, parse_args_to_l2_adapters_config)
    from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry

    p = argparse.ArgumentParser()
    add_l2_adapters_args(p)
    (cfg,) = parse_args_to_l2_adapters_config(
        p.parse_args(["--l2-adapter", json.dumps(spec)])).adapters
    return create_l2_adapter_from_registry(cfg, l1_memory_desc)


def _wait(fd, timeout):
    import select

    r, _, _ = select.select([fd], [], [], timeout)
    if not r:
        raise TimeoutError("LMCache task did not complete")
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        pass


def store(ad, keys, objs, timeout=600):
    tid = ad.submit_store_task(keys, objs)
    done = {}
    end = time.time() + timeout
    while tid not in done:
        done.update(ad.pop_completed_store_tasks())
        if tid not in done:
            _wait(ad.get_store_event_fd(), end - time.time())
    return done[tid]


def load(ad, keys, objs, timeout=600):
    tid = ad.submit_load_task(keys, objs)
    end = time.time() + timeout
    while True:
        bm = ad.query_load_result(tid)
        if bm is not None:
            return [bm.test(i) for i in range(len(keys))]
        _wait(ad.get_load_event_fd(), end - time.time())


def drop_cache(root):
    """Drops the page cache of every file under root (posix_fadvise)."""
    for d, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run(name, spec, chunks, dev, staged, tmp, arena=False):
    """One adapter: store the chunks, drop the cache, load, compare."""
    import torch
    from lmcache.v1.distributed.api import ObjectKey
    from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator

    n, csize = len(chunks), chunks[0].numel()
    shape, dtype = [torch.Size([2, csize // 4])], torch.bfloat16
    keys = [ObjectKey(chunk_hash=(i + 1).to_bytes(8, "big"), model_name="bench/model",
                      kv_rank=0) for i in range(n)]
    # Room for the chunks stored and those loaded back.
    gpu = TensorMemoryAllocator(torch.empty(2 * n * csize + (4 << 20), dtype=torch.uint8,
                                            device=dev))
    src = [gpu.allocate(shape, [dtype]) for _ in range(n)]
    for o, c in zip(src, chunks):
        o.raw_data.view(torch.uint8)[:csize].copy_(c)
    if dev == "cuda":
        torch.cuda.synchronize()
    l1 = None
    if staged:  # LMCache's L1: pinned host memory objects
        # Page aligned, as LMCache's own L1 (its O_DIRECT path needs it).
        size = 2 * n * csize + (4 << 20)
        raw = torch.empty(size + 4096, dtype=torch.uint8, pin_memory=dev == "cuda")
        off = -raw.data_ptr() % 4096
        l1 = TensorMemoryAllocator(raw[off:off + size])
        host = [l1.allocate(shape, [dtype]) for _ in range(n)]
    desc = None
    if arena:
        from lmcache.v1.distributed.internal_api import L1MemoryDesc

        desc = L1MemoryDesc(ptr=raw.data_ptr() + off, size=size, align_bytes=4096)
    regs0 = _registrations()
    ad = adapter(spec, desc)
    try:
        c0, t0 = cpu_s(), time.perf_counter()
        if staged:
            for h, g in zip(host, src):
                h.raw_data.copy_(g.raw_data, non_blocking=True)
            if dev == "cuda":
                torch.cuda.synchronize()
        res = store(ad, keys, host if staged else src)
        ts, cs = time.perf_counter() - t0, cpu_s() - c0
        if not res.is_successful():
            raise RuntimeError(f"{name}: store failed: {res}")
        drop_cache(tmp)
        out = [gpu.allocate(shape, [dtype]) for _ in range(n)]
        for o in out:
            o.raw_data.zero_()
        if staged:
            hout = [l1.allocate(shape, [dtype]) for _ in range(n)]
            for h in hout:
                h.raw_data.zero_()
        if dev == "cuda":
            torch.cuda.synchronize()
        c0, t0 = cpu_s(), time.perf_counter()
        hits = load(ad, keys, hout if staged else out)
        if staged:
            for o, h in zip(out, hout):
                o.raw_data.copy_(h.raw_data, non_blocking=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        tl, cl = time.perf_counter() - t0, cpu_s() - c0
        same = all(hits) and all(torch.equal(a.raw_data.view(torch.uint8)[:csize],
                                             b.raw_data.view(torch.uint8)[:csize])
                                 for a, b in zip(src, out))
        mib = n * csize / 2**20
        gib = mib / 1024
        r = {"backend": name, "chunks": n, "chunk_kib": csize >> 10, "mib": mib,
             "store_mib_s": round(mib / ts, 1), "load_mib_s": round(mib / tl, 1),
             "round_trip_mib_s": round(2 * mib / (ts + tl), 1),
             "store_cpu_s_gib": round(cs / gib, 3), "load_cpu_s_gib": round(cl / gib, 3),
             "hits": sum(hits), "identical": same}
        if hasattr(ad, "stats"):
            st = ad.stats()
            r["fgds"] = {k: st[k] for k in ("direct_bytes", "bounce_bytes", "fallbacks",
                                            "gpu_bytes", "host_bytes") if k in st}
            regs = _registrations()
            r["fgds"]["per_chunk_registrations"] = regs["per_chunk_total"] - regs0["per_chunk_total"]
            r["fgds"]["arena_registrations"] = regs["arena_total"] - regs0["arena_total"]
        return r
    finally:
        ad.close()
        del gpu, l1


def _registrations():
    from fgds.lmcache import registrations

    return registrations()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--chunk-kib", type=int, default=2048)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--only", help="comma-separated backends to run")
    a = ap.parse_args()

    # LMCache's warnings about memory objects this program drops unfreed.
    os.environ.setdefault("LMCACHE_LOG_LEVEL", "ERROR")
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA GPU (use --device cpu to check the program)"}))
        return 1
    import fgds
    import fgds.lmcache  # noqa: F401 - registers FgdsL2Adapter's config

    csize = a.chunk_kib << 10
    n = max(1, (a.mib << 20) // csize)
    g = torch.Generator(device=a.device).manual_seed(1)
    chunks = [torch.randint(0, 256, (csize,), dtype=torch.uint8, device=a.device, generator=g)
              for _ in range(n)]
    os.makedirs(a.dir, exist_ok=True)
    backends = {
        "fgds": (lambda d: {"type": "plugin", "module_path": "fgds.lmcache",
                            "class_name": "FgdsL2Adapter",
                            "adapter_params": {"path": os.path.join(d, "kv.slab"),
                                               "capacity_bytes": n * csize,
                                               "slot_size": csize, "num_workers": 4}}, False),
        "lmcache-fs": (lambda d: {"type": "fs", "base_path": d}, True),
        "lmcache-fs-odirect": (lambda d: {"type": "fs", "base_path": d, "use_odirect": True},
                               True),
    }
    fgds_spec = backends["fgds"][0]
    backends["fgds-l1-arena"] = (fgds_spec, True, True)
    backends["fgds-l1-per-chunk"] = (fgds_spec, True)
    only = a.only.split(",") if a.only else list(backends)
    results = []
    print(f"# LMCache KV round trip: {n} chunks of {a.chunk_kib} KiB ({n * csize >> 20} MiB) "
          f"of {a.device} memory, torch {torch.__version__}, fgds {fgds.__version__}, "
          f"{torch.cuda.get_device_name(0) if a.device == 'cuda' else 'cpu'}", flush=True)
    for name in only:
        spec, staged, *arena = backends[name]
        d = os.path.join(a.dir, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        try:
            r = run(name, spec(d), chunks, a.device, staged, d, bool(arena))
        except Exception as e:  # noqa: BLE001 - reported, the others still run
            r = {"backend": name, "error": f"{type(e).__name__}: {e}"}
        finally:
            shutil.rmtree(d, ignore_errors=True)
        results.append(r)
        print(json.dumps(r), flush=True)
    print(f"{'backend':<20} {'store MiB/s':>12} {'load MiB/s':>11} {'round trip':>11} "
          f"{'CPU s/GiB st/ld':>16}  identical")
    for r in results:
        if "error" in r:
            print(f"{r['backend']:<20} error: {r['error']}")
            continue
        print(f"{r['backend']:<20} {r['store_mib_s']:>12} {r['load_mib_s']:>11} "
              f"{r['round_trip_mib_s']:>11} {r['store_cpu_s_gib']:>7}/{r['load_cpu_s_gib']:<8}  "
              f"{r['identical']}")
    return 0 if all(r.get("identical") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
