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

use crate::check::{self, ProbeMem};
use crate::gpumem::{GpuMem, Spec};
use crate::parse_size;
use clap::Args;
use fgds::{Buffer, Config, FileHandle};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

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

// ---------------------------------------------------------------- report

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Report {
    pub format: String,
    pub fgds_version: String,
    /// "p2p-verified", "blocked", "failed" or "error".
    pub verdict: String,
    pub exit_code: u8,
    pub seed: u64,
    pub machine: Machine,
    pub kernel: Kernel,
    pub storage: Storage,
    pub gpus: Vec<Gpu>,
    pub steps: Vec<Step>,
    pub throughput: Vec<Row>,
    pub blockers: Vec<Blocker>,
    /// Ranges of GPU memory holding known data when the run ended, for a
    /// check from outside (the VM's host checker): stream `seed` from `pos`.
    pub host_check: Vec<HostCheck>,
    pub errors: Vec<String>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Machine {
    pub hostname: String,
    pub cpu: String,
    pub cpus: usize,
    pub memory_bytes: u64,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Kernel {
    pub release: String,
    pub version: String,
    pub module_loaded: bool,
    /// CONFIG_PCI_P2PDMA, CONFIG_ZONE_DEVICE, CONFIG_FGDS as "NAME=value".
    pub options: Vec<String>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Storage {
    pub dir: String,
    pub filesystem: String,
    pub block_device: Option<String>,
    pub device_kind: Option<String>,
    pub model: Option<String>,
    pub pci_address: Option<String>,
    pub o_direct: bool,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Gpu {
    pub index: usize,
    /// "cuda", "hip", "vfio", "dmabuf-fd".
    pub source: String,
    pub description: String,
    /// The GPU's model, where its driver says (NVIDIA: /proc/driver/nvidia).
    pub model: Option<String>,
    pub pci_address: Option<String>,
    pub vendor: Option<String>,
    pub device: Option<String>,
    pub driver: Option<String>,
    pub fgds_node: Option<String>,
    /// How bytes are read back (the vendor runtime, vfio's BAR mapping).
    pub readback: String,
    /// `fgds check`'s verdict for the test file with this GPU's probe.
    pub check_verdict: String,
    pub check_exit_code: u8,
    /// The PCIe path between the file's device and this GPU, in words.
    pub pcie_path: Option<String>,
    /// "ok", "failed: ...", "not run: ...".
    pub probe: String,
    pub problems: Vec<Problem2>,
}

/// A problem `fgds check` found, with its next step.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Problem2 {
    pub what: String,
    pub next: String,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Step {
    /// Index into `gpus`, None for steps without GPU memory.
    pub gpu: Option<usize>,
    pub name: String,
    /// "pass", "fail", "blocked" or "skipped".
    pub status: String,
    pub detail: String,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Row {
    /// None: host memory.
    pub gpu: Option<usize>,
    /// "pread", "preadv", "io_uring", "engine", "engine-write", "bounce",
    /// "kvikio", "cufile-gdsio".
    pub path: String,
    /// "host" or "gpu".
    pub memory: String,
    /// "read" or "write".
    pub op: String,
    pub request_bytes: u64,
    pub in_flight: u32,
    pub bytes: u64,
    pub seconds: f64,
    pub mib_per_s: f64,
    /// mib_per_s over the same path's into host memory (the ceiling row
    /// for bounce, kvikio, cufile: host io_uring).
    pub vs_host: Option<f64>,
    /// What the row is, where the path alone does not say (KvikIO's mode).
    pub note: Option<String>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Blocker {
    pub gpu: Option<usize>,
    /// The step(s) that could not run.
    pub step: String,
    pub why: String,
    pub next: String,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct HostCheck {
    pub gpu: usize,
    pub what: String,
    /// Offset in the GPU memory used.
    pub gpu_offset: u64,
    /// The BAR (vfio) and the offset in it, where known.
    pub bar: Option<u32>,
    pub bar_offset: Option<u64>,
    pub len: u64,
    pub seed: u64,
    pub pos: u64,
}

// ---------------------------------------------------------------- data

/// The test data: byte p of stream `seed` is byte p % 8 (little endian) of
/// splitmix64(seed, p / 8), as tools/testing/selftests/fgds/fgds_pattern.h
/// (so the VM's host checker verifies it independently).
fn word(seed: u64, idx: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0xd1b5_4a32_d192_ed03)
        .wrapping_add(idx.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn pattern(buf: &mut [u8], seed: u64, pos: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        let p = pos + i as u64;
        *b = (word(seed, p >> 3) >> (8 * (p & 7))) as u8;
    }
}

fn pattern_fast(buf: &mut [u8], seed: u64, pos: u64) {
    if pos % 8 != 0 {
        return pattern(buf, seed, pos);
    }
    let mut chunks = buf.chunks_exact_mut(8);
    let mut idx = pos / 8;
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, idx).to_le_bytes());
        idx += 1;
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    if n > 0 {
        rest.copy_from_slice(&word(seed, idx).to_le_bytes()[..n]);
    }
}

/// Offset of the first byte that differs from the stream.
fn first_mismatch(buf: &[u8], seed: u64, pos: u64) -> Option<usize> {
    let mut want = vec![0u8; 1 << 20];
    for (k, chunk) in buf.chunks(1 << 20).enumerate() {
        let w = &mut want[..chunk.len()];
        pattern_fast(w, seed, pos + (k << 20) as u64);
        if w != chunk {
            let i = chunk.iter().zip(w.iter()).position(|(a, b)| a != b)?;
            return Some((k << 20) + i);
        }
    }
    None
}

// ---------------------------------------------------------------- files

/// A file this run made: O_EXCL, O_DIRECT, unlinked at once; reached by
/// others (KvikIO, gdsio) through /proc/PID/fd/N.
struct TempFile {
    f: std::fs::File,
}

impl TempFile {
    fn create(dir: &Path, tag: &str) -> Result<TempFile, String> {
        let path = dir.join(format!("fgds-validate-{}-{tag}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .map_err(|e| format!("create {} (O_EXCL, O_DIRECT): {e}", path.display()))?;
        std::fs::remove_file(&path).map_err(|e| format!("unlink {}: {e}", path.display()))?;
        Ok(TempFile { f })
    }

    fn fd(&self) -> RawFd {
        self.f.as_raw_fd()
    }

    fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), self.fd()))
    }

    /// Writes `len` bytes of stream `seed` with O_DIRECT from host memory.
    fn fill(&self, len: u64, seed: u64) -> Result<(), String> {
        let chunk = 1usize << 20;
        let b = Buffer::alloc_host(chunk).map_err(|e| e.to_string())?;
        let mut data = vec![0u8; chunk];
        let mut off = 0u64;
        while off < len {
            let n = chunk.min((len - off) as usize);
            pattern_fast(&mut data[..n], seed, off);
            b.write_bytes(0, &data[..n]).map_err(|e| e.to_string())?;
            // SAFETY: b has chunk >= n bytes.
            let w = unsafe { libc::pwrite(self.fd(), b.base_addr() as *const _, n, off as i64) };
            if w != n as isize {
                return Err(format!(
                    "O_DIRECT write at {off}: {}",
                    std::io::Error::last_os_error()
                ));
            }
            off += n as u64;
        }
        // SAFETY: plain fd.
        if unsafe { libc::fsync(self.fd()) } != 0 {
            return Err(format!("fsync: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Reads `len` bytes at `off` with O_DIRECT into host memory.
    fn read_host(&self, off: u64, len: usize) -> Result<Vec<u8>, String> {
        let b = Buffer::alloc_host(len).map_err(|e| e.to_string())?;
        let mut done = 0usize;
        while done < len {
            // SAFETY: b has len bytes.
            let r = unsafe {
                libc::pread(
                    self.fd(),
                    (b.base_addr() as *mut u8).add(done) as *mut _,
                    len - done,
                    (off + done as u64) as i64,
                )
            };
            if r <= 0 {
                return Err(format!(
                    "O_DIRECT read at {}: {}",
                    off + done as u64,
                    std::io::Error::last_os_error()
                ));
            }
            done += r as usize;
        }
        b.read_bytes(0, len).map_err(|e| e.to_string())
    }
}

// ---------------------------------------------------------------- I/O paths

const REQ: usize = 1 << 20;
/// Registrations are 2 MiB aligned: fgds makes struct pages per 2 MiB.
const SPAN: u64 = 2 << 20;
/// The probe's 64 KiB sit in a 2 MiB span of their own.
const PROBE_SPAN: u64 = SPAN;
const QD: u32 = 32;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Path4 {
    Pread,
    Preadv,
    Uring,
    Engine,
}

impl Path4 {
    const ALL: [Path4; 4] = [Path4::Pread, Path4::Preadv, Path4::Uring, Path4::Engine];
    fn name(self) -> &'static str {
        match self {
            Path4::Pread => "pread",
            Path4::Preadv => "preadv",
            Path4::Uring => "io_uring",
            Path4::Engine => "engine",
        }
    }
    fn geometry(self) -> (u64, u32) {
        match self {
            Path4::Pread | Path4::Preadv => (REQ as u64, 1),
            Path4::Uring => (REQ as u64, QD),
            Path4::Engine => {
                let c = Config::default();
                (c.chunk_size as u64, c.queue_depth)
            }
        }
    }
}

fn errno_str(e: i32) -> String {
    let name = fgds::error::ERRNOS
        .iter()
        .find(|x| x.errno == e)
        .map(|x| x.name)
        .unwrap_or("");
    format!("{name} ({})", std::io::Error::from_raw_os_error(e))
}

/// Synchronous pread/preadv (1 MiB per call; preadv as 4 x 256 KiB) or
/// pwrite/pwritev, sequential.
fn sync_loop(
    fd: RawFd,
    ptr: *mut u8,
    len: u64,
    file_off: u64,
    vec: bool,
    write: bool,
) -> Result<(), String> {
    let mut off = 0u64;
    while off < len {
        let n = (REQ as u64).min(len - off) as usize;
        // SAFETY: ptr..ptr+len is memory the caller mapped.
        let p = unsafe { ptr.add(off as usize) };
        let r = if vec {
            let q = n / 4;
            let iov: Vec<libc::iovec> = (0..4)
                .map(|i| libc::iovec {
                    // SAFETY: inside [p, p + n).
                    iov_base: unsafe { p.add(i * q) } as *mut _,
                    iov_len: if i == 3 { n - 3 * q } else { q },
                })
                .collect();
            // SAFETY: iov describes mapped memory.
            unsafe {
                if write {
                    libc::pwritev(fd, iov.as_ptr(), 4, (file_off + off) as i64)
                } else {
                    libc::preadv(fd, iov.as_ptr(), 4, (file_off + off) as i64)
                }
            }
        } else {
            // SAFETY: p..p+n is mapped.
            unsafe {
                if write {
                    libc::pwrite(fd, p as *const _, n, (file_off + off) as i64)
                } else {
                    libc::pread(fd, p as *mut _, n, (file_off + off) as i64)
                }
            }
        };
        if r != n as isize {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(if r < 0 {
                format!("at file offset {}: {}", file_off + off, errno_str(e))
            } else {
                format!("at file offset {}: {r} of {n} bytes", file_off + off)
            });
        }
        off += n as u64;
    }
    Ok(())
}

/// io_uring READ/WRITE of 1 MiB requests, `qd` in flight.
fn uring_loop(
    fd: RawFd,
    ptr: *mut u8,
    len: u64,
    file_off: u64,
    qd: u32,
    write: bool,
) -> Result<(), String> {
    use io_uring::{opcode, types, IoUring};
    let mut ring =
        IoUring::new(qd.next_power_of_two().max(8)).map_err(|e| format!("io_uring_setup: {e}"))?;
    let total = len.div_ceil(REQ as u64);
    let (mut next, mut inflight, mut err) = (0u64, 0u32, None::<String>);
    loop {
        while err.is_none() && next < total && inflight < qd {
            let off = next * REQ as u64;
            let n = (REQ as u64).min(len - off) as u32;
            // SAFETY: inside the caller's mapping.
            let p = unsafe { ptr.add(off as usize) };
            let sqe = if write {
                opcode::Write::new(types::Fd(fd), p, n)
                    .offset(file_off + off)
                    .build()
            } else {
                opcode::Read::new(types::Fd(fd), p, n)
                    .offset(file_off + off)
                    .build()
            }
            .user_data(u64::from(n));
            // SAFETY: the memory outlives the request (every one is reaped below).
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                break;
            }
            next += 1;
            inflight += 1;
        }
        if inflight == 0 {
            break;
        }
        if let Err(e) = ring.submit_and_wait(1) {
            if e.raw_os_error() != Some(libc::EINTR) {
                // Cannot leave with requests in flight into the caller's memory.
                std::process::abort();
            }
        }
        for c in ring.completion() {
            inflight -= 1;
            if c.result() < 0 {
                err.get_or_insert(errno_str(-c.result()));
            } else if c.result() as u64 != c.user_data() {
                err.get_or_insert(format!(
                    "short transfer: {} of {}",
                    c.result(),
                    c.user_data()
                ));
            }
        }
    }
    err.map_or(Ok(()), Err)
}

fn run_path(
    path: Path4,
    (fd, h): (RawFd, Option<&FileHandle>),
    buf: &Buffer,
    buf_off: u64,
    len: u64,
    file_off: u64,
    write: bool,
) -> Result<(), String> {
    let ptr = (buf.base_addr() + buf_off) as *mut u8;
    match path {
        Path4::Pread => sync_loop(fd, ptr, len, file_off, false, write),
        Path4::Preadv => sync_loop(fd, ptr, len, file_off, true, write),
        Path4::Uring => uring_loop(fd, ptr, len, file_off, if write { 8 } else { QD }, write),
        Path4::Engine => {
            let h = h.ok_or("no library handle")?;
            h.reset_stats();
            let r = if write {
                h.write(buf, buf_off as usize, len as usize, file_off)
            } else {
                h.read(buf, buf_off as usize, len as usize, file_off)
            };
            match r {
                Ok(n) if n as u64 == len => {}
                Ok(n) => return Err(format!("{n} of {len} bytes")),
                Err(e) => return Err(e.to_string()),
            }
            let st = h.stats();
            if buf.is_p2p() && (st.direct_bytes != len || st.bounce_bytes != 0) {
                return Err(format!(
                    "the library moved {} bytes direct and {} through bounce buffers ({}): expected all {len} direct",
                    st.direct_bytes,
                    st.bounce_bytes,
                    st.last_fallback_reason.as_deref().unwrap_or("no reason given")
                ));
            }
            Ok(())
        }
    }
}

// ---------------------------------------------------------------- the run

struct Ctx {
    rep: Report,
    s: u64,
}

impl Ctx {
    fn step(
        &mut self,
        gpu: Option<usize>,
        name: impl Into<String>,
        r: Result<String, String>,
    ) -> bool {
        let ok = r.is_ok();
        let (status, detail) = match r {
            Ok(d) => ("pass", d),
            Err(d) => ("fail", d),
        };
        self.rep.steps.push(Step {
            gpu,
            name: name.into(),
            status: status.into(),
            detail,
        });
        ok
    }

    fn blocked(
        &mut self,
        gpu: Option<usize>,
        step: &str,
        why: impl Into<String>,
        next: impl Into<String>,
    ) {
        let why = why.into();
        self.rep.steps.push(Step {
            gpu,
            name: step.into(),
            status: "blocked".into(),
            detail: why.clone(),
        });
        self.rep.blockers.push(Blocker {
            gpu,
            step: step.into(),
            why,
            next: next.into(),
        });
    }

    fn row(
        &mut self,
        gpu: Option<usize>,
        path: &str,
        op: &str,
        geo: (u64, u32),
        bytes: u64,
        secs: f64,
    ) {
        let mib = if secs > 0.0 {
            bytes as f64 / secs / (1 << 20) as f64
        } else {
            0.0
        };
        let memory = if gpu.is_some() { "gpu" } else { "host" };
        let base = match path {
            "bounce" | "kvikio" | "cufile-gdsio" => "io_uring",
            p => p,
        };
        let vs_host = gpu.and_then(|_| {
            self.rep
                .throughput
                .iter()
                .find(|r| r.gpu.is_none() && r.path == base && r.op == op)
                .filter(|r| r.mib_per_s > 0.0)
                .map(|r| (mib / r.mib_per_s * 100.0).round() / 100.0)
        });
        self.rep.throughput.push(Row {
            gpu,
            path: path.into(),
            memory: memory.into(),
            op: op.into(),
            request_bytes: geo.0,
            in_flight: geo.1,
            bytes,
            seconds: (secs * 1e4).round() / 1e4,
            mib_per_s: mib.round(),
            vs_host,
            note: None,
        });
    }
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    Machine {
        hostname: read_trim("/proc/sys/kernel/hostname").unwrap_or_default(),
        cpu: cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default(),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        memory_bytes: std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |k| k * 1024),
    }
}

fn fs_type(fd: RawFd) -> String {
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: st is writable.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return "unknown".into();
    }
    match st.f_type as u64 {
        0xef53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683e => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794c_7630 => "overlayfs".into(),
        0x6969 => "nfs".into(),
        0x0102_1997 => "9p".into(),
        0x2fc1_2fc1 => "zfs".into(),
        t => format!("f_type {t:#x}"),
    }
}

fn gpu_info(index: usize, mem: &GpuMem, crep: &check::Report) -> Gpu {
    let pci = mem.pci_address.clone();
    let pg = crep
        .pci_gpus
        .iter()
        .find(|g| pci.as_deref() == Some(g.address.as_str()));
    let node = crep
        .gpus
        .iter()
        .find(|g| pci.is_some() && g.pci_address == pci);
    let probe = crep
        .probes
        .first()
        .map(|p| match (&p.not_run, p.ok) {
            (Some(w), _) => format!("not run: {w}"),
            (None, true) => "ok".into(),
            (None, false) => format!("failed: {}", p.error.as_deref().unwrap_or("?")),
        })
        .unwrap_or_else(|| "not run".into());
    let mut problems: Vec<Problem2> = crep
        .problems
        .iter()
        .chain(crep.file.iter().flat_map(|f| f.problems.iter()))
        .chain(node.iter().flat_map(|n| n.problems.iter()))
        .map(|p| Problem2 {
            what: p.what.clone(),
            next: p.next.clone(),
        })
        .collect();
    problems.dedup();
    Gpu {
        index,
        source: mem.source.into(),
        description: mem.description.clone(),
        model: pci.as_ref().and_then(|a| gpu_model(a)),
        pci_address: pci.clone(),
        vendor: pg.map(|g| g.vendor.clone()),
        device: pg.map(|g| g.device.clone()),
        driver: pg.and_then(|g| g.driver.clone()).or_else(|| {
            pci.as_ref().and_then(|a| {
                std::fs::read_link(format!("/sys/bus/pci/devices/{a}/driver"))
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            })
        }),
        fgds_node: node.map(|n| n.node.clone()),
        readback: mem.cpu_path.clone(),
        check_verdict: crep.verdict.into(),
        check_exit_code: crep.exit_code,
        pcie_path: node.and_then(|n| n.path_to_storage.clone()),
        probe,
        problems,
    }
}

/// The model name NVIDIA's driver gives (`Model: NVIDIA H200`).
fn gpu_model(pci: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/driver/nvidia/gpus/{pci}/information"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Model:").map(|m| m.trim().to_string()))
        .filter(|m| !m.is_empty())
}

/// The next step for a failed registration.
fn register_next(e: &fgds::Error, module_loaded: bool) -> String {
    if !module_loaded {
        return "build and boot a kernel with fgds (tools/fgds/install/README.md), then modprobe fgds".into();
    }
    e.hint().to_string()
}

/// Copies `len` bytes of the GPU memory at `off` to the host through the
/// CPU path (or the fgds mapping `via` when there is none).
fn gpu_read(
    mem: &GpuMem,
    via: Option<(&Buffer, u64)>,
    off: u64,
    len: usize,
) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; len];
    match mem.read(off, &mut v) {
        Some(r) => r.map_err(|e| format!("read back through {}: {e}", mem.cpu_path))?,
        None => {
            let (b, base) = via.ok_or("no CPU path to the GPU memory")?;
            b.read_bytes_into((off - base) as usize, &mut v)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(v)
}

fn gpu_write(
    mem: &GpuMem,
    via: Option<(&Buffer, u64)>,
    off: u64,
    data: &[u8],
) -> Result<(), String> {
    match mem.write(off, data) {
        Some(r) => r.map_err(|e| format!("write through {}: {e}", mem.cpu_path)),
        None => {
            let (b, base) = via.ok_or("no CPU path to the GPU memory")?;
            b.write_bytes((off - base) as usize, data)
                .map_err(|e| e.to_string())
        }
    }
}

fn gpu_fill(
    mem: &GpuMem,
    via: Option<(&Buffer, u64)>,
    off: u64,
    len: u64,
    seed: Option<u64>,
) -> Result<(), String> {
    let mut chunk = vec![0u8; (1usize << 20).min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let n = chunk.len().min((len - done) as usize);
        if let Some(s) = seed {
            pattern_fast(&mut chunk[..n], s, done);
        }
        gpu_write(mem, via, off + done, &chunk[..n])?;
        done += n as u64;
    }
    Ok(())
}

fn verify(
    mem: &GpuMem,
    via: Option<(&Buffer, u64)>,
    off: u64,
    len: u64,
    seed: u64,
) -> Result<(), String> {
    let got = gpu_read(mem, via, off, len as usize)?;
    match first_mismatch(&got, seed, 0) {
        None => Ok(()),
        Some(i) => {
            let mut w = [0u8; 1];
            pattern(&mut w, seed, i as u64);
            Err(format!(
                "byte {i} of {len} differs: {:#04x} in GPU memory, {:#04x} in the file",
                got[i], w[0]
            ))
        }
    }
}

/// Registers a dma-buf of `[off, off + len)` of `mem` and maps it.
fn register(mem: &GpuMem, off: u64, len: u64) -> Result<Buffer, fgds::Error> {
    let db = mem
        .dmabuf(off, len)
        .map_err(|e| fgds::Error::InvalidArgument(format!("export a dma-buf: {e}")))?;
    Buffer::register_dmabuf(None, db.fd(), db.offset, len)
}

/// UNREG with reads in flight: returns (detail) or the failure.
fn teardown(
    mem: &GpuMem,
    off: u64,
    len: u64,
    file: &TempFile,
    refill: u64,
) -> Result<String, String> {
    use io_uring::{opcode, types, IoUring};
    let db = mem.dmabuf(off, len).map_err(|e| e.to_string())?;
    let devs = fgds::list_devices().map_err(|e| e.to_string())?;
    let mut reg = None;
    for d in &devs {
        let dev = fgds::Device::open(&d.dev_path).map_err(|e| e.to_string())?;
        match dev.register(db.fd(), db.offset, len) {
            Ok(c) => {
                reg = Some((dev, c));
                break;
            }
            Err(e) if e.errno() == libc::EXDEV => continue,
            Err(e) => return Err(format!("register: {e}")),
        }
    }
    let (dev, cookie) = reg.ok_or("no fgds node took the dma-buf (EXDEV from all)")?;
    // SAFETY: mapping the registration at its cookie.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            dev.as_raw_fd(),
            cookie as i64,
        )
    };
    if map == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        let _ = dev.unregister(cookie);
        return Err(format!("mmap: {e}"));
    }
    let req = 64u64 << 10;
    // At most 256 requests (16 MiB), one ring's worth.
    let n = (len / req).min(256) as u32;
    let mut ring =
        IoUring::new(n.next_power_of_two()).map_err(|e| format!("io_uring_setup: {e}"))?;
    for i in 0..n {
        let sqe = opcode::Read::new(
            types::Fd(file.fd()),
            (map as u64 + u64::from(i) * req) as *mut u8,
            req as u32,
        )
        .offset(u64::from(i) * req)
        .build()
        .user_data(u64::from(i));
        // SAFETY: the mapping stays until every request is reaped.
        let _ = unsafe { ring.submission().push(&sqe) };
    }
    let _ = ring.submit();
    let done_before = ring.completion().len();
    let t = Instant::now();
    let unreg = dev.unregister(cookie);
    let unreg_ms = t.elapsed().as_secs_f64() * 1e3;
    let (mut ok, mut efault, mut other) = (0u32, 0u32, Vec::new());
    let mut reaped = 0;
    while reaped < n {
        if ring.submit_and_wait(1).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        for c in ring.completion() {
            reaped += 1;
            match c.result() {
                r if r as u64 == req => ok += 1,
                r if r == -libc::EFAULT => efault += 1,
                r if r < 0 => other.push(errno_str(-r)),
                r => other.push(format!("short read of {r}")),
            }
        }
    }
    // SAFETY: the mapping made above; no request uses it any more.
    unsafe { libc::munmap(map, len as usize) };
    drop(db);
    unreg.map_err(|e| format!("UNREG with reads in flight: {e}"))?;
    // No DMA lands after UNREG returned: refill, wait, compare.
    gpu_fill(mem, None, off, len, Some(refill)).map_err(|e| format!("refill: {e}"))?;
    std::thread::sleep(std::time::Duration::from_millis(200));
    verify(mem, None, off, len, refill)
        .map_err(|e| format!("memory changed after UNREG returned: {e}"))?;
    if !other.is_empty() {
        return Err(format!(
            "requests failed with other than EFAULT: {}",
            other.join(", ")
        ));
    }
    Ok(format!(
        "{n} reads of 64 KiB submitted, {} in flight at UNREG (returned in {unreg_ms:.1} ms); {ok} completed, {efault} failed with EFAULT; the memory refilled after UNREG stayed intact",
        n as usize - done_before
    ))
}

