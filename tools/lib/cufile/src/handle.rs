//! Registered files (`cuFileHandleRegister`/`Deregister`): the table of
//! handles, the ids handed out for handles and batches, and the note, once
//! per handle, that its I/O bounced.

use crate::abi::*;
use crate::config::LogLevel;
use crate::driver::{driver, log, FELL_BACK};
use crate::errors::status_of;
use crate::stats;
use fgds::{Error, FileHandle};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// A registered file.
pub(crate) struct Handle {
    pub(crate) file: Arc<FileHandle>,
    fd: c_int,
    warned: AtomicBool,
}

/// The registered files, by the id handed out for each.
fn handles() -> &'static RwLock<HashMap<usize, Arc<Handle>>> {
    static HANDLES: OnceLock<RwLock<HashMap<usize, Arc<Handle>>>> = OnceLock::new();
    HANDLES.get_or_init(Default::default)
}

/// Handles and batch ids are small integers handed out as pointers, so that
/// a bad one is an error rather than a wild dereference.
pub(crate) fn new_id() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn handle(fh: *mut c_void) -> Result<Arc<Handle>, CUfileOpError> {
    handles()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(fh as usize))
        .cloned()
        .ok_or(CU_FILE_HANDLE_NOT_REGISTERED)
}

/// Whether a request is misaligned for the file's O_DIRECT (its edges bounce).
pub(crate) fn unaligned(h: &Handle, addr: u64, size: usize, file_off: u64) -> bool {
    let (ma, oa) = h.file.dio_alignment();
    let (ma, oa) = (ma.max(1), oa.max(1));
    addr % ma != 0 || file_off % oa != 0 || size as u64 % oa != 0
}

/// Says once per handle that its I/O bounced, and why.
pub(crate) fn note_path(h: &Handle) {
    let st = h.file.stats();
    if st.fallbacks == 0 && st.bounce_bytes == 0 {
        return;
    }
    FELL_BACK.store(true, Ordering::Relaxed);
    if !h.warned.swap(true, Ordering::Relaxed) {
        let why = st
            .last_fallback_reason
            .unwrap_or_else(|| "unaligned head or tail of a request".into());
        log(
            LogLevel::Info,
            format_args!(
                "fd {}: bounce path ({} bytes so far): {why}",
                h.fd, st.bounce_bytes
            ),
        );
    }
}

/// `cuFileHandleRegister`: a file descriptor (`CU_FILE_HANDLE_TYPE_OPAQUE_FD`),
/// opened with or without `O_DIRECT`.
///
/// # Safety
/// `fh` and `descr` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cuFileHandleRegister(
    fh: *mut *mut c_void,
    descr: *mut CUfileDescr_t,
) -> CUfileError_t {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return e,
    };
    if fh.is_null() || descr.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: checked non-NULL; the caller's descriptor.
    let descr = unsafe { &*descr };
    if descr.type_ != CU_FILE_HANDLE_TYPE_OPAQUE_FD {
        return CUfileError_t::op(CU_FILE_INVALID_FILE_TYPE);
    }
    // SAFETY: type OPAQUE_FD: the union holds the fd.
    let fd = unsafe { descr.handle.fd };
    let mut cfg = d.settings.fgds.clone();
    cfg.chunk_size = d.chunk.load(Ordering::Relaxed);
    let r = FileHandle::from_fd(fd, cfg);
    stats::reg(stats::Reg::Handle, r.is_ok(), None, 0);
    match r {
        Ok(f) => {
            let id = new_id();
            let h = Arc::new(Handle {
                file: Arc::new(f),
                fd,
                warned: AtomicBool::new(false),
            });
            handles()
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, h);
            // SAFETY: checked non-NULL.
            unsafe { fh.write(id as *mut c_void) };
            CUfileError_t::OK
        }
        Err(e @ (Error::Io { .. } | Error::InvalidArgument(_))) => {
            log(
                LogLevel::Debug,
                format_args!("cuFileHandleRegister: fd {fd}: {e}"),
            );
            CUfileError_t::op(if e.errno() == libc::EBADF {
                CU_FILE_INVALID_VALUE
            } else {
                CU_FILE_INVALID_FILE_TYPE
            })
        }
        Err(e) => status_of("cuFileHandleRegister", &e),
    }
}

/// `cuFileHandleDeregister`: I/O in flight on the handle completes first.
#[no_mangle]
pub extern "C" fn cuFileHandleDeregister(fh: *mut c_void) {
    let h = handles()
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(fh as usize));
    stats::reg(stats::Reg::HandleFree, h.is_some(), None, 0);
}
