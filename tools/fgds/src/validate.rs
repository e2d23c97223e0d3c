//! `fgds validate`: one command that proves and measures fgds on a machine.
//!
//! For each GPU (or the one chosen): `fgds check`'s verdict with a probe;
//! GPU memory through the vendor runtime (CUDA, HIP) or a dma-buf the user
//! names (`--dmabuf`, as `fgds check`); P2P reads of seeded data through
//! `pread`, `preadv`, io_uring and the library's engine, each read back
//! through the runtime and compared byte for byte; the reverse direction;
//! UNREG with reads in flight; then throughput of each path next to the
//! same path into host memory (the file's O_DIRECT ceiling), the bounce
//! path, and KvikIO and cuFile's gdsio where installed. Where P2P cannot
//! run, what can still runs and the report names what blocked the rest.
//!
//! Files: made in `--dir` with `O_EXCL` (never one that exists) and
//! unlinked as soon as they are open, so nothing is left behind even if
//! the run is killed. The report format is in `tools/fgds/README.md`.
//!
//! This file holds the arguments, the exit statuses, the host-memory rows
//! and the order of the run; its parts are in `validate/`.

mod data;
mod gpu;
mod machine;
mod memory;
mod paths;
mod report;

use crate::check::{self, ProbeMem};
use crate::gpumem::{GpuMem, Spec};
use crate::parse_size;
use clap::Args;
use data::TempFile;
use fgds::{Buffer, Config, FileHandle};
use machine::{fs_type, kernel, machine, read_trim};
use paths::{throughput, Path4, PROBE_SPAN, SPAN};
use report::{markdown, Blocker, Ctx, Report, Step, Storage};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Format name and version in every report.
pub const FORMAT: &str = "fgds-validate/1";
/// Exit status: P2P reads and writes verified on at least one GPU, nothing failed.
pub const EXIT_VERIFIED: u8 = 0;
/// Exit status: P2P could not run (see `blockers`); what ran passed.
pub const EXIT_BLOCKED: u8 = 1;
/// Exit status: the run could not be made (bad argument, unusable --dir,
/// --json file exists).
pub const EXIT_ERROR: u8 = 2;
/// Exit status: a check failed (data differ, an unexpected error).
pub const EXIT_FAILED: u8 = 3;

#[derive(Args, Debug, Clone)]
pub struct ValidateArgs {
    /// Directory to test in (a file system on the NVMe). Its files are
    /// made with O_EXCL and unlinked at once: nothing is left behind.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Only this GPU: its CUDA (or HIP) device ordinal. Default: every CUDA
    /// GPU an fgds node serves, or device 0 where none is.
    #[arg(long)]
    pub gpu: Option<i32>,
    /// Also write the JSON report to OUT ("-": standard output instead of
    /// the Markdown). OUT is created; an existing file is refused.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// GPU memory the user names instead of the vendor runtime:
    /// vfio:BDF[,bar=N][,offset=SIZE][,size=SIZE] or fd:N,size=SIZE[,offset=SIZE]
    /// (as fgds check --dmabuf). Needs 6 x --size + 2 MiB + --bench-size.
    #[arg(long, value_parser = crate::gpumem::parse_spec)]
    pub dmabuf: Option<Spec>,
    /// Bytes of each verified transfer (a multiple of 2 MiB).
    #[arg(long, default_value = "16M", value_parser = parse_size)]
    pub size: u64,
    /// Bytes of each throughput run (a multiple of 2 MiB).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub bench_size: u64,
    /// Seed of the test data (default: from the clock); the report gives it.
    #[arg(long)]
    pub seed: Option<u64>,
}

