#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""KvikIO, unmodified, writing and reading every byte of a file from and
into GPU memory (``kvikio.CuFile.pwrite``/``pread`` of a CuPy array), in
the compat mode KvikIO is given (``KVIKIO_COMPAT_MODE``): ``ON`` is
KvikIO's own POSIX path, ``OFF`` makes it call cuFile (whichever
``libcufile.so.0`` the process has: run it under ``fgds run`` for fgds's).

    kvikio_bench.py FILE SIZE_MIB [--rounds N] [--api kvikio|fgds]

``--api fgds`` does the same through fgds's own Python API instead
(``fgds.File.pwrite``/``pread`` of the CuPy arrays), for the baseline of
the same program on fgds directly.

Prints one JSON line: the compat mode KvikIO reports, which
``libcufile.so.0`` is loaded (fgds's exports ``cuFileBufRegisterDmabufFGDS``)
and its version, write and read MiB/s and CPU s/GiB per round, whether every
byte read back equals what was written, KvikIO's own statistics
(``kvikio.SummaryMonitor``: bytes per backend, ``GDS`` being cuFile), and,
with fgds's library, its cuFile statistics (``cuFileGetStatsL3``: the calls
it served, per GPU P2P against bounced). An error is printed as
``{"error": ...}`` with exit status 1.
"""

import argparse
import ctypes
import json
import os
import resource
import sys
import time


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def mapped_cufiles():
    """The paths of every libcufile mapped into this process."""
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libcufile" in line.split()[-1]})


def loaded_cufile():
    """The library ``dlopen("libcufile.so.0")`` gives this process (what
    KvikIO's cuFile shim binds to), if one is loaded."""
    try:
        return ctypes.CDLL("libcufile.so.0", mode=os.RTLD_NOLOAD)
    except OSError:
        return None


class CufileStats:
    """fgds's cuFile statistics through cuFile's own calls (cufile.h's
    CUfileStatsLevel3_t: 1024 bytes of levels 1-2, num_gpus, 16 per-GPU
    records of a 16-byte uuid and 29 counters)."""

    L1 = ("read_ok", "read_err", "write_ok", "write_err", "hdl_reg_ok", "hdl_reg_err",
          "hdl_dereg_ok", "hdl_dereg_err", "buf_reg_ok", "buf_reg_err", "buf_dereg_ok",
          "buf_dereg_err", "read_bytes", "write_bytes", "read_bw_bytes_per_sec",
          "write_bw_bytes_per_sec", "read_lat_avg_us", "write_lat_avg_us")
    GPU = ("read_bytes", "read_bw_bytes_per_sec", "read_utilization", "read_duration_us",
           "n_total_reads", "n_p2p_reads", "n_nvfs_reads", "n_posix_reads",
           "n_unaligned_reads", "n_dr_reads", "n_sparse_regions", "n_inline_regions",
           "n_reads_err", "writes_bytes", "write_bw_bytes_per_sec", "write_utilization",
           "write_duration_us", "n_total_writes", "n_p2p_writes", "n_nvfs_writes",
           "n_posix_writes", "n_unaligned_writes", "n_dr_writes", "n_writes_err", "n_mmap",
           "n_mmap_ok", "n_mmap_err", "n_mmap_free", "reg_bytes")

    def __init__(self, lib):
        self.lib = lib
        for f in ("cuFileSetStatsLevel", "cuFileStatsReset", "cuFileGetStatsL3"):
            getattr(lib, f).restype = ctypes.c_uint64  # CUfileError_t: {err, cu_err}
        self.check("cuFileSetStatsLevel", lib.cuFileSetStatsLevel(3))

    @staticmethod
    def check(what, r):
        if r & 0xFFFFFFFF:
            raise RuntimeError(f"{what}: cuFile error {r & 0xFFFFFFFF}")

    def reset(self):
        self.check("cuFileStatsReset", self.lib.cuFileStatsReset())

    def get(self):
        buf = (ctypes.c_uint8 * 5000)()
        self.check("cuFileGetStatsL3", self.lib.cuFileGetStatsL3(buf))
        raw = bytes(buf)
        u64 = lambda off: int.from_bytes(raw[off:off + 8], "little")  # noqa: E731
        out = {k: u64(8 * i) for i, k in enumerate(self.L1)}
        gpus = []
        for g in range(int.from_bytes(raw[1024:1028], "little")):
            base = 1032 + 248 * g
            rec = {"gpu": raw[base:base + 16].rstrip(b"\0").decode()}
            rec.update({k: u64(base + 16 + 8 * i) for i, k in enumerate(self.GPU)
                        if not k.startswith(("n_nvfs", "n_dr", "n_sparse", "n_inline"))})
            gpus.append(rec)
        out["per_gpu"] = gpus
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("size_mib", type=int)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--api", choices=("kvikio", "fgds"), default="kvikio")
    a = ap.parse_args()

    import cupy
    import kvikio
    import kvikio.defaults

    if a.api == "fgds":
        import fgds

    size = a.size_mib << 20
    res = {"api": a.api, "compat_mode": str(kvikio.defaults.get("compat_mode")),
           "compat_mode_preferred": kvikio.defaults.is_compat_mode_preferred(),
           "size_mib": a.size_mib}
    lib = loaded_cufile()
    stats = None
    if lib is not None:
        res["libcufile_is_fgds"] = hasattr(lib, "cuFileBufRegisterDmabufFGDS")
        try:
            import kvikio.cufile_driver
            res["libcufile_version"] = list(kvikio.cufile_driver.libcufile_version())
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            res["libcufile_version"] = f"error: {e}"
        if res["libcufile_is_fgds"]:
            stats = CufileStats(lib)
    src = cupy.random.randint(0, 256, size, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    cupy.cuda.runtime.deviceSynchronize()
    monitor = kvikio.SummaryMonitor()
    rounds = []
    for r in range(a.rounds):
        before = monitor.get()
        if stats:
            stats.reset()
        c0, t0 = cpu_s(), time.perf_counter()
        if a.api == "fgds":
            n = fgds.File(a.file, "w").pwrite(src)
        else:
            with kvikio.CuFile(a.file, "w") as f:
                n = f.pwrite(src).get()
        os.sync()
        tw, cw = time.perf_counter() - t0, cpu_s() - c0
        if n != size:
            raise RuntimeError(f"round {r}: wrote {n} of {size} bytes")
        kvikio.drop_file_page_cache(a.file)
        dst.fill(0)
        cupy.cuda.runtime.deviceSynchronize()
        c0, t0 = cpu_s(), time.perf_counter()
        if a.api == "fgds":
            n = fgds.File(a.file, "r").pread(dst)
        else:
            with kvikio.CuFile(a.file, "r") as f:
                n = f.pread(dst).get()
        cupy.cuda.runtime.deviceSynchronize()
        tr, cr = time.perf_counter() - t0, cpu_s() - c0
        if n != size:
            raise RuntimeError(f"round {r}: read {n} of {size} bytes")
        same = bool(cupy.array_equal(src, dst))
        kv = monitor.get().since(before)
        rec = {
            "write_mib_s": round(a.size_mib / tw, 1), "write_cpu_s_gib": round(cw / (size / 2**30), 3),
            "read_mib_s": round(a.size_mib / tr, 1), "read_cpu_s_gib": round(cr / (size / 2**30), 3),
            "identical": same,
            "kvikio_by_backend": {k: {"ops": v["num_ops"], "bytes": v["bytes_transferred"]}
                                  for k, v in kv.by_backend.items() if v["num_ops"]},
        }
        if stats:
            rec["fgds_cufile_stats"] = stats.get()
        rounds.append(rec)
        if not same:
            break
    res["rounds"] = rounds
    # What KvikIO's dlopen("libcufile.so.0") bound to, now that it has run.
    lib = loaded_cufile()
    res["libcufile_mapped"] = mapped_cufiles()
    res["libcufile_is_fgds"] = lib is not None and hasattr(lib, "cuFileBufRegisterDmabufFGDS")
    os.unlink(a.file)
    print(json.dumps(res))
    return 0 if all(r["identical"] for r in rounds) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - one line for the driver script
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
