//! `fgds bench`: a gdsio-like benchmark of the library's engine, optionally
//! side by side with the library's Batch API, a plain O_DIRECT
//! pread/pwrite thread pool and fio's io_uring engine, all at the same
//! request size and the same number of I/Os in flight.

use crate::human;
use clap::{Args, ValueEnum};
use fgds::{Batch, Buffer, Config, FileHandle, IoParams, IoTarget, Op, Status};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Long help of `fgds bench`: what the rows mean and how they are made equal.
const AFTER_HELP: &str = "\
What is compared (every path uses O_DIRECT, so the page cache plays no part
and no cache dropping is needed):

  request size  R = min(--bs, --chunk)       bytes per I/O the device sees
  in flight     Q = --threads * min(--qd, ceil(--bs / --chunk))

  fgds          the library's synchronous API: --threads threads, each
                issuing calls of --bs bytes that the engine splits into
                --chunk requests with up to --qd of them in flight (one
                io_uring per thread; pread/pwrite with --no-io-uring).
  fgds-batch    (--batch) the library's Batch API: one thread keeps Q
                requests of R bytes submitted (Batch::submit + Batch::wait);
                aligned requests of a chunk or less go on the batch's own
                io_uring, the others to the library's I/O threads.
  pread-pool    (--baseline) Q threads, each doing pread/pwrite of R bytes
                on an O_DIRECT descriptor, taking the next offset from a
                shared cursor (seq) or drawing random ones (rand).
  io_uring-loop (--uring) a bare io_uring loop, no library: one thread
                keeps Q requests of R bytes on a plain ring and hands each
                to the kernel in a system call of its own, as fio's engine
                does; measured the way the fgds-batch row is (same process,
                same clock, same getrusage), so the two differ only by what
                the library adds; host memory.
  fio-io_uring  (--fio) fio --ioengine=io_uring --direct=1 --bs=R
                --iodepth=Q --numjobs=1 --norandommap on the same file,
                region (--size=--file-size, --io_size=--size) and pattern
                (read/randread/write/randwrite); host memory.

So all rows have the same total number of I/Os in flight. For 1 MiB
sequential at queue depth 32 use e.g. `-b 64M --chunk 1M -q 32`; for 4 KiB
random at queue depth 32 use `-b 4K -t 32 -q 1` (one synchronous 4 KiB call
has one request in flight, so the library needs 32 calling threads; the
fgds-batch row keeps the 32 in one Batch instead).

CPU: user + system seconds from getrusage(RUSAGE_SELF) around each
in-process run (all threads of this process, the library's I/O threads
included); for fio its own usr_cpu + sys_cpu (percent of its job runtime),
and the whole fio process tree (RUSAGE_CHILDREN) as cpu_seconds_process.
cpu_s_per_gib is CPU seconds per GiB moved. IOPS are requests of R bytes
per second; avg latency is per call (fgds), per request (the others).
Sequential offsets start at 0 and wrap at --file-size; random offsets are
uniform over --file-size, aligned to the call size (fgds) or R (others),
drawn afresh for every run, round and thread (fio: --randrepeat=0), so no
engine reads what another has just brought into a cache.

