"""Loads a file into GPU memory with torch.cuda.gds's GdsFile.load_storage
(cuFileRead: NVIDIA's libcufile.so.0, or fgds's under `fgds run` /
LD_PRELOAD) or with fgds's own API (`--api fgds`), checks every byte
against the file and prints one JSON line: MiB/s, CPU s/GiB, path stats.

    python3 load_4g.py FILE --api torch|fgds [--repeat N]
"""

import argparse
import json
import os
import resource
import sys
import time

import torch


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--api", choices=["torch", "fgds"], required=True)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    n = os.path.getsize(a.file)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {"api": a.api, "bytes": n, "runs": []}
    try:
        if a.api == "torch":
            import torch.cuda.gds as gds

            f = gds.GdsFile(a.file, os.O_RDONLY)
            gds.gds_register_buffer(dst.untyped_storage())
            load = lambda: f.load_storage(dst.untyped_storage(), 0)  # noqa: E731
        else:
            import fgds

            f = fgds.File(a.file, "r")
            buf = fgds.Buffer(dst)
            out["p2p"] = buf.is_p2p
            out["p2p_unavailable_reason"] = buf.p2p_unavailable_reason
            load = lambda: f.pread(buf, n, 0, 0)  # noqa: E731
        for _ in range(a.repeat):
            dst.fill_(0)
            torch.cuda.synchronize()
            c0, t0 = cpu_s(), time.perf_counter()
            load()
            torch.cuda.synchronize()
            t, c = time.perf_counter() - t0, cpu_s() - c0
            out["runs"].append({"MiB_s": round(n / t / 2**20), "cpu_s_per_GiB": round(c / (n / 2**30), 3)})
        if a.api == "fgds":
            st = f.stats()
            out["stats"] = dict(st) if isinstance(st, dict) else str(st)
    except Exception as e:  # the run's result, reported
        out["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        return 1
    # Every byte: the file read on the host, compared on the GPU in 1 GiB pieces.
    same = True
    with open(a.file, "rb") as fh:
        for off in range(0, n, 1 << 30):
            want = torch.frombuffer(bytearray(fh.read(1 << 30)), dtype=torch.uint8).cuda()
            same &= bool(torch.equal(dst[off : off + want.numel()], want))
    out["identical"] = same
    print(json.dumps(out))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
