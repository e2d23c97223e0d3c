//! cuFile's parameter API (`cuFileGetParameter*`, `cuFileSetParameter*`):
//! values set before the driver opens are staged and applied when it opens,
//! over `cufile.json` and the environment (cuFile's precedence). A parameter
//! fgds has a quantity for reads and sets that quantity; one it has none
//! for answers `CU_FILE_PLATFORM_NOT_SUPPORTED`, and a value out of range or
//! an unknown parameter `CU_FILE_INVALID_VALUE`.

use crate::abi::{bool_param as bp, size_param as sp, *};
use crate::config::{LogLevel, Settings};
use std::sync::Mutex;

/// What `cuFileSetParameter*` staged before the driver opened.
#[derive(Debug, Default, Clone)]
pub struct Staged {
    sizes: [Option<usize>; sp::COUNT],
    bools: [Option<bool>; bp::COUNT],
    log: Option<String>,
}

/// The staged values, and whether the driver already took them.
static STAGED: Mutex<(Staged, bool)> = Mutex::new((
    Staged {
        sizes: [None; sp::COUNT],
        bools: [None; bp::COUNT],
        log: None,
    },
    false,
));

fn staged() -> std::sync::MutexGuard<'static, (Staged, bool)> {
    STAGED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stages what `set` writes, unless the driver already took the staged
/// values (`CU_FILE_DRIVER_ALREADY_OPEN`).
fn stage(set: impl FnOnce(&mut Staged)) -> Result<(), CUfileOpError> {
    let mut g = staged();
    if g.1 {
        return Err(CU_FILE_DRIVER_ALREADY_OPEN);
    }
    set(&mut g.0);
    Ok(())
}

/// Called by the driver's start: the staged values, which can no longer change.
pub fn take() -> Staged {
    let mut g = staged();
    g.1 = true;
    g.0.clone()
}

/// The staged values, while the driver is not open.
pub fn peek() -> Staged {
    staged().0.clone()
}

/// The range of a size parameter fgds has, `Err` with the code for others.
pub fn size_range(p: i32) -> Result<(usize, usize), CUfileOpError> {
    match p {
        sp::PROFILE_STATS => Ok((0, 3)),
        sp::EXECUTION_MAX_IO_QUEUE_DEPTH => Ok((1, 4096)),
        // NVIDIA's range; a cap on the threads one call runs on
        sp::EXECUTION_MAX_IO_THREADS => Ok((0, 128)),
        sp::PROPERTIES_MAX_DIRECT_IO_SIZE_KB => Ok((4, fgds::engine::MAX_RW_COUNT / 1024)),
        sp::PROPERTIES_IO_BATCHSIZE => Ok((1, 4096)),
        sp::PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB => Ok((0, u32::MAX as usize)),
        sp::PROPERTIES_PER_BUFFER_CACHE_SIZE_KB => Ok((4, fgds::engine::MAX_RW_COUNT / 1024)),
        p if (0..sp::COUNT as i32).contains(&p) => Err(CU_FILE_PLATFORM_NOT_SUPPORTED),
        _ => Err(CU_FILE_INVALID_VALUE),
    }
}

fn bool_known(p: i32) -> Result<(), CUfileOpError> {
    match p {
        bp::PROPERTIES_ALLOW_COMPAT_MODE
        | bp::FORCE_COMPAT_MODE
        | bp::PREFER_IO_URING
        | bp::PROPERTIES_ALLOW_SYSTEM_MEMORY
        | bp::USE_PCIP2PDMA => Ok(()),
        p if (0..bp::COUNT as i32).contains(&p) => Err(CU_FILE_PLATFORM_NOT_SUPPORTED),
        _ => Err(CU_FILE_INVALID_VALUE),
    }
}

/// cuFile's log level names, as fgds's levels.
pub fn log_level(name: &str) -> Option<LogLevel> {
    match name.to_ascii_uppercase().as_str() {
        "NONE" | "OFF" => Some(LogLevel::Off),
        "ERROR" | "WARN" | "NOTICE" | "INFO" => Some(LogLevel::Info),
        "DEBUG" | "TRACE" => Some(LogLevel::Debug),
        _ => None,
    }
}

/// Stages a size parameter; `Err(code)` when it cannot be.
pub fn set_size(p: i32, v: usize) -> Result<(), CUfileOpError> {
    let (lo, hi) = size_range(p)?;
    if !(lo..=hi).contains(&v) {
        return Err(CU_FILE_INVALID_VALUE);
    }
    stage(|st| st.sizes[p as usize] = Some(v))
}

