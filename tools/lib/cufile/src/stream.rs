//! Stream-ordered I/O (`cuFileReadAsync`/`WriteAsync`,
//! `cuFileStreamRegister`/`Deregister`) on fgds's I/O on a CUDA stream.

use crate::abi::*;
use crate::config::LogLevel;
use crate::driver::{driver, log};
use crate::errors::{io_result, status_of};
use crate::handle::{handle, note_path};
use crate::io::plain;
use crate::memory::{held_target, offset};
use crate::stats;
use fgds::{BufferKind, Error, Op};
use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::{Mutex, OnceLock};

/// The streams registered (`cuFileStreamRegister`) and their flags.
fn streams() -> &'static Mutex<HashMap<usize, c_uint>> {
    static STREAMS: OnceLock<Mutex<HashMap<usize, c_uint>>> = OnceLock::new();
    STREAMS.get_or_init(Default::default)
}

/// # Safety
/// As [`cuFileReadAsync`]; `args`' pointers may be NULL (an error).
unsafe fn stream_io(
    op: Op,
    fh: *mut c_void,
    base: *mut c_void,
    args: fgds::LateArgs,
    stream: *mut c_void,
) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    let h = match handle(fh) {
        Ok(h) => h,
        Err(c) => return CUfileError_t::op(c),
    };
    let (size_p, file_offset_p, buf_off_p, bytes_p) =
        (args.size, args.file_off, args.buf_off, args.bytes_done);
    if base.is_null()
        || size_p.is_null()
        || file_offset_p.is_null()
        || buf_off_p.is_null()
        || bytes_p.is_null()
    {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // Unregistered: a buffer as large as the request may become (*size_p
    // is its upper bound, cuFile's rule); for CUDA memory the cached
    // registration of its allocation, shared by every request on it.
    // SAFETY: the caller's pointers, checked non-NULL.
    let (size, bo) = unsafe { (*size_p, *buf_off_p) };
    let r = offset(bo, "buffer offset").and_then(|bo| held_target(base, 0, bo + size.max(1)));
    let (buffer, base_off, gpu) = match r {
        Ok(x) => x,
        Err(e) => return status_of("cuFileReadAsync", &e),
    };
    let host = matches!(buffer.kind(), BufferKind::Host | BufferKind::HostUser);
    if host && stream.is_null() && fgds::gpu::Runtime::cuda().is_err() {
        // No CUDA, so no work can be queued on the default stream: the
        // request runs now, in order.
        // SAFETY: the caller's pointers, checked non-NULL.
        let (size, fo, bo) = unsafe { (*size_p, *file_offset_p, *buf_off_p) };
        let r = offset(fo, "file offset").and_then(|fo| {
            let bo = offset(bo, "buffer offset")?;
            plain(&h.file, op, &buffer, base_off + bo, size, fo as u64)
        });
        note_path(&h);
        let v = io_result("cuFileReadAsync", r);
        // SAFETY: checked non-NULL.
        unsafe { bytes_p.write(v) };
        return CUfileError_t::OK;
    }
    // Counted as cuFileRead/cuFileWrite are, when the stream ran it.
    let path = if buffer.is_p2p() && h.file.no_direct_reason().is_none() {
        stats::Path::P2p
    } else {
        stats::Path::Posix
    };
    let file = h.file.clone();
    let addr = buffer.base_addr() + base_off as u64;
    let notify: fgds::Notify = Box::new(move |d: &fgds::StreamDone| {
        if stats::level() == 0 {
            return;
        }
        let un = {
            let (ma, oa) = file.dio_alignment();
            let (ma, oa) = (ma.max(1) as i64, oa.max(1) as i64);
            (addr as i64).wrapping_add(d.buf_off) % ma != 0
                || d.file_off % oa != 0
                || d.size as i64 % oa != 0
        };
        let g = gpu.as_deref().map(|g| stats::GpuIo {
            gpu: g,
            path,
            unaligned: un,
        });
        stats::io(op == Op::Write, d.size, d.result.ok(), d.took, g);
    });
    // SAFETY: cuFileReadAsync's contract is LateArgs's.
    let r = unsafe {
        h.file
            .on_stream_notify(op, buffer, base_off, args, stream, notify)
    };
    match r {
        Ok(()) => CUfileError_t::OK,
        Err(e @ Error::RuntimeUnavailable { .. }) => {
            log(LogLevel::Debug, format_args!("cuFileReadAsync: {e}"));
            CUfileError_t::op(CU_FILE_ASYNC_NOT_SUPPORTED)
        }
        Err(e) => status_of("cuFileReadAsync", &e),
    }
}

fn late(
    size: *mut usize,
    file_off: *mut libc::off_t,
    buf_off: *mut libc::off_t,
    bytes_done: *mut isize,
) -> fgds::LateArgs {
    fgds::LateArgs {
        size,
        file_off,
        buf_off,
        bytes_done,
    }
}

/// `cuFileReadAsync`: enqueued on `stream`; `*size_p`, `*file_offset_p`,
/// `*buf_off_p` are read when the stream reaches the request, the result
/// goes to `*bytes_read_p`. Without CUDA (host memory, NULL stream) it
/// runs before returning.
///
/// # Safety
/// The pointers stay valid until the stream has run the request.
#[no_mangle]
pub unsafe extern "C" fn cuFileReadAsync(
    fh: *mut c_void,
    base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut libc::off_t,
    buf_off_p: *mut libc::off_t,
    bytes_read_p: *mut isize,
    stream: *mut c_void,
) -> CUfileError_t {
    // SAFETY: As this function's contract.
    unsafe {
        stream_io(
            Op::Read,
            fh,
            base,
            late(size_p, file_offset_p, buf_off_p, bytes_read_p),
            stream,
        )
    }
}

/// `cuFileWriteAsync`: as [`cuFileReadAsync`].
///
/// # Safety
/// As [`cuFileReadAsync`].
#[no_mangle]
pub unsafe extern "C" fn cuFileWriteAsync(
    fh: *mut c_void,
    base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut libc::off_t,
    buf_off_p: *mut libc::off_t,
    bytes_written_p: *mut isize,
    stream: *mut c_void,
) -> CUfileError_t {
    // SAFETY: As this function's contract.
    unsafe {
        stream_io(
            Op::Write,
            fh,
            base,
            late(size_p, file_offset_p, buf_off_p, bytes_written_p),
            stream,
        )
    }
}

/// `cuFileStreamRegister`: remembered; fgds needs no per-stream set-up.
#[no_mangle]
pub extern "C" fn cuFileStreamRegister(stream: *mut c_void, flags: c_uint) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if flags > 15 {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    streams()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(stream as usize, flags);
    CUfileError_t::OK
}

/// `cuFileStreamDeregister`.
#[no_mangle]
pub extern "C" fn cuFileStreamDeregister(stream: *mut c_void) -> CUfileError_t {
    match streams()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(stream as usize))
    {
        Some(_) => CUfileError_t::OK,
        None => CUfileError_t::op(CU_FILE_INVALID_VALUE),
    }
}
