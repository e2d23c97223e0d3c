#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Gather the `fgds bench --json` reports of a host-suite run into one JSON
document (rows + host information) and print the result table.

    collect.py --file FILE --out SUITE.json RUNDIR

RUNDIR holds NNN.json (a bench report) and NNN.meta (section, command) per
row of the matrix. Every row of the output has the fields plot.py reads:
suite, rw, pattern, block_size (request size), queue_depth (I/Os in
flight), engine, mib_per_s, cpu_s_per_gib.
"""
import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys

LIB_ENGINES = ("fgds", "fgds-batch")
REF_ENGINE = "fio-io_uring"


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def human(n):
    for unit in ("", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{int(n)}{unit}" if n == int(n) else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def host_info(path, top):
    cpu_model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    fstype, source = (sh("findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", path).split() + ["", ""])[:2]
    dev = {"source": source}
    base = os.path.basename(source)
    if source.startswith("/dev/") and base:
        lsblk = sh("lsblk", "-J", "-d", "-o", "NAME,MODEL,SIZE,ROTA,TRAN,TYPE,LOG-SEC,PHY-SEC", source)
        try:
            dev.update(json.loads(lsblk)["blockdevices"][0])
        except (ValueError, KeyError, IndexError):
            pass
        for attr in ("queue/scheduler", "queue/max_sectors_kb", "queue/nr_requests", "device/model"):
            p = f"/sys/class/block/{base}/{attr}"
            try:
                with open(p) as f:
                    dev[attr] = f.read().strip()
            except OSError:
                pass
    env = os.environ
    return {
        "kernel": platform.release(),
        "cpu_model": cpu_model,
        "nr_cpus": os.cpu_count(),
        "file": path,
        "file_size": os.path.getsize(path) if os.path.exists(path) else None,
        "file_system": fstype,
        "device": dev,
        "fio_version": sh("fio", "--version") if shutil.which("fio") else None,
        "git_commit": sh("git", "-C", top, "rev-parse", "--short", "HEAD"),
        "git_dirty": bool(sh("git", "-C", top, "status", "--porcelain", "--untracked-files=no")),
        "started_utc": env.get("FGDS_BENCH_START"),
        "suite_seconds": int(env.get("FGDS_BENCH_SECONDS", "0") or 0),
        "loadavg_start": env.get("FGDS_BENCH_LOAD_START"),
        "loadavg_end": env.get("FGDS_BENCH_LOAD_END"),
        "background_procs_start": int(env.get("FGDS_BENCH_BG_START", "0") or 0),
        "background_procs_end": int(env.get("FGDS_BENCH_BG_END", "0") or 0),
        "background_start": env.get("FGDS_BENCH_BG_NAMES_START", ""),
        "background_end": env.get("FGDS_BENCH_BG_NAMES_END", ""),
        "cpus": env.get("FGDS_BENCH_CPUS", ""),
    }


def rows_of(section, command, rep):
    rows = []
    for r in rep["results"]:
        reqs = r["bytes"] / rep["request_size"] if rep["request_size"] else 0
        rows.append({
            "suite": "host",
            "section": section,
            "rw": rep["rw"],
            "pattern": rep["pattern"],
            "block_size": rep["request_size"],
            "queue_depth": rep["in_flight"],
            "engine": r["engine"],
            "mib_per_s": r["mib_per_s"],
            "samples_mib_per_s": r.get("samples_mib_per_s", []),
            "iops": r["iops"],
            "avg_latency_us": r["avg_latency_us"],
            "cpu_s_per_gib": r["cpu_s_per_gib"],
            "cpu_seconds": r["cpu_seconds"],
            "cpu_user_s": r["cpu_user_s"],
            "cpu_sys_s": r["cpu_sys_s"],
            "cpu_seconds_process": r.get("cpu_seconds_process"),
            "ctx_switches": r.get("ctx_switches"),
            "ctx_per_request": (r.get("ctx_switches", 0) / reqs) if reqs else None,
            "bytes": r["bytes"],
            "seconds": r["seconds"],
            "runs": r.get("runs", 1),
            "requests": r.get("requests"),
            "direct_bytes": r.get("direct_bytes"),
            "bounce_bytes": r.get("bounce_bytes"),
            "fallbacks": r.get("fallbacks"),
            "call_size": rep["block_size"],
            "chunk_size": rep["chunk_size"],
            "threads": rep["threads"],
            "engine_queue_depth": rep["queue_depth"],
            "file_span": rep.get("file_size"),
            "command": command,
        })
    return rows


def verdicts(rows):
    """Per cell and library engine: throughput and CPU per GiB against fio."""
    cells = {}
    for r in rows:
        key = (r["section"], r["rw"], r["pattern"], r["block_size"], r["queue_depth"])
        cells.setdefault(key, {})[r["engine"]] = r
    out = []
    for key, eng in cells.items():
        ref = eng.get(REF_ENGINE)
        if not ref:
            continue
        for name in LIB_ENGINES:
            lib = eng.get(name)
            if not lib:
                continue
            tput = lib["mib_per_s"] / ref["mib_per_s"] if ref["mib_per_s"] else None
            cpu = lib["cpu_s_per_gib"] / ref["cpu_s_per_gib"] if ref["cpu_s_per_gib"] else None
            samples = ref.get("samples_mib_per_s") or [ref["mib_per_s"]]
            within = min(samples) <= lib["mib_per_s"] <= max(samples) or any(
                min(samples) <= s <= max(samples) for s in lib.get("samples_mib_per_s", []))
            tput_ok = tput is not None and tput >= 1.0
            cpu_ok = cpu is not None and cpu < 1.0
            out.append({
                "section": key[0], "rw": key[1], "pattern": key[2],
                "block_size": key[3], "queue_depth": key[4], "engine": name,
                "throughput_ratio_to_fio": tput, "cpu_per_gib_ratio_to_fio": cpu,
                "throughput_target_met": tput_ok, "cpu_target_met": cpu_ok,
                "throughput_spreads_overlap": within,
            })
    return out


def print_table(rows, verdict):
    v = {(x["section"], x["rw"], x["pattern"], x["block_size"], x["queue_depth"], x["engine"]): x
         for x in verdict}
    hdr = (f"{'section':<7} {'rw':<5} {'pat':<4} {'req':>5} {'qd':>3} {'engine':<12} "
           f"{'MiB/s':>7} {'rounds':>11} {'IOPS':>7} {'CPU s/GiB':>9} {'ctx/req':>7} "
           f"{'tput/fio':>8} {'cpu/fio':>7}  target")
    print(hdr)
    print("-" * len(hdr))
    last = None
    for r in rows:
        key = (r["section"], r["rw"], r["pattern"], r["block_size"], r["queue_depth"])
        if last is not None and key != last:
            print()
        last = key
        s = r.get("samples_mib_per_s") or [r["mib_per_s"]]
        x = v.get(key + (r["engine"],))
        tput = cpu = target = ""
        if x:
            tput = f"{x['throughput_ratio_to_fio']:.2f}" if x["throughput_ratio_to_fio"] else "-"
            cpu = f"{x['cpu_per_gib_ratio_to_fio']:.2f}" if x["cpu_per_gib_ratio_to_fio"] else "-"
            miss = [w for w, ok in (("tput", x["throughput_target_met"]),
                                    ("cpu", x["cpu_target_met"])) if not ok]
            target = "met" if not miss else "MISS " + "+".join(miss)
            if "tput" in miss and x["throughput_spreads_overlap"]:
                target += " (tput within round spread)"
        ctx = r.get("ctx_per_request")
        print(f"{r['section']:<7} {r['rw']:<5} {r['pattern']:<4} {human(r['block_size']):>5} "
              f"{r['queue_depth']:>3} {r['engine']:<12} {r['mib_per_s']:>7.1f} "
              f"{f'{min(s):.0f}-{max(s):.0f}':>11} {r['iops']:>7.0f} {r['cpu_s_per_gib']:>9.3f} "
              f"{(f'{ctx:.2f}' if ctx is not None else '-'):>7} {tput:>8} {cpu:>7}  {target}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", required=True, help="the benchmark file")
    ap.add_argument("--out", required=True, help="suite JSON to write")
    ap.add_argument("rundir", help="directory of NNN.json + NNN.meta")
    a = ap.parse_args()
    top = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../.."))
    rows = []
    for path in sorted(glob.glob(os.path.join(a.rundir, "*.json"))):
        with open(path) as f:
            rep = json.load(f)
        section, command = "matrix", ""
        meta = path[:-len(".json")] + ".meta"
        if os.path.exists(meta):
            with open(meta) as f:
                lines = f.read().splitlines() + ["", ""]
            section, command = lines[0] or section, lines[1]
        rows.extend(rows_of(section, command, rep))
    if not rows:
        sys.exit("collect.py: no reports in " + a.rundir)
    verdict = verdicts(rows)
    doc = {
        "suite": "host",
        "description": "fgds library engine vs fio (io_uring) vs a bare io_uring loop vs pread pool, O_DIRECT, "
                       "equal request size (block_size) and I/Os in flight (queue_depth); "
                       "see `fgds bench --help`",
        "host": host_info(os.path.abspath(a.file), top),
        "rows": rows,
        "targets": verdict,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    h = doc["host"]
    print(f"host: {h['kernel']}, {h['cpu_model']} x{h['nr_cpus']}, {h['file_system']} on "
          f"{h['device'].get('source')} ({h['device'].get('model') or h['device'].get('device/model') or '?'}), "
          f"file {h['file']} ({human(h['file_size'] or 0)}B)")
    print(f"load {h['loadavg_start']} -> {h['loadavg_end']}; other heavy work: "
          f"[{h['background_start'] or 'none'}] -> [{h['background_end'] or 'none'}]; "
          f"suite {h['suite_seconds']} s; engines on CPUs {h['cpus'] or 'any'}")
    print()
    print_table(rows, verdict)
    print()
    for eng in LIB_ENGINES:
        met = sum(1 for x in verdict if x["engine"] == eng
                  and x["throughput_target_met"] and x["cpu_target_met"])
        total = sum(1 for x in verdict if x["engine"] == eng)
        print(f"{eng} vs fio-io_uring: both targets met in {met}/{total} rows "
              f"(throughput >= fio and CPU s/GiB < fio at equal request size and in-flight count)")


if __name__ == "__main__":
    main()