fn kernel() -> Kernel {
    let cfg = check::kernel_options();
    Kernel {
        release: read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
        version: read_trim("/proc/sys/kernel/version").unwrap_or_default(),
        module_loaded: fgds::device::module_loaded(),
        options: cfg,
    }
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
fn run_gpu(
    cx: &mut Ctx,
    gi: usize,
    mem: &GpuMem,
    a: &ValidateArgs,
    data: &TempFile,
    bench: &TempFile,
    ordinal: i32,
) {
    let s = cx.s;
    let (t_len, seed) = (a.bench_size, cx.rep.seed);
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
        let g = &cx.rep.gpus[gi];
        let why = g
            .problems
            .iter()
            .map(|p| p.what.clone())
            .collect::<Vec<_>>()
            .join("; ");
        let next = g
            .problems
            .iter()
            .map(|p| p.next.clone())
            .collect::<Vec<_>>()
            .join("; ");
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
                cx.rep.host_check.push(HostCheck {
                    gpu: gi,
                    what: format!("p2p read {}", p.name()),
                    gpu_offset: off,
                    bar: mem.bar,
                    bar_offset: mem.bar_offset.map(|b| b + off),
                    len: s,
                    seed: s1,
                    pos: 0,
                });
            }
        }
        // The reverse direction: GPU memory -> a new file, checked by a host read.
        let r = (|| {
            let w = TempFile::create(&a.dir, "written")?;
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
            cx.rep.host_check.push(HostCheck {
                gpu: gi,
                what: "p2p write source".into(),
                gpu_offset: 4 * s,
                bar: mem.bar,
                bar_offset: mem.bar_offset.map(|b| b + 4 * s),
                len: s,
                seed: s2,
                pos: 0,
            });
        }
        if independent {
            let r = teardown(mem, 5 * s, s, data, s3);
            if cx.step(Some(gi), "teardown with reads in flight", r) {
                cx.rep.host_check.push(HostCheck {
                    gpu: gi,
                    what: "refilled after UNREG with reads in flight".into(),
                    gpu_offset: 5 * s,
                    bar: mem.bar,
                    bar_offset: mem.bar_offset.map(|b| b + 5 * s),
                    len: s,
                    seed: s3,
                    pos: 0,
                });
            }
        } else {
            cx.rep.steps.push(Step {
                gpu: Some(gi),
                name: "teardown with reads in flight".into(),
                status: "skipped".into(),
                detail: "needs a CPU path to the memory independent of fgds (vendor runtime or vfio) to see that nothing lands after UNREG".into(),
            });
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
            let w = TempFile::create(&a.dir, "written")?;
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
    if let Some(bb) = &bbuf {
        for p in Path4::ALL {
            let t = Instant::now();
            let r = run_path(
                p,
                (bench.fd(), h_bench.as_ref().ok()),
                bb,
                0,
                t_len,
                0,
                false,
            );
            let secs = t.elapsed().as_secs_f64();
            match r {
                Ok(()) => cx.row(Some(gi), p.name(), "read", p.geometry(), t_len, secs),
                Err(e) => {
                    cx.step(Some(gi), format!("throughput {}", p.name()), Err(e));
                }
            }
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
        Err(_) if !bounce_possible => cx.rep.steps.push(Step {
            gpu: Some(gi),
            name: "throughput bounce".into(),
            status: "skipped".into(),
            detail: "a dma-buf passed by descriptor has no CPU path without an fgds registration"
                .into(),
        }),
        Ok(()) => cx.row(Some(gi), "bounce", "read", (REQ as u64, 1), t_len, secs),
        Err(e) => {
            cx.step(Some(gi), "throughput bounce", Err(e));
        }
    }
    if let Some(bb) = &bbuf {
        let t = Instant::now();
        let r = run_path(
            Path4::Engine,
            (bench.fd(), h_bench.as_ref().ok()),
            bb,
            0,
            t_len,
            0,
            true,
        );
        let secs = t.elapsed().as_secs_f64();
        match r {
            Ok(()) => cx.row(
                Some(gi),
                "engine-write",
                "write",
                Path4::Engine.geometry(),
                t_len,
                secs,
            ),
            Err(e) => {
                cx.step(Some(gi), "throughput engine-write", Err(e));
            }
        }
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
            Err(e) => cx.rep.steps.push(Step {
                gpu: Some(gi),
                name: "kvikio".into(),
                status: "skipped".into(),
                detail: format!("KvikIO not usable: {e}"),
            }),
        }
        match gdsio() {
            None => cx.rep.steps.push(Step {
                gpu: Some(gi),
                name: "cufile-gdsio".into(),
                status: "skipped".into(),
                detail: "gdsio (cuFile's benchmark) not installed".into(),
            }),
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
                    None => cx.rep.steps.push(Step {
                        gpu: Some(gi),
                        name: "cufile-gdsio".into(),
                        status: "skipped".into(),
                        detail: format!("{} gave no throughput line", g.display()),
                    }),
                }
            }
        }
    }
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
    for p in Path4::ALL {
        let t = Instant::now();
        let r = run_path(p, (bench.fd(), h.as_ref().ok()), &hb, 0, t_len, 0, false);
        let secs = t.elapsed().as_secs_f64();
        match r {
            Ok(()) => cx.row(None, p.name(), "read", p.geometry(), t_len, secs),
            Err(e) => {
                cx.step(None, format!("host {}", p.name()), Err(e));
            }
        }
    }
    let t = Instant::now();
    let r = run_path(
        Path4::Engine,
        (bench.fd(), h.as_ref().ok()),
        &hb,
        0,
        t_len,
        0,
        true,
    );
    let secs = t.elapsed().as_secs_f64();
    match r {
        Ok(()) => cx.row(
            None,
            "engine-write",
            "write",
            Path4::Engine.geometry(),
            t_len,
            secs,
        ),
        Err(e) => {
            cx.step(None, "host engine-write", Err(e));
        }
    }
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
        let mut cx = Ctx { rep, s: a.size };
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
            run_gpu(&mut cx, gi, m, &a, &data, &bench, *o);
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

