//! `fgds bench`: a gdsio-like benchmark, optionally side by side with a
//! plain O_DIRECT pread/pwrite thread pool.

use crate::human;
use clap::{Args, ValueEnum};
use fgds::{Buffer, Config, FileHandle};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Copy, Debug, ValueEnum, serde::Serialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    Read,
    Write,
}

#[derive(Clone, Copy, Debug, ValueEnum, serde::Serialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Seq,
    Rand,
}

#[derive(Clone, Copy, Debug, ValueEnum, serde::Serialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Mem {
    Host,
    Fgds,
    Cuda,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let m = match s[i..]
                .to_ascii_lowercase()
                .trim_end_matches("ib")
                .trim_end_matches('b')
            {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1u64 << 40,
                u => return Err(format!("unknown unit {u:?}")),
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    num.trim()
        .parse::<u64>()
        .map(|n| n * mul)
        .map_err(|e| format!("{s:?}: {e}"))
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// File to read or write (created and filled for reads if too small).
    #[arg(long, short = 'f')]
    file: PathBuf,
    /// Read or write.
    #[arg(long, value_enum, default_value = "read")]
    rw: Rw,
    /// Sequential or random offsets (aligned to the block size).
    #[arg(long, value_enum, default_value = "seq")]
    pattern: Pattern,
    /// Bytes per I/O call (K/M/G suffixes).
    #[arg(long, short = 'b', default_value = "1M", value_parser = parse_size)]
    bs: u64,
    /// Queue depth of each call (chunks in flight).
    #[arg(long, short = 'q', default_value_t = fgds::engine::DEFAULT_QUEUE_DEPTH)]
    qd: u32,
    /// Chunk size the engine splits calls into.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    chunk: u64,
    /// Threads issuing calls.
    #[arg(long, short = 't', default_value_t = 1)]
    threads: usize,
    /// Total bytes to move (also the file size used).
    #[arg(long, short = 's', default_value = "256M", value_parser = parse_size)]
    size: u64,
    /// Buffer memory.
    #[arg(long, value_enum, default_value = "host")]
    mem: Mem,
    /// Do not use io_uring (pread/pwrite inside the engine).
    #[arg(long)]
    no_io_uring: bool,
    /// Also run a plain O_DIRECT pread/pwrite thread pool and compare.
    #[arg(long)]
    baseline: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Result1 {
    engine: String,
    bytes: u64,
    seconds: f64,
    mib_per_s: f64,
    iops: f64,
    avg_latency_us: f64,
    direct_bytes: Option<u64>,
    bounce_bytes: Option<u64>,
    fallbacks: Option<u64>,
}

#[derive(serde::Serialize)]
struct Report {
    file: PathBuf,
    rw: Rw,
    pattern: Pattern,
    block_size: u64,
    queue_depth: u32,
    chunk_size: u64,
    threads: usize,
    total: u64,
    mem: Mem,
    results: Vec<Result1>,
}

fn offsets(a: &BenchArgs, t: usize) -> Vec<u64> {
    let per = a.size / a.threads as u64 / a.bs;
    let blocks = (a.size / a.bs).max(1);
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
    (0..per)
        .map(|i| match a.pattern {
            Pattern::Seq => (t as u64 * per + i) * a.bs,
            Pattern::Rand => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % blocks) * a.bs
            }
        })
        .collect()
}

fn make_buffer(a: &BenchArgs) -> Result<Buffer, fgds::Error> {
    match a.mem {
        Mem::Host => Buffer::alloc_host(a.bs as usize),
        Mem::Cuda | Mem::Fgds => {
            let rt = fgds::gpu::Runtime::cuda()?;
            rt.use_device(0)?;
            let len = a.bs.div_ceil(fgds::gpu::CUDA_EXPORT_ALIGN) * fgds::gpu::CUDA_EXPORT_ALIGN;
            let p = rt.mem_alloc(len as usize)?;
            let b = Buffer::from_cuda(p, len)?;
            if a.mem == Mem::Fgds && !b.is_p2p() {
                return Err(fgds::Error::P2pUnavailable {
                    reason: b
                        .p2p_unavailable_reason()
                        .unwrap_or("no fgds mapping")
                        .to_string(),
                });
            }
            // The device memory is deliberately leaked until process exit.
            Ok(b)
        }
    }
}

