//! fgds's errors in cuFile's codes: the `CUfileError_t` a call returns,
//! `cuFileRead`'s `-1` with `errno` or `-code`, and cuFile's description of
//! a code (`cuFileOpErrorStringFGDS`).

use crate::abi::*;
use crate::config::LogLevel;
use crate::driver::log;
use fgds::Error;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

/// The cuFile code for an fgds error (`-1` with errno for system call errors,
/// as cuFileRead returns them).
fn op_code(e: &Error) -> CUfileOpError {
    match e {
        Error::Io { .. } => -1,
        Error::Segment { source, .. } => op_code(source),
        Error::InvalidArgument(_) | Error::Misaligned { .. } | Error::TooManySegments { .. } => {
            CU_FILE_INVALID_VALUE
        }
        Error::OutOfBounds { .. } => CU_FILE_INVALID_MAPPING_RANGE,
        Error::NotRegistered { .. } => CU_FILE_MEMORY_NOT_REGISTERED,
        Error::AlreadyRegistered { .. } => CU_FILE_MEMORY_ALREADY_REGISTERED,
        Error::NoDevice(_) => CU_FILE_DEVICE_NOT_FOUND,
        Error::ApiVersion { .. } => CU_FILE_DRIVER_VERSION_MISMATCH,
        Error::P2pUnavailable { .. } => CU_FILE_IO_NOT_SUPPORTED,
        Error::BatchFull { .. } => CU_FILE_BATCH_FULL,
        Error::RuntimeUnavailable { .. } | Error::Runtime { .. } => CU_FILE_CUDA_DRIVER_ERROR,
        Error::BadHandle(_) => CU_FILE_HANDLE_NOT_REGISTERED,
        _ => CU_FILE_IO_ERROR,
    }
}

pub(crate) fn status_of(call: &str, e: &Error) -> CUfileError_t {
    log(LogLevel::Debug, format_args!("{call}: {e}"));
    match (op_code(e), e) {
        (-1, _) => CUfileError_t::op(CU_FILE_INTERNAL_ERROR),
        (c, Error::Runtime { code, .. }) => CUfileError_t {
            err: c,
            cu_err: *code,
        },
        (c, _) => CUfileError_t::op(c),
    }
}

/// cuFileRead's return for an error: `-1` with `errno` set, or `-code`.
fn io_ret(call: &str, e: &Error) -> isize {
    log(LogLevel::Debug, format_args!("{call}: {e}"));
    match op_code(e) {
        -1 => {
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = e.errno() };
            -1
        }
        c => -(c as isize),
    }
}

/// What `cuFileRead` and its kin return: the bytes moved, or [`io_ret`]'s
/// code for the error.
pub(crate) fn io_result(call: &str, r: fgds::Result<usize>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => io_ret(call, &e),
    }
}

/// cuFile's description of a code (`CUFILE_ERRSTR`, `cufileop_status_error`
/// in the header): the library's one table, [`crate::abi::op_error_str`].
#[no_mangle]
pub extern "C" fn cuFileOpErrorStringFGDS(code: c_int) -> *const std::ffi::c_char {
    static STRS: OnceLock<Mutex<HashMap<c_int, std::ffi::CString>>> = OnceLock::new();
    let mut g = STRS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let key = code.saturating_abs();
    g.entry(key)
        .or_insert_with(|| {
            std::ffi::CString::new(op_error_str(key))
                .unwrap_or_else(|_| c"unknown cufile error".into())
        })
        .as_ptr()
}