Placement: the scheduler may run one engine on the CPU that takes the
disk's interrupts and the next elsewhere, which on a virtual machine moves
small requests tens of percent (4 KiB reads one at a time: 63-68 MiB/s on
that vCPU, 40-45 on the other, on this project's 2-core host). To compare
engines rather than placements, start the whole run on the same CPUs, e.g.
`taskset -c 0 fgds bench ...` (fio inherits it); host-suite.sh does
(FGDS_BENCH_CPUS).

Memory: the fgds row moves each call into a buffer of --bs bytes per
thread; the other rows use R bytes per request in flight (fio: its own
iodepth x bs), the same few pages over and over. Moving data into more
memory costs by itself: 1 MiB sequential reads one at a time ran at
863-932 MiB/s into one 1 MiB buffer and at 589-731 into 64 MiB of them
taken in turn (the io_uring-loop, this project's host, a virtual disk).
Compare the fgds row with the others at --bs = --chunk when one request
is in flight; with more, a call of --bs bytes ends when its last chunk
does, so short calls drain the queue and long ones use more memory.";

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

/// A size on the command line: the spellings of the `FGDS_*` variables
/// (`fgds::env::parse_size`: `1048576`, `1M`, `1MiB`, `4g`, `1T`).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    fgds::env::parse_size(s)
        .ok_or_else(|| format!("{s:?}: not a size in bytes (1048576, 1M, 1MiB, 4G)"))
}

#[derive(Args, Debug, Clone)]
#[command(after_long_help = AFTER_HELP)]
pub struct BenchArgs {
    /// File to read or write. A missing file is created (and filled for
    /// reads); an existing one is only read unless it was created by fgds
    /// bench or --overwrite is given.
    #[arg(long, short = 'f')]
    file: PathBuf,
    /// Read or write.
    #[arg(long, value_enum, default_value = "read")]
    rw: Rw,
    /// Sequential or random offsets (aligned to the block size).
    #[arg(long, value_enum, default_value = "seq")]
    pattern: Pattern,
    /// Bytes per I/O call of the library (K/M/G suffixes).
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
    /// Total bytes to move per engine.
    #[arg(long, short = 's', default_value = "256M", value_parser = parse_size)]
    size: u64,
    /// Bytes of the file the offsets cover (default: --size). Reads create
    /// and fill the file up to this size first.
    #[arg(long, value_parser = parse_size)]
    file_size: Option<u64>,
    /// Buffer memory.
    #[arg(long, value_enum, default_value = "host")]
    mem: Mem,
    /// Do not use io_uring (pread/pwrite inside the engine).
    #[arg(long)]
    no_io_uring: bool,
    /// Also run a plain O_DIRECT pread/pwrite thread pool (Q threads of R
    /// bytes, see below) and compare.
    #[arg(long)]
    baseline: bool,
    /// Also run the library's Batch API with Q requests of R bytes in flight.
    #[arg(long)]
    batch: bool,
    /// Also run a bare io_uring loop without the library (Q requests of R
    /// bytes on a plain ring, one thread), measured like --batch.
    #[arg(long)]
    uring: bool,
    /// Also run fio (--ioengine=io_uring --direct=1, --iodepth=Q, --bs=R);
    /// fio must be on PATH.
    #[arg(long)]
    fio: bool,
    /// Run every engine this many times, rotating their order each round;
    /// rows add the rounds up (bytes, seconds, CPU) and list each round's MiB/s.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Only create and fill the file up to --file-size (or --size), then exit.
    #[arg(long)]
    prepare_only: bool,
    /// Allow writing a file that fgds bench did not create: growing it for a
    /// read run (bytes past its end), or overwriting it in a write run.
    /// Without it such a run stops before it starts. Files fgds bench
    /// created are marked (extended attribute user.fgds.bench) and need it not.
    #[arg(long)]
    overwrite: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Result1 {
    engine: String,
    /// Bytes per request the device sees.
    request_size: u64,
    /// Requests in flight (at most).
    in_flight: u64,
    bytes: u64,
    seconds: f64,
    mib_per_s: f64,
    /// Requests of `request_size` per second.
    iops: f64,
    avg_latency_us: f64,
    cpu_user_s: f64,
    cpu_sys_s: f64,
    cpu_seconds: f64,
    cpu_s_per_gib: f64,
    /// Context switches of the run (fio: of its job).
    ctx_switches: u64,
    /// fio only: CPU of the whole fio process tree (setup included).
    cpu_seconds_process: Option<f64>,
    /// Rounds (--repeat) added up in this row.
    runs: u32,
    /// MiB/s of each round, in the order they ran.
    samples_mib_per_s: Vec<f64>,
    /// Library only: requests submitted (direct + bounce).
    requests: Option<u64>,
    direct_bytes: Option<u64>,
    bounce_bytes: Option<u64>,
    fallbacks: Option<u64>,
}

#[derive(serde::Serialize)]
struct Report {
    file: PathBuf,
    file_size: u64,
    rw: Rw,
    pattern: Pattern,
    block_size: u64,
    queue_depth: u32,
    chunk_size: u64,
    threads: usize,
    total: u64,
    mem: Mem,
    io_uring: bool,
    /// Bytes per request of every row (R).
    request_size: u64,
    /// Requests in flight of every row (Q).
    in_flight: u64,
    results: Vec<Result1>,
}

/// Request size, requests in flight and file region shared by every row.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Geometry {
    req: u64,
    inflight: u64,
    span: u64,
}

fn geometry(a: &BenchArgs) -> Geometry {
    let req = a.bs.min(a.chunk).max(1);
    let per_call = a.bs.div_ceil(a.chunk.max(1)).min(u64::from(a.qd)).max(1);
    Geometry {
        req,
        inflight: a.threads as u64 * per_call,
        span: a.file_size.unwrap_or(a.size),
    }
}

/// Offsets of a pattern over `span` bytes in units of `unit` bytes.
struct Offsets {
    pattern: Pattern,
    blocks: u64,
    unit: u64,
    x: u64,
}

impl Offsets {
    fn new(pattern: Pattern, span: u64, unit: u64, seed: u64) -> Self {
        Offsets {
            pattern,
            blocks: (span / unit.max(1)).max(1),
            unit,
            x: 0x9E37_79B9_7F4A_7C15u64 ^ (seed + 1),
        }
    }

    /// Offset of the `i`-th I/O (seq) or the next random one (rand).
    fn at(&mut self, i: u64) -> u64 {
        match self.pattern {
            Pattern::Seq => (i % self.blocks) * self.unit,
            Pattern::Rand => {
                self.x ^= self.x << 13;
                self.x ^= self.x >> 7;
                self.x ^= self.x << 17;
                (self.x % self.blocks) * self.unit
            }
        }
    }
}

/// A seed no earlier run of this process or of another used: random
/// offsets are drawn afresh for every engine, round and thread, as fio's
/// are (--randrepeat=0), so that no engine reads blocks another has just
/// brought into a cache (the disk's, or the host's under a virtual disk).
fn run_seed() -> u64 {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    now ^ (u64::from(std::process::id()) << 40) ^ n.wrapping_mul(0xA076_1D64_78BD_642F)
}

fn offsets(a: &BenchArgs, t: usize) -> Vec<u64> {
    let per = a.size / a.threads as u64 / a.bs;
    let mut g = Offsets::new(a.pattern, geometry(a).span, a.bs, run_seed());
    (0..per).map(|i| g.at(t as u64 * per + i)).collect()
}

/// CPU time of this process (or its waited-for children).
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    user: f64,
    sys: f64,
    /// Context switches, voluntary and involuntary.
    ctx: u64,
}

