#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The GPU machine's benchmark suite, in one run (not a test).

1. A file into GPU memory: the disk's parallel O_DIRECT ceiling (into host
   memory), fgds (its fallback path where no fgds node serves the GPU),
   plain read + copy, a pinned double-buffered loop, KvikIO and
   torch.cuda.gds (how it fails, if it does). Every result is compared with
   the reference on the GPU.
2. A multi-GiB state dict: torch.load(map_location="cuda") against
   fgds.torch.load_state_dict (and torch.cuda.gds's recipe); a safetensors
   file: safetensors.torch.load_file(device="cuda") against
   fgds.safetensors.load_file.

Prints a table and writes JSON (--json). Usage:
    gpu-suite.py [--dir DIR] [--file-gib N] [--sd-gib N] [--json OUT]
"""

import argparse
import json
import mmap
import os
import platform
import resource
import threading
import time
import traceback


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Suite:
    def __init__(self, args):
        self.args = args
        self.rows = []

    def measure(self, part, name, nbytes, fn, check=None):
        """Run fn() (which returns the result or raises), time it with CPU
        seconds, check it, and record a row; failures are recorded too."""
        import torch

        row = {"part": part, "engine": name, "bytes": nbytes}
        try:
            torch.cuda.synchronize()
            c0, t0 = cpu_seconds(), time.perf_counter()
            out = fn()
            torch.cuda.synchronize()
            secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
            row.update(
                seconds=secs,
                mib_per_s=nbytes / secs / 2**20,
                cpu_s_per_gib=cpu / (nbytes / 2**30),
            )
            if check is not None:
                row["identical"] = bool(check(out))
            if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
                row["stats"] = out[1]
        except Exception as e:  # recorded: a peer that fails here is a result
            row["error"] = f"{type(e).__name__}: {e}".strip()[:400]
            if self.args.verbose:
                traceback.print_exc()
        self.rows.append(row)
        self.print_row(row)
        return row

    @staticmethod
    def print_row(r):
        if "error" in r:
            print(f"  {r['part']:<10} {r['engine']:<28} FAILED: {r['error']}", flush=True)
        else:
            ok = {True: "yes", False: "NO", None: "-"}[r.get("identical")]
            print(
                f"  {r['part']:<10} {r['engine']:<28} {r['mib_per_s']:>9.0f} MiB/s"
                f" {r['cpu_s_per_gib']:>8.3f} CPU s/GiB  identical: {ok}",
                flush=True,
            )


def write_file(path, nbytes):
    """A file of random-looking bytes (written once, through the page cache)."""
    import torch

    chunk = 64 << 20
    g = torch.Generator().manual_seed(7)
    with open(path, "wb") as f:
        left = nbytes
        while left:
            n = min(chunk, left)
            f.write(torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).numpy().tobytes())
            left -= n
        f.flush()
        os.fsync(f.fileno())


def odirect_ceiling(path, nbytes, threads=8, chunk=8 << 20, direct=True):
    """Parallel preads into host memory: with O_DIRECT, what the disk gives;
    without, what the page cache gives."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    bufs = [mmap.mmap(-1, chunk) for _ in range(threads)]
    nxt = [0]
    lock = threading.Lock()

    def work(i):
        while True:
            with lock:
                off = nxt[0]
                nxt[0] += chunk
            if off >= nbytes:
                return
            os.preadv(fd, [bufs[i]], off)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    os.close(fd)


def part_file(s, d, ref_holder):
    import torch
    import fgds

    n = s.args.file_gib << 30
    path = os.path.join(d, "file.bin")
    if not os.path.exists(path) or os.path.getsize(path) != n:
        write_file(path, n)
    ref = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.uint8).cuda()
    ref_holder.append(ref)

    def same(t):
        return torch.equal(t if not isinstance(t, tuple) else t[0], ref)

    # The disk's parallel O_DIRECT ceiling, into host memory: a pool of
    # pread threads, and fgds's own engine (io_uring, 16 x 1 MiB in flight).
    s.measure("file", "ceiling: pread pool (host)", n, lambda: odirect_ceiling(path, n, threads=16))

    def engine_host(chunk=256 << 20):
        b = fgds.Buffer.alloc(chunk)
        with fgds.File(path, "r", strict=True) as f:
            for off in range(0, n, chunk):
                f.pread(b, min(chunk, n - off), off)
            return None, dict(f.stats())

    s.measure("file", "ceiling: fgds engine (host)", n, engine_host)
    # fgds's fallback (like KvikIO's compat mode) reads through the page
    # cache: its ceiling is the page cache's, measured the same way.
    s.measure(
        "file", "ceiling: buffered pread pool", n, lambda: odirect_ceiling(path, n, threads=16, direct=False)
    )

    def fgds_read():
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        with fgds.File(path, "r") as f:
            f.pread(t)
            st = f.stats()
        return t, dict(st) if not isinstance(st, dict) else st

    s.measure("file", "fgds (fallback: no fgds node)", n, fgds_read, same)

    def plain():
        with open(path, "rb") as f:
            data = f.read()
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).cuda()

    s.measure("file", "read + copy", n, plain, same)

    def pinned_double_buffered(chunk=64 << 20):
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        bufs = [torch.empty(chunk, dtype=torch.uint8).pin_memory() for _ in range(2)]
        done = [torch.cuda.Event(), torch.cuda.Event()]
        stream = torch.cuda.Stream()
        fd = os.open(path, os.O_RDONLY)
        off, i = 0, 0
        while off < n:
            k = min(chunk, n - off)
            done[i].synchronize()
            got = os.preadv(fd, [memoryview(bufs[i].numpy())[:k]], off)
            assert got == k
            with torch.cuda.stream(stream):
                t[off : off + k].copy_(bufs[i][:k], non_blocking=True)
                done[i].record(stream)
            off += k
            i ^= 1
        stream.synchronize()
        os.close(fd)
        return t

    s.measure("file", "pinned double-buffered", n, pinned_double_buffered, same)

    def kvikio_read():
        import kvikio

        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        with kvikio.CuFile(path, "r") as f:
            f.pread(t).get()
        return t

    s.measure("file", "KvikIO", n, kvikio_read, same)

    def torch_gds():
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        f = torch.cuda.gds.GdsFile(path, os.O_RDONLY)
        f.register_handle()
        f.load_storage(t.untyped_storage(), 0)
        f.deregister_handle()
        return t

    s.measure("file", "torch.cuda.gds", n, torch_gds, same)


