//! The engines `fgds bench` runs in this process: the library's
//! synchronous API (fgds), its Batch API (fgds-batch), a pread/pwrite
//! thread pool (pread-pool) and a bare io_uring loop (io_uring-loop), each
//! timed the same way.

use super::measure::{Cpu, Measured};
use super::workload::{
    engine_config, geometry, offsets, open_flags, run_seed, BenchArgs, Mem, Offsets, Rw,
};
use fgds::{Batch, Buffer, FileHandle, IoParams, IoTarget, Op, Status};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Allocates the I/O memory of one thread. Host memory is touched here, so
/// that page faults do not land in the measured run.
pub(super) fn make_buffer(mem: Mem, size: u64) -> Result<Buffer, fgds::Error> {
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

pub(super) fn progress(a: &BenchArgs, label: &str) -> indicatif::ProgressBar {
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

/// The file through the library, for the engines that use it.
fn open_library(a: &BenchArgs) -> Result<Arc<FileHandle>, fgds::Error> {
    Ok(Arc::new(FileHandle::open(
        &a.file,
        open_flags(a),
        0o644,
        engine_config(a),
    )?))
}

pub(super) fn run_fgds(a: &BenchArgs) -> Result<Measured, fgds::Error> {
    let f = open_library(a)?;
    let bufs = (0..a.threads)
        .map(|_| make_buffer(a.mem, a.bs))
        .collect::<Result<Vec<_>, _>>()?;
    let pb = progress(a, "fgds");
    let lat_ns = AtomicU64::new(0);
    let ops = AtomicU64::new(0);
    let clock = Clock::start()?;
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
    let (lat_ns, lat_count) = (lat_ns.load(Ordering::Relaxed), ops.load(Ordering::Relaxed));
    clock.stop(&pb, bytes, lat_ns, lat_count, Some(f.stats()))
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

pub(super) fn run_batch(a: &BenchArgs) -> Result<Measured, fgds::Error> {
    let g = geometry(a);
    let q = g.inflight as usize;
    if q > Batch::MAX_CAPACITY {
        return Err(fgds::Error::InvalidArgument(format!(
            "--batch: {q} requests in flight > batch capacity {}",
            Batch::MAX_CAPACITY
        )));
    }
    let f = open_library(a)?;
    let req = g.req as usize;
    let buf = Arc::new(make_buffer(a.mem, g.req * q as u64)?);
    let op = match a.rw {
        Rw::Read => Op::Read,
        Rw::Write => Op::Write,
    };
    let mut gen = Offsets::new(a.pattern, g.span, g.req, run_seed());
    let mut batch = Batch::new(q)?;
    let pb = progress(a, "fgds-batch");
    let clock = Clock::start()?;
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
    clock.stop(&pb, fl.bytes, fl.lat_ns, fl.done, Some(f.stats()))
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

pub(super) fn run_baseline(a: &BenchArgs) -> Result<Measured, fgds::Error> {
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
    let clock = Clock::start()?;
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
    clock.stop(&pb, bytes, lat_ns.load(Ordering::Relaxed), total_ops, None)
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
pub(super) fn run_uring(a: &BenchArgs) -> Result<Measured, fgds::Error> {
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
    let clock = Clock::start()?;
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
    clock.stop(&pb, fl.bytes, fl.lat_ns, fl.done, None)
}

/// The wall clock and CPU time of one engine run, from its start.
struct Clock {
    cpu0: Cpu,
    t0: Instant,
}

impl Clock {
    fn start() -> Result<Clock, fgds::Error> {
        let cpu0 = Cpu::now(libc::RUSAGE_SELF)?;
        Ok(Clock {
            cpu0,
            t0: Instant::now(),
        })
    }

    /// Stops the clock and clears `pb`: the run's `bytes`, the latency
    /// summed over its `lat_count` requests and the library's counters
    /// (`stats`, fgds rows), with its seconds and CPU time.
    fn stop(
        self,
        pb: &indicatif::ProgressBar,
        bytes: u64,
        lat_ns: u64,
        lat_count: u64,
        stats: Option<fgds::Stats>,
    ) -> Result<Measured, fgds::Error> {
        let secs = self.t0.elapsed().as_secs_f64();
        let cpu = Cpu::now(libc::RUSAGE_SELF)?.since(self.cpu0);
        pb.finish_and_clear();
        Ok(Measured {
            bytes,
            secs,
            lat_ns,
            lat_count,
            cpu,
            stats,
            ..Measured::default()
        })
    }
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