/// Stages a boolean parameter.
pub fn set_bool(p: i32, v: bool) -> Result<(), CUfileOpError> {
    bool_known(p)?;
    // fgds always serves host memory and always goes through PCI P2PDMA:
    // those cannot be turned off.
    if !v && matches!(p, bp::PROPERTIES_ALLOW_SYSTEM_MEMORY | bp::USE_PCIP2PDMA) {
        return Err(CU_FILE_PLATFORM_NOT_SUPPORTED);
    }
    stage(|st| st.bools[p as usize] = Some(v))
}

/// Stages a string parameter (only `CUFILE_PARAM_LOGGING_LEVEL`: fgds logs
/// to stderr, so it has no log file or folder).
pub fn set_string(p: i32, v: &str) -> Result<(), CUfileOpError> {
    match p {
        string_param::LOGGING_LEVEL => {}
        string_param::ENV_LOGFILE_PATH | string_param::LOG_DIR | string_param::RDMA_TRANSPORT => {
            return Err(CU_FILE_PLATFORM_NOT_SUPPORTED)
        }
        _ => return Err(CU_FILE_INVALID_VALUE),
    }
    if log_level(v).is_none() {
        return Err(CU_FILE_INVALID_VALUE);
    }
    stage(|st| st.log = Some(v.to_ascii_uppercase()))
}

/// Applies staged values over the settings from `cufile.json` and the
/// environment. The two limits are caps, as their `cufile.json` keys are.
pub fn apply(st: &Staged, s: &mut Settings) {
    if let Some(v) = st.sizes[sp::PROFILE_STATS as usize] {
        s.stats_level = v as u32;
    }
    if let Some(v) = st.sizes[sp::EXECUTION_MAX_IO_QUEUE_DEPTH as usize] {
        s.fgds.queue_depth = s.fgds.queue_depth.min(v as u32);
    }
    if let Some(v) = st.sizes[sp::EXECUTION_MAX_IO_THREADS as usize] {
        s.fgds.parallel = s.fgds.parallel.min(v.max(1) as u32);
    }
    if let Some(kb) = st.sizes[sp::PROPERTIES_MAX_DIRECT_IO_SIZE_KB as usize] {
        let cap = (kb * 1024 / 4096).max(1) * 4096;
        s.fgds.chunk_size = s.fgds.chunk_size.min(cap);
    }
    if let Some(v) = st.sizes[sp::PROPERTIES_IO_BATCHSIZE as usize] {
        s.max_batch = v;
    }
    if let Some(kb) = st.sizes[sp::PROPERTIES_PER_BUFFER_CACHE_SIZE_KB as usize] {
        s.cache.per_buffer_size = (kb * 1024).div_ceil(4096) * 4096;
    }
    let pb = s.cache.per_buffer_size;
    if let Some(kb) = st.sizes[sp::PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB as usize] {
        s.cache.device_cache_size = kb * 1024;
    }
    // whole staging buffers
    s.cache.device_cache_size = s.cache.device_cache_size / pb * pb;
    if let Some(v) = st.bools[bp::PROPERTIES_ALLOW_COMPAT_MODE as usize] {
        s.fgds.strict = !v;
    }
    if let Some(v) = st.bools[bp::FORCE_COMPAT_MODE as usize] {
        s.fgds.disable_direct = v;
    }
    if let Some(v) = st.bools[bp::PREFER_IO_URING as usize] {
        s.fgds.use_io_uring = v;
    }
    if let Some(name) = &st.log {
        if let Some(l) = log_level(name) {
            s.log = l;
            s.log_name = Some(name.clone());
        }
    }
}

/// A size parameter's value in `s` (`chunk`: the chunk size in force).
pub fn get_size(
    p: i32,
    s: &Settings,
    chunk: usize,
    stats_level: u32,
) -> Result<usize, CUfileOpError> {
    size_range(p)?;
    Ok(match p {
        sp::PROFILE_STATS => stats_level as usize,
        sp::EXECUTION_MAX_IO_QUEUE_DEPTH => s.fgds.queue_depth as usize,
        sp::EXECUTION_MAX_IO_THREADS => s.fgds.parallel as usize,
        sp::PROPERTIES_MAX_DIRECT_IO_SIZE_KB => chunk / 1024,
        sp::PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB => s.cache.device_cache_size / 1024,
        sp::PROPERTIES_PER_BUFFER_CACHE_SIZE_KB => s.cache.per_buffer_size / 1024,
        _ => s.max_batch,
    })
}

