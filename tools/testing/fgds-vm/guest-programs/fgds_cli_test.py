#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""fgds check and fgds validate (tools/fgds) against the real driver, in the VM.

The GPU stand-in is named as a dma-buf exporter (--dmabuf vfio:BDF): the CLI
opens it through vfio-pci itself. Two verdicts are tested:

- the data NVMe "fgds0" and the stand-in below one PCIe switch: P2P works;
  the 4 KiB probe read lands in the BAR (checked by the host), `fgds check`
  exits 0, and
  `fgds validate` verifies every P2P path both ways and the teardown; then
  the host checker (tools/testing/fgds-vm/barcheck.c) compares the ranges
  the report names with the data stream, from outside the guest;
- the NVMe "fgdsfar" on its own root port (FGDS_FAR): the probe read fails
  with EINVAL, `fgds check` exits 1, `fgds validate` exits 1 with the
  kernel's refusal as the blocker and still runs the host and bounce rows.

`fgds validate` also runs with no --dmabuf, on the CUDA device the GPU
stand-in's runtime (tools/testing/fgds-gpurt) makes of the stand-in: its
memory registered through the library's runtime path, the report
p2p-verified, its bytes checked by the host where the runtime's log says the
allocation lay in the BAR.

Neither command may leave a file behind or write one it did not create.
Output: TAP. Needs the fgds VM (FGDS_GPU_BDF, FGDS_EXT4, FGDS_FAR) and the
CLI next to this program (build-tests.sh copies it) or in FGDS_CLI.
"""
import json
import os
import subprocess
import sys

from guest_util import expect, host_req, pattern, tap

HERE = os.path.dirname(os.path.abspath(__file__))
FGDS = os.environ.get("FGDS_CLI") or os.path.join(HERE, "fgds")
EINVAL = 22


def fgds(*args, timeout=900, env=None):
    p = subprocess.run([FGDS, *args], capture_output=True, text=True, timeout=timeout,
                       env=None if env is None else {**os.environ, **env})
    return p.returncode, p.stdout, p.stderr


def leftovers(d):
    return [n for n in os.listdir(d) if n.startswith("fgds-validate-")]


def put_file(path, size, seed):
    """A file whose first 4 KiB are stream seed (the probe reads them), then zeroes."""
    with open(path, "wb") as f:
        f.write(pattern(seed, 4096))
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())


def env():
    need = ["FGDS_GPU_BDF", "FGDS_EXT4", "FGDS_FAR"]
    missing = [n for n in need if not os.environ.get(n)]
    if missing:
        return None, f"{', '.join(missing)} not set: run in the fgds VM"
    if not os.access(FGDS, os.X_OK):
        return None, f"no fgds CLI at {FGDS}"
    return {n: os.environ[n] for n in need}, None


# ------------------------------------------------------------------ tests

def test_check_p2p_pair_probe_reads_into_the_bar(e):
    path = os.path.join(e["FGDS_EXT4"], "fgds-cli-check")
    put_file(path, 4 << 20, 0x4c1)
    try:
        spec = f"vfio:{e['FGDS_GPU_BDF']},offset=200M,size=2M"
        rc, out, err = fgds("check", "--json", "--dmabuf", spec, path)
        expect(rc == 0, f"check --json exit {rc}, want 0 (P2P works)\n{out}\n{err}")
        r = json.loads(out)
        expect(r["verdict"] == "p2p" and r["exit_code"] == 0, f"verdict {r['verdict']}")
        expect(len(r["probes"]) == 1, f"probes: {r['probes']}")
        p = r["probes"][0]
        expect(p["ran"] and p["ok"] and p["data_matches"] is True, f"probe: {p}")
        expect(p["pci_address"] == e["FGDS_GPU_BDF"], f"probe GPU {p['pci_address']}")
        g = [g for g in r["gpus"] if g["pci_address"] == e["FGDS_GPU_BDF"]]
        expect(g and g[0]["p2p_possible"], f"gpus: {r['gpus']}")
        expect(g[0]["path_to_storage"].startswith("direct below the common upstream bridge"),
               f"path: {g[0]['path_to_storage']}")
        expect(r["file"]["device_kind"] == "nvme" and r["file"]["o_direct"], f"file: {r['file']}")
        # From outside the guest: the probe's 4 KiB are in the BAR at offset 200 MiB.
        ans = host_req("check", 0x4c1, 200 << 20, 4096, 0)
        expect(ans == "ok", f"host: {ans}")
        rc, out, err = fgds("check", "--dmabuf", spec, path)
        expect(rc == 0, f"check exit {rc}\n{out}{err}")
        expect("): ok, the bytes are the file's" in out, out)
        expect("verdict: P2P I/O can work (exit 0)" in out, out)
        # the rule alone agrees
        rc, out, err = fgds("check", "--json", "--no-probe", path)
        r = json.loads(out)
        expect(rc == 0 and r["probes"] == [] and r["verdict"] == "p2p", f"--no-probe: {rc} {out}")
    finally:
        os.unlink(path)


def test_check_far_nvme_probe_is_refused(e):
    spec = f"vfio:{e['FGDS_GPU_BDF']},offset=200M,size=2M"
    rc, out, err = fgds("check", "--json", "--dmabuf", spec, e["FGDS_FAR"])
    expect(rc == 1, f"check --json exit {rc}, want 1 (fallback only)\n{out}\n{err}")
    r = json.loads(out)
    expect(r["verdict"] == "fallback" and r["exit_code"] == 1 and not r["p2p_possible"],
           f"verdict {r['verdict']}")
    p = r["probes"][0]
    expect(p["ran"] and not p["ok"] and p["errno"] == EINVAL and p["errno_name"] == "EINVAL",
           f"probe: {p}")
    g = [g for g in r["gpus"] if g["pci_address"] == e["FGDS_GPU_BDF"]][0]
    expect(not g["p2p_possible"], f"gpu: {g}")
    whats = " ".join(x["what"] for x in g["problems"])
    expect("the kernel refuses P2P DMA" in whats and "probe read" in whats, whats)
    expect(all(x["next"] for x in g["problems"]), f"a problem without a next step: {g}")
    rc, out, err = fgds("check", "--dmabuf", spec, e["FGDS_FAR"])
    expect(rc == 1 and "FAILED: pread of 4096 bytes into GPU memory" in out and
           "verdict: P2P I/O cannot work here" in out, f"{rc}\n{out}")
    rc, out, err = fgds("check", "--json", "--no-probe", e["FGDS_FAR"])
    r = json.loads(out)
    g = [g for g in r["gpus"] if g["pci_address"] == e["FGDS_GPU_BDF"]][0]
    expect(rc == 1 and g["path_to_storage"] == "refused by the kernel", f"--no-probe: {rc} {g}")


def test_check_missing_file_is_an_error(e):
    rc, out, err = fgds("check", "--json", "/mnt/no-such-file")
    r = json.loads(out)
    expect(rc == 2 and r["verdict"] == "error" and r["errors"], f"{rc} {out}")


def host_checks(r):
    bad = []
    for h in r["host_check"]:
        ans = host_req("check", h["seed"], h["bar_offset"], h["len"], h["pos"])
        if ans != "ok":
            bad.append(f"{h['what']}: {ans}")
    return bad


def expect_p2p_steps_pass(r):
    """validate's report r: every step of a run on P2P memory passed, none failed."""
    steps = {s["name"]: s for s in r["steps"]}
    for n in ["check", "register", "p2p read pread", "p2p read preadv", "p2p read io_uring",
              "p2p read engine", "p2p write (pwrite, pwritev, io_uring, engine)",
              "teardown with reads in flight"]:
        expect(n in steps and steps[n]["status"] == "pass", f"step {n}: {steps.get(n)}")
    expect(not any(s["status"] == "fail" for s in r["steps"]), r["steps"])


