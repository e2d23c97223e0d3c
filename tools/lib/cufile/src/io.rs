//! Synchronous I/O: `cuFileRead`/`cuFileWrite` and the vectored
//! `cuFileReadv`/`cuFileWritev` (cuFile 1.19), each counted in the
//! statistics.

use crate::abi::*;
use crate::config::LogLevel;
use crate::driver::{driver, log};
use crate::errors::io_result;
use crate::handle::{handle, note_path, unaligned, Handle};
use crate::memory::{held_target, offset, target, Target};
use crate::stats;
use fgds::{Buffer, FileHandle, Op};
use std::ffi::{c_uint, c_void};
use std::sync::Arc;
use std::time::Instant;

/// The name of a synchronous call (`names`: the reading one, the writing
/// one) and the registered file `fh`, once the driver is open; else what
/// the call returns (`-code`).
fn begin(
    fh: *mut c_void,
    op: Op,
    names: [&'static str; 2],
) -> Result<(&'static str, Arc<Handle>), isize> {
    let call = match op {
        Op::Read => names[0],
        Op::Write => names[1],
    };
    if let Err(e) = driver() {
        return Err(-(e.err as isize));
    }
    let h = handle(fh).map_err(|c| -(c as isize))?;
    Ok((call, h))
}

/// `size` bytes between `file` at `file_off` and `buf` at `off`, the way
/// `op` says.
pub(crate) fn plain(
    file: &FileHandle,
    op: Op,
    buf: &Buffer,
    off: usize,
    size: usize,
    file_off: u64,
) -> fgds::Result<usize> {
    match op {
        Op::Read => file.read(buf, off, size, file_off),
        Op::Write => file.write(buf, off, size, file_off),
    }
}

fn sync_io(
    fh: *mut c_void,
    op: Op,
    base: *const c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_off: libc::off_t,
) -> isize {
    let (call, h) = match begin(fh, op, ["cuFileRead", "cuFileWrite"]) {
        Ok(x) => x,
        Err(ret) => return ret,
    };
    if size == 0 {
        return 0;
    }
    let t0 = Instant::now();
    let fell_back = h.file.stats().fallbacks;
    let mut gpu = None;
    let r = offset(file_offset, "file offset").and_then(|fo| {
        let fo = fo as u64;
        match target(base, buf_off, size)? {
            Target::Buf(rb, off) => {
                let b = &rb.buf;
                if let Some(g) = rb.gpu.clone() {
                    let un = unaligned(&h, b.base_addr() + off as u64, size, fo);
                    gpu = Some((g, b.is_p2p(), un));
                }
                plain(&h.file, op, b, off, size, fo)
            }
            Target::Gpu { addr, gpu: g, rt } => {
                let un = unaligned(&h, addr, size, fo);
                let r = match op {
                    Op::Read => fgds::gpucache::read(&h.file, &rt, addr, size, fo),
                    Op::Write => fgds::gpucache::write(&h.file, &rt, addr, size, fo),
                };
                let p2p = r.as_ref().map_or(true, |(_, route)| route.is_p2p());
                gpu = Some((g, p2p, un));
                r.map(|(n, _)| n)
            }
        }
    });
    note_path(&h);
    if stats::level() > 0 {
        // P2P: into an fgds mapping, and no fallback on this handle meanwhile.
        let bounced = h.file.stats().fallbacks != fell_back;
        let g = gpu.as_ref().map(|(g, p2p, un)| stats::GpuIo {
            gpu: g,
            path: if *p2p && !bounced {
                stats::Path::P2p
            } else {
                stats::Path::Posix
            },
            unaligned: *un,
        });
        let done = r.as_ref().ok().copied();
        stats::io(op == Op::Write, size, done, t0.elapsed(), g);
    }
    io_result(call, r)
}

/// `cuFileRead`: bytes read (short at the end of the file), `-1` with
/// `errno` for a system call error, or a negative `CUfileOpError`.
///
/// # Safety
/// `[base + buf_off, base + buf_off + size)` is valid memory.
#[no_mangle]
pub unsafe extern "C" fn cuFileRead(
    fh: *mut c_void,
    base: *mut c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_off: libc::off_t,
) -> isize {
    sync_io(fh, Op::Read, base, size, file_offset, buf_off)
}

/// `cuFileWrite`: as [`cuFileRead`].
///
/// # Safety
/// As [`cuFileRead`].
#[no_mangle]
pub unsafe extern "C" fn cuFileWrite(
    fh: *mut c_void,
    base: *const c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_off: libc::off_t,
) -> isize {
    sync_io(fh, Op::Write, base, size, file_offset, buf_off)
}

fn vectored_io(
    fh: *mut c_void,
    op: Op,
    iov: *const CUfileIOVec_t,
    iovcnt: usize,
    file_offset: libc::off_t,
    flags: c_uint,
) -> isize {
    let (call, h) = match begin(fh, op, ["cuFileReadv", "cuFileWritev"]) {
        Ok(x) => x,
        Err(ret) => return ret,
    };
    if flags != 0 || (iov.is_null() && iovcnt > 0) {
        log(
            LogLevel::Debug,
            format_args!("{call}: flags {flags} (must be 0) or iov NULL"),
        );
        return -(CU_FILE_INVALID_VALUE as isize);
    }
    if iovcnt == 0 {
        return 0;
    }
    if iovcnt > fgds::FGDS_IOV_MAX {
        log(
            LogLevel::Debug,
            format_args!("{call}: {iovcnt} segments, at most {}", fgds::FGDS_IOV_MAX),
        );
        return -(CU_FILE_INVALID_VALUE as isize);
    }
    // SAFETY: cuFile's contract: iov holds iovcnt entries.
    let iov = unsafe { std::slice::from_raw_parts(iov, iovcnt) };
    let t0 = Instant::now();
    let r = offset(file_offset, "file offset").and_then(|fo| {
        // Each segment: its registered buffer, else the cached registration
        // of its CUDA allocation, else one for this call.
        let bufs = iov
            .iter()
            .filter(|v| v.len > 0)
            .map(|v| held_target(v.base, 0, v.len).map(|(b, off, _)| (b, off, v.len)))
            .collect::<fgds::Result<Vec<_>>>()?;
        let segs: Vec<fgds::Segment<'_>> = bufs
            .iter()
            .map(|(b, off, len)| fgds::Segment {
                buffer: b,
                offset: *off,
                size: *len,
            })
            .collect();
        if segs.is_empty() {
            return Ok(0);
        }
        match op {
            Op::Read => h.file.readv(&segs, fo as u64),
            Op::Write => h.file.writev(&segs, fo as u64),
        }
    });
    note_path(&h);
    if stats::level() > 0 {
        stats::vectored(op == Op::Write, r.as_ref().ok().copied(), t0.elapsed());
    }
    io_result(call, r)
}

/// `cuFileReadv` (cuFile 1.19): reads into the `iovcnt` segments of `iov`,
/// in order, from `file_offset` on, in one call of fgds's vectored engine
/// (P2P into registered GPU memory an fgds node maps, the bounce path
/// elsewhere); `flags` must be 0. Returns as `cuFileRead`.
///
/// # Safety
/// `iov` holds `iovcnt` entries whose memory is valid.
#[no_mangle]
pub unsafe extern "C" fn cuFileReadv(
    fh: *mut c_void,
    iov: *const CUfileIOVec_t,
    iovcnt: usize,
    file_offset: libc::off_t,
    flags: c_uint,
) -> isize {
    vectored_io(fh, Op::Read, iov, iovcnt, file_offset, flags)
}

/// `cuFileWritev` (cuFile 1.19): the writing [`cuFileReadv`].
///
/// # Safety
/// As [`cuFileReadv`].
#[no_mangle]
pub unsafe extern "C" fn cuFileWritev(
    fh: *mut c_void,
    iov: *const CUfileIOVec_t,
    iovcnt: usize,
    file_offset: libc::off_t,
    flags: c_uint,
) -> isize {
    vectored_io(fh, Op::Write, iov, iovcnt, file_offset, flags)
}
