//! One GPU's part of the run: the check, verified P2P reads and writes (or
//! the bounce path without P2P), the teardown step, and throughput of each
//! path into GPU memory with KvikIO and cuFile's gdsio where installed.

use super::data::{first_mismatch, TempFile};
use super::machine::gpu_info;
use super::memory::{gpu_fill, register, teardown, verify};
use super::paths::{run_path, sync_loop, throughput, Path4, PROBE_SPAN, REQ};
use super::report::{Ctx, HostCheck, Problem2, Step};
use crate::check::{self, ProbeMem};
use crate::gpumem::GpuMem;
use fgds::{Buffer, Config, FileHandle};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The next step for a failed registration.
fn register_next(e: &fgds::Error, module_loaded: bool) -> String {
    if !module_loaded {
        return "build and boot a kernel with fgds (tools/fgds/install/README.md), then modprobe fgds".into();
    }
    e.hint().to_string()
}

/// Tries an installed KvikIO (Python, with CuPy): one read of the file into device memory.
fn kvikio(path: &Path, len: u64, ordinal: i32) -> Result<(u64, f64, String), String> {
    const SCRIPT: &str = "import sys,time\nimport cupy,kvikio,kvikio.defaults\ncupy.cuda.Device(int(sys.argv[3])).use()\nn=int(sys.argv[2])\na=cupy.empty(n,dtype=cupy.uint8)\nf=kvikio.CuFile(sys.argv[1],'r')\nf.read(a[:1<<20])\ncupy.cuda.runtime.deviceSynchronize()\nt=time.perf_counter()\nr=f.read(a)\ncupy.cuda.runtime.deviceSynchronize()\ndt=time.perf_counter()-t\nc=getattr(f,'is_compat_mode_preferred',None) or getattr(kvikio.defaults,'is_compat_mode_preferred',None)\nprint(r,dt,'?' if c is None else int(bool(c())),kvikio.__version__)\n";
    let out = std::process::Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(path)
        .arg(len.to_string())
        .arg(ordinal.to_string())
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("failed").to_string());
    }
    let s = String::from_utf8_lossy(&out.stdout);
    let mut it = s.split_whitespace();
    let n: Option<u64> = it.next().and_then(|x| x.parse().ok());
    let t: Option<f64> = it.next().and_then(|x| x.parse().ok());
    let (compat, version) = (it.next().unwrap_or("?"), it.next().unwrap_or("?"));
    let mode = match compat {
        "1" => "compatibility mode: POSIX reads through host memory, not GPUDirect",
        "0" => "cuFile mode (GPUDirect where cuFile's own driver allows)",
        _ => "mode unknown",
    };
    match (n, t) {
        (Some(n), Some(t)) => Ok((n, t, format!("KvikIO {version}, {mode}"))),
        _ => Err(format!("unexpected output {s:?}")),
    }
}

fn gdsio() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/local/cuda/gds/tools")])
        .map(|d| d.join("gdsio"))
        .find(|p| p.is_file())
}

/// gdsio's "Throughput: X GiB/sec" line, in MiB/s.
pub fn gdsio_mib_per_s(out: &str) -> Option<f64> {
    let i = out.find("Throughput:")?;
    let v: f64 = out[i + 11..].split_whitespace().next()?.parse().ok()?;
    Some(v * 1024.0)
}