def test_validate_p2p_pair_verified_and_checked_from_the_host(e):
    d = e["FGDS_EXT4"]
    out_json = "/tmp/fgds-validate.json"
    if os.path.exists(out_json):
        os.unlink(out_json)
    before = sorted(os.listdir(d))
    spec = f"vfio:{e['FGDS_GPU_BDF']},bar=2,offset=64M"
    try:
        rc, md, err = fgds("validate", "--dir", d, "--dmabuf", spec, "--size", "4M",
                           "--bench-size", "32M", "--seed", "4242", "--json", out_json)
        expect(rc == 0, f"validate exit {rc}, want 0\n{md}\n{err}")
        with open(out_json) as f:
            r = json.load(f)
        expect(r["format"] == "fgds-validate/1" and r["verdict"] == "p2p-verified" and
               r["exit_code"] == 0 and r["seed"] == 4242, f"{r['verdict']}")
        expect("- verdict: **p2p-verified** (exit 0)" in md, md)
        expect_p2p_steps_pass(r)
        expect(not r["blockers"], r["blockers"])
        g = r["gpus"][0]
        expect(g["source"] == "vfio" and g["pci_address"] == e["FGDS_GPU_BDF"] and
               g["driver"] == "vfio-pci" and g["fgds_node"] and g["probe"] == "ok", g)
        expect(r["storage"]["device_kind"] == "nvme" and r["storage"]["filesystem"] == "ext4",
               r["storage"])
        rows = {(t["memory"], t["path"]): t for t in r["throughput"]}
        for p in ["pread", "preadv", "io_uring", "engine"]:
            expect(("host", p) in rows and ("gpu", p) in rows, f"throughput rows: {list(rows)}")
            expect(rows[("gpu", p)]["bytes"] == 32 << 20 and rows[("gpu", p)]["vs_host"] is not None,
                   rows[("gpu", p)])
        expect(("gpu", "bounce") in rows and ("gpu", "engine-write") in rows, list(rows))
        # From outside the guest: the BAR holds what the report says.
        expect(len(r["host_check"]) == 6, r["host_check"])
        expect(all(h["bar_offset"] == (64 << 20) + h["gpu_offset"] and h["bar"] == 2
                   for h in r["host_check"]), r["host_check"])
        bad = host_checks(r)
        expect(not bad, "; ".join(bad))
        expect(sorted(os.listdir(d)) == before, f"left behind: {leftovers(d)}")
    finally:
        if os.path.exists(out_json):
            os.unlink(out_json)


