# SPDX-License-Identifier: GPL-2.0
"""report.py's VM sections: the VM suite's paths (section 1, from
vm-suite.json), the driver's own figures (fgds_bench: vm-driver.json) and
unregistered against registered GPU memory (unreg-bench*.json)."""
from report_util import human, table


def vm_section(doc, img):
    rows = doc["rows"]
    engines = [e for e in ("host", "fgds", "fgds-vec", "fgds-lib", "fgds-batch", "bounce", "p2pmem") if any(r["engine"] == e for r in rows)]
    keys = sorted({(r["rw"], r["block_size"], r["queue_depth"]) for r in rows}, key=lambda k: (k[0], k[1], k[2]))
    by = {(r["rw"], r["block_size"], r["queue_depth"], r["engine"]): r for r in rows}
    tput, cpu, miss_ratio, miss_cpu = [], [], [], []
    for k in keys:
        t, c = [k[0], human(k[1]), k[2]], [k[0], human(k[1]), k[2]]
        for e in engines:
            r = by.get(k + (e,))
            t.append("-" if r is None else f"{r['mib_per_s']:.0f} ({r['ratio_to_ceiling']:.2f})")
            c.append("-" if r is None else f"{r['cpu_s_per_gib']:.2f}")
        tput.append(t)
        cpu.append(c)
        f, b = by.get(k + ("fgds",)), by.get(k + ("bounce",))
        if f and k[1] >= 1 << 20 and f["ratio_to_ceiling"] < 0.95:
            miss_ratio.append(f"{k[0]} {human(k[1])} qd {k[2]}: {f['ratio_to_ceiling']:.2f}")
        if f and b and b["cpu_s_per_gib"] > 0 and f["cpu_s_per_gib"] > b["cpu_s_per_gib"] / 3:
            miss_cpu.append(f"{k[0]} {human(k[1])} qd {k[2]}: {f['cpu_s_per_gib']:.2f} vs bounce {b['cpu_s_per_gib']:.2f}")
    big = [by[k + ("fgds",)]["ratio_to_ceiling"] for k in keys if k[1] >= 1 << 20 and k + ("fgds",) in by]
    cpu_big = [by[k + ("fgds",)]["cpu_s_per_gib"] / by[k + ("bounce",)]["cpu_s_per_gib"]
               for k in keys if k[1] >= 1 << 20 and k + ("fgds",) in by and k + ("bounce",) in by
               and by[k + ("bounce",)]["cpu_s_per_gib"] > 0]
    miss_cpu_big = [m for m in miss_cpu if " 4K " not in m and " 64K " not in m]
    out = [
        "## 1. In the VM: NVMe -> GPU stand-in, every path",
        "",
        "Command: `make bench` (release kernel; `tools/testing/fgds-vm/guest-programs/fgds_vmbench.c`).",
        "Same emulated NVMe, same 256 MiB file on ext4, same request sizes and queue depths for",
        "every path. `host` is O_DIRECT into host memory (the ceiling); `fgds` O_DIRECT into an",
        "fgds mapping of the stand-in's BAR through io_uring; `fgds-vec` READV/WRITEV of 4",
        "segments in 4 registrations; `fgds-lib` libfgds's engine (one call of the request size,",
        "chunked: the queue depth is the engine's per thread of a call, so small requests run one",
        "at a time, and a call above 16 MiB (`FGDS_SPLIT_SIZE`) runs on up to `FGDS_PARALLEL`",
        "threads, 4 in this guest); `fgds-batch` libfgds's Batch API with the row's queue depth of requests in",
        "flight; `bounce` O_DIRECT through host memory plus a CPU copy to or from the BAR;",
        "`p2pmem` O_DIRECT into the second NVMe's CMB (upstream p2pmem). CPU is the whole",
        "guest's busy time (user, system, irq, softirq) per GiB moved.",
        "",
        "The machine: QEMU 10 under TCG (no KVM), q35, 2 vCPUs, 3 GiB; the NVMe is QEMU's `nvme`",
        "device over a sparse raw image on the host's ext4 (cache=unsafe); the GPU stand-in is",
        "`ivshmem-plain` whose 512 MiB BAR is a /dev/shm file; both below one emulated x3130",
        "switch; the host is a 2-core AMD EPYC virtual machine. Release kernel (no debug options).",
        "",
        "Throughput, MiB/s (ratio to `host`):",
        "",
        table(["rw", "request", "qd"] + engines, tput),
        "",
        "Guest CPU seconds per GiB:",
        "",
        table(["rw", "request", "qd"] + engines, cpu),
        "",
        f"![VM throughput vs request size]({img}/vm-throughput-vs-size.png)",
        f"![VM ratio to ceiling]({img}/vm-ratio-to-ceiling.png)",
        f"![VM CPU per GiB vs request size]({img}/vm-cpu-per-gib-vs-size.png)",
        "",
        "Targets:",
        "",
        f"- fgds >= 0.95 of the ceiling at 1 MiB and above: "
        + ("met in every row" if not miss_ratio else f"missed in {len(miss_ratio)} of {len(big)} rows: " + "; ".join(miss_ratio))
        + (f" (median ratio over those {len(big)} rows {sorted(big)[len(big) // 2]:.2f}, range"
           f" {min(big):.2f}-{max(big):.2f}: the emulated NVMe's run-to-run swing, both ways, is larger"
           " than any difference between the paths; the misses are not one size or direction)" if big else ""),
        f"- fgds CPU per GiB <= 1/3 of the bounce path's: "
        + ("met in every row" if not miss_cpu else f"missed in {len(miss_cpu)} of {len(keys)} rows: " + "; ".join(miss_cpu[:12]) + (" ..." if len(miss_cpu) > 12 else "")),
        "",
        "At 1 MiB and above fgds uses "
        + (f"{min(cpu_big):.2f} to {max(cpu_big):.2f} of the bounce path's CPU per GiB" if cpu_big else "-")
        + (f" (missed there: {'; '.join(miss_cpu_big)})" if miss_cpu_big else " (target met in every row)")
        + ". At 4 KiB and 64 KiB the cost of each request (system call, interrupt, emulated",
        "doorbells and completions under TCG) dominates every path and the copy the bounce path adds",
        "is a small part of it, so no path is three times cheaper there; what would close it is",
        "fewer requests per byte (larger requests), not a different data path. Single rows swing by",
        "+-20% between runs (one emulated NVMe, TCG); the p2pmem rows are slow because QEMU emulates",
        "the CMB's memory at some 30 MiB/s, which says nothing about real CMBs.",
        "",
    ]
    vec = {}
    for k in keys:
        f, v = by.get(k + ("fgds",)), by.get(k + ("fgds-vec",))
        if f and v and f["mib_per_s"] > 0:
            vec.setdefault(k[1], []).append(v["mib_per_s"] / f["mib_per_s"])
    if vec:
        out += [
            "Why `fgds-vec` trails `fgds` at 64 KiB and 1 MiB (fgds-vec / fgds, all rows of a size: "
            + ", ".join(f"{human(b)} {min(r):.2f}-{max(r):.2f}" for b, r in sorted(vec.items())) + "):",
            "the block layer never puts pages of two different `dev_pagemap`s in one bio",
            "(`iov_iter_extract_bvecs()` stops at a pagemap change and `bio_iov_iter_get_pages()` ends",
            "the bio there: block/bio.c, lib/iov_iter.c of 7.2), and each registration's pages are in",
            "pagemaps of its own (the driver gives each run of 2 MiB units a registration makes one",
            "pagemap, and shares only units two registrations have in common). The 4 segments of a",
            "vectored request here lie in 4 registrations, so in 4 pagemaps: the direct I/O becomes 4",
            "bios, 4 NVMe commands of 16 KiB where the plain 64 KiB read is one, and at 1 MiB 4 of",
            "256 KiB where the plain read is 2 of 512 KiB (QEMU's NVMe splits at its 512 KiB MDTS); at",
            "16 MiB and more both are cut at the MDTS anyway and the columns meet. Each command costs the",
            "same doorbell, interrupt and completion under TCG whatever its size, so the throughput",
            "follows the command count. Segments inside one registration share its pagemap and are not",
            "split, and neither is a plain request across the 2 MiB units of one registration (before the",
            "driver made one pagemap per run, each unit was a pagemap of its own, so the same rule split",
            "such a request at the boundary): `fgds_vecsplit`, in the driver's figures below, counts the",
            "device's reads per request. The split across",
            "registrations is the block layer's rule (a bio's pages share one pagemap, whose P2P",
            "mapping is decided once), which neither the library nor the driver can merge; a caller",
            "that wants one command per request puts its segments in one registration.",
            "",
        ]
    return "\n".join(out), miss_ratio, miss_cpu


