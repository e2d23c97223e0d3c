//! The sizes of the staging pool and the registration cache
//! ([`Settings`], `FGDS_*` or `cufile.json`), which way a request went
//! ([`Route`]), and what the pool and the cache did ([`Counters`]).

use crate::error::{Error, Result};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

/// Most allocations the registration cache holds.
pub const REG_CACHE_ENTRIES: usize = 64;
/// How often the cache's thread drops the registrations of freed memory.
pub const REG_CACHE_CHECK: Duration = Duration::from_millis(500);
/// A full cache makes room only by dropping a registration no request used
/// for this long; while none has been idle that long, a miss is not cached
/// (the staging pool serves it), so that a working set larger than the
/// cache does not re-register on every pass. A registration of a window
/// costs milliseconds; one unused for 5 s is fair game.
pub const REG_CACHE_IDLE: Duration = Duration::from_secs(5);

/// The sizes of the pool and the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Bytes of staging buffers per GPU (cuFile's `max_device_cache_size`); 0: no pool.
    pub device_cache_size: usize,
    /// Bytes of one staging buffer (cuFile's `per_buffer_cache_size`).
    pub per_buffer_size: usize,
    /// Bytes of whole-allocation registrations kept; 0: no cache.
    pub reg_cache_size: u64,
    /// Synchronous requests of at least this many bytes use the cache.
    pub reg_cache_min: usize,
    /// The most bytes one cached registration covers: a window of a larger
    /// allocation.
    pub reg_cache_window: u64,
}

impl Settings {
    /// What the `FGDS_*` environment sets (or the defaults).
    pub fn from_env() -> Settings {
        let e = crate::env::env();
        Settings {
            device_cache_size: e.device_cache_size,
            per_buffer_size: e.per_buffer_cache_size,
            reg_cache_size: e.reg_cache_size,
            reg_cache_min: e.reg_cache_min,
            reg_cache_window: e.reg_cache_window,
        }
    }

    fn check(&self) -> Result<()> {
        let pb = self.per_buffer_size;
        if pb == 0 || pb % 4096 != 0 || pb > crate::config::MAX_RW_COUNT {
            return Err(Error::InvalidArgument(format!(
                "per-buffer cache size {pb} must be a non-zero multiple of 4096 up to 2 GiB - 4 KiB"
            )));
        }
        let w = self.reg_cache_window;
        if w == 0 || w % 4096 != 0 {
            return Err(Error::InvalidArgument(format!(
                "registration cache window {w} must be a non-zero multiple of 4096"
            )));
        }
        if self.device_cache_size % pb != 0 {
            return Err(Error::InvalidArgument(format!(
                "device cache size {} must be a multiple of the per-buffer size {pb}",
                self.device_cache_size
            )));
        }
        Ok(())
    }
}

fn settings_slot() -> &'static Mutex<Option<Settings>> {
    static S: Mutex<Option<Settings>> = Mutex::new(None);
    &S
}

/// The settings in force: those [`configure`] set, else the environment's.
pub fn settings() -> Settings {
    let mut g = settings_slot().lock().unwrap_or_else(|p| p.into_inner());
    *g.get_or_insert_with(Settings::from_env)
}

/// Sets the sizes (libcufile: from `cufile.json`). Pools made before keep
/// their size; the cache's bounds apply from its next insertion.
pub fn configure(s: Settings) -> Result<()> {
    s.check()?;
    *settings_slot().lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
    Ok(())
}

/// Which way a request on unregistered GPU memory went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Into a staging buffer of the pool, and a device-to-device copy.
    Staged,
    /// Into the cached registration of the whole allocation.
    Cached,
    /// Into a registration made for this request only.
    Uncached,
    /// No fgds node serves the GPU: the bounce path.
    Bounce,
}

impl Route {
    /// Whether the request's data went peer to peer (into a registration).
    pub fn is_p2p(self) -> bool {
        !matches!(self, Route::Bounce)
    }
}

/// What the pool and the cache did, since the process started (a
/// shutdown of the runtime that owns them does not start them over).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests through the staging pool.
    pub staged: u64,
    /// Requests into a cached registration.
    pub cached: u64,
    /// Requests with a registration of their own.
    pub uncached: u64,
    /// Staging buffers allocated and registered, on every GPU.
    pub pool_buffers: u64,
    /// Staging buffers that could not be made (allocation or registration
    /// failed); the pool tries again later
    /// ([`POOL_RETRY_MIN`](crate::gpucache::POOL_RETRY_MIN)).
    pub pool_failures: u64,
    /// Requests on unregistered GPU memory that went to the bounce path
    /// (no node serves the GPU, or neither the cache, the pool nor a
    /// registration of their own could be used); by cause in
    /// [`crate::stats::fallbacks`]'s `registrations`.
    pub bounced: u64,
    /// Lookups of the cache that found a live registration.
    pub cache_hits: u64,
    /// Registrations the cache made.
    pub cache_registrations: u64,
    /// Registrations it dropped because their allocation was freed (its buffer id changed),
    /// counted once dropped (munmap and UNREG done unless a request still used one).
    pub cache_stale: u64,
    /// Registrations it dropped to stay within its bounds, for a caller's
    /// own, or when emptied ([`clear`](crate::gpucache::clear), `fgds_shutdown()`).
    pub cache_evicted: u64,
    /// Misses it did not register because it was full of registrations in
    /// use ([`REG_CACHE_IDLE`]).
    pub cache_full: u64,
    /// Allocations cached now.
    pub cache_entries: u64,
    /// Bytes registered in the cache now.
    pub cache_bytes: u64,
}

pub(super) static STAGED: AtomicU64 = AtomicU64::new(0);
pub(super) static CACHED: AtomicU64 = AtomicU64::new(0);
pub(super) static UNCACHED: AtomicU64 = AtomicU64::new(0);
pub(super) static POOL_BUFFERS: AtomicU64 = AtomicU64::new(0);
pub(super) static POOL_FAILURES: AtomicU64 = AtomicU64::new(0);
pub(super) static BOUNCED: AtomicU64 = AtomicU64::new(0);
pub(super) static HITS: AtomicU64 = AtomicU64::new(0);
pub(super) static CACHE_REGS: AtomicU64 = AtomicU64::new(0);
pub(super) static STALE: AtomicU64 = AtomicU64::new(0);
pub(super) static EVICTED: AtomicU64 = AtomicU64::new(0);
pub(super) static FULL: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        let ok = Settings {
            device_cache_size: 128 << 20,
            per_buffer_size: 1 << 20,
            reg_cache_size: 0,
            reg_cache_min: 0,
            reg_cache_window: 64 << 20,
        };
        assert!(ok.check().is_ok());
        assert!(Settings {
            per_buffer_size: 1000,
            ..ok
        }
        .check()
        .is_err());
        assert!(Settings {
            device_cache_size: (1 << 20) + 4096,
            ..ok
        }
        .check()
        .is_err());
    }
}
