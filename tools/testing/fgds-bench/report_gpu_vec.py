# SPDX-License-Identifier: GPL-2.0
"""report.py's vectored-call rows: gpu-vec.py against plain calls, beside
the previous wheel's (gpu-vec.json, gpu-vec-main.json) and
gpu-copy-cost.py's figures (gpu-copy-cost.json)."""
from report_util import spread, table


def gpu_vec_section(doc, before=None, copy_cost=None, kept=False):
    """gpu-vec.py's rows (docs/benchmarks/gpu-vec.json): one readv/writev
    against one pread/pwrite of the same bytes; `before` (gpu-vec-main.json,
    the same program with the previous wheel in the same call), if given,
    beside each row."""
    rows = doc["rows"]
    old = {(r["kind"], r["api"]): r for r in (before or {}).get("rows", []) if "error" not in r}
    when = ("run on the same machine in the same call as the suite, just before it" if not kept else
            "not run again with the suite above: these rows and `gpu-copy-cost.py`'s are the run before,"
            " kept in `docs/benchmarks/`, run on the same machine in the same call as that run's suite")
    out = [f"Vectored calls against plain ones (`tools/testing/fgds-bench/gpu-vec.py`, {when}; page cache"
           " warm; median of 3 rounds, 2 for writes; every result compared with the file)"
           + (", and the same program with main's wheel (before the bounce path's own piece and part sizes"
              " and its one-copy vectored reads), run in the same call just after "
              + ("the suite:" if not kept else "that suite:") if old else ":"), ""]
    lines, verdicts = [], []
    kinds = []
    for r in rows:
        if r["kind"] not in kinds:
            kinds.append(r["kind"])
    for k in kinds:
        rs = [r for r in rows if r["kind"] == k]
        base = next((r for r in rs if r["api"] in ("pread", "pwrite") and "error" not in r), None)
        obase = old.get((k, base["api"])) if base else None
        for r in rs:
            o = old.get((k, r["api"]))
            was = [f"{o['mib_per_s']:.0f}", f"{o['mib_per_s'] / obase['mib_per_s']:.2f}" if obase else "-"] \
                if o else ["-", "-"]
            if "error" in r:
                lines.append([k, r["api"], "failed", "-", r["error"]] + (was if old else []))
                continue
            rel = f"{r['mib_per_s'] / base['mib_per_s']:.2f}" if base else "-"
            ident = {True: "yes", False: "NO"}.get(r.get("identical"), "-")
            lines.append([k, r["api"], spread(r), rel, ident] + (was if old else []))
            if base and r is not base and r["api"].startswith(("readv", "writev")):
                x = r["mib_per_s"] / base["mib_per_s"]
                verdicts.append(f"{k}, {r['api']}: " + (f"met ({x:.2f}x)" if x >= 0.9 else
                                f"missed by {(1 - x / 0.9) * 100:.0f}% ({x:.2f}x)"))
    head = ["transfer", "call", "MiB/s", "x the plain call", "identical"]
    if old:
        head += ["before: MiB/s", "before: x the plain call"]
    out += [table(head, lines), ""]
    if verdicts:
        out += ["- one readv/writev >= 0.9x one pread/pwrite of the same bytes: " + "; ".join(verdicts), ""]
    others = []
    for r in rows:
        if "error" in r or not r["api"].startswith(("readv", "writev")) or r["kind"].startswith("64 KiB x 2000 into cuda"):
            continue
        base = next((b for b in rows if b["kind"] == r["kind"] and b["api"] in ("pread", "pwrite") and "error" not in b), None)
        if not base or r["mib_per_s"] >= 0.9 * base["mib_per_s"]:
            continue
        o, ob = old.get((r["kind"], r["api"])), old.get((r["kind"], base["api"]))
        others.append(
            f"{r['kind']}, {r['api']}: {r['mib_per_s'] / base['mib_per_s']:.2f}x"
            + (f" here, {o['mib_per_s'] / ob['mib_per_s']:.2f}x with main's wheel in the same call" if o and ob else "")
            + (" (writes from GPU memory take the same path as before: a copy out of the GPU, then a buffered"
               " write of each piece)" if r["api"].startswith("writev") else
               " (one read and one copy per call: the plain call's work)" if "1 buffer" in r["api"] else "")
            + f"; the plain call's rounds ranged {base['mib_per_s_min']:.0f}-{base['mib_per_s_max']:.0f},"
            f" this row's {r['mib_per_s_min']:.0f}-{r['mib_per_s_max']:.0f}")
    if others:
        out += ["The other misses are not profiled; the paths they take did not change or do the plain call's"
                " work, and these rows swing between rounds and runs on this machine: " + "; ".join(others) + ".", ""]
    # plain calls against main's wheel: what the new path costs a small call
    slower = []
    for r in rows:
        o = old.get((r["kind"], r["api"]))
        if "error" in r or r["api"] != "pread" or "cuda" not in r["kind"] or not o:
            continue
        if r["mib_per_s"] < 0.95 * o["mib_per_s"]:
            n = int(r["kind"].split()[0]) << 10
            t, to = n / 2**20 / r["mib_per_s"] * 1e6, n / 2**20 / o["mib_per_s"] * 1e6
            slower.append(f"{r['kind']}: {r['mib_per_s']:.0f} MiB/s against {o['mib_per_s']:.0f} with main's wheel"
                          f" ({t:.0f} us a call against {to:.0f})")
    if slower:
        out += [
            "Plain calls of 1 MiB and less into CUDA memory are slower than with main's wheel: "
            + "; ".join(slower) + ". Each call now asks `cachestat(2)` about its range (one system call) and"
            " waits for its copy through the queued-copy path (one driver call more, `cuCtxSetCurrent`). (A"
            " call's last wait spins; only the waits that more pieces of the call follow sleep on a"
            " blocking-sync event, whose wake-up costs tens of microseconds on this machine.) Not profiled"
            " further.", ""]
    small = {r["api"]: r for r in rows if r["kind"].startswith("64 KiB") and "cuda" in r["kind"] and "error" not in r}
    p, v, v1 = (small.get(x) for x in ("pread", "readv, 4 segments in 4 buffers", "readv, 4 segments in 1 buffer"))
    if p and v and v["mib_per_s"] < 0.9 * p["mib_per_s"]:
        per = (64 << 10) / 2**20
        us = lambda r: per / r["mib_per_s"] * 1e6  # noqa: E731
        ov, ov1 = old.get((v["kind"], v["api"])), (old.get((v1["kind"], v1["api"])) if v1 else None)
        cc = (copy_cost or {}).get("rows", {})
        out += [
            f"Why the small vectored calls into CUDA memory into 4 allocations still miss: a 64 KiB pread took"
            f" {us(p):.0f} us, a readv of 4 x 16 KiB into 4 allocations {us(v):.0f} us"
            + (f" ({us(ov):.0f} with main's wheel)" if ov else "")
            + (f", and into one allocation, side by side, {us(v1):.0f} us" if v1 else "")
            + (f" ({us(ov1):.0f} with main's wheel)" if ov1 else "")
            + ". Both read the 4 neighbouring segments with one read into one pinned buffer; side by side in"
            " one allocation they are now one copy to the GPU as well (main's wheel queued one copy per segment"
            " there too, since it told the segments' buffers apart by position, not identity), so that call does"
            " the pread's work. Into 4 allocations the call must queue 4 copies where the pread queues one"
            + (f", and that is the whole difference: `gpu-copy-cost.py`, in the same call, timed on the driver API"
               f" as the engine calls it 1 copy of 64 KiB and a wait at {cc['one_copy']['us']:.1f} us, 4 copies of"
               f" 16 KiB into 4 allocations and a wait at {cc['copies']['us']:.1f} us, and the queueing of one copy"
               f" alone at {cc['queue_one']['us']:.1f} us: the 3 extra copies cost"
               f" {cc['copies']['us'] - cc['one_copy']['us']:.0f} us, the readv lost {us(v) - us(p):.0f} us."
               if cc.get("one_copy") and cc.get("copies") and cc.get("queue_one") else ".")
            + (f" One `cuMemcpyBatchAsync` of the 4 copies (CUDA 12.8 and later) took {cc['batch']['us']:.1f} us"
               " with its wait"
               + (", no cheaper, so the engine keeps one copy per allocation" if cc["batch"]["us"] >= 0.9 * cc["copies"]["us"]
                  else "; the engine does not use it yet") + "."
               if cc.get("batch") else "")
            + (f" The rest of a vectored call (the Python list of 4 segments, the planning and merging of each) is"
               f" what the side-by-side row pays beyond the pread, which it matches otherwise:"
               + (f" {us(v1) - us(p):.0f} us." if us(v1) - us(p) >= 0.5 else " nothing measurable here.")
               if v1 else "")
            + " Large vectored calls are split over threads like plain ones and keep up.",
            "",
        ]
    return "\n".join(out)