def test_validate_cuda_device_p2p_verified_and_checked_from_the_host(e):
    """No --dmabuf: the CLI allocates with CUDA, the GPU stand-in's runtime
    (tools/testing/fgds-gpurt, next to this program in gpurt/), whose log says
    where its memory lay in the BAR."""
    d = e["FGDS_EXT4"]
    log = "/tmp/fgds-gpurt-validate.log"
    if os.path.exists(log):
        os.unlink(log)
    before = sorted(os.listdir(d))
    rt = {"LD_LIBRARY_PATH": os.path.join(HERE, "gpurt", "cuda"),
          "FGDS_GPURT_DEVICES": e["FGDS_GPU_BDF"], "FGDS_GPURT_LOG": log}
    try:
        rc, out, err = fgds("validate", "--dir", d, "--size", "4M", "--bench-size", "32M",
                            "--seed", "4343", "--json", "-", env=rt)
        expect(rc == 0, f"validate exit {rc}, want 0\n{out}\n{err}")
        r = json.loads(out)
        expect(r["verdict"] == "p2p-verified" and r["exit_code"] == 0, r["verdict"])
        expect_p2p_steps_pass(r)
        expect(len(r["gpus"]) == 1, r["gpus"])
        g = r["gpus"][0]
        expect(g["source"] == "cuda" and g["pci_address"] == e["FGDS_GPU_BDF"] and
               g["fgds_node"] and g["probe"] == "ok", g)
        rows = {(t["memory"], t["path"]): t for t in r["throughput"]}
        for p in ["pread", "preadv", "io_uring", "engine"]:
            expect(("gpu", p) in rows and rows[("gpu", p)]["bytes"] == 32 << 20,
                   f"throughput rows: {list(rows)}")
        # From outside the guest: validate's allocation (the largest) holds what
        # the report says.
        with open(log) as f:
            allocs = [ln.split() for ln in f if ln.startswith("alloc ")]
        expect(allocs, "the runtime logged no allocation")
        base = max(allocs, key=lambda a: int(a[3]))
        expect(base[1] == "0", f"allocation on device {base[1]}")
        expect(len(r["host_check"]) == 6, r["host_check"])
        for h in r["host_check"]:
            ans = host_req("check", h["seed"], int(base[2]) + h["gpu_offset"], h["len"], h["pos"])
            expect(ans == "ok", f"{h['what']}: host: {ans}")
        expect(sorted(os.listdir(d)) == before, f"left behind: {leftovers(d)}")
    finally:
        if os.path.exists(log):
            os.unlink(log)