impl Cpu {
    fn now(who: libc::c_int) -> Result<Cpu, fgds::Error> {
        // SAFETY: zeroed rusage is a valid out value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid `who` and out pointer.
        if unsafe { libc::getrusage(who, &mut ru) } < 0 {
            return Err(fgds::Error::Io {
                op: "getrusage".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Ok(Cpu {
            user: s(ru.ru_utime),
            sys: s(ru.ru_stime),
            ctx: (ru.ru_nvcsw + ru.ru_nivcsw).max(0) as u64,
        })
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            user: (self.user - before.user).max(0.0),
            sys: (self.sys - before.sys).max(0.0),
            ctx: self.ctx.saturating_sub(before.ctx),
        }
    }
}

/// Allocates the I/O memory of one thread. Host memory is touched here, so
/// that page faults do not land in the measured run.
fn make_buffer(mem: Mem, size: u64) -> Result<Buffer, fgds::Error> {
    match mem {
        Mem::Host => {
            let b = Buffer::alloc_host(size as usize)?;
            b.write_bytes(0, &vec![0x5a; size as usize])?;
            Ok(b)
        }
        Mem::Cuda | Mem::Fgds => {
            let rt = fgds::gpu::Runtime::cuda()?;
            rt.use_device(0)?;
            let a = fgds::gpu::export_align();
            let len = size.div_ceil(a) * a;
            let p = rt.mem_alloc(len as usize)?;
            let b = Buffer::from_cuda(p, len)?;
            if mem == Mem::Fgds && !b.is_p2p() {
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

/// A progress bar for filling `bytes` of the file: on a terminal (stderr)
/// only, and only when the fill is long enough to be seen waiting.
fn fill_progress(a: &BenchArgs, bytes: u64) -> indicatif::ProgressBar {
    if bytes < (256 << 20) {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(bytes);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb.set_message(format!("filling {}", a.file.display()));
    pb
}

/// The extended attribute that marks a file `fgds bench` created itself, so
/// that a later run may grow or write it without `--overwrite`.
const OWNER_XATTR: &std::ffi::CStr = c"user.fgds.bench";

/// Why `fgds bench` will not write a file.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The file exists, `fgds bench` did not create it, and the run would
    /// write it.
    #[error(
        "{file}: not created by fgds bench ({have} of its bytes), and this run would {what}; \
         fgds bench never writes a file it did not create: pass --overwrite to allow it, \
         or give a new file with -f"
    )]
    WouldWrite {
        /// The file.
        file: String,
        /// Its size now, in words.
        have: String,
        /// What the run would do to it.
        what: String,
    },
    /// A library or system call failed.
    #[error(transparent)]
    Fgds(#[from] fgds::Error),
}

fn io_err(op: String, source: std::io::Error) -> fgds::Error {
    fgds::Error::Io { op, source }
}

/// Whether `fd` carries the mark of a file `fgds bench` created.
fn is_ours(fd: i32) -> bool {
    let mut v = [0u8; 8];
    // SAFETY: fd is open, the name is NUL-terminated and `v` is a writable
    // buffer of the length passed.
    let n = unsafe { libc::fgetxattr(fd, OWNER_XATTR.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
    n == 1 && v[0] == b'1'
}

/// Marks `fd` as created by `fgds bench`; says so when the file system has
/// no user extended attributes (the next run then needs --overwrite).
fn mark_ours(fd: i32, file: &std::path::Path) {
    // SAFETY: fd is open, the name is NUL-terminated, the value is 1 byte.
    let r = unsafe { libc::fsetxattr(fd, OWNER_XATTR.as_ptr(), c"1".as_ptr().cast(), 1, 0) };
    if r < 0 {
        eprintln!(
            "fgds bench: note: cannot mark {} as created by fgds bench ({}): a later run that \
             writes it will need --overwrite",
            file.display(),
            std::io::Error::last_os_error()
        );
    }
}

/// Bytes of a regular file or a block device.
fn length_of(f: &std::fs::File, file: &std::path::Path) -> Result<u64, fgds::Error> {
    use std::io::Seek;
    let mut f = f;
    f.seek(std::io::SeekFrom::End(0))
        .map_err(|e| io_err(format!("size of {}", file.display()), e))
}

/// Decides, before anything runs, whether the run may write the file, and
/// says on stderr what it will do to it: a missing file is created (and
/// marked as the benchmark's); an existing one that `fgds bench` did not
/// create is only read unless `--overwrite`. Then fills it up to the bytes a
/// read run needs (only past its current end: existing bytes are kept).
fn prepare(a: &BenchArgs, always: bool) -> Result<(), BenchError> {
    let need = a.size.max(geometry(a).span);
    let fill_needed = |have: u64| (always || a.rw == Rw::Read) && have < need;
    let name = a.file.display().to_string();
    let existing = match std::fs::File::open(&a.file) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(format!("open {name}"), e).into()),
    };
    let have = match existing {
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&a.file)
                .map_err(|e| io_err(format!("create {name}"), e))?;
            mark_ours(f.as_raw_fd(), &a.file);
            eprintln!(
                "fgds bench: {name} does not exist: creating it for the benchmark ({})",
                human(if a.rw == Rw::Read || always {
                    need
                } else {
                    geometry(a).span
                })
            );
            0
        }
        Some(f) => {
            let have = length_of(&f, &a.file)?;
            let regular = f.metadata().map(|m| m.is_file()).unwrap_or(false);
            if !regular && have < need {
                return Err(fgds::Error::InvalidArgument(format!(
                    "{name} is not a regular file and holds {}, less than the {} this run needs: \
                     lower -s/--file-size",
                    human(have),
                    human(need)
                ))
                .into());
            }
            let what = if fill_needed(have) {
                Some(format!(
                    "grow it from {} to {} (bytes from {} on written)",
                    human(have),
                    human(need),
                    have
                ))
            } else if a.rw == Rw::Write && !always {
                Some(format!(
                    "overwrite its first {} with the write benchmark's data",
                    human(geometry(a).span)
                ))
            } else {
                None
            };
            match what {
                None => {}
                Some(_) if regular && is_ours(f.as_raw_fd()) => {}
                Some(what) if a.overwrite => {
                    eprintln!("fgds bench: --overwrite: will {what} of {name}");
                }
                Some(what) => {
                    return Err(BenchError::WouldWrite {
                        file: name,
                        have: human(have),
                        what,
                    })
                }
            }
            if !regular {
                // A block device is large enough (above): nothing to fill.
                return Ok(());
            }
            have
        }
    };
    if fill_needed(have) {
        let f = FileHandle::open(&a.file, libc::O_RDWR, 0o644, Config::default())?;
        let chunk = 8usize << 20;
        let b = Buffer::alloc_host(chunk)?;
        let fill: Vec<u8> = (0..chunk).map(|i| (i * 131 % 251) as u8).collect();
        b.write_bytes(0, &fill)?;
        // Byte `o` of the file is fill[o % chunk]; start at the current end
        // so that no byte already there is rewritten.
        let pb = fill_progress(a, need - have);
        let mut off = have;
        while off < need {
            let at = (off % chunk as u64) as usize;
            let n = (need - off).min((chunk - at) as u64) as usize;
            f.write(&b, at, n, off)?;
            off += n as u64;
            pb.inc(n as u64);
        }
        pb.finish_and_clear();
        // SAFETY: valid fd.
        if unsafe { libc::fsync(f.raw_fd()) } < 0 {
            return Err(io_err(format!("fsync {name}"), std::io::Error::last_os_error()).into());
        }
    }
    Ok(())
}

fn engine_config(a: &BenchArgs) -> Config {
    Config {
        chunk_size: a.chunk as usize,
        queue_depth: a.qd,
        use_io_uring: !a.no_io_uring,
        ..Config::default()
    }
}

fn open_flags(a: &BenchArgs) -> i32 {
    if a.rw == Rw::Read {
        libc::O_RDONLY
    } else {
        // prepare() created the file, or found one it may write
        libc::O_RDWR
    }
}

/// What one engine run measured.
#[derive(Debug, Clone, Default)]
struct Measured {
    bytes: u64,
    secs: f64,
    lat_ns: u64,
    lat_count: u64,
    cpu: Cpu,
    /// The library's counters (fgds rows).
    stats: Option<fgds::Stats>,
    /// fio: CPU seconds of the whole process tree.
    cpu_process: Option<f64>,
}

impl Measured {
    fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.secs.max(1e-9)
    }

    /// Adds another round of the same engine.
    fn add(&mut self, o: &Measured) {
        self.bytes += o.bytes;
        self.secs += o.secs;
        self.lat_ns += o.lat_ns;
        self.lat_count += o.lat_count;
        self.cpu.user += o.cpu.user;
        self.cpu.sys += o.cpu.sys;
        self.cpu.ctx += o.cpu.ctx;
        self.stats = match (self.stats.take(), &o.stats) {
            (Some(mut a), Some(b)) => {
                a.direct_bytes += b.direct_bytes;
                a.bounce_bytes += b.bounce_bytes;
                a.fallbacks += b.fallbacks;
                a.direct_ops += b.direct_ops;
                a.bounce_ops += b.bounce_ops;
                Some(a)
            }
            (a, b) => a.or_else(|| b.clone()),
        };
        self.cpu_process = match (self.cpu_process, o.cpu_process) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

fn summary(engine: &str, g: Geometry, m: Measured, samples: Vec<f64>) -> Result1 {
    let secs = m.secs.max(1e-9);
    let cpu = m.cpu.user + m.cpu.sys;
    let gib = m.bytes as f64 / (1u64 << 30) as f64;
    let st = m.stats;
    Result1 {
        engine: engine.into(),
        request_size: g.req,
        in_flight: g.inflight,
        bytes: m.bytes,
        seconds: m.secs,
        mib_per_s: m.bytes as f64 / (1 << 20) as f64 / secs,
        iops: m.bytes as f64 / g.req as f64 / secs,
        avg_latency_us: if m.lat_count > 0 {
            m.lat_ns as f64 / m.lat_count as f64 / 1000.0
        } else {
            0.0
        },
        cpu_user_s: m.cpu.user,
        cpu_sys_s: m.cpu.sys,
        cpu_seconds: cpu,
        cpu_s_per_gib: if gib > 0.0 { cpu / gib } else { 0.0 },
        ctx_switches: m.cpu.ctx,
        cpu_seconds_process: m.cpu_process,
        runs: samples.len() as u32,
        samples_mib_per_s: samples,
        requests: st.as_ref().map(|s| s.direct_ops + s.bounce_ops),
        direct_bytes: st.as_ref().map(|s| s.direct_bytes),
        bounce_bytes: st.as_ref().map(|s| s.bounce_bytes),
        fallbacks: st.as_ref().map(|s| s.fallbacks),
    }
}

fn run_fgds(a: &BenchArgs) -> Result<Measured, fgds::Error> {
    let f = Arc::new(FileHandle::open(
        &a.file,
        open_flags(a),
        0o644,
        engine_config(a),
    )?);
    let bufs = (0..a.threads)
        .map(|_| make_buffer(a.mem, a.bs))
        .collect::<Result<Vec<_>, _>>()?;
    let pb = progress(a, "fgds");
    let lat_ns = AtomicU64::new(0);
    let ops = AtomicU64::new(0);
    let cpu0 = Cpu::now(libc::RUSAGE_SELF)?;
    let t0 = Instant::now();
    let r: Result<u64, fgds::Error> = std::thread::scope(|s| {
        let hs: Vec<_> = bufs
            .iter()
            .enumerate()
            .map(|(t, b)| {
                let f = f.clone();
                let (pb, lat_ns, ops) = (&pb, &lat_ns, &ops);
                s.spawn(move || -> Result<u64, fgds::Error> {
                    let mut bytes = 0u64;
                    for off in offsets(a, t) {
                        let t1 = Instant::now();
                        let n = match a.rw {
                            Rw::Read => f.read(b, 0, a.bs as usize, off)?,
                            Rw::Write => f.write(b, 0, a.bs as usize, off)?,
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
    let cpu = Cpu::now(libc::RUSAGE_SELF)?.since(cpu0);
    pb.finish_and_clear();
    let m = Measured {
        bytes,
        secs,
        lat_ns: lat_ns.load(Ordering::Relaxed),
        lat_count: ops.load(Ordering::Relaxed),
        cpu,
        stats: Some(f.stats()),
        cpu_process: None,
    };
    Ok(m)
}

/// The requests one thread keeps in flight (fgds-batch, io_uring-loop):
/// which of its Q buffer slots are free, when each request was issued and
/// what the finished ones moved. Both engines count through it, so their
/// rows are timed alike.
struct InFlight {
    free: Vec<usize>,
    started: Vec<Instant>,
    total: u64,
    issued: u64,
    done: u64,
    bytes: u64,
    lat_ns: u64,
}

impl InFlight {
    fn new(q: usize, total: u64) -> Self {
        InFlight {
            free: (0..q).rev().collect(),
            started: vec![Instant::now(); q],
            total,
            issued: 0,
            done: 0,
            bytes: 0,
            lat_ns: 0,
        }
    }

    /// A free slot and the request's index, while requests are left to
    /// issue; the request counts as issued from now.
    fn issue(&mut self) -> Option<(usize, u64)> {
        if self.issued >= self.total {
            return None;
        }
        let slot = self.free.pop()?;
        if let Some(t) = self.started.get_mut(slot) {
            *t = Instant::now();
        }
        self.issued += 1;
        Some((slot, self.issued - 1))
    }

    /// The request in `slot` moved `n` bytes; the slot is free again.
    fn finish(&mut self, slot: usize, n: u64) {
        if let Some(t) = self.started.get(slot) {
            self.lat_ns += t.elapsed().as_nanos() as u64;
        }
        self.free.push(slot);
        self.bytes += n;
        self.done += 1;
    }

    fn all_done(&self) -> bool {
        self.done >= self.total
    }
}

fn run_batch(a: &BenchArgs) -> Result<Measured, fgds::Error> {
    let g = geometry(a);
    let q = g.inflight as usize;
    if q > Batch::MAX_CAPACITY {
        return Err(fgds::Error::InvalidArgument(format!(
            "--batch: {q} requests in flight > batch capacity {}",
            Batch::MAX_CAPACITY
        )));
    }
    let f = Arc::new(FileHandle::open(
        &a.file,
        open_flags(a),
        0o644,
        engine_config(a),
    )?);
    let req = g.req as usize;
    let buf = Arc::new(make_buffer(a.mem, g.req * q as u64)?);
    let op = match a.rw {
        Rw::Read => Op::Read,
        Rw::Write => Op::Write,
    };
    let mut gen = Offsets::new(a.pattern, g.span, g.req, run_seed());
    let mut batch = Batch::new(q)?;
    let pb = progress(a, "fgds-batch");
    let cpu0 = Cpu::now(libc::RUSAGE_SELF)?;
    let t0 = Instant::now();
    let mut fl = InFlight::new(q, a.size / g.req);
    let mut params = Vec::with_capacity(q);
    while !fl.all_done() {
        params.clear();
        while let Some((slot, i)) = fl.issue() {
            params.push(IoParams {
                cookie: slot as u64,
                file: f.clone(),
                op,
                file_off: gen.at(i),
                target: IoTarget::Plain {
                    buffer: buf.clone(),
                    buf_off: slot * req,
                    size: req,
                },
            });
        }
        if !params.is_empty() {
            batch.submit(&params)?;
        }
        for ev in batch.wait(1, None) {
            if ev.status != Status::Complete {
                let e = i32::try_from(-ev.result)
                    .ok()
                    .filter(|e| *e > 0)
                    .unwrap_or(libc::EIO);
                return Err(fgds::Error::Io {
                    op: format!("batch request {:?}", ev.status),
                    source: std::io::Error::from_raw_os_error(e),
                });
            }
            fl.finish(ev.cookie as usize, ev.result as u64);
            pb.inc(ev.result as u64);
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = Cpu::now(libc::RUSAGE_SELF)?.since(cpu0);
    pb.finish_and_clear();
    let m = Measured {
        bytes: fl.bytes,
        secs,
        lat_ns: fl.lat_ns,
        lat_count: fl.done,
        cpu,
        stats: Some(f.stats()),
        cpu_process: None,
    };
    Ok(m)
}

/// The file with O_DIRECT, for the engines that bypass the library.
fn open_direct(a: &BenchArgs) -> Result<std::fs::File, fgds::Error> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(a.rw == Rw::Write)
        .custom_flags(libc::O_DIRECT)
        .open(&a.file)
        .map_err(|e| fgds::Error::Io {
            op: format!("open {} O_DIRECT", a.file.display()),
            source: e,
        })
}

fn run_baseline(a: &BenchArgs) -> Result<Measured, fgds::Error> {
    let g = geometry(a);
    let file = open_direct(a)?;
    let fd = file.as_raw_fd();
    let pb = progress(a, "pread pool");
    let lat_ns = AtomicU64::new(0);
    let next = AtomicU64::new(0);
    let total_ops = a.size / g.req;
    let bufs = (0..g.inflight)
        .map(|_| make_buffer(Mem::Host, g.req))
        .collect::<Result<Vec<_>, _>>()?;
    let cpu0 = Cpu::now(libc::RUSAGE_SELF)?;
    let t0 = Instant::now();
    let r: Result<u64, fgds::Error> = std::thread::scope(|s| {
        let hs: Vec<_> = bufs
            .iter()
            .map(|b| {
                let (pb, lat_ns, next) = (&pb, &lat_ns, &next);
                s.spawn(move || -> Result<u64, fgds::Error> {
                    let p = b.base_addr() as *mut libc::c_void;
                    let mut gen = Offsets::new(a.pattern, g.span, g.req, run_seed());
                    let mut bytes = 0u64;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= total_ops {
                            return Ok(bytes);
                        }
                        let off = gen.at(i) as libc::off_t;
                        let t1 = Instant::now();
                        let len = g.req as usize;
                        // SAFETY: p points to req bytes owned by b.
                        let n = unsafe {
                            match a.rw {
                                Rw::Read => libc::pread(fd, p, len, off),
                                Rw::Write => libc::pwrite(fd, p, len, off),
                            }
                        };
                        if n < 0 {
                            return Err(fgds::Error::Io {
                                op: format!("pread/pwrite {len} bytes at {off}"),
                                source: std::io::Error::last_os_error(),
                            });
                        }
                        lat_ns.fetch_add(t1.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        bytes += n as u64;
                        pb.inc(n as u64);
                    }
                })
            })
            .collect();
        join_all(hs)
    });
    let bytes = r?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = Cpu::now(libc::RUSAGE_SELF)?.since(cpu0);
    pb.finish_and_clear();
    let m = Measured {
        bytes,
        secs,
        lat_ns: lat_ns.load(Ordering::Relaxed),
        lat_count: total_ops,
        cpu,
        stats: None,
        cpu_process: None,
    };
    Ok(m)
}

/// The error of a failed io_uring call of the bare loop.
fn uring_err(op: &str, e: std::io::Error) -> fgds::Error {
    fgds::Error::Io {
        op: format!("io_uring-loop: {op}"),
        source: e,
    }
}

/// `--uring`: fio's io_uring engine reduced to its loop, in this process.
/// One thread keeps Q requests of R bytes in flight on a ring of its own
/// (COOP_TASKRUN where the kernel has it), submitting each request with a
/// system call of its own and sleeping in the kernel only when the ring
/// has no completion, as fio does; no library code runs. The difference to
/// the fgds-batch row is what the Batch API adds per request.
fn run_uring(a: &BenchArgs) -> Result<Measured, fgds::Error> {
    use io_uring::{opcode, types, IoUring};
    let g = geometry(a);
    let q = g.inflight as usize;
    let req = g.req as usize;
    let len = u32::try_from(req).map_err(|_| {
        fgds::Error::InvalidArgument(format!(
            "--uring: requests of {req} bytes do not fit one io_uring read/write; use --chunk 2G or less"
        ))
    })?;
    let file = open_direct(a)?;
    let fd = types::Fd(file.as_raw_fd());
    let buf = make_buffer(Mem::Host, g.req * q as u64)?;
    let base = buf.base_addr() as *mut u8;
    let entries = u32::try_from(q.next_power_of_two().max(8)).unwrap_or(4096);
    let mut ring = IoUring::builder()
        .setup_coop_taskrun()
        .build(entries)
        .or_else(|_| IoUring::new(entries))
        .map_err(|e| uring_err("io_uring_setup", e))?;
    let mut gen = Offsets::new(a.pattern, g.span, g.req, run_seed());
    let pb = progress(a, "io_uring-loop");
    let cpu0 = Cpu::now(libc::RUSAGE_SELF)?;
    let t0 = Instant::now();
    let mut fl = InFlight::new(q, a.size / g.req);
    let mut err: Option<fgds::Error> = None;
    // Requests the kernel may still be transferring into buf.
    let mut inflight = 0usize;
    loop {
        while err.is_none() {
            let Some((slot, i)) = fl.issue() else { break };
            // SAFETY: slot < q, so the request's R bytes lie inside buf.
            let ptr = unsafe { base.add(slot * req) };
            let off = gen.at(i);
            let sqe = match a.rw {
                Rw::Read => opcode::Read::new(fd, ptr, len).offset(off).build(),
                Rw::Write => opcode::Write::new(fd, ptr, len).offset(off).build(),
            }
            .user_data(slot as u64);
            // SAFETY: the SQE points at buf, which stays alive until every
            // request has been reaped (or is leaked below). The queue has
            // room: each request is submitted before the next is queued.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                err = Some(uring_err("submission queue", std::io::Error::other("full")));
                break;
            }
            inflight += 1;
            if let Err(e) = ring.submit() {
                err = Some(uring_err("io_uring_enter", e));
            }
        }
        if inflight == 0 {
            break;
        }
        let mut reaped = 0;
        for c in ring.completion() {
            reaped += 1;
            inflight -= 1;
            let slot = c.user_data() as usize;
            let n = c.result();
            if n < 0 || n as usize != req {
                let why = if n < 0 {
                    std::io::Error::from_raw_os_error(-n)
                } else {
                    std::io::Error::other(format!("short transfer of {n} bytes"))
                };
                err.get_or_insert(uring_err(&format!("request of {req} bytes"), why));
                continue;
            }
            fl.finish(slot, n as u64);
            pb.inc(n as u64);
        }
        if reaped == 0 {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    // Cannot wait for what is in flight: the memory it
                    // points at must outlive it.
                    std::mem::forget(buf);
                    return Err(uring_err("io_uring_enter (wait)", e));
                }
            }
        }
    }
    if let Some(e) = err {
        return Err(e);
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = Cpu::now(libc::RUSAGE_SELF)?.since(cpu0);
    pb.finish_and_clear();
    Ok(Measured {
        bytes: fl.bytes,
        secs,
        lat_ns: fl.lat_ns,
        lat_count: fl.done,
        cpu,
        stats: None,
        cpu_process: None,
    })
}

/// What fio's JSON report says about the job.
#[derive(Debug)]
struct FioOut {
    bytes: u64,
    runtime_s: f64,
    lat_ns: f64,
    cpu: Cpu,
}

fn fio_parse(stdout: &str, rw: Rw) -> Result<FioOut, String> {
    let start = stdout.find('{').ok_or("no JSON document in fio's output")?;
    let v: serde_json::Value =
        serde_json::from_str(&stdout[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let j = &v["jobs"][0];
    if j.is_null() {
        return Err("fio JSON has no jobs".into());
    }
    if let Some(e) = j["error"].as_i64().filter(|e| *e != 0) {
        return Err(format!("fio job error {e}"));
    }
    let sec = match rw {
        Rw::Read => &j["read"],
        Rw::Write => &j["write"],
    };
    let num = |v: &serde_json::Value, what: &str| {
        v.as_f64()
            .ok_or_else(|| format!("fio JSON lacks a number for {what}"))
    };
    let runtime_ms = num(&sec["runtime"], "runtime")?;
    let job_ms = num(&j["job_runtime"], "job_runtime")?;
    let usr = num(&j["usr_cpu"], "usr_cpu")?;
    let sys = num(&j["sys_cpu"], "sys_cpu")?;
    Ok(FioOut {
        bytes: sec["io_bytes"].as_u64().ok_or("fio JSON lacks io_bytes")?,
        runtime_s: runtime_ms / 1000.0,
        lat_ns: sec["lat_ns"]["mean"].as_f64().unwrap_or(0.0),
        cpu: Cpu {
            user: usr / 100.0 * job_ms / 1000.0,
            sys: sys / 100.0 * job_ms / 1000.0,
            ctx: j["ctx"].as_u64().unwrap_or(0),
        },
    })
}

fn fio_args(a: &BenchArgs, g: Geometry) -> Vec<String> {
    let rw = match (a.rw, a.pattern) {
        (Rw::Read, Pattern::Seq) => "read",
        (Rw::Read, Pattern::Rand) => "randread",
        (Rw::Write, Pattern::Seq) => "write",
        (Rw::Write, Pattern::Rand) => "randwrite",
    };
    // fio separates several file names with ':'.
    let name = a.file.to_string_lossy().replace(':', "\\:");
    vec![
        "--name=fgds-bench".into(),
        format!("--filename={name}"),
        "--ioengine=io_uring".into(),
        "--direct=1".into(),
        format!("--rw={rw}"),
        format!("--bs={}", g.req),
        format!("--iodepth={}", g.inflight),
        "--numjobs=1".into(),
        format!("--size={}", (g.span / g.req).max(1) * g.req),
        format!("--io_size={}", a.size / g.req * g.req),
        "--norandommap".into(),
        "--randrepeat=0".into(),
        "--output-format=json".into(),
    ]
}

fn run_fio(a: &BenchArgs) -> Result<Measured, fgds::Error> {
    let g = geometry(a);
    let args = fio_args(a, g);
    let before = Cpu::now(libc::RUSAGE_CHILDREN)?;
    let out = std::process::Command::new("fio")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| fgds::Error::Io {
            op: if e.kind() == std::io::ErrorKind::NotFound {
                "--fio: fio is not on PATH; install it (as root) with `apt-get install fio`".into()
            } else {
                "--fio: cannot run fio".into()
            },
            source: e,
        })?;
    let whole = Cpu::now(libc::RUSAGE_CHILDREN)?.since(before);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let fail = |why: String| fgds::Error::Io {
        op: format!("fio {}", args.join(" ")),
        source: std::io::Error::other(format!("{why}; stderr: {}", stderr.trim())),
    };
    if !out.status.success() {
        return Err(fail(format!("{}", out.status)));
    }
    let f = fio_parse(&String::from_utf8_lossy(&out.stdout), a.rw).map_err(fail)?;
    Ok(Measured {
        bytes: f.bytes,
        secs: f.runtime_s,
        lat_ns: f.lat_ns as u64,
        lat_count: 1,
        cpu: f.cpu,
        stats: None,
        cpu_process: Some(whole.user + whole.sys),
    })
}

fn print_table(rep: &Report) {
    println!(
        "{:?} {:?} bs={} qd={} chunk={} threads={} total={} file={} mem={:?} | request {} x {} in flight",
        rep.rw,
        rep.pattern,
        human(rep.block_size),
        rep.queue_depth,
        human(rep.chunk_size),
        rep.threads,
        human(rep.total),
        human(rep.file_size),
        rep.mem,
        human(rep.request_size),
        rep.in_flight,
    );
    println!(
        "{:<13} {:>9} {:>10} {:>13} {:>10} {:>11} {:>8} {:>7} {:>9} {:>11} {:>11}",
        "engine",
        "in flight",
        "MiB/s",
        "rounds min-max",
        "IOPS",
        "avg lat us",
        "secs",
        "CPU s",
        "CPU s/GiB",
        "direct",
        "bounce"
    );
    for r in &rep.results {
        let lo = r
            .samples_mib_per_s
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let hi = r.samples_mib_per_s.iter().copied().fold(0.0, f64::max);
        println!(
            "{:<13} {:>9} {:>10.1} {:>13} {:>10.0} {:>11.1} {:>8.3} {:>7.3} {:>9.3} {:>11} {:>11}",
            r.engine,
            r.in_flight,
            r.mib_per_s,
            format!("{lo:.0}-{hi:.0}"),
            r.iops,
            r.avg_latency_us,
            r.seconds,
            r.cpu_seconds,
            r.cpu_s_per_gib,
            r.direct_bytes.map(human).unwrap_or_else(|| "-".into()),
            r.bounce_bytes.map(human).unwrap_or_else(|| "-".into()),
        );
    }
}

pub fn run(a: BenchArgs) -> Result<ExitCode, BenchError> {
    if a.bs == 0 || a.chunk == 0 || a.threads == 0 || a.size < a.bs * a.threads as u64 {
        return Err(fgds::Error::InvalidArgument(
            "need bs > 0, chunk > 0, threads > 0 and size >= bs * threads".into(),
        )
        .into());
    }
    let g = geometry(&a);
    if g.span < a.bs || g.span < g.req {
        return Err(fgds::Error::InvalidArgument(format!(
            "--file-size {} is smaller than one call ({})",
            g.span, a.bs
        ))
        .into());
    }
    if a.prepare_only {
        prepare(&a, true)?;
        if !a.json {
            println!(
                "{}: ready, {}",
                a.file.display(),
                human(std::fs::metadata(&a.file).map(|m| m.len()).unwrap_or(0))
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    prepare(&a, false)?;
    type Runner = fn(&BenchArgs) -> Result<Measured, fgds::Error>;
    let mut engines: Vec<(&str, Runner)> = vec![("fgds", run_fgds)];
    if a.batch {
        engines.push(("fgds-batch", run_batch));
    }
    if a.baseline {
        engines.push(("pread-pool", run_baseline));
    }
    if a.uring {
        engines.push(("io_uring-loop", run_uring));
    }
    if a.fio {
        engines.push(("fio-io_uring", run_fio));
    }
    let n = engines.len();
    let mut acc: Vec<(Measured, Vec<f64>)> = vec![(Measured::default(), Vec::new()); n];
    for round in 0..a.repeat as usize {
        for k in 0..n {
            let i = (k + round) % n;
            let m = (engines[i].1)(&a)?;
            acc[i].1.push(m.mib_per_s());
            acc[i].0.add(&m);
        }
    }
    let results = engines
        .iter()
        .zip(acc)
        .map(|((name, _), (m, samples))| summary(name, g, m, samples))
        .collect();
    let rep = Report {
        file: a.file.clone(),
        file_size: g.span,
        rw: a.rw,
        pattern: a.pattern,
        block_size: a.bs,
        queue_depth: a.qd,
        chunk_size: a.chunk,
        threads: a.threads,
        total: a.size,
        mem: a.mem,
        io_uring: !a.no_io_uring,
        request_size: g.req,
        in_flight: g.inflight,
        results,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep).unwrap_or_default());
    } else {
        print_table(&rep);
    }
    Ok(ExitCode::SUCCESS)
}

/// Joins the benchmark threads and adds up the bytes they moved.
fn join_all(
    hs: Vec<std::thread::ScopedJoinHandle<'_, Result<u64, fgds::Error>>>,
) -> Result<u64, fgds::Error> {
    let mut total = 0;
    let mut first_err = None;
    for h in hs {
        match h.join() {
            Ok(Ok(n)) => total += n,
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err
                    .get_or_insert(fgds::Error::InvalidArgument("bench thread panicked".into()));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(total),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchArgs,
    }

    fn args(v: &[&str]) -> BenchArgs {
        let mut all = vec!["bench", "-f", "/nonexistent"];
        all.extend_from_slice(v);
        Cli::parse_from(all).a
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("4g"), Ok(4 << 30));
        assert!(parse_size("1X").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn equal_in_flight() {
        // 1 MiB sequential at qd 32: one thread, 64 MiB calls, 1 MiB chunks.
        let g = geometry(&args(&["-b", "64M", "--chunk", "1M", "-q", "32"]));
        assert_eq!((g.req, g.inflight), (1 << 20, 32));
        // 4 KiB random at qd 32: 32 threads of one 4 KiB request each.
        let g = geometry(&args(&["-b", "4K", "-t", "32", "-q", "1"]));
        assert_eq!((g.req, g.inflight), (4096, 32));
        // a call shorter than qd chunks keeps only its chunks in flight
        let g = geometry(&args(&[
            "-b", "256K", "--chunk", "64K", "-q", "16", "-t", "2",
        ]));
        assert_eq!((g.req, g.inflight), (64 << 10, 8));
        let g = geometry(&args(&["-s", "1G", "--file-size", "4G"]));
        assert_eq!(g.span, 4 << 30);
    }

    #[test]
    fn offsets_stay_in_the_file() {
        let mut s = Offsets::new(Pattern::Seq, 10 << 20, 1 << 20, 0);
        assert_eq!(s.at(0), 0);
        assert_eq!(s.at(3), 3 << 20);
        assert_eq!(s.at(10), 0);
        let mut r = Offsets::new(Pattern::Rand, 4 << 30, 4096, 7);
        for i in 0..10_000 {
            let o = r.at(i);
            assert_eq!(o % 4096, 0);
            assert!(o + 4096 <= 4 << 30);
        }
    }

    #[test]
    fn fio_command_and_json() {
        let a = args(&[
            "--rw",
            "read",
            "--pattern",
            "rand",
            "-b",
            "4K",
            "-t",
            "8",
            "-q",
            "1",
            "-s",
            "64M",
            "--file-size",
            "4G",
        ]);
        let v = fio_args(&a, geometry(&a)).join(" ");
        for want in [
            "--rw=randread",
            "--bs=4096",
            "--iodepth=8",
            "--direct=1",
            "--ioengine=io_uring",
            "--size=4294967296",
            "--io_size=67108864",
        ] {
            assert!(v.contains(want), "{v}");
        }
        let out = r#"note: a warning line
{ "fio version": "fio-3.33",
  "jobs": [ { "jobname": "fgds-bench", "error": 0, "job_runtime": 2000, "ctx": 42,
      "usr_cpu": 5.0, "sys_cpu": 20.0,
      "read": { "io_bytes": 1073741824, "runtime": 2000, "iops": 128.0,
                "lat_ns": { "mean": 7000.0 } },
      "write": { "io_bytes": 0, "runtime": 0, "lat_ns": { "mean": 0.0 } } } ] }"#;
        let f = fio_parse(out, Rw::Read).unwrap();
        assert_eq!(f.bytes, 1 << 30);
        assert!((f.runtime_s - 2.0).abs() < 1e-9);
        assert!((f.cpu.user - 0.1).abs() < 1e-9);
        assert!((f.cpu.sys - 0.4).abs() < 1e-9);
        assert_eq!(f.cpu.ctx, 42);
        assert!(fio_parse("fio: no such option", Rw::Read).is_err());
        assert!(fio_parse(r#"{"jobs": []}"#, Rw::Read).is_err());
    }
}
