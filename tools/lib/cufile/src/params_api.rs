//! The entry points of cuFile's parameter API (`cuFileGetParameter*`,
//! `cuFileSetParameter*`, the slab arrays): the C side of [`crate::params`],
//! which stages the values and knows each parameter.

use crate::abi::*;
use crate::config::Settings;
use crate::driver::{settings_with, DRIVER};
use crate::{params, stats};
use std::ffi::c_int;
use std::sync::atomic::Ordering;

/// The settings, chunk size and statistics level a parameter reads: those
/// in force once the driver is open, else those it would open with.
fn param_view<T>(f: impl FnOnce(&Settings, usize, u32) -> T) -> Result<T, CUfileError_t> {
    match DRIVER.get() {
        Some(Ok(d)) => Ok(f(
            &d.settings,
            d.chunk.load(Ordering::Relaxed),
            stats::level(),
        )),
        Some(Err((code, _))) => Err(CUfileError_t::op(*code)),
        None => {
            let s = settings_with(&params::peek()).map_err(|(c, _)| CUfileError_t::op(c))?;
            Ok(f(&s, s.fgds.chunk_size, s.stats_level))
        }
    }
}

/// A `cuFileGetParameter*`: the value `read` finds in the settings
/// [`param_view`] gives, handed to `put` to write out, or the code of why
/// there is none.
fn get<T>(
    read: impl FnOnce(&Settings, usize, u32) -> Result<T, CUfileOpError>,
    put: impl FnOnce(T) -> CUfileError_t,
) -> CUfileError_t {
    match param_view(read) {
        Ok(Ok(v)) => put(v),
        Ok(Err(c)) => CUfileError_t::op(c),
        Err(e) => e,
    }
}

/// [`get`] into the caller's `*value`; `CU_FILE_INVALID_VALUE` for NULL.
///
/// # Safety
/// `value` is NULL or valid for a write.
unsafe fn get_into<T>(
    value: *mut T,
    read: impl FnOnce(&Settings, usize, u32) -> Result<T, CUfileOpError>,
) -> CUfileError_t {
    if value.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    get(read, |v| {
        // SAFETY: checked non-NULL.
        unsafe { value.write(v) };
        CUfileError_t::OK
    })
}

fn done<T>(r: Result<T, CUfileOpError>) -> CUfileError_t {
    match r {
        Ok(_) => CUfileError_t::OK,
        Err(c) => CUfileError_t::op(c),
    }
}

/// `cuFileGetParameterSizeT`: `PROFILE_STATS` (the statistics level),
/// `EXECUTION_MAX_IO_QUEUE_DEPTH` (fgds's queue depth),
/// `PROPERTIES_MAX_DIRECT_IO_SIZE_KB` (the chunk size, KiB),
/// `PROPERTIES_IO_BATCHSIZE`; the others have no fgds quantity
/// (`CU_FILE_PLATFORM_NOT_SUPPORTED`).
///
/// # Safety
/// `value` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterSizeT(param: c_int, value: *mut usize) -> CUfileError_t {
    // SAFETY: as this function's contract.
    unsafe {
        get_into(value, |s, chunk, lvl| {
            params::get_size(param, s, chunk, lvl)
        })
    }
}

/// `cuFileGetParameterBool`: `PROPERTIES_ALLOW_COMPAT_MODE` (not strict),
/// `FORCE_COMPAT_MODE`, `PREFER_IO_URING`, `PROPERTIES_ALLOW_SYSTEM_MEMORY`
/// and `USE_PCIP2PDMA` (always true); the others
/// `CU_FILE_PLATFORM_NOT_SUPPORTED`.
///
/// # Safety
/// `value` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterBool(param: c_int, value: *mut bool) -> CUfileError_t {
    // SAFETY: as this function's contract.
    unsafe { get_into(value, |s, _, _| params::get_bool(param, s)) }
}