def test_validate_far_nvme_is_blocked_and_runs_the_rest(e):
    mnt = "/mnt/fgds-far"
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", e["FGDS_FAR"]], check=True)
    subprocess.run(["mount", e["FGDS_FAR"], mnt], check=True)
    try:
        rc, out, err = fgds("validate", "--dir", mnt, "--dmabuf", f"vfio:{e['FGDS_GPU_BDF']}",
                            "--size", "2M", "--bench-size", "8M", "--json", "-")
        expect(rc == 1, f"validate exit {rc}, want 1 (blocked)\n{out}\n{err}")
        r = json.loads(out)
        expect(r["verdict"] == "blocked" and r["exit_code"] == 1, r["verdict"])
        expect(not any(s["status"] == "fail" for s in r["steps"]), r["steps"])
        why = " ".join(b["why"] for b in r["blockers"])
        expect("the kernel refuses P2P DMA" in why and all(b["next"] for b in r["blockers"]),
               r["blockers"])
        expect(r["gpus"][0]["check_verdict"] == "fallback" and
               r["gpus"][0]["probe"].startswith("failed:"), r["gpus"][0])
        rows = {(t["memory"], t["path"]) for t in r["throughput"]}
        expect(("host", "io_uring") in rows and ("gpu", "bounce") in rows and
               ("gpu", "pread") not in rows, rows)
        expect(not leftovers(mnt) and os.listdir(mnt) == ["lost+found"], os.listdir(mnt))
    finally:
        subprocess.run(["umount", mnt])


def test_validate_never_overwrites_its_json(e):
    out_json = "/tmp/fgds-validate-keep.json"
    with open(out_json, "w") as f:
        f.write("keep\n")
    try:
        rc, md, err = fgds("validate", "--dir", e["FGDS_EXT4"], "--json", out_json)
        expect(rc == 2, f"exit {rc}, want 2\n{md}{err}")
        with open(out_json) as f:
            expect(f.read() == "keep\n", "the existing file was changed")
        expect("- verdict: **error** (exit 2)" in md and "never overwritten" in md, md)
    finally:
        os.unlink(out_json)


TESTS = [
    test_check_p2p_pair_probe_reads_into_the_bar,
    test_check_far_nvme_probe_is_refused,
    test_check_missing_file_is_an_error,
    test_validate_p2p_pair_verified_and_checked_from_the_host,
    test_validate_cuda_device_p2p_verified_and_checked_from_the_host,
    test_validate_far_nvme_is_blocked_and_runs_the_rest,
    test_validate_never_overwrites_its_json,
]


def main():
    print("TAP version 13")
    print(f"1..{len(TESTS)}")
    e, skip = env()
    failed = 0
    for i, t in enumerate(TESTS, 1):
        name = t.__name__[len("test_"):]
        if skip:
            print(f"ok {i} {name} # SKIP {skip}")
            continue
        failed += tap(i, name, lambda: t(e))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
