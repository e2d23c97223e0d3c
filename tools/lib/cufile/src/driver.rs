//! The driver: what the library finds when it opens (`cufile.json`, the
//! environment, staged parameters, the fgds nodes), at `cuFileDriverOpen` or
//! the first call of any other function; the log; and the driver's entry
//! points (open, close, use count, properties, the `cuFileDriverSet*`
//! limits, `cuFileGetVersion`).

use crate::abi::*;
use crate::config::{self, LogLevel, Settings};
use crate::{params, stats};
use std::ffi::{c_int, c_long, c_uint};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The cuFile version presented: `FGDS_CUFILE_VERSION` (1.20 by default).
pub(crate) fn version() -> u32 {
    fgds::env::env().cufile_version
}

/// What the library found at start.
pub(crate) struct Driver {
    pub(crate) settings: Settings,
    /// `None`: an fgds node serves a GPU (P2P can run); else why not.
    pub(crate) no_p2p: Option<String>,
    /// Bytes of a chunk, changeable by `cuFileDriverSetMaxDirectIOSize`.
    pub(crate) chunk: AtomicUsize,
    pub(crate) max_cache_kb: AtomicUsize,
    max_pinned_kb: AtomicUsize,
}

pub(crate) static DRIVER: OnceLock<Result<Driver, (CUfileOpError, String)>> = OnceLock::new();
static USE_COUNT: AtomicI64 = AtomicI64::new(0);
pub(crate) static FELL_BACK: AtomicBool = AtomicBool::new(false);

pub(crate) fn log(level: LogLevel, msg: std::fmt::Arguments<'_>) {
    let on = match DRIVER.get() {
        Some(Ok(d)) => d.settings.log >= level,
        _ => level <= LogLevel::Info,
    };
    if on {
        eprintln!("libcufile (fgds): {msg}");
    }
}

/// The settings the driver opens with: `cufile.json`, the environment,
/// then what `cuFileSetParameter*` staged.
pub(crate) fn settings_with(staged: &params::Staged) -> Result<Settings, (CUfileOpError, String)> {
    let mut s = config::load().map_err(|e| (CU_FILE_DRIVER_INVALID_PROPS, e.to_string()))?;
    params::apply(staged, &mut s);
    Ok(s)
}

/// Under `fgds run` ([`fgds::report::RUN_REPORT_VAR`] set): appends what
/// this process did to `fgds run`'s report when it exits, for the summary
/// `fgds run` prints (bytes peer to peer and bounced, every fallback by
/// cause).
fn report_at_exit() {
    extern "C" fn at_exit() {
        fgds::report::write_run_report("libcufile");
    }
    if std::env::var_os(fgds::report::RUN_REPORT_VAR).is_some() {
        // SAFETY: at_exit is a plain function of this library; glibc runs
        // it at exit, or when this library is unloaded.
        unsafe {
            libc::atexit(at_exit);
        }
    }
}

fn init() -> Result<Driver, (CUfileOpError, String)> {
    let settings = settings_with(&params::take());
    if let Err((_, why)) = &settings {
        // Said here: the log level is unknown without the settings.
        eprintln!("libcufile (fgds): cuFileDriverOpen: {why}");
    }
    let settings = settings?;
    stats::init_level(settings.stats_level);
    report_at_exit();
    let quiet = settings.log == LogLevel::Off;
    let no_p2p = match fgds::list_devices() {
        Ok(d) if !d.is_empty() => None,
        Ok(_) => Some("no fgds node (module not loaded or no GPU bound)".to_string()),
        Err(e) => Some(format!("no fgds node: {e}")),
    };
    let json = settings
        .json
        .as_ref()
        .map(|p| format!(", settings from {}", p.display()))
        .unwrap_or_default();
    if let (true, Some(why)) = (settings.fgds.strict, &no_p2p) {
        let msg = format!(
            "strict (FGDS_STRICT=1 or allow_compat_mode false) and {why}: every call fails{json}"
        );
        if !quiet {
            eprintln!("libcufile (fgds): {msg}");
        }
        return Err((CU_FILE_DRIVER_NOT_INITIALIZED, msg));
    }
    if !quiet {
        match &no_p2p {
            None => eprintln!(
                "libcufile (fgds): P2P through /dev/fgds* for the GPUs they serve, bounce path for others{}{json}",
                if settings.fgds.strict { " (strict: a bounce is an error)" } else { "" }
            ),
            Some(why) => eprintln!(
                "libcufile (fgds): bounce path (compat mode) for GPU memory: {why}; FGDS_STRICT=1 makes it an error{json}"
            ),
        }
    }
    if let Err(e) = fgds::gpucache::configure(settings.cache) {
        return Err((CU_FILE_DRIVER_INVALID_PROPS, e.to_string()));
    }
    Ok(Driver {
        chunk: AtomicUsize::new(settings.fgds.chunk_size),
        max_cache_kb: AtomicUsize::new(settings.cache.device_cache_size >> 10),
        max_pinned_kb: AtomicUsize::new(32 << 20),
        settings,
        no_p2p,
    })
}