fn progress(a: &BenchArgs, label: &str) -> indicatif::ProgressBar {
    if a.json || a.size < (1 << 30) {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(a.size);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb.set_message(label.to_string());
    pb
}

fn prepare(a: &BenchArgs) -> Result<(), fgds::Error> {
    let need = a.size;
    let have = std::fs::metadata(&a.file).map(|m| m.len()).unwrap_or(0);
    if a.rw == Rw::Read && have < need {
        let f = FileHandle::open(
            &a.file,
            libc::O_RDWR | libc::O_CREAT,
            0o644,
            Config::default(),
        )?;
        let chunk = 8usize << 20;
        let b = Buffer::alloc_host(chunk)?;
        let fill: Vec<u8> = (0..chunk).map(|i| (i * 131 % 251) as u8).collect();
        b.write_bytes(0, &fill)?;
        let mut off = 0u64;
        while off < need {
            let n = (need - off).min(chunk as u64) as usize;
            f.write(&b, 0, n, off)?;
            off += n as u64;
        }
        // SAFETY: valid fd.
        unsafe { libc::fsync(f.raw_fd()) };
    }
    Ok(())
}

fn run_fgds(a: &BenchArgs) -> Result<Result1, fgds::Error> {
    let cfg = Config {
        chunk_size: a.chunk as usize,
        queue_depth: a.qd,
        use_io_uring: !a.no_io_uring,
        ..Config::default()
    };
    let flags = if a.rw == Rw::Read {
        libc::O_RDONLY
    } else {
        libc::O_RDWR | libc::O_CREAT
    };
    let f = Arc::new(FileHandle::open(&a.file, flags, 0o644, cfg)?);
    let pb = progress(a, "fgds");
    let lat_ns = AtomicU64::new(0);
    let ops = AtomicU64::new(0);
    let t0 = Instant::now();
    let r: Result<u64, fgds::Error> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..a.threads)
            .map(|t| {
                let f = f.clone();
                let (pb, lat_ns, ops) = (&pb, &lat_ns, &ops);
                s.spawn(move || -> Result<u64, fgds::Error> {
                    let b = make_buffer(a)?;
                    let mut bytes = 0u64;
                    for off in offsets(a, t) {
                        let t1 = Instant::now();
                        let n = match a.rw {
                            Rw::Read => f.read(&b, 0, a.bs as usize, off)?,
                            Rw::Write => f.write(&b, 0, a.bs as usize, off)?,
                        };
                        lat_ns.fetch_add(t1.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        ops.fetch_add(1, Ordering::Relaxed);
                        bytes += n as u64;
                        pb.inc(n as u64);
                    }
                    Ok(bytes)
                })
            })
            .collect();
        join_all(hs)
    });
    let bytes = r?;
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let st = f.stats();
    Ok(summary(
        "fgds",
        bytes,
        secs,
        ops.load(Ordering::Relaxed),
        lat_ns.load(Ordering::Relaxed),
        Some(st),
    ))
}

fn summary(
    engine: &str,
    bytes: u64,
    secs: f64,
    ops: u64,
    lat_ns: u64,
    st: Option<fgds::Stats>,
) -> Result1 {
    Result1 {
        engine: engine.into(),
        bytes,
        seconds: secs,
        mib_per_s: bytes as f64 / (1 << 20) as f64 / secs.max(1e-9),
        iops: ops as f64 / secs.max(1e-9),
        avg_latency_us: if ops > 0 {
            lat_ns as f64 / ops as f64 / 1000.0
        } else {
            0.0
        },
        direct_bytes: st.as_ref().map(|s| s.direct_bytes),
        bounce_bytes: st.as_ref().map(|s| s.bounce_bytes),
        fallbacks: st.as_ref().map(|s| s.fallbacks),
    }
}

