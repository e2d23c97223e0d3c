//! The entry points of cuFile's statistics (`cuFileSetStatsLevel`,
//! `cuFileGetStatsLevel`, `cuFileStatsStart`/`Stop`/`Reset`,
//! `cuFileGetStatsL1`/`L2`/`L3`): the C side of [`crate::stats`], which
//! counts.

use crate::abi::*;
use crate::driver::{driver, version};
use crate::stats;
use std::ffi::c_int;

/// Runs `f` once the driver is open (the level is known then): OK, else
/// the driver's error.
fn when_open(f: impl FnOnce()) -> CUfileError_t {
    match driver() {
        Ok(_) => {
            f();
            CUfileError_t::OK
        }
        Err(e) => e,
    }
}

/// `cuFileSetStatsLevel`: 0 (off), 1, 2 or 3, else `CU_FILE_INVALID_VALUE`;
/// overrides `profile.cufile_stats` and takes effect for later calls.
#[no_mangle]
pub extern "C" fn cuFileSetStatsLevel(level: c_int) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if stats::set_level(level) {
        CUfileError_t::OK
    } else {
        CUfileError_t::op(CU_FILE_INVALID_VALUE)
    }
}

/// `cuFileGetStatsLevel`.
///
/// # Safety
/// `level` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsLevel(level: *mut c_int) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if level.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: checked non-NULL.
    unsafe { level.write(stats::level() as c_int) };
    CUfileError_t::OK
}

/// `cuFileStatsStart`: counting resumes (it runs from the start while the
/// level is above 0); `CU_FILE_INVALID_VALUE` at level 0.
#[no_mangle]
pub extern "C" fn cuFileStatsStart() -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if stats::level() == 0 {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    stats::set_running(true);
    CUfileError_t::OK
}

/// `cuFileStatsStop`: counting pauses; what was counted stays readable.
#[no_mangle]
pub extern "C" fn cuFileStatsStop() -> CUfileError_t {
    when_open(|| stats::set_running(false))
}

/// `cuFileStatsReset`: every counter to 0, the span restarts.
#[no_mangle]
pub extern "C" fn cuFileStatsReset() -> CUfileError_t {
    when_open(stats::reset)
}

/// Writes the statistics of `level` in the layout of the version presented
/// (`FGDS_CUFILE_VERSION`: before 1.19, level 1 has no vectored counters).
fn get_stats<T>(out: *mut T, level: u32) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if out.is_null() || stats::level() < level {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    let bytes = stats::layout(&stats::snapshot(), level, version());
    debug_assert!(bytes.len() <= std::mem::size_of::<T>());
    // SAFETY: checked non-NULL; the caller's struct of the version it was
    // built for, which the layout is.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), bytes.len()) };
    CUfileError_t::OK
}

/// `cuFileGetStatsL1` (level 1 or more, else `CU_FILE_INVALID_VALUE`).
///
/// # Safety
/// `stats` is NULL or points to a `CUfileStatsLevel1_t` of the version
/// presented.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL1(stats: *mut CUfileStatsLevel1_t) -> CUfileError_t {
    get_stats(stats, 1)
}

/// `cuFileGetStatsL2` (level 2 or more): level 1 and the size histograms.
///
/// # Safety
/// `stats` is NULL or points to a `CUfileStatsLevel2_t` of the version
/// presented.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL2(stats: *mut CUfileStatsLevel2_t) -> CUfileError_t {
    get_stats(stats, 2)
}

/// `cuFileGetStatsL3` (level 3): level 2 and per GPU, P2P against bounced.
///
/// # Safety
/// `stats` is NULL or points to a `CUfileStatsLevel3_t` of the version
/// presented.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL3(stats: *mut CUfileStatsLevel3_t) -> CUfileError_t {
    get_stats(stats, 3)
}