/// A boolean parameter's value in `s`.
pub fn get_bool(p: i32, s: &Settings) -> Result<bool, CUfileOpError> {
    bool_known(p)?;
    Ok(match p {
        bp::PROPERTIES_ALLOW_COMPAT_MODE => !s.fgds.strict,
        bp::FORCE_COMPAT_MODE => s.fgds.disable_direct,
        bp::PREFER_IO_URING => s.fgds.use_io_uring,
        _ => true,
    })
}

/// A string parameter's value in `s`.
pub fn get_string(p: i32, s: &Settings) -> Result<String, CUfileOpError> {
    match p {
        string_param::LOGGING_LEVEL => Ok(s.log_name.clone().unwrap_or_else(|| {
            match s.log {
                LogLevel::Off => "NONE",
                LogLevel::Info => "WARN",
                LogLevel::Debug => "DEBUG",
            }
            .to_string()
        })),
        string_param::ENV_LOGFILE_PATH | string_param::LOG_DIR | string_param::RDMA_TRANSPORT => {
            Err(CU_FILE_PLATFORM_NOT_SUPPORTED)
        }
        _ => Err(CU_FILE_INVALID_VALUE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_codes() {
        assert_eq!(size_range(sp::PROFILE_STATS), Ok((0, 3)));
        assert_eq!(size_range(sp::EXECUTION_MAX_IO_THREADS), Ok((0, 128)));
        assert_eq!(
            size_range(sp::EXECUTION_MIN_IO_THRESHOLD_SIZE_KB),
            Err(CU_FILE_PLATFORM_NOT_SUPPORTED)
        );
        assert_eq!(size_range(12), Err(CU_FILE_INVALID_VALUE));
        assert_eq!(size_range(-1), Err(CU_FILE_INVALID_VALUE));
        assert_eq!(
            bool_known(bp::PROFILE_NVTX),
            Err(CU_FILE_PLATFORM_NOT_SUPPORTED)
        );
        assert_eq!(log_level("trace"), Some(LogLevel::Debug));
        assert_eq!(log_level("loud"), None);
    }

    #[test]
    fn staged_values_apply_as_caps() {
        let mut st = Staged::default();
        st.sizes[sp::PROPERTIES_MAX_DIRECT_IO_SIZE_KB as usize] = Some(16384);
        st.sizes[sp::EXECUTION_MAX_IO_QUEUE_DEPTH as usize] = Some(4);
        st.sizes[sp::PROPERTIES_IO_BATCHSIZE as usize] = Some(8);
        st.bools[bp::PROPERTIES_ALLOW_COMPAT_MODE as usize] = Some(false);
        st.log = Some("DEBUG".into());
        let mut s = Settings::default();
        let chunk = s.fgds.chunk_size;
        apply(&st, &mut s);
        assert_eq!(s.fgds.chunk_size, chunk.min(16 << 20));
        assert_eq!(s.fgds.queue_depth, 4);
        assert_eq!(s.max_batch, 8);
        assert!(s.fgds.strict);
        assert_eq!(s.log, LogLevel::Debug);
        assert_eq!(
            get_string(string_param::LOGGING_LEVEL, &s).as_deref(),
            Ok("DEBUG")
        );
        assert_eq!(get_size(sp::PROPERTIES_IO_BATCHSIZE, &s, chunk, 0), Ok(8));
        assert_eq!(get_bool(bp::PROPERTIES_ALLOW_COMPAT_MODE, &s), Ok(false));
    }

    #[test]
    fn staging_pool_sizes() {
        let mut st = Staged::default();
        st.sizes[sp::PROPERTIES_PER_BUFFER_CACHE_SIZE_KB as usize] = Some(2048);
        st.sizes[sp::PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB as usize] = Some(5000);
        let mut s = Settings::default();
        assert_eq!(
            get_size(sp::PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB, &s, 0, 0),
            Ok(128 << 10),
            "cuFile's default"
        );
        apply(&st, &mut s);
        assert_eq!(s.cache.per_buffer_size, 2 << 20);
        assert_eq!(s.cache.device_cache_size, 4 << 20, "whole staging buffers");
        assert_eq!(
            get_size(sp::PROPERTIES_PER_BUFFER_CACHE_SIZE_KB, &s, 0, 0),
            Ok(2048)
        );
        assert_eq!(
            set_size(sp::PROPERTIES_PER_BUFFER_CACHE_SIZE_KB, 1),
            Err(CU_FILE_INVALID_VALUE)
        );
    }
}
