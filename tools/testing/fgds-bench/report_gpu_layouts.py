# SPDX-License-Identifier: GPL-2.0
"""report.py's cold loads by checkpoint layout: gpu-layouts.py's rows
(gpu-layouts.json: one run, or {"runs": [...]} for several calls), every
loader at its settings against fgds.safetensors at its defaults, with what
the disk served during each row."""
from report_util import table

FGDS = "fgds.safetensors (defaults)"


def _machine(m):
    if not m:
        return "machine not recorded"
    fs, blk = m.get("fs") or {}, m.get("block") or {}
    disk = f"{fs.get('type', '?')} on {fs.get('device', '?')}"
    if blk:
        disk += f" ({', '.join(f'{k} {v}' for k, v in blk.items() if v is not None and k != 'name')})"
    gpu = m.get("gpu") or m.get("nvidia_smi") or "?"
    return f"{gpu}; {m.get('cpu', '?')}; files on {disk}"


def _peer(name):
    """The peer a row's setting belongs to (its name up to the first comma
    or parenthesis)."""
    for p in ("fgds.safetensors", "safetensors", "fastsafetensors", "InstantTensor", "Run:ai", "ceiling"):
        if name.startswith(p):
            return p
    return name


def gpu_layouts_section(doc):
    runs = doc.get("runs", [doc])
    out = ["Cold loads by checkpoint layout (`tools/testing/fgds-bench/gpu-layouts.py`; page cache dropped before "
           "every round, rows taking turns round by round; median of the rounds, lowest-highest; x fgds: the "
           "row's speed over fgds.safetensors at its defaults in the same layout; disk: what the block device "
           "served during the row (median over its rounds: requests, their average size, requests in flight "
           "on average), from `/sys/dev/block/.../stat`). Each loader reads every byte and its first round is "
           "compared, tensor by tensor, with the tensors written.", ""]
    verdicts = []
    for run in runs:
        out.append(f"Run `gpu-layouts.py {run.get('command', '')}` ({run.get('rounds', '?')} rounds): "
                   f"{_machine(run.get('machine'))}.")
        out.append("")
        layouts = []
        for r in run["layouts"]:
            if r["layout"] not in layouts:
                layouts.append(r["layout"])
        for lay in layouts:
            rs = [r for r in run["layouts"] if r["layout"] == lay]
            first = rs[0]
            out.append(f"{lay}: {first['tensors']} bf16 tensors, {first['bytes'] / 2**30:.2f} GiB in "
                       f"{first['files']} file(s):")
            out.append("")
            rows = []
            base = next((r for r in rs if r["setting"] == FGDS and "error" not in r), None)
            for r in rs:
                if "error" in r:
                    rows.append([r["cache"], r["setting"], "failed", "-", "-", "-", "-", r["error"]])
                    continue
                d = r.get("disk")
                disk = f"{d['requests']:.0f} x {d['avg_kib']:.0f} KiB, {d['in_flight']:.1f}" if d else "-"
                rel = f"{r['mib_per_s'] / base['mib_per_s']:.2f}" if base else "-"
                ident = {True: "yes", False: "NO"}.get(r.get("identical"), "-")
                if r["setting"].startswith("ceiling"):
                    ident = "-"
                rows.append([r["cache"], r["setting"], f"{r['mib_per_s']:.0f} ({r['min']:.0f}-{r['max']:.0f})",
                             f"{r['cpu_s_per_gib']:.3f}", rel, disk, ident, ""])
            out.append(table(["cache", "engine", "MiB/s", "CPU s/GiB", "x fgds", "disk: requests, in flight",
                              "identical", "error"], rows))
            out.append("")
            if not base:
                continue
            best = {}
            for r in rs:
                p = _peer(r["setting"])
                if "error" in r or p in ("fgds.safetensors", "ceiling"):
                    continue
                if p not in best or r["mib_per_s"] > best[p]["mib_per_s"]:
                    best[p] = r
            each = []
            for p, r in best.items():
                x = base["mib_per_s"] / r["mib_per_s"]
                each.append(f"{p} ({r['setting']}, {r['mib_per_s']:.0f} MiB/s): "
                            f"{'met' if x >= 1.0 else 'missed'} ({x:.2f}x)")
            verdicts.append(f"- {lay}, cold: {FGDS} ({base['mib_per_s']:.0f} MiB/s) >= 1.0x every peer at its "
                            f"best setting: " + "; ".join(each))
    if verdicts:
        out += ["Targets (issue 42: the defaults win cold on every layout):", ""] + verdicts + [""]
    return "\n".join(out)
