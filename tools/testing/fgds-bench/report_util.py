# SPDX-License-Identifier: GPL-2.0
"""report.py's helpers shared by its sections: sizes and rates as text
(human, gib, spread), Markdown tables (table), and reading the JSON inputs
(load, load_lines)."""
import json


def human(n):
    for unit in ("", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:g}{unit}"
        n /= 1024
    return str(n)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def gib(n):
    return f"{n / 2**30:.3g} GiB"


def spread(r):
    return f"{r['mib_per_s']:.0f} ({r['mib_per_s_min']:.0f}-{r['mib_per_s_max']:.0f})"


def load_lines(path):
    """A file of one JSON object per line (the unregistered-memory
    benchmarks'), or None."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return None