pub(crate) fn driver() -> Result<&'static Driver, CUfileError_t> {
    match DRIVER.get_or_init(init) {
        Ok(d) => Ok(d),
        Err((code, _)) => Err(CUfileError_t::op(*code)),
    }
}

/// `cuFileDriverOpen`: reads the settings and looks for fgds nodes (also
/// done by the first call of any other function).
#[no_mangle]
pub extern "C" fn cuFileDriverOpen() -> CUfileError_t {
    match driver() {
        Ok(_) => {
            USE_COUNT.fetch_add(1, Ordering::Relaxed);
            CUfileError_t::OK
        }
        Err(e) => e,
    }
}

/// `cuFileDriverClose` (older programs).
#[no_mangle]
pub extern "C" fn cuFileDriverClose() -> CUfileError_t {
    cuFileDriverClose_v2()
}

/// `cuFileDriverClose_v2`: drops one use; handles and buffers stay valid.
/// The last use dropped ([`last_use_dropped`]), what the library keeps of
/// its own goes too.
#[no_mangle]
pub extern "C" fn cuFileDriverClose_v2() -> CUfileError_t {
    let r = USE_COUNT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        (n > 0).then(|| n - 1)
    });
    match r {
        Ok(n) => {
            if n == 1 {
                last_use_dropped();
            }
            CUfileError_t::OK
        }
        Err(_) => CUfileError_t::op(CU_FILE_DRIVER_NOT_INITIALIZED),
    }
}

/// No use is left (cuFile's "release the driver"): `fgds_shutdown()` drops
/// what libfgds keeps of its own for memory never registered (its
/// registration cache and the cache's thread, its staging pools, the
/// threads' copy streams). What the caller made stays valid, as cuFile
/// keeps it: handles (`cuFileHandleRegister`), buffers
/// (`cuFileBufRegister`: registrations of the caller's, not the cache's),
/// batches and streams; a request in flight finishes first; the settings
/// and statistics stay. The next request makes the library's own again.
/// At exit, nothing needs it: the kernel frees what is left with the
/// process.
fn last_use_dropped() {
    #[cfg(test)]
    tests::LAST_USES_DROPPED.fetch_add(1, Ordering::Relaxed);
    fgds::capi::fgds_shutdown();
}

/// `cuFileUseCount`.
#[no_mangle]
pub extern "C" fn cuFileUseCount() -> c_long {
    USE_COUNT.load(Ordering::Relaxed) as c_long
}

/// `cuFileDriverGetProperties`: which path runs. `fflags` has
/// `CU_FILE_P2P_SUPPORTED` when an fgds node serves a GPU; `dcontrolflags`
/// has `CU_FILE_ALLOW_COMPAT_MODE` unless strict, `CU_FILE_POSIX_IO_MODE`
/// when no fgds node exists (GPU memory always bounces) and
/// `CU_FILE_FALLBACK_IO_MODE` once any I/O of this process bounced.
///
/// # Safety
/// `props` is NULL or points to a `CUfileDrvProps_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverGetProperties(props: *mut CUfileDrvProps_t) -> CUfileError_t {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return e,
    };
    if props.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    let bit = |b: c_uint| 1u32 << b;
    let mut ctl = 0;
    if !d.settings.fgds.strict {
        ctl |= bit(CU_FILE_ALLOW_COMPAT_MODE);
    }
    if d.no_p2p.is_some() {
        ctl |= bit(CU_FILE_POSIX_IO_MODE);
    }
    if FELL_BACK.load(Ordering::Relaxed) {
        ctl |= bit(CU_FILE_FALLBACK_IO_MODE);
    }
    let mut ff = bit(CU_FILE_BATCH_IO_SUPPORTED)
        | bit(CU_FILE_STREAMS_SUPPORTED)
        | bit(CU_FILE_PARALLEL_IO_SUPPORTED);
    let mut st = 0;
    if d.no_p2p.is_none() {
        ff |= bit(CU_FILE_P2P_SUPPORTED);
        st |= bit(CU_FILE_NVME_SUPPORTED);
    }
    let p = CUfileDrvProps_t {
        nvfs: CUfileDrvPropsNvfs {
            major_version: fgds::sys::FGDS_API_VERSION,
            minor_version: 0,
            poll_thresh_size: 4,
            max_direct_io_size: d.chunk.load(Ordering::Relaxed) >> 10,
            dstatusflags: st,
            dcontrolflags: ctl,
        },
        fflags: ff,
        max_device_cache_size: d.max_cache_kb.load(Ordering::Relaxed) as c_uint,
        per_buffer_cache_size: (fgds::gpucache::settings().per_buffer_size >> 10) as c_uint,
        max_device_pinned_mem_size: d.max_pinned_kb.load(Ordering::Relaxed) as c_uint,
        max_batch_io_size: d.settings.max_batch as c_uint,
        max_batch_io_timeout_msecs: 5,
    };
    // SAFETY: checked non-NULL; the caller's struct.
    unsafe { props.write(p) };
    CUfileError_t::OK
}