// ---------------------------------------------------------------- Markdown

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn gpu_label(g: Option<usize>) -> String {
    g.map_or("host".into(), |i| format!("gpu{i}"))
}

/// The Markdown report (format in tools/fgds/README.md).
pub fn markdown(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "# fgds validate report\n");
    let _ = writeln!(o, "- format: {}", r.format);
    let _ = writeln!(o, "- verdict: **{}** (exit {})", r.verdict, r.exit_code);
    let _ = writeln!(o, "- fgds: {}", r.fgds_version);
    let _ = writeln!(o, "- seed: {}", r.seed);
    let _ = writeln!(
        o,
        "- machine: {}, {}, {} CPUs, {}",
        r.machine.hostname,
        r.machine.cpu,
        r.machine.cpus,
        crate::human(r.machine.memory_bytes)
    );
    let _ = writeln!(
        o,
        "- kernel: {} ({}); fgds module {}",
        r.kernel.release,
        r.kernel.options.join(" "),
        if r.kernel.module_loaded {
            "loaded"
        } else {
            "not loaded"
        }
    );
    let st = &r.storage;
    let _ = writeln!(
        o,
        "- storage: {} on {} ({}), {}, PCI {}, O_DIRECT {}",
        st.dir,
        st.block_device.as_deref().unwrap_or("?"),
        st.device_kind.as_deref().unwrap_or("?"),
        st.filesystem,
        st.pci_address.as_deref().unwrap_or("none"),
        if st.o_direct { "yes" } else { "no" }
    );
    if let Some(m) = &st.model {
        let _ = writeln!(o, "- storage model: {m}");
    }
    for g in &r.gpus {
        let _ = writeln!(o, "\n## gpu{}: {}\n", g.index, g.description);
        let _ = writeln!(o, "- source: {}", g.source);
        if let Some(m) = &g.model {
            let _ = writeln!(o, "- model: {m}");
        }
        let _ = writeln!(
            o,
            "- PCI: {} [{}:{}], driver {}, fgds node {}",
            g.pci_address.as_deref().unwrap_or("?"),
            g.vendor.as_deref().unwrap_or("?"),
            g.device.as_deref().unwrap_or("?"),
            g.driver.as_deref().unwrap_or("none"),
            g.fgds_node.as_deref().unwrap_or("none")
        );
        let _ = writeln!(
            o,
            "- check: {} (exit {})",
            g.check_verdict, g.check_exit_code
        );
        let _ = writeln!(
            o,
            "- PCIe path: {}",
            g.pcie_path.as_deref().unwrap_or("unknown")
        );
        let _ = writeln!(o, "- probe: {}", g.probe);
        let _ = writeln!(o, "- read back through: {}", g.readback);
        for p in &g.problems {
            let _ = writeln!(o, "- problem: {} (next: {})", p.what, p.next);
        }
    }
    let _ = writeln!(o, "\n## Steps\n");
    let _ = writeln!(o, "| gpu | step | status | detail |");
    let _ = writeln!(o, "| --- | --- | --- | --- |");
    for s in &r.steps {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            gpu_label(s.gpu),
            cell(&s.name),
            s.status,
            cell(&s.detail)
        );
    }
    let _ = writeln!(o, "\n## Throughput\n");
    let _ = writeln!(
        o,
        "| memory | path | op | request | in flight | bytes | seconds | MiB/s | vs host | note |"
    );
    let _ = writeln!(
        o,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for t in &r.throughput {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            gpu_label(t.gpu),
            t.path,
            t.op,
            t.request_bytes,
            t.in_flight,
            t.bytes,
            t.seconds,
            t.mib_per_s,
            t.vs_host.map_or("-".into(), |v| format!("{v:.2}")),
            cell(t.note.as_deref().unwrap_or("-"))
        );
    }
    if !r.blockers.is_empty() {
        let _ = writeln!(o, "\n## Blockers\n");
        for b in &r.blockers {
            let _ = writeln!(
                o,
                "- {} {}: {} (next: {})",
                gpu_label(b.gpu),
                b.step,
                b.why,
                if b.next.is_empty() { "-" } else { &b.next }
            );
        }
    }
    if !r.errors.is_empty() {
        let _ = writeln!(o, "\n## Errors\n");
        for e in &r.errors {
            let _ = writeln!(o, "- {e}");
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same stream as fgds_pattern.h: the first 16 bytes of seed 0x1234
    /// as fgds_pattern_fill() writes them (printed by a C program).
    #[test]
    fn pattern_matches_the_selftests() {
        let mut b = [0u8; 16];
        pattern(&mut b, 0x1234, 0);
        assert_eq!(
            b,
            [132, 125, 178, 241, 249, 246, 124, 18, 56, 35, 3, 23, 25, 146, 231, 155]
        );
        let mut f = [0u8; 16];
        pattern_fast(&mut f, 0x1234, 0);
        assert_eq!(b, f);
        assert_eq!(
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            word(0x1234, 0)
        );
        let mut c = [0u8; 5];
        pattern(&mut c, 0x1234, 3);
        assert_eq!(c, b[3..8]);
        assert_eq!(first_mismatch(&b, 0x1234, 0), None);
        b[9] ^= 1;
        assert_eq!(first_mismatch(&b, 0x1234, 0), Some(9));
    }

    /// A GPU's section, its rows and blockers, as README.md's format says.
    #[test]
    fn markdown_of_a_gpu() {
        let r = Report {
            format: FORMAT.into(),
            verdict: "blocked".into(),
            exit_code: EXIT_BLOCKED,
            gpus: vec![Gpu {
                source: "vfio".into(),
                description: "vfio-pci 0000:04:00.0 BAR2".into(),
                pci_address: Some("0000:04:00.0".into()),
                driver: Some("vfio-pci".into()),
                fgds_node: Some("fgds0".into()),
                probe: "failed: EINVAL".into(),
                problems: vec![Problem2 {
                    what: "the kernel refuses".into(),
                    next: "use one switch".into(),
                }],
                ..Default::default()
            }],
            steps: vec![Step {
                gpu: Some(0),
                name: "check".into(),
                status: "blocked".into(),
                detail: "a | b".into(),
            }],
            throughput: vec![Row {
                gpu: Some(0),
                path: "bounce".into(),
                memory: "gpu".into(),
                op: "read".into(),
                bytes: 4096,
                mib_per_s: 12.0,
                vs_host: Some(0.5),
                note: Some("x|y".into()),
                ..Default::default()
            }],
            blockers: vec![Blocker {
                gpu: Some(0),
                step: "p2p read".into(),
                why: "refused".into(),
                next: String::new(),
            }],
            ..Default::default()
        };
        let md = markdown(&r);
        assert!(
            md.contains("\n## gpu0: vfio-pci 0000:04:00.0 BAR2\n\n- source: vfio\n"),
            "{md}"
        );
        assert!(md.contains("- PCI: 0000:04:00.0 [?:?], driver vfio-pci, fgds node fgds0\n"));
        assert!(md.contains("- probe: failed: EINVAL\n"));
        assert!(md.contains("- problem: the kernel refuses (next: use one switch)\n"));
        assert!(
            md.contains("| gpu0 | check | blocked | a \\| b |\n"),
            "{md}"
        );
        assert!(
            md.contains("| gpu0 | bounce | read | 0 | 0 | 4096 | 0 | 12 | 0.50 | x\\|y |\n"),
            "{md}"
        );
        assert!(
            md.contains("\n## Blockers\n\n- gpu0 p2p read: refused (next: -)\n"),
            "{md}"
        );
        assert!(!md.contains("## Errors"));
    }

    #[test]
    fn gdsio_line() {
        let out = "IoType: READ XferType: GPUD Threads: 1 DataSetSize: 262144/262144(KiB) IOSize: 1024(KiB) Throughput: 2.5 GiB/sec, Avg_Latency: 390.6 usecs ops: 256 total_time 0.1 secs";
        assert_eq!(gdsio_mib_per_s(out), Some(2560.0));
        assert_eq!(gdsio_mib_per_s("nothing"), None);
    }
}