def driver_section(doc):
    """The driver's own figures from vm-suite.json's "driver" object (or
    from vm-driver.json beside it, that object or a document holding it
    under "driver"), which `make bench` (fgds_bench) is to write:

        "driver": {"kernel": str,
                   "registrations": [{"bytes": int, "reg_mmap_us": float,
                                      "fault_us": float, "unreg_us": float,
                                      "chunks": int, "pagemaps": int, "pages": int,
                                      "memmap_kib": float}, ...],
                   "memmap_kib_per_gib": float,   # struct pages per GiB registered
                   "memmap_kib_idle": float}      # with nothing registered
    """
    d = doc.get("driver") if doc else None
    out = ["### The driver's own figures", ""]
    if not d:
        return "\n".join(out + [
            "Not in this vm-suite.json: `make bench` (fgds_bench) writes them to its `driver` object",
            "(REG_BUFFER + mmap time and UNREG time for 4 KiB to 256 MiB, struct-page memory per GiB",
            "registered and with nothing registered); then `make bench-report`.", ""])
    rows = []
    for r in d.get("registrations", []):
        reg, un = r.get("reg_mmap_us"), r.get("unreg_us")
        rows.append([human(r["bytes"]), f"{reg:.0f}" if reg is not None else "-",
                     f"{r['fault_us']:.0f}" if r.get("fault_us") is not None else "-",
                     f"{un:.0f}" if un is not None else "-",
                     f"{un / reg:.2f}" if reg and un is not None else "-",
                     r.get("chunks", "-"), r.get("pagemaps", "-"), r.get("pages", "-"),
                     f"{r['memmap_kib']:.0f}" if r.get("memmap_kib") is not None else "-"])
    out += [f"Release kernel{(' ' + d['kernel']) if d.get('kernel') else ''}, one registration at a time, "
            "times in microseconds (chunks: 2 MiB units with struct pages; pagemaps: the `dev_pagemap`s"
            " holding them):", "",
            table(["size", "REG_BUFFER + mmap", "first touch of every page", "UNREG", "UNREG / REG",
                   "chunks", "pagemaps", "pages", "struct-page KiB"], rows), ""]
    regs = [r for r in d.get("registrations", []) if r.get("unreg_us") is not None]
    per = [r["unreg_us"] / r["pagemaps"] for r in regs if r.get("pagemaps")]
    if per:
        big = max(regs, key=lambda r: r["bytes"])
        out += [f"UNREG takes {min(per) / 1000:.0f}-{max(per) / 1000:.0f} ms per pagemap, and every registration"
                f" here is one pagemap (up to 1 GiB a pagemap), so {human(big['bytes'])} unregisters in"
                f" {big['unreg_us'] / 1000:.0f} ms, against {big['reg_mmap_us'] / 1000:.0f} ms for REG_BUFFER"
                " + mmap. Removing a pagemap waits for RCU grace periods (`memunmap_pages()` kills its percpu"
                " reference and waits for it; `pgmap_array_delete()` calls `synchronize_rcu()`), tens of"
                " milliseconds under TCG, whatever its size. Before the driver made one pagemap per run of"
                " units, every 2 MiB unit was a pagemap of its own, removed one after the other: 32-49 ms per"
                " unit, 4.19 s for 256 MiB and 1.88 s for 104 MiB in the same VM (`make bench` on the"
                " driver as of f3fc7de).", ""]
    if d.get("vecsplit"):
        out += ["Device reads per O_DIRECT request into fgds mappings (`fgds_vecsplit`, same boot):"
                " `plain` one pread, `1-chunk` a preadv of 4 segments inside one registration, `4-regs`"
                " a preadv of 4 segments in 4 registrations, `across` one pread across the boundary of a"
                " registration's two 2 MiB units:", "", "```", d["vecsplit"].rstrip("\n"), "```", ""]
    if d.get("memmap_kib_per_gib") is not None:
        out.append(f"Struct-page memory: {d['memmap_kib_per_gib']:.0f} KiB per GiB registered; "
                   f"{d.get('memmap_kib_idle', 0):.0f} KiB with nothing registered.")
        out.append("")
    return "\n".join(out)