/// `cuFileDriverSetPollMode`: accepted, no effect (fgds reaps with io_uring).
#[no_mangle]
pub extern "C" fn cuFileDriverSetPollMode(_poll: bool, _threshold_kb: usize) -> CUfileError_t {
    driver().err().unwrap_or(CUfileError_t::OK)
}

/// `cuFileDriverSetMaxDirectIOSize` (KiB): the largest chunk of handles
/// registered afterwards (it lowers the configured chunk size, as
/// `max_direct_io_size_kb` does).
#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxDirectIOSize(kb: usize) -> CUfileError_t {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return e,
    };
    let bytes = kb.saturating_mul(1024) / 4096 * 4096;
    if bytes == 0 || bytes > fgds::engine::MAX_RW_COUNT {
        return CUfileError_t::op(CU_FILE_DRIVER_UNSUPPORTED_LIMIT);
    }
    d.chunk
        .store(bytes.min(d.settings.fgds.chunk_size), Ordering::Relaxed);
    CUfileError_t::OK
}

/// `cuFileDriverSetMaxCacheSize` (KiB): the staging pool's most bytes per
/// GPU (whole staging buffers) for pools made afterwards (`fgds::gpucache`).
#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxCacheSize(kb: usize) -> CUfileError_t {
    match driver() {
        Ok(d) => {
            let mut s = fgds::gpucache::settings();
            let pb = s.per_buffer_size;
            s.device_cache_size = kb.saturating_mul(1024) / pb * pb;
            if fgds::gpucache::configure(s).is_err() {
                return CUfileError_t::op(CU_FILE_INVALID_VALUE);
            }
            d.max_cache_kb
                .store(s.device_cache_size >> 10, Ordering::Relaxed);
            CUfileError_t::OK
        }
        Err(e) => e,
    }
}

/// `cuFileDriverSetMaxPinnedMemSize` (KiB): reported, no effect.
#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxPinnedMemSize(kb: usize) -> CUfileError_t {
    match driver() {
        Ok(d) => {
            d.max_pinned_kb.store(kb, Ordering::Relaxed);
            CUfileError_t::OK
        }
        Err(e) => e,
    }
}

/// `cuFileGetVersion`: 1200 (cuFile 1.20's ABI), or the version
/// `FGDS_CUFILE_VERSION` presents.
///
/// # Safety
/// `version` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetVersion(version: *mut c_int) -> CUfileError_t {
    if version.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: checked non-NULL.
    unsafe { version.write(self::version() as c_int) };
    CUfileError_t::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) static LAST_USES_DROPPED: AtomicUsize = AtomicUsize::new(0);

    #[test]
    fn the_last_close_shuts_the_library_down_and_an_open_starts_it_again() {
        let dropped = || LAST_USES_DROPPED.load(Ordering::Relaxed);
        let before = dropped();
        assert_eq!(cuFileDriverOpen().err, CU_FILE_SUCCESS);
        assert_eq!(cuFileDriverOpen().err, CU_FILE_SUCCESS);
        assert_eq!(cuFileDriverClose_v2().err, CU_FILE_SUCCESS);
        assert_eq!(dropped(), before, "a use is left");
        assert_eq!(cuFileDriverClose().err, CU_FILE_SUCCESS);
        assert_eq!(dropped(), before + 1, "the last use");
        assert_eq!(cuFileUseCount(), 0);
        assert_eq!(
            cuFileDriverClose_v2().err,
            CU_FILE_DRIVER_NOT_INITIALIZED,
            "no use to drop"
        );
        assert_eq!(dropped(), before + 1);
        assert_eq!(cuFileDriverOpen().err, CU_FILE_SUCCESS, "open again");
        assert_eq!(cuFileUseCount(), 1);
        assert_eq!(cuFileDriverClose_v2().err, CU_FILE_SUCCESS);
        assert_eq!(dropped(), before + 2);
    }
}
