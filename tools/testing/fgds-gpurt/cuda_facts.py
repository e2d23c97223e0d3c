#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Ask a CUDA driver what fgds and the stand-in's runtime rely on.

Runs against whatever libcuda.so.1 the loader finds: NVIDIA's on the GPU
machine, the stand-in's (fgds-gpurt) in the VM. Each answer is one line,
"NAME VALUE", and the whole set is written as JSON with --json FILE. The
answers of a real driver are kept beside this file (cuda-facts-*.json);
--compare FILE checks the answers of this driver against them and exits 1
on a disagreement in a fact this driver answers (a call it does not export
answers "unsupported", which is no disagreement).

The questions: allocation alignment; cuMemGetAddressRange of an interior
pointer; buffer ids (one per allocation, a new one when a freed address is
handed out again); whether a later allocation can sit below an earlier one;
which ranges cuMemGetHandleForAddressRange exports (alignment, past the
allocation's end, across two allocations); whether memory behind a dma-buf
still open comes back at cuMemFree; and, with torch, the same for tensors
in torch's expandable segments and in the cudaMallocAsync pool.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys

KIB, MIB = 1 << 10, 1 << 20
ATTR_BUFFER_ID = 7
DEV_ATTR_DMA_BUF_SUPPORTED = 124
HANDLE_TYPE_DMA_BUF_FD = 1

cu = ctypes.CDLL("libcuda.so.1")
facts = {}


def fact(name, value):
    facts[name] = value
    print(f"{name} {value}", flush=True)


def call(fn, *args):
    """A CUresult, or None where the driver does not export @fn."""
    try:
        f = getattr(cu, fn)
    except AttributeError:
        return None
    return f(*args)


def check(fn, *args):
    r = call(fn, *args)
    if r != 0:
        raise SystemExit(f"cuda_facts: {fn} failed: CUresult {r}")


def alloc(size):
    p = ctypes.c_uint64()
    check("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(size))
    return p.value


def free(p):
    check("cuMemFree_v2", ctypes.c_uint64(p))


def buffer_id(p):
    v = ctypes.c_uint64()
    r = call("cuPointerGetAttribute", ctypes.byref(v), ATTR_BUFFER_ID, ctypes.c_uint64(p))
    return v.value if r == 0 else f"error{r}"


def address_range(p):
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    r = call("cuMemGetAddressRange_v2", ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(p))
    return (base.value, size.value) if r == 0 else (None, f"error{r}")


def export(p, size):
    """The CUresult of exporting [p, p + size) as a dma-buf; the fd is closed."""
    fd = ctypes.c_int(-1)
    r = call("cuMemGetHandleForAddressRange", ctypes.byref(fd), ctypes.c_uint64(p),
             ctypes.c_size_t(size), HANDLE_TYPE_DMA_BUF_FD, ctypes.c_ulonglong(0))
    if r == 0:
        os.close(fd.value)
        return "ok"
    return "unsupported" if r is None else f"error{r}"


def export_fd(p, size):
    fd = ctypes.c_int(-1)
    r = call("cuMemGetHandleForAddressRange", ctypes.byref(fd), ctypes.c_uint64(p),
             ctypes.c_size_t(size), HANDLE_TYPE_DMA_BUF_FD, ctypes.c_ulonglong(0))
    return fd.value if r == 0 else -1


def alignment(p):
    """The largest power of two up to 2 MiB that divides @p."""
    a = 1
    while a < 2 * MIB and p % (2 * a) == 0:
        a *= 2
    return a


def mem_free():
    free_b, total = ctypes.c_size_t(), ctypes.c_size_t()
    r = call("cuMemGetInfo_v2", ctypes.byref(free_b), ctypes.byref(total))
    return free_b.value if r == 0 else None


def driver_facts():
    check("cuInit", 0)
    v = ctypes.c_int()
    r = call("cuDriverGetVersion", ctypes.byref(v))
    fact("driver_version", "unsupported" if r is None else v.value)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check("cuDeviceGet", ctypes.byref(dev), 0)
    check("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    check("cuCtxSetCurrent", ctx)
    v = ctypes.c_int()
    r = call("cuDeviceGetAttribute", ctypes.byref(v), DEV_ATTR_DMA_BUF_SUPPORTED, dev)
    fact("dma_buf_supported", v.value if r == 0 else f"error{r}")

    # Alignment: the smallest seen over four allocations of each size.
    for size in (512, 4 * KIB, 100 * KIB, 1 * MIB, 2 * MIB, 3 * MIB):
        ps = [alloc(size) for _ in range(4)]
        fact(f"alignment_of_{size}", min(alignment(p) for p in ps))
        for p in ps:
            free(p)

    a = alloc(100 * KIB)
    base, size = address_range(a + 1000)
    fact("address_range_base_is_allocation", base == a)
    fact("address_range_size_of_100KiB", size)
    fact("buffer_id_same_within_allocation", buffer_id(a) == buffer_id(a + 50 * KIB))
    fact("export_whole_100KiB", export(a, 100 * KIB))
    fact("export_128KiB_of_100KiB", export(a, 128 * KIB))
    fact("export_200KiB_of_100KiB", export(a, 200 * KIB))
    free(a)

    b = alloc(2 * MIB)
    for off, size in ((0, 2 * MIB), (0, 4 * KIB), (4 * KIB, 4 * KIB), (0, 64 * KIB),
                      (64 * KIB, 64 * KIB), (4 * KIB, 64 * KIB), (512, 4 * KIB)):
        fact(f"export_2MiB_at_{off}_size_{size}", export(b + off, size))
    c = alloc(2 * MIB)
    fact("second_2MiB_adjacent", c == b + 2 * MIB)
    if c == b + 2 * MIB:
        fact("export_across_two_allocations", export(b + MIB, 2 * MIB))
    free(c)
    free(b)

    # Reuse: free an allocation and ask for the same size again.
    x = alloc(MIB)
    xid = buffer_id(x)
    free(x)
    y = alloc(MIB)
    fact("freed_address_reused", y == x)
    if y == x:
        fact("buffer_id_changes_on_reuse", buffer_id(y) != xid)
    free(y)

    # Order: can a later allocation sit below an earlier live one?
    ps = [alloc(MIB) for _ in range(4)]
    free(ps[0])
    d = alloc(MIB)
    fact("later_allocation_below_earlier", d < max(ps[1:]))
    for p in ps[1:] + [d]:
        free(p)

    # Free with the dma-buf still open: the address is handed out again?
    e = alloc(4 * MIB)
    eid = buffer_id(e)
    fd = export_fd(e, 4 * MIB)
    free(e)
    f = alloc(4 * MIB)
    if fd >= 0:
        fact("freed_address_reused_while_exported", f == e)
        fact("buffer_id_changes_on_reuse_while_exported", buffer_id(f) != eid if f == e else "n/a")
        fact("export_of_reused_address_while_exported", export(f, 4 * MIB) if f == e else "n/a")
        os.close(fd)
    free(f)

    # ... and the memory behind it: back at cuMemFree, or only at close?
    size = 256 * MIB
    before = mem_free()
    if before is None:
        fact("memory_back_at_free_while_exported", "unsupported")
        fact("memory_back_after_close", "unsupported")
        return
    e = alloc(size)
    fd = export_fd(e, size)
    free(e)
    after_free = mem_free()
    if fd >= 0:
        os.close(fd)
    after_close = mem_free()
    # Within 32 MiB of where it started: the driver's own bookkeeping moves a little.
    fact("memory_back_at_free_while_exported", before - after_free < 32 * MIB)
    fact("memory_back_after_close", before - after_close < 32 * MIB)


TORCH = r"""
import ctypes, json, os, sys, torch
cu = ctypes.CDLL("libcuda.so.1")
KIB, MIB = 1 << 10, 1 << 20
out = {}
def bid(p):
    v = ctypes.c_uint64()
    r = cu.cuPointerGetAttribute(ctypes.byref(v), 7, ctypes.c_uint64(p))
    return v.value if r == 0 else f"error{r}"
def rng(p):
    b, s = ctypes.c_uint64(), ctypes.c_size_t()
    r = cu.cuMemGetAddressRange_v2(ctypes.byref(b), ctypes.byref(s), ctypes.c_uint64(p))
    return (b.value, s.value) if r == 0 else (None, f"error{r}")
def exp(p, n):
    fd = ctypes.c_int(-1)
    r = cu.cuMemGetHandleForAddressRange(ctypes.byref(fd), ctypes.c_uint64(p), ctypes.c_size_t(n), 1, ctypes.c_ulonglong(0))
    if r == 0:
        os.close(fd.value)
        return "ok"
    return f"error{r}"
mode = sys.argv[1]
t1 = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
t2 = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
p1, p2 = t1.data_ptr(), t2.data_ptr()
b1, s1 = rng(p1)
out["range_size_of_3MiB_tensor"] = s1
out["range_base_below_tensor"] = b1 is not None and b1 < p1
out["two_tensors_one_buffer_id"] = bid(p1) == bid(p2)
out["two_tensors_one_range"] = rng(p1) == rng(p2)
al = p1 - p1 % (64 * KIB)
out["export_64KiB_aligned_window_of_tensor"] = exp(al, 64 * KIB)
out["export_whole_range"] = exp(b1, s1) if b1 is not None else "n/a"
out["export_range_of_both_tensors"] = exp(min(p1, p2) - min(p1, p2) % (64 * KIB), 8 * MIB)
old = p1
del t1
torch.cuda.empty_cache()
t3 = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
out["address_reused_after_empty_cache"] = t3.data_ptr() == old
print(json.dumps(out))
"""


def torch_facts():
    try:
        import torch  # noqa: F401
    except ImportError:
        fact("torch", "absent")
        return
    for mode, env in (("expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
                      ("malloc_async", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
                      ("native", {"PYTORCH_CUDA_ALLOC_CONF": ""})):
        r = subprocess.run([sys.executable, "-c", TORCH, mode], env={**os.environ, **env},
                           capture_output=True, text=True, timeout=300)
        if r.returncode:
            fact(f"torch_{mode}", f"failed: {r.stderr.strip().splitlines()[-1:]}")
            continue
        for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items():
            fact(f"torch_{mode}_{k}", v)


# Where the stand-in differs from CUDA on purpose, and why.
KNOWN = {
    "export_128KiB_of_100KiB": "CUDA exports past an allocation's end (what lies there); the "
                               "stand-in refuses, so that an importer asking for it is told",
    "export_200KiB_of_100KiB": "the same",
    "second_2MiB_adjacent": "where the next allocation lies is no rule: the stand-in packs them",
    "export_across_two_allocations": "the stand-in exports within one allocation only",
}


def compare(real):
    """The facts this driver answers differently from @real: (name, known why or None)."""
    out = []
    for k, v in facts.items():
        if k not in real or v == "unsupported" or v == real[k]:
            continue
        if k.startswith(("export", "dma_buf")) and facts.get("dma_buf_supported") == 0:
            continue  # a file stands in for the BAR: no dma-bufs at all
        out.append((k, KNOWN.get(k)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the answers to this file")
    ap.add_argument("--compare", help="a real driver's answers: exit 1 where this one differs")
    ap.add_argument("--no-torch", action="store_true", help="skip torch's allocators")
    args = ap.parse_args()
    driver_facts()
    if not args.no_torch:
        torch_facts()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(facts, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            real = json.load(f)
        bad = 0
        for k, why in compare(real):
            print(f"cuda_facts: {k}: this driver says {facts[k]}, the real one {real[k]}"
                  + (f" (known: {why})" if why else ""))
            bad += why is None
        print(f"cuda_facts: {len(facts)} facts asked, {sum(k in real for k in facts)} "
              f"compared, {bad} differ")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
