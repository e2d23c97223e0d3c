//! The four I/O paths a transfer can take (pread, preadv, io_uring, the
//! library's engine), each in either direction, the sizes they use, and
//! the timing of one into a throughput row.

use super::report::Ctx;
use fgds::{Buffer, Config, FileHandle};
use std::os::fd::RawFd;
use std::time::Instant;

pub(super) const REQ: usize = 1 << 20;
/// Registrations are 2 MiB aligned: fgds makes struct pages per 2 MiB.
pub(super) const SPAN: u64 = 2 << 20;
/// The probe's 64 KiB sit in a 2 MiB span of their own.
pub(super) const PROBE_SPAN: u64 = SPAN;
const QD: u32 = 32;

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Path4 {
    Pread,
    Preadv,
    Uring,
    Engine,
}

impl Path4 {
    pub(super) const ALL: [Path4; 4] = [Path4::Pread, Path4::Preadv, Path4::Uring, Path4::Engine];
    pub(super) fn name(self) -> &'static str {
        match self {
            Path4::Pread => "pread",
            Path4::Preadv => "preadv",
            Path4::Uring => "io_uring",
            Path4::Engine => "engine",
        }
    }
    pub(super) fn geometry(self) -> (u64, u32) {
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

pub(super) fn errno_str(e: i32) -> String {
    let name = fgds::error::ERRNOS
        .iter()
        .find(|x| x.errno == e)
        .map(|x| x.name)
        .unwrap_or("");
    format!("{name} ({})", std::io::Error::from_raw_os_error(e))
}

/// Synchronous pread/preadv (1 MiB per call; preadv as 4 x 256 KiB) or
/// pwrite/pwritev, sequential.
pub(super) fn sync_loop(
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

pub(super) fn run_path(
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

/// Times `path` moving `len` bytes of the file through `buf` (a write
/// where `write`) and adds its throughput row, named `pread`...`engine` or
/// `engine-write`; a failure is a step (`host ...` or `throughput ...`).
pub(super) fn throughput(
    cx: &mut Ctx,
    gpu: Option<usize>,
    path: Path4,
    write: bool,
    file: (RawFd, Option<&FileHandle>),
    buf: &Buffer,
    len: u64,
) {
    let t = Instant::now();
    let r = run_path(path, file, buf, 0, len, 0, write);
    let secs = t.elapsed().as_secs_f64();
    let (name, op) = if write {
        (format!("{}-write", path.name()), "write")
    } else {
        (path.name().to_string(), "read")
    };
    match r {
        Ok(()) => cx.row(gpu, &name, op, path.geometry(), len, secs),
        Err(e) => {
            let prefix = if gpu.is_some() { "throughput" } else { "host" };
            cx.step(gpu, format!("{prefix} {name}"), Err(e));
        }
    }
}