fn run_baseline(a: &BenchArgs) -> Result<Result1, fgds::Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(a.rw == Rw::Write)
        .custom_flags(libc::O_DIRECT)
        .open(&a.file)
        .map_err(|e| fgds::Error::Io {
            op: format!("open {} O_DIRECT", a.file.display()),
            source: e,
        })?;
    let fd = file.as_raw_fd();
    let pb = progress(a, "pread pool");
    let lat_ns = AtomicU64::new(0);
    let ops = AtomicU64::new(0);
    let t0 = Instant::now();
    let r: Result<u64, fgds::Error> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..a.threads)
            .map(|t| {
                let (pb, lat_ns, ops) = (&pb, &lat_ns, &ops);
                s.spawn(move || -> Result<u64, fgds::Error> {
                    let b = Buffer::alloc_host(a.bs as usize)?;
                    let p = b.base_addr() as *mut libc::c_void;
                    let mut bytes = 0u64;
                    for off in offsets(a, t) {
                        let t1 = Instant::now();
                        // SAFETY: p points to bs bytes owned by b.
                        let n = unsafe {
                            match a.rw {
                                Rw::Read => libc::pread(fd, p, a.bs as usize, off as libc::off_t),
                                Rw::Write => libc::pwrite(fd, p, a.bs as usize, off as libc::off_t),
                            }
                        };
                        if n < 0 {
                            return Err(fgds::Error::Io {
                                op: "pread/pwrite".into(),
                                source: std::io::Error::last_os_error(),
                            });
                        }
                        lat_ns.fetch_add(t1.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        ops.fetch_add(1, Ordering::Relaxed);
                        bytes += n as u64;
                        pb.inc(n as u64);
                    }
                    Ok(bytes)
                })
            })
            .collect();
        join_all(hs)
    });
    let bytes = r?;
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    Ok(summary(
        "pread-pool",
        bytes,
        secs,
        ops.load(Ordering::Relaxed),
        lat_ns.load(Ordering::Relaxed),
        None,
    ))
}

pub fn run(a: BenchArgs) -> Result<ExitCode, fgds::Error> {
    if a.bs == 0 || a.threads == 0 || a.size < a.bs * a.threads as u64 {
        return Err(fgds::Error::InvalidArgument(
            "need bs > 0, threads > 0 and size >= bs * threads".into(),
        ));
    }
    prepare(&a)?;
    let mut results = vec![run_fgds(&a)?];
    if a.baseline {
        results.push(run_baseline(&a)?);
    }
    let rep = Report {
        file: a.file.clone(),
        rw: a.rw,
        pattern: a.pattern,
        block_size: a.bs,
        queue_depth: a.qd,
        chunk_size: a.chunk,
        threads: a.threads,
        total: a.size,
        mem: a.mem,
        results,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep).unwrap_or_default());
    } else {
        println!(
            "{:?} {:?} bs={} qd={} chunk={} threads={} total={} mem={:?}",
            rep.rw,
            rep.pattern,
            human(rep.block_size),
            rep.queue_depth,
            human(rep.chunk_size),
            rep.threads,
            human(rep.total),
            rep.mem
        );
        println!(
            "{:<12} {:>10} {:>10} {:>12} {:>10} {:>12} {:>12}",
            "engine", "MiB/s", "IOPS", "avg lat us", "secs", "direct", "bounce"
        );
        for r in &rep.results {
            println!(
                "{:<12} {:>10.1} {:>10.0} {:>12.1} {:>10.3} {:>12} {:>12}",
                r.engine,
                r.mib_per_s,
                r.iops,
                r.avg_latency_us,
                r.seconds,
                r.direct_bytes.map(human).unwrap_or_else(|| "-".into()),
                r.bounce_bytes.map(human).unwrap_or_else(|| "-".into()),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Joins the benchmark threads and adds up the bytes they moved.
fn join_all(
    hs: Vec<std::thread::ScopedJoinHandle<'_, Result<u64, fgds::Error>>>,
) -> Result<u64, fgds::Error> {
    let mut total = 0;
    for h in hs {
        total += h
            .join()
            .map_err(|_| fgds::Error::InvalidArgument("bench thread panicked".into()))??;
    }
    Ok(total)
}