def unreg_section(rows, py_rows):
    """Unregistered against registered GPU memory: cufile_unreg_bench's rows
    (libcufile.so.0; runs "default", "staged" and "uncached") and fgds_python_unreg_bench's
    (fgds.File), each {kconfig, mode, size, calls, registered_us,
    unregistered_us, ratio, reg_buffer_calls, staged, cached}."""
    rows = (rows or []) + (py_rows or [])
    kc = sorted({r.get("kconfig", "?") for r in rows})
    out = ["### Unregistered GPU memory", "",
           "Per-call time (median) of a read of 64 KiB, 1 MiB and 16 MiB into `cuMemAlloc`'d memory of the",
           "GPU stand-in's CUDA runtime (`tools/testing/fgds-gpurt`) that the caller never registered, against",
           "the same read into registered memory, the two alternating call by call on the same file and",
           "offsets (issue 28): through `libcufile.so.0` (`cuFileRead`; registered: `cuFileBufRegister`) by",
           "`cufile_unreg_bench`, and through `fgds.File.pread` (unregistered: a `__cuda_array_interface__`",
           "object; registered: an `fgds.Buffer`) by `fgds_python_unreg_bench`. \"REG_BUFFER\" counts the",
           "library's own successful `FGDS_IOCTL_REG_BUFFER` calls during the timed calls of both series",
           "(`fgds_gpucache_counters`), after one call of each kind that may set up (a staging buffer, a",
           "cached registration); \"route\" says how many unregistered calls went through the staging pool",
           "and how many into the cached registration of the allocation. Run \"default\" is the library's",
           "defaults (staging below 1 MiB, the cache from 1 MiB on); \"staged\" sets",
           "`FGDS_REG_CACHE_MIN=1T` (every request staged), what the threshold was chosen from;",
           "\"uncached\" sets `FGDS_REG_CACHE_SIZE=0 FGDS_DEVICE_CACHE_SIZE=0` (no pool, no cache: a",
           "registration, mapping and unregistration per call, what the library did before; a quarter",
           "of the calls).",
           f"Kernel: {', '.join(kc)}; measured with "
           + ("`make bench` (release kernel)" if kc == ["release"] else
              f"`FGDS_KCONFIG={kc[0] if kc else '?'} FGDS_TESTS=cufile_unreg_bench,fgds_python_unreg_bench "
              "tools/testing/fgds-vm/run-vm.sh check` (the same programs `make bench` runs on the release "
              "kernel; the debug kernel (KASAN, lockdep) slows both columns)")
           + ". Goal: unregistered at least 0.8x registered from 1 MiB on, no REG_BUFFER per call.",
           "Which path a request takes and how the 1 MiB threshold was chosen (the staged runs of",
           "several boots against the cached ones): `tools/lib/fgds/src/gpucache.rs`; the staging",
           "pool's cost per call here is the stand-in's device-to-device copy, a memcpy through the",
           "emulated BAR queued to and waited for from its stream's host thread.", ""]
    head = ["through", "run", "size", "registered (us)", "unregistered (us)", "throughput, unregistered / registered",
            "REG_BUFFER / calls", "route: staged, cached"]
    body = []
    for r in rows:
        api = "fgds.File" if r.get("mode") == "python" else "libcufile"
        run = "default" if r.get("mode") == "python" else r.get("mode", "?")
        body.append([api, run, human(r["size"]), f"{r['registered_us']:.0f}",
                     f"{r['unregistered_us']:.0f}", f"{r['ratio']:.2f}x",
                     f"{r['reg_buffer_calls']} / {2 * r['calls']}", f"{r['staged']}, {r['cached']}"])
    out += [table(head, body), ""]
    return "\n".join(out)