/// Host-memory rows: the O_DIRECT ceiling of each path.
fn host_rows(cx: &mut Ctx, bench: &TempFile, t_len: u64) {
    let hb = match Buffer::alloc_host(t_len as usize) {
        Ok(b) => b,
        Err(e) => {
            cx.rep
                .errors
                .push(format!("host buffer of {}: {e}", crate::human(t_len)));
            return;
        }
    };
    let _ = hb.write_bytes(0, &vec![0u8; t_len as usize]);
    let h = FileHandle::from_fd(bench.fd(), Config::default());
    let file = (bench.fd(), h.as_ref().ok());
    for p in Path4::ALL {
        throughput(cx, None, p, false, file, &hb, t_len);
    }
    throughput(cx, None, Path4::Engine, true, file, &hb, t_len);
}

fn finish(rep: &mut Report) {
    let failed = rep.steps.iter().any(|s| s.status == "fail") || !rep.errors.is_empty();
    let verified = rep.gpus.iter().any(|g| {
        let mine: Vec<&Step> = rep
            .steps
            .iter()
            .filter(|s| s.gpu == Some(g.index))
            .collect();
        mine.iter()
            .any(|s| s.name.starts_with("p2p read ") && s.status == "pass")
            && mine
                .iter()
                .all(|s| s.status == "pass" || s.status == "skipped")
    });
    let (v, c) = if failed {
        ("failed", EXIT_FAILED)
    } else if verified {
        ("p2p-verified", EXIT_VERIFIED)
    } else {
        ("blocked", EXIT_BLOCKED)
    };
    rep.verdict = v.into();
    rep.exit_code = c;
}

fn setup_error(rep: &mut Report, e: String) -> ExitCode {
    rep.errors.push(e);
    rep.verdict = "error".into();
    rep.exit_code = EXIT_ERROR;
    ExitCode::from(EXIT_ERROR)
}

