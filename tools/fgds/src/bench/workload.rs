//! The command line of `fgds bench` and the workload it sets: the
//! arguments, the request size and requests in flight every row shares,
//! the offsets of each I/O, and the library's configuration for the run.

use clap::{Args, ValueEnum};
use fgds::Config;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

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
    pub(super) file: PathBuf,
    /// Read or write.
    #[arg(long, value_enum, default_value = "read")]
    pub(super) rw: Rw,
    /// Sequential or random offsets (aligned to the block size).
    #[arg(long, value_enum, default_value = "seq")]
    pub(super) pattern: Pattern,
    /// Bytes per I/O call of the library (K/M/G suffixes).
    #[arg(long, short = 'b', default_value = "1M", value_parser = parse_size)]
    pub(super) bs: u64,
    /// Queue depth of each call (chunks in flight).
    #[arg(long, short = 'q', default_value_t = fgds::engine::DEFAULT_QUEUE_DEPTH)]
    pub(super) qd: u32,
    /// Chunk size the engine splits calls into.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub(super) chunk: u64,
    /// Threads issuing calls.
    #[arg(long, short = 't', default_value_t = 1)]
    pub(super) threads: usize,
    /// Total bytes to move per engine.
    #[arg(long, short = 's', default_value = "256M", value_parser = parse_size)]
    pub(super) size: u64,
    /// Bytes of the file the offsets cover (default: --size). Reads create
    /// and fill the file up to this size first.
    #[arg(long, value_parser = parse_size)]
    pub(super) file_size: Option<u64>,
    /// Buffer memory.
    #[arg(long, value_enum, default_value = "host")]
    pub(super) mem: Mem,
    /// Do not use io_uring (pread/pwrite inside the engine).
    #[arg(long)]
    pub(super) no_io_uring: bool,
    /// Also run a plain O_DIRECT pread/pwrite thread pool (Q threads of R
    /// bytes, see below) and compare.
    #[arg(long)]
    pub(super) baseline: bool,
    /// Also run the library's Batch API with Q requests of R bytes in flight.
    #[arg(long)]
    pub(super) batch: bool,
    /// Also run a bare io_uring loop without the library (Q requests of R
    /// bytes on a plain ring, one thread), measured like --batch.
    #[arg(long)]
    pub(super) uring: bool,
    /// Also run fio (--ioengine=io_uring --direct=1, --iodepth=Q, --bs=R);
    /// fio must be on PATH.
    #[arg(long)]
    pub(super) fio: bool,
    /// Run every engine this many times, rotating their order each round;
    /// rows add the rounds up (bytes, seconds, CPU) and list each round's MiB/s.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) repeat: u32,
    /// Only create and fill the file up to --file-size (or --size), then exit.
    #[arg(long)]
    pub(super) prepare_only: bool,
    /// Allow writing a file that fgds bench did not create: growing it for a
    /// read run (bytes past its end), or overwriting it in a write run.
    /// Without it such a run stops before it starts. Files fgds bench
    /// created are marked (extended attribute user.fgds.bench) and need it not.
    #[arg(long)]
    pub(super) overwrite: bool,
    /// Print JSON.
    #[arg(long)]
    pub(super) json: bool,
}

/// Request size, requests in flight and file region shared by every row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Geometry {
    pub(super) req: u64,
    pub(super) inflight: u64,
    pub(super) span: u64,
}

pub(super) fn geometry(a: &BenchArgs) -> Geometry {
    let req = a.bs.min(a.chunk).max(1);
    let per_call = a.bs.div_ceil(a.chunk.max(1)).min(u64::from(a.qd)).max(1);
    Geometry {
        req,
        inflight: a.threads as u64 * per_call,
        span: a.file_size.unwrap_or(a.size),
    }
}

/// Offsets of a pattern over `span` bytes in units of `unit` bytes.
pub(super) struct Offsets {
    pub(super) pattern: Pattern,
    pub(super) blocks: u64,
    pub(super) unit: u64,
    pub(super) x: u64,
}

impl Offsets {
    pub(super) fn new(pattern: Pattern, span: u64, unit: u64, seed: u64) -> Self {
        Offsets {
            pattern,
            blocks: (span / unit.max(1)).max(1),
            unit,
            x: 0x9E37_79B9_7F4A_7C15u64 ^ (seed + 1),
        }
    }

    /// Offset of the `i`-th I/O (seq) or the next random one (rand).
    pub(super) fn at(&mut self, i: u64) -> u64 {
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
pub(super) fn run_seed() -> u64 {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    now ^ (u64::from(std::process::id()) << 40) ^ n.wrapping_mul(0xA076_1D64_78BD_642F)
}

pub(super) fn offsets(a: &BenchArgs, t: usize) -> Vec<u64> {
    let per = a.size / a.threads as u64 / a.bs;
    let mut g = Offsets::new(a.pattern, geometry(a).span, a.bs, run_seed());
    (0..per).map(|i| g.at(t as u64 * per + i)).collect()
}

pub(super) fn engine_config(a: &BenchArgs) -> Config {
    Config {
        chunk_size: a.chunk as usize,
        queue_depth: a.qd,
        use_io_uring: !a.no_io_uring,
        ..Config::default()
    }
}

pub(super) fn open_flags(a: &BenchArgs) -> i32 {
    if a.rw == Rw::Read {
        libc::O_RDONLY
    } else {
        // prepare() created the file, or found one it may write
        libc::O_RDWR
    }
}

/// `fgds bench -f /nonexistent` with `v` after it, parsed (for the tests).
#[cfg(test)]
pub(super) fn args_of(v: &[&str]) -> BenchArgs {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchArgs,
    }

    let mut all = vec!["bench", "-f", "/nonexistent"];
    all.extend_from_slice(v);
    Cli::parse_from(all).a
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let g = geometry(&args_of(&["-b", "64M", "--chunk", "1M", "-q", "32"]));
        assert_eq!((g.req, g.inflight), (1 << 20, 32));
        // 4 KiB random at qd 32: 32 threads of one 4 KiB request each.
        let g = geometry(&args_of(&["-b", "4K", "-t", "32", "-q", "1"]));
        assert_eq!((g.req, g.inflight), (4096, 32));
        // a call shorter than qd chunks keeps only its chunks in flight
        let g = geometry(&args_of(&[
            "-b", "256K", "--chunk", "64K", "-q", "16", "-t", "2",
        ]));
        assert_eq!((g.req, g.inflight), (64 << 10, 8));
        let g = geometry(&args_of(&["-s", "1G", "--file-size", "4G"]));
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
}
