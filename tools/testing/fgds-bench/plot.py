#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Plot fgds benchmark suite results.

    plot.py SUITE.json [OUTDIR]        (OUTDIR default: build/bench/plots)

SUITE.json is a document with a "rows" list (or a bare list of rows); each
row has: suite, rw, pattern, block_size (bytes per request), queue_depth
(I/Os in flight), engine, mib_per_s, and optionally cpu_s_per_gib and
ratio_to_ceiling. Host-suite and VM-suite documents both work. Writes, per
suite:

  SUITE-throughput-vs-qd.png     MiB/s against queue depth, a line per engine,
                                 a panel per (rw, pattern, request size)
  SUITE-throughput-vs-size.png   MiB/s against request size, a line per
                                 engine, a panel per (rw, pattern, queue depth)
  SUITE-cpu-per-gib-vs-qd.png    CPU seconds per GiB, same panels as above
  SUITE-cpu-per-gib-vs-size.png
  SUITE-ratio-to-ceiling.png     only if rows carry ratio_to_ceiling

A panel is drawn only where the x axis has at least two points. Repeated
rows of one point are averaged. If matplotlib is missing, it is installed
into a virtual environment at build/bench-venv (python3 -m venv + pip).
"""
import json
import os
import subprocess
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../.."))
VENV = os.path.join(TOP, "build", "bench-venv")


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python3")
    if os.environ.get("FGDS_PLOT_IN_VENV"):
        sys.exit(f"plot.py: matplotlib is still missing in {VENV}")
    if not os.path.exists(py):
        print(f"plot.py: matplotlib is missing: creating {VENV} (python3 -m venv)", file=sys.stderr)
        r = subprocess.run([sys.executable, "-m", "venv", VENV], check=False)
        if r.returncode != 0:
            sys.exit("plot.py: python3 -m venv failed (on Debian: apt-get install python3-venv)")
    if subprocess.run([py, "-c", "import matplotlib"], capture_output=True, check=False).returncode:
        print("plot.py: pip install matplotlib (into the venv)", file=sys.stderr)
        r = subprocess.run([py, "-m", "pip", "install", "-q", "matplotlib"], check=False)
        if r.returncode != 0:
            sys.exit("plot.py: pip install matplotlib failed")
    env = dict(os.environ, FGDS_PLOT_IN_VENV="1")
    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024
    return str(n)


def load_rows(path):
    with open(path) as f:
        doc = json.load(f)
    rows = doc["rows"] if isinstance(doc, dict) else doc
    need = ("rw", "pattern", "block_size", "queue_depth", "engine", "mib_per_s")
    out = []
    for r in rows:
        if all(r.get(k) is not None for k in need):
            r.setdefault("suite", doc.get("suite", "suite") if isinstance(doc, dict) else "suite")
            out.append(r)
    return out


def series(rows, fixed, xkey, ykey):
    """{panel key: {engine: [(x, mean y)]}} for panels with >= 2 x values."""
    acc = {}
    for r in rows:
        y = r.get(ykey)
        if y is None:
            continue
        panel = tuple(r[k] for k in fixed)
        acc.setdefault(panel, {}).setdefault(r["engine"], {}).setdefault(r[xkey], []).append(float(y))
    out = {}
    for panel, engines in acc.items():
        xs = {x for pts in engines.values() for x in pts}
        if len(xs) < 2:
            continue
        out[panel] = {e: sorted((x, sum(v) / len(v)) for x, v in pts.items())
                      for e, pts in engines.items()}
    return out


def figure(plt, ticker, panels, title, xlabel, ylabel, xfmt, logy, path):
    if not panels:
        return None
    keys = sorted(panels, key=lambda k: tuple(str(v) for v in k))
    cols = min(3, len(keys))
    rows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    engines = sorted({e for p in panels.values() for e in p})
    markers = "osD^v<>ph*"
    for i, key in enumerate(keys):
        ax = axes[i // cols][i % cols]
        for j, e in enumerate(engines):
            pts = panels[key].get(e)
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[j % len(markers)],
                    label=e)
        ax.set_xscale("log", base=2)
        xs = sorted({p[0] for pts in panels[key].values() for p in pts})
        ax.set_xticks(xs)
        ax.set_xticklabels([xfmt(x) for x in xs])
        ax.minorticks_off()
        if logy:
            ax.set_yscale("log")
            plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_title(key[1], fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for i in range(len(keys), rows * cols):
        axes[i // cols][i % cols].axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    src = sys.argv[1]
    outdir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(TOP, "build", "bench", "plots")
    rows = load_rows(src)
    if not rows:
        sys.exit(f"plot.py: no usable rows in {src}")
    ensure_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    os.makedirs(outdir, exist_ok=True)
    written = []
    for suite in sorted({r["suite"] for r in rows}):
        rs = [dict(r, label_qd=f"{r['rw']} {r['pattern']} {human(r['block_size'])}",
                   label_bs=f"{r['rw']} {r['pattern']} qd {r['queue_depth']}")
              for r in rows if r["suite"] == suite]
        by_qd = ("suite", "label_qd")
        by_bs = ("suite", "label_bs")
        qd = str
        size = lambda b: human(b).replace(" ", "").replace("iB", "")  # noqa: E731
        plots = [
            (series(rs, by_qd, "queue_depth", "mib_per_s"), "throughput vs queue depth",
             "I/Os in flight", "MiB/s", qd, False, "throughput-vs-qd"),
            (series(rs, by_bs, "block_size", "mib_per_s"), "throughput vs request size",
             "request size", "MiB/s", size, False, "throughput-vs-size"),
            (series(rs, by_qd, "queue_depth", "cpu_s_per_gib"), "CPU seconds per GiB vs queue depth",
             "I/Os in flight", "CPU s / GiB", qd, True, "cpu-per-gib-vs-qd"),
            (series(rs, by_bs, "block_size", "cpu_s_per_gib"), "CPU seconds per GiB vs request size",
             "request size", "CPU s / GiB", size, True, "cpu-per-gib-vs-size"),
            (series(rs, by_qd, "queue_depth", "ratio_to_ceiling"), "ratio to ceiling vs queue depth",
             "I/Os in flight", "ratio to ceiling", qd, False, "ratio-to-ceiling"),
        ]
        for panels, title, xl, yl, fmt, logy, name in plots:
            p = figure(plt, ticker, panels, f"{suite}: {title}", xl, yl, fmt, logy,
                       os.path.join(outdir, f"{suite}-{name}.png"))
            if p:
                written.append(p)
    for p in written:
        print(f"plot.py: wrote {p}")
    if not written:
        print("plot.py: nothing to plot (no axis with two or more points)", file=sys.stderr)


if __name__ == "__main__":
    main()