/// One GPU's part of the run.
pub(super) fn run_gpu(
    cx: &mut Ctx,
    gi: usize,
    mem: &GpuMem,
    dir: &Path,
    data: &TempFile,
    bench: &TempFile,
    ordinal: i32,
) {
    let s = cx.s;
    let (t_len, seed) = (cx.bench_size, cx.rep.seed);
    let (s1, s2, s3) = (seed, seed ^ 0x5555, seed ^ 0xaaaa);
    let probe_off = 6 * s;
    let bench_off = probe_off + PROBE_SPAN;
    let crep = match check::report(Some(&data.proc_path()), ProbeMem::Given(mem, probe_off)) {
        Ok(r) => r,
        Err(e) => {
            cx.rep.errors.push(format!("check: {e}"));
            return;
        }
    };
    let info = gpu_info(gi, mem, &crep);
    let module = crep.module_loaded;
    // This GPU's verdict: its node's (the rule, overridden by the probe), or
    // the probe's where no node is known for it.
    let node_ok = crep
        .gpus
        .iter()
        .find(|g| mem.pci_address.is_some() && g.pci_address == mem.pci_address)
        .map(|g| g.p2p_possible);
    let probe_ok = crep.probes.first().is_some_and(|p| p.ok);
    let check_ok = crep.errors.is_empty() && node_ok.unwrap_or(probe_ok);
    let probe = info.probe.clone();
    cx.rep.gpus.push(info);
    let via_none: Option<(&Buffer, u64)> = None;
    let vbuf = if check_ok {
        cx.step(
            Some(gi),
            "check",
            Ok(format!("P2P I/O can work; probe {probe}")),
        );
        // Register what the P2P steps use: [0, 5S) (the bench range later).
        match register(mem, 0, 5 * s) {
            Ok(b) => Some(b),
            Err(e) => {
                let next = register_next(&e, module);
                cx.blocked(
                    Some(gi),
                    "register",
                    format!("registering the GPU memory on an fgds node failed: {e}"),
                    next,
                );
                None
            }
        }
    } else {
        // The kernel's verdict stands: the P2P steps are not tried.
        let ps = &cx.rep.gpus[gi].problems;
        let joined = |f: fn(&Problem2) -> &str| ps.iter().map(f).collect::<Vec<_>>().join("; ");
        let (why, next) = (joined(|p| &p.what), joined(|p| &p.next));
        let detail = format!(
            "fgds check: {} (exit {}); probe {probe}",
            crep.verdict, crep.exit_code
        );
        cx.rep.steps.push(Step {
            gpu: Some(gi),
            name: "check".into(),
            status: "blocked".into(),
            detail: detail.clone(),
        });
        cx.blocked(
            Some(gi),
            "p2p steps (read, write, teardown, throughput)",
            if why.is_empty() { detail } else { why },
            next,
        );
        None
    };
    let independent = mem.independent_readback;
    // GPU memory left holding `s` bytes of stream `seed` at `off`, for
    // the host's own check.
    let known = |what: String, off: u64, seed: u64| HostCheck {
        gpu: gi,
        what,
        gpu_offset: off,
        bar: mem.bar,
        bar_offset: mem.bar_offset.map(|b| b + off),
        len: s,
        seed,
        pos: 0,
    };
    let via = vbuf.as_ref().map(|b| (b, 0u64));
    let h_data = FileHandle::from_fd(data.fd(), Config::default());
    let h_bench = FileHandle::from_fd(bench.fd(), Config::default());
    if let Some(vb) = &vbuf {
        cx.step(
            Some(gi),
            "register",
            Ok(format!(
                "{} registered and mapped (fgds mapping, cookie {:#x})",
                crate::human(5 * s),
                vb.cookie().unwrap_or(0)
            )),
        );
        // P2P reads, each into its own range, read back and compared.
        for (k, p) in Path4::ALL.iter().enumerate() {
            let off = k as u64 * s;
            let r = (|| {
                gpu_fill(mem, via, off, s, None)?;
                let h = h_data.as_ref().map_err(|e| e.to_string())?;
                run_path(*p, (data.fd(), Some(h)), vb, off, s, 0, false)?;
                verify(mem, via, off, s, s1)?;
                Ok(format!(
                    "{} read peer to peer into GPU memory; every byte equal through {}",
                    crate::human(s),
                    mem.cpu_path
                ))
            })();
            if cx.step(Some(gi), format!("p2p read {}", p.name()), r) && independent {
                cx.rep
                    .host_check
                    .push(known(format!("p2p read {}", p.name()), off, s1));
            }
        }
        // The reverse direction: GPU memory -> a new file, checked by a host read.
        let r = (|| {
            let w = TempFile::create(dir, "written")?;
            gpu_fill(mem, via, 4 * s, s, Some(s2))?;
            let hw = FileHandle::from_fd(w.fd(), Config::default()).map_err(|e| e.to_string())?;
            let mut done = Vec::new();
            for (k, p) in Path4::ALL.iter().enumerate() {
                run_path(*p, (w.fd(), Some(&hw)), vb, 4 * s, s, k as u64 * s, true)
                    .map_err(|e| format!("p2p write {}: {e}", p.name()))?;
                done.push(p.name());
            }
            for (k, p) in Path4::ALL.iter().enumerate() {
                let got = w.read_host(k as u64 * s, s as usize)?;
                if let Some(i) = first_mismatch(&got, s2, 0) {
                    return Err(format!(
                        "p2p write {}: byte {i} of the file differs from GPU memory",
                        p.name()
                    ));
                }
            }
            Ok(format!("{} written peer to peer from GPU memory by each of {}; every byte equal in an O_DIRECT read into host memory", crate::human(s), done.join(", ")))
        })();
        if cx.step(Some(gi), "p2p write (pwrite, pwritev, io_uring, engine)", r) && independent {
            cx.rep
                .host_check
                .push(known("p2p write source".into(), 4 * s, s2));
        }
        if independent {
            let r = teardown(mem, 5 * s, s, data, s3);
            if cx.step(Some(gi), "teardown with reads in flight", r) {
                cx.rep.host_check.push(known(
                    "refilled after UNREG with reads in flight".into(),
                    5 * s,
                    s3,
                ));
            }
        } else {
            cx.skipped(Some(gi), "teardown with reads in flight", "needs a CPU path to the memory independent of fgds (vendor runtime or vfio) to see that nothing lands after UNREG");
        }
    } else if let Some((rt, dptr)) = mem.runtime() {
        // Without P2P: the bounce path, verified the same way.
        let r = (|| {
            let b = Buffer::from_gpu_staged(rt.clone(), dptr, s).map_err(|e| e.to_string())?;
            gpu_fill(mem, via_none, 0, s, None)?;
            let h = h_data.as_ref().map_err(|e| e.to_string())?;
            let n = h.read(&b, 0, s as usize, 0).map_err(|e| e.to_string())?;
            if n as u64 != s {
                return Err(format!("{n} of {s} bytes"));
            }
            verify(mem, via_none, 0, s, s1)?;
            let w = TempFile::create(dir, "written")?;
            gpu_fill(mem, via_none, 0, s, Some(s2))?;
            let hw = FileHandle::from_fd(w.fd(), Config::default()).map_err(|e| e.to_string())?;
            hw.write(&b, 0, s as usize, 0).map_err(|e| e.to_string())?;
            let got = w.read_host(0, s as usize)?;
            if let Some(i) = first_mismatch(&got, s2, 0) {
                return Err(format!(
                    "bounce write: byte {i} of the file differs from GPU memory"
                ));
            }
            Ok(format!("{} read and written through the library's bounce path (pinned host buffers); every byte equal through {}", crate::human(s), mem.cpu_path))
        })();
        cx.step(Some(gi), "bounce read and write", r);
    }
    // Throughput into GPU memory, next to the host rows.
    let bbuf = if vbuf.is_some() {
        match register(mem, bench_off, t_len) {
            Ok(b) => Some(b),
            Err(e) => {
                cx.blocked(
                    Some(gi),
                    "throughput (p2p)",
                    format!("register {}: {e}", crate::human(t_len)),
                    e.hint(),
                );
                None
            }
        }
    } else {
        None
    };
    let bench_file = (bench.fd(), h_bench.as_ref().ok());
    if let Some(bb) = &bbuf {
        for p in Path4::ALL {
            throughput(cx, Some(gi), p, false, bench_file, bb, t_len);
        }
    }
    // The bounce path: what a program gets without fgds. A dma-buf passed
    // by descriptor has no CPU path but an fgds mapping.
    let bounce_possible = mem.runtime().is_some() || mem.independent_readback || bbuf.is_some();
    let t = Instant::now();
    let r: Result<(), String> = match mem.runtime() {
        _ if !bounce_possible => Err(String::new()),
        Some((rt, dptr)) => (|| {
            let b =
                Buffer::from_gpu_staged(rt, dptr + bench_off, t_len).map_err(|e| e.to_string())?;
            let h = h_bench.as_ref().map_err(|e| e.to_string())?;
            h.read(&b, 0, t_len as usize, 0)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })(),
        None => (|| {
            // O_DIRECT into host memory, then a CPU copy into the GPU's memory.
            let hb = Buffer::alloc_host(REQ).map_err(|e| e.to_string())?;
            let mut tmp = vec![0u8; REQ];
            let mut off = 0;
            while off < t_len {
                sync_loop(
                    bench.fd(),
                    hb.base_addr() as *mut u8,
                    REQ as u64,
                    off,
                    false,
                    false,
                )?;
                hb.read_bytes_into(0, &mut tmp).map_err(|e| e.to_string())?;
                match (mem.write(bench_off + off, &tmp), &bbuf) {
                    (Some(r), _) => r.map_err(|e| e.to_string())?,
                    (None, Some(bb)) => bb
                        .write_bytes(off as usize, &tmp)
                        .map_err(|e| e.to_string())?,
                    (None, None) => {
                        return Err(
                            "no CPU path to the GPU memory without an fgds registration".into()
                        )
                    }
                }
                off += REQ as u64;
            }
            Ok(())
        })(),
    };
    let secs = t.elapsed().as_secs_f64();
    match r {
        Err(_) if !bounce_possible => cx.skipped(
            Some(gi),
            "throughput bounce",
            "a dma-buf passed by descriptor has no CPU path without an fgds registration",
        ),
        Ok(()) => cx.row(Some(gi), "bounce", "read", (REQ as u64, 1), t_len, secs),
        Err(e) => {
            cx.step(Some(gi), "throughput bounce", Err(e));
        }
    }
    if let Some(bb) = &bbuf {
        throughput(cx, Some(gi), Path4::Engine, true, bench_file, bb, t_len);
    }
    // KvikIO and cuFile (gdsio), when installed, on CUDA memory.
    if mem.source == "cuda" {
        match kvikio(&bench.proc_path(), t_len, ordinal) {
            Ok((n, secs, note)) => {
                cx.row(Some(gi), "kvikio", "read", (0, 0), n, secs);
                if let Some(r) = cx.rep.throughput.last_mut() {
                    r.note = Some(note);
                }
            }
            Err(e) => cx.skipped(Some(gi), "kvikio", format!("KvikIO not usable: {e}")),
        }
        match gdsio() {
            None => cx.skipped(
                Some(gi),
                "cufile-gdsio",
                "gdsio (cuFile's benchmark) not installed",
            ),
            Some(g) => {
                let out = std::process::Command::new(&g)
                    .arg("-f")
                    .arg(bench.proc_path())
                    .args([
                        "-d",
                        &ordinal.to_string(),
                        "-w",
                        "1",
                        "-s",
                        &t_len.to_string(),
                        "-i",
                        "1M",
                        "-x",
                        "0",
                        "-I",
                        "0",
                    ])
                    .output();
                match out
                    .as_ref()
                    .ok()
                    .and_then(|o| gdsio_mib_per_s(&String::from_utf8_lossy(&o.stdout)))
                {
                    Some(mib) => cx.row(
                        Some(gi),
                        "cufile-gdsio",
                        "read",
                        (REQ as u64, 1),
                        t_len,
                        t_len as f64 / (1 << 20) as f64 / mib,
                    ),
                    None => cx.skipped(
                        Some(gi),
                        "cufile-gdsio",
                        format!("{} gave no throughput line", g.display()),
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdsio_line() {
        let out = "IoType: READ XferType: GPUD Threads: 1 DataSetSize: 262144/262144(KiB) IOSize: 1024(KiB) Throughput: 2.5 GiB/sec, Avg_Latency: 390.6 usecs ops: 256 total_time 0.1 secs";
        assert_eq!(gdsio_mib_per_s(out), Some(2560.0));
        assert_eq!(gdsio_mib_per_s("nothing"), None);
    }
}