/// `cuFileGetParameterString`: `LOGGING_LEVEL` (`NONE`, `WARN` or `DEBUG`
/// for fgds's levels, or the name set); the log file and folder
/// `CU_FILE_PLATFORM_NOT_SUPPORTED` (fgds logs to stderr).
/// `CU_FILE_INVALID_VALUE` when `len` has no room for the value and its NUL.
///
/// # Safety
/// `desc_str` is NULL or has room for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterString(
    param: c_int,
    desc_str: *mut libc::c_char,
    len: c_int,
) -> CUfileError_t {
    if desc_str.is_null() || len <= 0 {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    get(
        |s, _, _| params::get_string(param, s),
        |v| {
            if v.len() >= len as usize {
                return CUfileError_t::op(CU_FILE_INVALID_VALUE);
            }
            // SAFETY: len bytes of room, checked above.
            unsafe {
                std::ptr::copy_nonoverlapping(v.as_ptr(), desc_str as *mut u8, v.len());
                desc_str.add(v.len()).write(0);
            }
            CUfileError_t::OK
        },
    )
}

/// `cuFileGetParameterMinMaxValue`: the range `cuFileSetParameterSizeT`
/// accepts.
///
/// # Safety
/// `min_value` and `max_value` are NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterMinMaxValue(
    param: c_int,
    min_value: *mut usize,
    max_value: *mut usize,
) -> CUfileError_t {
    if min_value.is_null() || max_value.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    match params::size_range(param) {
        Ok((lo, hi)) => {
            // SAFETY: checked non-NULL.
            unsafe {
                min_value.write(lo);
                max_value.write(hi);
            }
            CUfileError_t::OK
        }
        Err(c) => CUfileError_t::op(c),
    }
}

/// `cuFileSetParameterSizeT`: staged until the driver opens (then
/// `CU_FILE_DRIVER_ALREADY_OPEN`; this library's driver opens at the first
/// call of any function outside this API); it wins over the environment
/// and `cufile.json`. The queue depth and the direct I/O size are caps, as
/// in `cufile.json`. Out of range: `CU_FILE_INVALID_VALUE`.
#[no_mangle]
pub extern "C" fn cuFileSetParameterSizeT(param: c_int, value: usize) -> CUfileError_t {
    done(params::set_size(param, value))
}

/// `cuFileSetParameterBool`: as [`cuFileSetParameterSizeT`]; turning off
/// host memory or PCI P2PDMA is `CU_FILE_PLATFORM_NOT_SUPPORTED`.
#[no_mangle]
pub extern "C" fn cuFileSetParameterBool(param: c_int, value: bool) -> CUfileError_t {
    done(params::set_bool(param, value))
}

/// `cuFileSetParameterString`: `LOGGING_LEVEL` (`NONE`/`OFF`: silent;
/// `ERROR`, `WARN`, `NOTICE`, `INFO`: the path and fallback lines; `DEBUG`,
/// `TRACE`: also every failed call); as [`cuFileSetParameterSizeT`].
///
/// # Safety
/// `desc_str` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cuFileSetParameterString(
    param: c_int,
    desc_str: *const libc::c_char,
) -> CUfileError_t {
    if desc_str.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: the caller's NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(desc_str) };
    match v.to_str() {
        Ok(v) => done(params::set_string(param, v)),
        Err(_) => CUfileError_t::op(CU_FILE_INVALID_VALUE),
    }
}

/// The slab-array parameters configure cuFile's own bounce-buffer pools,
/// which fgds does not have (its staging buffers are sized by the chunk
/// size): `CU_FILE_PLATFORM_NOT_SUPPORTED` after the arguments' checks.
fn slab_array(sizes: *const usize, counts: *const usize, len: c_int) -> CUfileError_t {
    if sizes.is_null() || counts.is_null() || len <= 0 {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    CUfileError_t::op(CU_FILE_PLATFORM_NOT_SUPPORTED)
}

/// `cuFileSetParameterPosixPoolSlabArray`: see [`slab_array`].
#[no_mangle]
pub extern "C" fn cuFileSetParameterPosixPoolSlabArray(
    size_values: *const usize,
    count_values: *const usize,
    len: c_int,
) -> CUfileError_t {
    slab_array(size_values, count_values, len)
}

/// `cuFileGetParameterPosixPoolSlabArray`: see [`slab_array`].
#[no_mangle]
pub extern "C" fn cuFileGetParameterPosixPoolSlabArray(
    size_values: *mut usize,
    count_values: *mut usize,
    len: c_int,
) -> CUfileError_t {
    slab_array(size_values, count_values, len)
}

/// `cuFileSetParameterGpuBounceBufferSlabArray`: see [`slab_array`].
#[no_mangle]
pub extern "C" fn cuFileSetParameterGpuBounceBufferSlabArray(
    size_values: *const usize,
    count_values: *const usize,
    len: c_int,
) -> CUfileError_t {
    slab_array(size_values, count_values, len)
}

/// `cuFileGetParameterGpuBounceBufferSlabArray`: see [`slab_array`].
#[no_mangle]
pub extern "C" fn cuFileGetParameterGpuBounceBufferSlabArray(
    size_values: *mut usize,
    count_values: *mut usize,
    len: c_int,
) -> CUfileError_t {
    slab_array(size_values, count_values, len)
}
