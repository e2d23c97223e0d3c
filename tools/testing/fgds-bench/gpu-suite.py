#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The GPU machine's benchmark suite, every peer in one run (not a test).

1. A file into GPU memory, page cache cold (dropped before every round) and
   warm (read once before): the disk's parallel O_DIRECT ceiling and the
   page cache's (a pool of pread threads into host memory); fgds as one
   call (`File.pread` of the whole file; the same with `parallel=1`, the
   calling thread alone; with the bounce reads forced through the page
   cache and forced O_DIRECT, `bounce_read=`; warm, with 8 MiB bounce
   pieces in 8 MiB parts), as a
   batch (64 x 32 MiB requests) and into host memory (its O_DIRECT path,
   one call and batch); plain read + copy; a pinned double-buffered loop;
   KvikIO (its defaults, and 16 threads); torch.cuda.gds (how it fails, if
   it does). Then the file's first 2 GiB from GPU memory into the page
   cache (the file removed before every round, no fsync): fgds one call
   and batch, KvikIO (defaults and 16 threads).
2. A multi-GiB state dict: torch.load(map_location="cuda") against
   fgds.torch.load_state_dict (and torch.cuda.gds's recipe); the same
   tensors in a safetensors file: every peer at each of its settings
   (peer_settings(): safetensors.torch.load_file(device="cuda") with its
   mmap and pread backends, fastsafetensors in its no-GDS mode,
   InstantTensor with its defaults and BUFFERED, Run:ai's streamer with its
   defaults and the threads and read size gpu-peer-tune.py found fastest)
   against fgds.safetensors.load_file. Warm and cold, as above.
3. A sharded checkpoint (--sharded-gib of bf16 tensors of a transformer's
   shapes in files of at most --shard-mib, with its
   model.safetensors.index.json): each peer's own way with several files
   (safetensors: load_file of each; the others: every file in one call), at
   the setting of that peer that was fastest on the single file of part 2
   in this run and cache, against fgds.safetensors.load_checkpoint (one
   call, the files' reads in one batch).

Every figure is the median of --rounds rounds (default 3) with the lowest and
highest beside it; the rows of a part and cache take turns, round by round
(Suite.turns: the virtual disk of the GPU machine reads the suite's file
faster the more often it served it lately, so rows run one after the other
would favour the later ones); every result is compared with the reference
on the GPU (first round). The machine is described from what this program reads:
/proc/cpuinfo, /proc/meminfo, /proc/mounts, /sys/block, uname, nvidia-smi.
"Cold" needs /proc/sys/vm/drop_caches (root); where it cannot be written
the cold rows are left out and the JSON says so (files larger than memory
would be the other way: --file-gib). Page-cache residency is read with
mincore(2) before each round and recorded.

Prints a table and writes JSON (--json, rewritten after every row, so a run
cut short keeps what it measured); report.py turns it into
docs/benchmarks.md section 3. The published run ran in one call: first
this program's warm and cold one call with main's wheel, the code before
the change the page measures (--only file --rows "fgds one call"; that
wheel, built as below from a checkout of that code and carried in a folder
of its own, installed in its own --target ahead of the others on PYTHONPATH,
--json $OUT/gpu-suite-main.json, same --dir), then the suite (4 GiB file,
2 GiB state dict, 4 GiB sharded checkpoint, 3 rounds); copy both JSON
files to build/bench/ before report.py. (gpu-vec.py and gpu-copy-cost.py,
whose rows report.py shows after the suite's, are kept from the run before:
see their headers.)

On the GPU machine (the `run` tool; nothing can be downloaded there), built
and downloaded here, carried in an ignored folder (named in `carry`):

    # the fgds wheel (abi3, glibc 2.34; tools/python/stage-native.sh first)
    (cd tools/python && CARGO_TARGET_DIR=../../build/python-target \\
      maturin build --release -j1 --compatibility manylinux_2_34 \\
      -o ../../build/python-wheels-gpu)
    # the peers the image lacks (Python 3.12 there; torch, safetensors 0.8.0
    # (the newest release), numpy, cupy-cuda13x, cuda-toolkit,
    # cuda-pathfinder, nvidia-cufile and typer are in the image)
    for p in kvikio-cu13==26.10.0 libkvikio-cu13==26.10.0 rapids-logger==0.3.0 \\
             fastsafetensors==0.5.0 instanttensor==0.2.2 \\
             runai-model-streamer==0.17.1 humanize==4.17.0; do
      python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --platform manylinux_2_28_x86_64 \\
        --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \\
        --platform manylinux_2_17_x86_64 -d build/gpu-whl $p
    done
    cp build/python-wheels-gpu/fgds-*.whl build/gpu-whl/

run with carry ["build/gpu-whl"] (16 MiB; the tool sends the checkout the
session started in, so a helper working in another worktree copies the
folder and this program (with gpu-peer-tune.py) into an ignored folder of
that checkout and runs them from there) and the command

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \\
      build/gpu-whl/*.whl && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 &&
    python3 tools/testing/fgds-bench/gpu-suite.py --dir /root/gpu-suite \\
      --json $OUT/gpu-suite.json

then copy gpu-suite.json to build/bench/ (and docs/benchmarks/) and run
report.py.

Usage:
    gpu-suite.py [--dir DIR] [--file-gib N] [--sd-gib N] [--sharded-gib N]
                 [--shard-mib N] [--rounds N] [--json OUT]
                 [--only file,checkpoint,sharded] [--rows ENGINE [--rows ENGINE ...]]
"""

import argparse
import contextlib
import ctypes
import json
import mmap
import os
import platform
import resource
import statistics
import subprocess
import threading
import time
import traceback


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------- the page cache

_libc = ctypes.CDLL(None, use_errno=True)


def resident(path):
    """Fraction of the file's pages in the page cache (mincore(2) of a
    shared read-only mapping)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    mmap_ = _libc.mmap
    mmap_.restype = ctypes.c_void_p
    mmap_.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = mmap_(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if addr in (None, ctypes.c_void_p(-1).value):
        return None
    try:
        page = mmap.PAGESIZE
        n = (size + page - 1) // page
        vec = (ctypes.c_ubyte * n)()
        if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
            return None
        return sum(v & 1 for v in bytes(vec)) / n
    finally:
        _libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))


def drop_caches():
    """Writes back and drops the page cache; False where that is not allowed."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def warm(path):
    """Reads the whole file through the page cache (8 threads)."""
    n = os.path.getsize(path)
    pool_read(path, n, threads=8, direct=False)


# ---------------------------------------------------------------- the machine


def read_text(p):
    try:
        with open(p) as f:
            return f.read().strip()
    except OSError:
        return None


def machine(d):
    info = {"uname": " ".join(platform.uname())}
    cpu = read_text("/proc/cpuinfo") or ""
    models = [ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("model name")]
    info["cpu"] = f"{models[0] if models else '?'} x{len(models) or os.cpu_count()}"
    mem = read_text("/proc/meminfo") or ""
    for ln in mem.splitlines():
        if ln.startswith("MemTotal:"):
            info["mem_total_kib"] = int(ln.split()[1])
    # the file system and block device the files live on
    best = None
    for ln in (read_text("/proc/mounts") or "").splitlines():
        dev, mnt, fs = ln.split()[:3]
        if os.path.realpath(d).startswith(mnt.rstrip("/") + "/") or os.path.realpath(d) == mnt:
            if best is None or len(mnt) > len(best[1]):
                best = (dev, mnt, fs)
    if best:
        info["fs"] = {"device": best[0], "mount": best[1], "type": best[2]}
        name = os.path.basename(os.path.realpath(best[0])) if best[0].startswith("/dev/") else None
        if name:
            blk = name
            if not os.path.exists(f"/sys/block/{blk}"):  # a partition: its disk
                for b in os.listdir("/sys/block"):
                    if os.path.exists(f"/sys/block/{b}/{name}"):
                        blk = b
            q = f"/sys/block/{blk}"
            info["block"] = {
                "name": blk,
                "model": read_text(f"{q}/device/model"),
                "vendor": read_text(f"{q}/device/vendor"),
                "driver": os.path.basename(os.path.realpath(f"{q}/device/driver"))
                if os.path.exists(f"{q}/device/driver")
                else None,
                "rotational": read_text(f"{q}/queue/rotational"),
                "scheduler": read_text(f"{q}/queue/scheduler"),
                "max_sectors_kb": read_text(f"{q}/queue/max_sectors_kb"),
                "nr_requests": read_text(f"{q}/queue/nr_requests"),
                "size_gib": round(int(read_text(f"{q}/size") or 0) * 512 / 2**30, 1),
            }
    info["block_devices"] = sorted(os.listdir("/sys/block")) if os.path.isdir("/sys/block") else []
    info["nvme"] = [b for b in info["block_devices"] if b.startswith("nvme")]
    try:
        q = "name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current"
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        info["nvidia_smi"] = out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.SubprocessError) as e:
        info["nvidia_smi"] = f"failed: {e}"
    dmi = read_text("/sys/class/dmi/id/sys_vendor")
    if dmi:
        info["dmi_sys_vendor"] = dmi
    info["hypervisor"] = "hypervisor" in cpu.split("flags", 1)[-1].split("\n", 1)[0] if "flags" in cpu else None
    return info


# ---------------------------------------------------------------- measuring


class Suite:
    def __init__(self, args):
        self.args = args
        self.rows = []
        self.info = {}
        self.queue = None

    def measure(self, part, name, nbytes, fn, check=None, cache=None, path=None, note=None, prep=None):
        """Runs fn() --rounds times (it returns the result or raises), times
        each round with CPU seconds, checks the first result and records
        one row: median, lowest and highest. `cache` "cold" drops the page
        cache before every round, "warm" reads `path` (a file or a list of
        them) before the row's first round and checks it stayed resident.
        `prep()` runs before every round, untimed. Inside `with
        self.turns()` the row waits for the others of the block and they
        take turns. With --rows, a row not named there is not run."""
        if self.args.rows is not None and name not in self.args.rows:
            return
        row = {"part": part, "engine": name, "bytes": nbytes, "cache": cache}
        if note:
            row["note"] = note
        entry = {"row": row, "fn": fn, "check": check, "path": path, "prep": prep}
        if self.queue is not None:
            self.queue.append(entry)
        else:
            self.run_turns([entry])

    @contextlib.contextmanager
    def turns(self):
        """The rows measured in the block take turns, round by round (the
        first round of every row, then the second, ...), so that the
        machine's drift between rows falls on all of them alike: the cold
        rows' virtual disk reads the suite's file faster the more often it
        has served it lately."""
        self.queue = []
        try:
            yield
        finally:
            q, self.queue = self.queue, None
            self.run_turns(q)

    def run_turns(self, entries):
        import torch

        acc = [([], [], []) for _ in entries]
        for i in range(self.args.rounds):
            for e, (rates, cpus, res) in zip(entries, acc):
                row = e["row"]
                if "error" in row:
                    continue
                try:
                    if e["prep"] is not None:
                        e["prep"]()
                    path = e["path"]
                    paths = [path] if isinstance(path, str) else (path or [])
                    if row["cache"] == "cold":
                        drop_caches()
                    elif row["cache"] == "warm" and i == 0:
                        for p in paths:
                            warm(p)
                    if paths:
                        res.append(min(resident(p) for p in paths))
                    torch.cuda.synchronize()
                    c0, t0 = cpu_seconds(), time.perf_counter()
                    out = e["fn"]()
                    torch.cuda.synchronize()
                    secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
                    rates.append(row["bytes"] / secs / 2**20)
                    cpus.append(cpu / (row["bytes"] / 2**30))
                    if i == 0:
                        if e["check"] is not None:
                            row["identical"] = bool(e["check"](out))
                        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
                            row["stats"] = out[1]
                    del out
                except Exception as ex:  # recorded: a peer that fails here is a result
                    row["error"] = f"{type(ex).__name__}: {ex}".strip()[:400]
                    if self.args.verbose:
                        traceback.print_exc()
        for e, (rates, cpus, res) in zip(entries, acc):
            row = e["row"]
            if "error" not in row:
                row.update(
                    mib_per_s=statistics.median(rates),
                    mib_per_s_min=min(rates),
                    mib_per_s_max=max(rates),
                    rounds=rates,
                    cpu_s_per_gib=statistics.median(cpus),
                    cpu_rounds=cpus,
                )
                if res:
                    row["resident_before"] = res
            if len(entries) > 1:
                row["turns"] = len(entries)
            self.rows.append(row)
            self.print_row(row)
        self.save()

    def save(self):
        """The JSON so far (a run cut short keeps what it measured)."""
        if self.args.json:
            with open(self.args.json + ".tmp", "w") as f:
                json.dump({"suite": "gpu", "host": self.info, "rows": self.rows}, f, indent=1)
            os.replace(self.args.json + ".tmp", self.args.json)

    @staticmethod
    def print_row(r):
        tag = f"{r['part']:<11} {(r.get('cache') or '-'):<4} {r['engine']:<34}"
        if "error" in r:
            print(f"  {tag} FAILED: {r['error']}", flush=True)
        else:
            ok = {True: "yes", False: "NO", None: "-"}[r.get("identical")]
            res = r.get("resident_before")
            rs = f" resident {min(res):.2f}-{max(res):.2f}" if res else ""
            print(
                f"  {tag} {r['mib_per_s']:>8.0f} MiB/s ({r['mib_per_s_min']:.0f}-{r['mib_per_s_max']:.0f})"
                f" {r['cpu_s_per_gib']:>7.3f} CPU s/GiB  identical: {ok}{rs}",
                flush=True,
            )


def write_file(path, nbytes):
    """A file of random bytes (written once, through the page cache)."""
    import torch

    chunk = 256 << 20
    g = torch.Generator(device="cuda").manual_seed(7)
    with open(path, "wb") as f:
        left = nbytes
        while left:
            n = min(chunk, left)
            f.write(torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=g).cpu().numpy().tobytes())
            left -= n
        f.flush()
        os.fsync(f.fileno())


def file_options(ap):
    """The options of a script on the GPU machine that reads the suite's
    file: --dir (where it lies), --file-gib and --json (where the rows go)."""
    ap.add_argument("--dir", default="/root/gpu-suite")
    ap.add_argument("--file-gib", type=int, default=4)
    ap.add_argument("--json", default=None)


def bench_file(d, gib):
    """The file of `gib` GiB in `d` that the file rows read (written where
    it is missing or of another size): its path and size."""
    n = gib << 30
    path = os.path.join(d, "file.bin")
    if not os.path.exists(path) or os.path.getsize(path) != n:
        write_file(path, n)
    return path, n


def kvikio_threads(threads):
    """KvikIO's thread pool of `threads` threads for a `with` block (None:
    as it is)."""
    import kvikio.defaults

    return kvikio.defaults.set({"num_threads": threads}) if threads else contextlib.nullcontext()


def pool_read(path, nbytes, threads=16, chunk=8 << 20, direct=True):
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


def fgds_batch(f, buf, n, op="read", req=32 << 20, depth=64):
    """n bytes in requests of `req`, `depth` in flight (a Batch)."""
    import fgds

    reqs = [(op, f, buf, min(req, n - off), off, off, i) for i, off in enumerate(range(0, n, req))]
    done = 0
    with fgds.Batch(depth) as b:
        nxt = 0
        out = 0
        while done < len(reqs):
            while nxt < len(reqs) and out < depth:
                k = min(depth - out, len(reqs) - nxt)
                b.submit(reqs[nxt : nxt + k])
                nxt += k
                out += k
            for cookie, status, result in b.wait(1):
                if status in ("pending", "timeout"):
                    continue
                if status != "complete" or result != reqs[cookie][3]:
                    raise RuntimeError(f"batch request {cookie}: {status} {result}")
                done += 1
                out -= 1


# ---------------------------------------------------------------- 1. a file


def part_file(s, d):
    import torch
    import fgds

    path, n = bench_file(d, s.args.file_gib)
    with open(path, "rb") as f:
        ref = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).cuda()
    host = fgds.Buffer.alloc(n)  # page-aligned host memory: fgds's O_DIRECT path

    def same(t):
        return torch.equal(t if not isinstance(t, tuple) else t[0], ref)

    def same_host(_):
        # the first, a middle and the last 64 MiB (all 4 GiB would be a copy of its own)
        k = 64 << 20
        return all(
            host.read_bytes(o, k) == ref[o : o + k].cpu().numpy().tobytes() for o in (0, n // 2 - k, n - k)
        )

    def fgds_read(**kw):
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        with fgds.File(path, "r", **kw) as f:
            got = f.pread(t)
            st = dict(f.stats())
        assert got == n, got
        return t, st

    def fgds_read_batch():
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        with fgds.File(path, "r") as f, fgds.Buffer(t) as b:
            fgds_batch(f, b, n)
            st = dict(f.stats())
        return t, st

    def host_one():
        with fgds.File(path, "r") as f:
            assert f.pread(host, n) == n
            return None, dict(f.stats())

    def host_batch():
        with fgds.File(path, "r") as f:
            fgds_batch(f, host, n)
            return None, dict(f.stats())

    def plain():
        with open(path, "rb") as f:
            data = f.read()
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).cuda()

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

    def kvikio_read(threads=None):
        import kvikio

        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        with kvikio_threads(threads), kvikio.CuFile(path, "r") as f:
            f.pread(t).get()
        return t

    def torch_gds():
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        # torch.cuda.gds.GdsFile registers the handle itself (torch 2.11: a
        # second register_handle() raises) and deregisters it when deleted.
        f = torch.cuda.gds.GdsFile(path, os.O_RDONLY)
        f.load_storage(t.untyped_storage(), 0)
        del f
        return t

    def file_rows(s, cache):
        m = lambda name, fn, check=None, **kw: s.measure("file", name, n, fn, check, cache=cache, path=path, **kw)  # noqa: E731
        if cache == "cold":
            m("ceiling: O_DIRECT pread pool (host)", lambda: pool_read(path, n, threads=16))
        m("ceiling: buffered pread pool (host)", lambda: pool_read(path, n, threads=16, direct=False))
        m("fgds one call (host)", host_one, same_host)
        m("fgds batch (host)", host_batch, same_host)
        m("fgds one call", fgds_read, same)
        m("fgds one call, parallel=1", lambda: fgds_read(parallel=1), same)
        # the bounce path's two ways into the bounce buffers, forced (the
        # default chooses from cachestat(2): buffered warm, O_DIRECT cold)
        m("fgds one call, bounce_read=buffered", lambda: fgds_read(bounce_read="buffered"), same)
        m("fgds one call, bounce_read=direct", lambda: fgds_read(bounce_read="direct"), same)
        if cache == "warm":
            # the other setting at the top of gpu-tune.py's bounce grid (the default: 4 MiB pieces, 8 MiB parts)
            m("fgds one call, 8M pieces, 8M parts",
              lambda: fgds_read(bounce_chunk_size=8 << 20, bounce_split_size=8 << 20), same)
        else:
            # a cold read's pieces and parts are 2 and 4 times the bounce
            # sizes (8 MiB, 32 MiB); halved here, the page cache path's 4 MiB
            # and 8 MiB (with up to 4 bounce buffers a thread, 8 MiB / 2 MiB,
            # where the former default held 2)
            m("fgds one call, 4M pieces, 8M parts",
              lambda: fgds_read(bounce_chunk_size=2 << 20, bounce_split_size=2 << 20), same)
        m("fgds batch", fgds_read_batch, same)
        m("read + copy", plain, same)
        m("pinned double-buffered", pinned_double_buffered, same)
        m("KvikIO", kvikio_read, same)
        m("KvikIO, 16 threads", lambda: kvikio_read(16), same)
        m("torch.cuda.gds", torch_gds, same)

    caches = ["warm"] + (["cold"] if s.can_drop else [])
    for cache in caches:
        with s.turns():
            file_rows(s, cache)
    del host

    # writes from GPU memory into the page cache (no fsync; the file is the
    # suite's own, removed before every round so that no round pays for
    # the last one's pages)
    wn = min(n, 2 << 30)
    src = ref[:wn]
    wpath = os.path.join(d, "write.bin")

    def unlink():
        if os.path.exists(wpath):
            os.unlink(wpath)
        os.sync()

    def fgds_write(batch=False):
        with fgds.File(wpath, "w") as f:
            if batch:
                with fgds.Buffer(src) as b:
                    fgds_batch(f, b, wn, op="write")
            else:
                assert f.pwrite(src) == wn
            st = dict(f.stats())
        return None, st

    def kvikio_write(threads=None):
        import kvikio

        with kvikio_threads(threads), kvikio.CuFile(wpath, "w") as f:
            f.pwrite(src).get()

    def written(_):
        with open(wpath, "rb") as f:
            return torch.equal(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).cuda(), src)

    mw = lambda name, fn: s.measure("write", name, wn, fn, written, cache="page cache", prep=unlink)  # noqa: E731
    with s.turns():
        mw("fgds one call", fgds_write)
        mw("fgds batch", lambda: fgds_write(True))
        mw("KvikIO", kvikio_write)
        mw("KvikIO, 16 threads", lambda: kvikio_write(16))
    unlink()
    del ref, src


# ---------------------------------------------------------------- the loaders

# Each loads every tensor of the safetensors files `paths` into CUDA memory
# and returns {name: tensor}, the way its documentation says to.


class _Env:
    """Environment variables set for a `with` block (Run:ai's streamer
    reads its settings from them), then restored."""

    def __init__(self, env):
        self.env = env or {}

    def __enter__(self):
        self.old = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def load_safetensors(paths, backend=None):
    """safetensors.torch.load_file(device="cuda") of each file (what
    transformers does with a sharded checkpoint); `backend` "pread" is
    0.8.0's other way to read (its default is "mmap")."""
    import safetensors.torch as st

    kw = {"backend": backend} if backend else {}
    out = {}
    for p in paths:
        out.update(st.load_file(p, device="cuda", **kw))
    return out


def load_fastsafetensors(paths):
    """fastsafetensors in its no-GDS mode: every file in one loader."""
    import torch
    from fastsafetensors import SafeTensorsFileLoader

    loader = SafeTensorsFileLoader(None, "cuda:0", nogds=True)
    try:
        loader.add_filenames({0: list(paths)})
        fb = loader.copy_files_to_device()
        out = {k: fb.get_tensor(k) for k in loader.get_keys()}
        torch.cuda.synchronize()
        return out
    finally:
        loader.close()


def load_instanttensor(paths, **kw):
    """InstantTensor's safe_open of every file at once (its README: one
    call for all the files plans the reads across them); the tensors own
    their memory (copy=True, its default). `kw`: backend=, io_depth=, ..."""
    from instanttensor import safe_open

    out = {}
    with safe_open(list(paths), framework="pt", device=0, **kw) as f:
        for name, t in f.tensors():
            out[name] = t
    return out


def load_runai(paths, env=None):
    """Run:ai's SafetensorsStreamer.stream_files(device="cuda:0") of every
    file at once; `env`: its RUNAI_STREAMER_* settings."""
    from runai_model_streamer import SafetensorsStreamer

    with _Env(env):
        with SafetensorsStreamer() as s:
            s.stream_files(list(paths), device="cuda:0")
            return {name: t for name, t in s.get_tensors()}


def load_fgds(paths):
    """fgds.safetensors: load_file of one file, load_files of several (one
    call)."""
    import fgds.safetensors as fst

    if len(paths) == 1:
        return fst.load_file(paths[0], device="cuda", return_stats=True)
    return fst.load_files(paths, device="cuda", return_stats=True)


def _buffered():
    from instanttensor import BackendPolicy

    return {"backend": BackendPolicy.BUFFERED}


# Run:ai's streamer with more threads and larger reads than its defaults (16
# threads, 2 MiB): the setting of its documented knobs
# (RUNAI_STREAMER_CONCURRENCY, RUNAI_STREAMER_CHUNK_BYTESIZE) that
# gpu-peer-tune.py found fastest on the GPU machine, warm and cold (2 GiB:
# 1420 and 1615 MiB/s against 1158 and 1357 with the defaults; 64 threads
# or 32 MiB reads no faster). InstantTensor's own documentation says when
# to take its BUFFERED policy (a model loaded again soon, from the page
# cache); its other knobs (io_depth=1024, chunk_size=32M) were slower there
# than its defaults.
RUNAI_TUNED = {"RUNAI_STREAMER_CONCURRENCY": "32", "RUNAI_STREAMER_CHUNK_BYTESIZE": str(8 << 20)}


def _knobs(env):
    """Run:ai's settings as a row name says them: concurrency=32, chunk=8M."""
    short = {"RUNAI_STREAMER_CONCURRENCY": "concurrency", "RUNAI_STREAMER_CHUNK_BYTESIZE": "chunk"}
    return ", ".join(f"{short[k]}={int(v) >> 20}M" if k.endswith("BYTESIZE") else f"{short[k]}={v}"
                     for k, v in env.items())


def peer_settings():
    """Each peer's settings, {peer: [(row name, loader)]}: its defaults and
    what its documentation offers for this machine. The suite runs every
    one on the single file, and each peer at the one fastest there (per
    cache) on the sharded checkpoint."""
    return {
        "safetensors": [
            ("safetensors load_file(cuda)", lambda ps: load_safetensors(ps)),
            ("safetensors load_file(cuda), backend=pread", lambda ps: load_safetensors(ps, "pread")),
        ],
        "fastsafetensors": [("fastsafetensors (nogds)", load_fastsafetensors)],
        "InstantTensor": [
            ("InstantTensor", lambda ps: load_instanttensor(ps)),
            ("InstantTensor, BUFFERED", lambda ps: load_instanttensor(ps, **_buffered())),
        ],
        "Run:ai": [
            ("Run:ai streamer", lambda ps: load_runai(ps)),
            (f"Run:ai streamer, {_knobs(RUNAI_TUNED)}", lambda ps: load_runai(ps, RUNAI_TUNED)),
        ],
    }


# ---------------------------------------------------------------- 2. checkpoints


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

    tensors = {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}
    p_st = os.path.join(d, "model.safetensors")
    import safetensors.torch as st

    st.save_file(tensors, p_st)

    def same_t(out):
        got = out[0] if isinstance(out, tuple) else out
        return all(torch.equal(got[k], v) for k, v in tensors.items())


    caches = ["warm"] + (["cold"] if s.can_drop else [])
    for cache in caches:
        with s.turns():
            def m(part, name, path, fn, check):
                return s.measure(part, name, n, fn, check, cache=cache, path=path)

            m("checkpoint", "torch.load(cuda)", p_torch, lambda: torch.load(p_torch, map_location="cuda"), same)
            m("checkpoint", "fgds.torch.load_state_dict", p_fgds,
              lambda: ft.load_state_dict(p_fgds, "cuda", return_stats=True), same)
            m("checkpoint", "torch.load of fgds's file", p_fgds, lambda: torch.load(p_fgds, map_location="cuda"), same)
            m("checkpoint", "torch.cuda.gds recipe", p_fgds, torch_gds_recipe, same)
            for settings in peer_settings().values():
                for name, fn in settings:
                    m("safetensors", name, p_st, lambda fn=fn: fn([p_st]), same_t)
            m("safetensors", "fgds.safetensors.load_file", p_st, lambda: load_fgds([p_st]), same_t)


# ---------------------------------------------------------------- 3. a sharded checkpoint


def save_shards(d, sd, shard):
    """Saves the tensors of `sd`, in order, in safetensors files of at most
    about `shard` bytes under `d` (model-0000i-of-0000n.safetensors);
    returns [(file name, {name: tensor})] in file order."""
    import safetensors.torch as st

    files, cur, size = [], {}, 0
    for k, v in sd.items():
        n = v.numel() * v.element_size()
        if cur and size + n > shard:
            files.append(cur)
            cur, size = {}, 0
        cur[k] = v
        size += n
    files.append(cur)
    out = []
    for i, part in enumerate(files):
        name = f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
        st.save_file(part, os.path.join(d, name), metadata={"format": "pt"})
        out.append((name, part))
    return out


def write_sharded(d, total, shard):
    """A checkpoint as people have them: bf16 tensors of a transformer's
    shapes (embedding, attention and MLP projections, norms), about
    `total` bytes in files of at most about `shard` bytes
    (model-0000i-of-0000n.safetensors) and its model.safetensors.index.json.
    Returns (the tensors on the GPU, the index's path)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(13)
    h, ff, vocab = 4096, 11008, 32000
    shapes = [("model.embed_tokens.weight", (vocab, h))]
    layer = 0
    per_layer = (4 * h * h + 3 * h * ff + 2 * h) * 2
    while (sum(a * b for _, (a, b) in shapes[:1]) * 2) + (layer + 1) * per_layer <= total:
        p = f"model.layers.{layer}"
        shapes += [(f"{p}.input_layernorm.weight", (h,))]
        shapes += [(f"{p}.self_attn.{x}_proj.weight", (h, h)) for x in "qkvo"]
        shapes += [(f"{p}.post_attention_layernorm.weight", (h,))]
        shapes += [(f"{p}.mlp.gate_proj.weight", (ff, h)), (f"{p}.mlp.up_proj.weight", (ff, h)),
                   (f"{p}.mlp.down_proj.weight", (h, ff))]
        layer += 1
    shapes += [("model.norm.weight", (h,))]
    sd = {k: torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=g) for k, shape in shapes}
    wmap = {k: name for name, part in save_shards(d, sd, shard) for k in part}
    index = os.path.join(d, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * v.element_size() for v in sd.values())},
                   "weight_map": wmap}, f, indent=1)
    return sd, index


def part_sharded(s, d):
    import fgds.safetensors as fst

    ckpt = os.path.join(d, "sharded")
    if os.path.isdir(ckpt):
        for n in os.listdir(ckpt):
            os.unlink(os.path.join(ckpt, n))
    os.makedirs(ckpt, exist_ok=True)
    sd, index = write_sharded(ckpt, s.args.sharded_gib << 30, s.args.shard_mib << 20)
    files, _ = fst.checkpoint_files(ckpt)
    n = sum(v.numel() * v.element_size() for v in sd.values())
    s.info["sharded"] = {"files": [os.path.basename(p) for p in files], "tensors": len(sd),
                         "sizes": [os.path.getsize(p) for p in files]}
    import torch

    def same(out):
        got = out[0] if isinstance(out, tuple) else out
        return got.keys() == sd.keys() and all(torch.equal(got[k], v) for k, v in sd.items())

    caches = ["warm"] + (["cold"] if s.can_drop else [])
    for cache in caches:
        with s.turns():
            def m(name, fn, note=None):
                return s.measure("sharded", name, n, fn, same, cache=cache, path=files, note=note)

            for peer, settings in peer_settings().items():
                # the setting that was fastest on the single file in this run, this cache
                single = {r["engine"]: r for r in s.rows
                          if r["part"] == "safetensors" and r.get("cache") == cache and "error" not in r}
                tried = [(single[name]["mib_per_s"], name, fn) for name, fn in settings if name in single]
                pick = [max(tried, key=lambda t: t[0])[1:]] if tried else settings
                for name, fn in pick:
                    m(name, lambda fn=fn: fn(files),
                      note=f"{peer}'s fastest setting on the single file, {cache}" if tried else None)
            m("fgds.safetensors.load_checkpoint", lambda: fst.load_checkpoint(ckpt, device="cuda", return_stats=True))
    del sd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(os.getcwd(), "build", "gpu-suite"))
    ap.add_argument("--file-gib", type=int, default=4)
    ap.add_argument("--sd-gib", type=int, default=2)
    ap.add_argument("--sharded-gib", type=int, default=4, help="the sharded checkpoint's size")
    ap.add_argument("--shard-mib", type=int, default=1024, help="its files' largest size")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="file,checkpoint,sharded")
    # An A/B of a few rows (another wheel, run in the same call as the suite).
    ap.add_argument("--rows", action="append", default=None, metavar="ENGINE",
                    help="only the row of this engine, as the table names it (\"KvikIO, 16 threads\"); "
                         "give it again for more rows")
    ap.add_argument("--json", default=None)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    import torch
    import fgds

    os.makedirs(args.dir, exist_ok=True)
    s = Suite(args)
    s.can_drop = drop_caches()
    info = machine(args.dir)
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for mod in ("fgds", "kvikio", "safetensors", "fastsafetensors", "instanttensor", "runai-model-streamer"):
        try:
            from importlib.metadata import version

            versions[mod] = version({"kvikio": "kvikio-cu13"}.get(mod, mod))
        except Exception as e:  # noqa: BLE001 - recorded
            versions[mod] = f"not installed ({type(e).__name__})"
    info.update(
        gpu=torch.cuda.get_device_name(0),
        versions=versions,
        fgds_nodes=[str(x) for x in fgds.list_devices()],
        fgds_module=fgds.module_loaded(),
        fgds_config={k: v for k, v in fgds.config().items() if k != "errors"},
        dir=args.dir,
        drop_caches=s.can_drop,
        rounds=args.rounds,
    )
    s.info = info
    print(f"GPU machine suite: {json.dumps(info)}", flush=True)
    parts = args.only.split(",")
    if "file" in parts:
        part_file(s, args.dir)
        torch.cuda.empty_cache()
    if "checkpoint" in parts:
        part_checkpoint(s, args.dir)
        torch.cuda.empty_cache()
    if "sharded" in parts:
        part_sharded(s, args.dir)
    s.info["complete"] = True
    s.save()


if __name__ == "__main__":
    main()