/// Runs `fgds validate`; the exit status is the report's.
pub fn run(a: ValidateArgs) -> ExitCode {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 & 0xffff_ffff)
            .unwrap_or(1)
    });
    let mut rep = Report {
        format: FORMAT.into(),
        fgds_version: env!("CARGO_PKG_VERSION").into(),
        seed,
        machine: machine(),
        kernel: kernel(),
        storage: Storage {
            dir: a.dir.display().to_string(),
            ..Default::default()
        },
        ..Default::default()
    };
    // The JSON file is created before anything runs, so that a name that
    // exists is refused before any work (and never overwritten).
    let mut json_out: Option<std::fs::File> = None;
    let code = 'run: {
        if let Some(p) = a.json.as_ref().filter(|p| p.as_os_str() != "-") {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(p)
            {
                Ok(f) => json_out = Some(f),
                Err(e) => {
                    break 'run setup_error(
                        &mut rep,
                        format!(
                            "--json {}: {e} (it is never overwritten: name a new file)",
                            p.display()
                        ),
                    );
                }
            }
        }
        if a.size == 0 || a.size % SPAN != 0 || a.bench_size == 0 || a.bench_size % SPAN != 0 {
            break 'run setup_error(
                &mut rep,
                "--size and --bench-size must be non-zero multiples of 2 MiB".into(),
            );
        }
        if !a.dir.is_dir() {
            break 'run setup_error(
                &mut rep,
                format!("--dir {}: not a directory", a.dir.display()),
            );
        }
        if let Err(e) = fgds::env::env().check() {
            break 'run setup_error(&mut rep, format!("FGDS_* configuration: {e}"));
        }
        let data = match TempFile::create(&a.dir, "data")
            .and_then(|f| f.fill(a.size, seed).map(|_| f))
        {
            Ok(f) => f,
            Err(e) => {
                break 'run setup_error(
                    &mut rep,
                    format!("the test file: {e} (fgds needs a file system with O_DIRECT on --dir)"),
                )
            }
        };
        let bench = match TempFile::create(&a.dir, "bench")
            .and_then(|f| f.fill(a.bench_size, seed ^ 0xbe).map(|_| f))
        {
            Ok(f) => f,
            Err(e) => break 'run setup_error(&mut rep, format!("the throughput file: {e}")),
        };
        let mut cx = Ctx {
            rep,
            s: a.size,
            bench_size: a.bench_size,
        };
        cx.step(None, "seeded write", Ok(format!("{} of stream {seed} and {} for throughput written with O_DIRECT to new files in {} (unlinked at once)", crate::human(a.size), crate::human(a.bench_size), a.dir.display())));
        // The storage under --dir.
        if let Ok(c) = check::report(Some(&data.proc_path()), ProbeMem::Off) {
            if let Some(f) = &c.file {
                cx.rep.storage.block_device = f.block_device.clone();
                cx.rep.storage.device_kind = f.device_kind.clone();
                cx.rep.storage.o_direct = f.o_direct;
                cx.rep.storage.pci_address = f
                    .pci_device
                    .as_ref()
                    .and_then(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned());
                cx.rep.storage.model = f
                    .block_device
                    .as_ref()
                    .and_then(|b| read_trim(format!("/sys/block/{b}/device/model")));
            }
        }
        cx.rep.storage.filesystem = fs_type(data.fd());
        host_rows(&mut cx, &bench, a.bench_size);
        let need = 6 * a.size + PROBE_SPAN + a.bench_size;
        // The GPUs.
        let mut mems: Vec<(GpuMem, i32)> = Vec::new();
        if let Some(spec) = &a.dmabuf {
            match GpuMem::from_spec(spec, need) {
                Ok(m) => mems.push((m, 0)),
                Err(e) => cx.blocked(
                    None,
                    "allocate",
                    format!("--dmabuf: {e}"),
                    "name a dma-buf range of at least 6 x --size + 2 MiB + --bench-size",
                ),
            }
        } else {
            let ordinals: Vec<i32> = match (a.gpu, fgds::gpu::cuda_dmabuf_support()) {
                (Some(n), _) => vec![n],
                (None, Ok(list)) => {
                    let devs = fgds::list_devices().unwrap_or_default();
                    let served: Vec<i32> = list
                        .iter()
                        .enumerate()
                        .filter(|(_, (pci, _))| {
                            devs.iter()
                                .any(|d| d.pci_address.as_deref() == Some(pci.as_str()))
                        })
                        .map(|(i, _)| i as i32)
                        .collect();
                    if served.is_empty() && !list.is_empty() {
                        vec![0]
                    } else {
                        served
                    }
                }
                (None, Err(_)) => vec![0],
            };
            for o in ordinals {
                match GpuMem::alloc_runtime(o, need) {
                    Ok(m) => mems.push((m, o)),
                    Err(e) => cx.blocked(None, "allocate", format!("GPU memory on device {o}: {e}"), "install the GPU's driver and CUDA (or HIP), or name a dma-buf with --dmabuf"),
                }
            }
        }
        for (gi, (m, o)) in mems.iter().enumerate() {
            gpu::run_gpu(&mut cx, gi, m, &a.dir, &data, &bench, *o);
        }
        if mems.is_empty() {
            // What fgds check says with no GPU memory to probe.
            if let Ok(c) = check::report(Some(&data.proc_path()), ProbeMem::Off) {
                for p in c
                    .problems
                    .iter()
                    .chain(c.file.iter().flat_map(|f| f.problems.iter()))
                {
                    cx.rep.blockers.push(Blocker {
                        gpu: None,
                        step: "check".into(),
                        why: p.what.clone(),
                        next: p.next.clone(),
                    });
                }
            }
        }
        rep = cx.rep;
        finish(&mut rep);
        drop((data, bench));
        ExitCode::from(rep.exit_code)
    };
    let json = serde_json::to_string_pretty(&rep).unwrap_or_default();
    if a.json.as_deref() == Some(Path::new("-")) {
        println!("{json}");
    } else {
        print!("{}", markdown(&rep));
        if let Some(mut f) = json_out {
            use std::io::Write;
            if let Err(e) = f
                .write_all(json.as_bytes())
                .and_then(|_| f.write_all(b"\n"))
            {
                eprintln!("fgds: writing the JSON report: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
        }
    }
    code
}