def part_checkpoint(s, d):
    import torch
    import fgds.torch as ft

    per = 32 << 20  # 4096 x 4096 float16
    count = max(1, (s.args.sd_gib << 30) // per)
    g = torch.Generator(device="cuda").manual_seed(11)
    sd = {
        f"layers.{i}.weight": torch.randn(4096, 4096, dtype=torch.float16, device="cuda", generator=g)
        for i in range(count)
    }
    sd["step"] = 1234
    n = count * per

    def same(out):
        got = out[0] if isinstance(out, tuple) else out
        return all(
            torch.equal(got[k], v) if isinstance(v, torch.Tensor) else got[k] == v for k, v in sd.items()
        )

    p_torch = os.path.join(d, "sd-torch.pt")
    p_fgds = os.path.join(d, "sd-fgds.pt")
    torch.save(sd, p_torch)
    ft.save_state_dict(sd, p_fgds)

    s.measure("checkpoint", "torch.load(cuda)", n, lambda: torch.load(p_torch, map_location="cuda"), same)
    s.measure(
        "checkpoint",
        "fgds.torch.load_state_dict",
        n,
        lambda: ft.load_state_dict(p_fgds, "cuda", return_stats=True),
        same,
    )
    s.measure(
        "checkpoint", "torch.load of fgds's file", n, lambda: torch.load(p_fgds, map_location="cuda"), same
    )

    def torch_gds_recipe():
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            fake = torch.load(p_fgds, weights_only=True)
        f = torch.cuda.gds.GdsFile(p_fgds, os.O_RDONLY)
        out = {}
        for k, v in fake.items():
            if not isinstance(v, torch.Tensor):
                out[k] = v
                continue
            t = torch.empty(v.shape, dtype=v.dtype, device="cuda")
            f.load_storage(t.untyped_storage(), v.untyped_storage()._checkpoint_offset)
            out[k] = t
        return out

    s.measure("checkpoint", "torch.cuda.gds recipe", n, torch_gds_recipe, same)

    try:
        import safetensors.torch as st
        import fgds.safetensors as fst
    except ImportError as e:
        s.rows.append({"part": "safetensors", "engine": "-", "error": f"ImportError: {e}"})
        return
    tensors = {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}
    p_st = os.path.join(d, "model.safetensors")
    st.save_file(tensors, p_st)

    def same_t(out):
        got = out[0] if isinstance(out, tuple) else out
        return all(torch.equal(got[k], v) for k, v in tensors.items())

    s.measure("safetensors", "safetensors load_file(cuda)", n, lambda: st.load_file(p_st, device="cuda"), same_t)
    s.measure(
        "safetensors",
        "fgds.safetensors.load_file",
        n,
        lambda: fst.load_file(p_st, device="cuda", return_stats=True),
        same_t,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(os.getcwd(), "build", "gpu-suite"))
    ap.add_argument("--file-gib", type=int, default=4)
    ap.add_argument("--sd-gib", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    import torch
    import fgds

    os.makedirs(args.dir, exist_ok=True)
    s = Suite(args)
    info = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "fgds_nodes": [str(d) for d in fgds.list_devices()],
        "dir": args.dir,
    }
    print(f"GPU machine suite: {info}", flush=True)
    refs = []
    part_file(s, args.dir, refs)
    refs.clear()
    torch.cuda.empty_cache()
    part_checkpoint(s, args.dir)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"suite": "gpu", "host": info, "rows": s.rows}, f, indent=1)


if __name__ == "__main__":
    main()
