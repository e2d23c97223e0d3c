//! The library's runtime: one object that owns what the library keeps
//! between calls for GPU memory the caller never registered, so that
//! nothing outlives its owner. It holds the staging pools ([`Pools`]), the
//! registration cache with its reaper thread ([`Cache`]) and the
//! generation of the threads' copy streams and events
//! ([`CopyStreams`]); it is made on first use ([`get`]) and dropped by
//! [`shutdown`] (`fgds_shutdown()`; libcufile's last `cuFileDriverClose`),
//! which stops and joins the reaper,
//! unregisters the cache's registrations, unregisters and frees the
//! staging buffers and destroys the copy streams and events (a thread
//! that copies again makes new ones). A later call makes a fresh one.
//!
//! A call racing with a shutdown holds an `Arc` of the runtime it started
//! on and finishes on it; that runtime is dropped when the last holder lets
//! go, never under a request.
//!
//! Left outside, on purpose:
//! - the loaded driver library ([`crate::gpu::Runtime::cuda`]), the parsed
//!   environment ([`crate::env::env`]) and the page size: facts of the
//!   process that hold nothing to give back (unloading a driver library
//!   from a running process is not safe);
//! - [`super::settings()`]: the sizes `cufile.json` or `FGDS_*` chose are the
//!   caller's configuration, set once when libcufile opens (which it does
//!   not do again after a close), so they apply to the runtime after a
//!   shutdown too;
//! - the counters ([`super::Counters`], [`crate::stats`]): statistics of
//!   the process, holding no resource; `fgds run`'s report at exit counts
//!   what was done before a shutdown too.
//!
//! At exit nothing runs: the runtime lives in a `static`, which Rust does
//! not drop; the kernel unmaps and closes what it holds with the process
//! (the driver drops a registration when its file is closed).

use super::cache::Cache;
use super::pool::Pools;
use crate::gpu::{self, CopyStreams, DeviceMemory, Runtime as Gpu};
use std::sync::{Arc, Mutex};

/// What the library keeps between calls for GPU memory the caller never
/// registered.
pub(crate) struct Runtime {
    pub(super) pools: Pools,
    pub(super) cache: Arc<Cache>,
    /// The copy streams and events made while it runs (the bounce path's
    /// and the staging pool's copies): destroyed once it and the copies
    /// using them are done.
    _streams: Arc<CopyStreams>,
}

impl Runtime {
    fn new() -> Runtime {
        // A caller's own registration of GPU memory drops the cache's of
        // the same allocation first.
        crate::buffer::before_own_registration(release);
        Runtime {
            pools: Pools::default(),
            cache: Arc::new(Cache::new()),
            _streams: gpu::copy_streams(),
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // The reaper first (it reads the cache), then the registrations;
        // the pools (their staging buffers unregistered and freed) with
        // the fields. Registrations and staging buffers a request still
        // holds go when it is done.
        self.cache.stop_reaper();
        self.cache.clear();
    }
}

fn slot() -> &'static Mutex<Option<Arc<Runtime>>> {
    static CURRENT: Mutex<Option<Arc<Runtime>>> = Mutex::new(None);
    &CURRENT
}

/// The runtime, made on first use (again after a [`shutdown`]).
pub(crate) fn get() -> Arc<Runtime> {
    slot()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(|| Arc::new(Runtime::new()))
        .clone()
}

/// The runtime if one is made (none before the first use, or after a
/// [`shutdown`]).
pub(crate) fn running() -> Option<Arc<Runtime>> {
    slot().lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Drops the runtime: at once if no call holds it, else when the last
/// such call is done; and ends the generation of copy streams (made with
/// the runtime or, before one was, without). A later call makes a fresh
/// one of each.
pub(crate) fn shutdown() {
    let old = {
        let mut g = slot().lock().unwrap_or_else(|p| p.into_inner());
        // under the lock: a runtime made after this takes a new generation
        gpu::retire_copy_streams();
        g.take()
    };
    drop(old); // with no lock held: the drop joins the reaper
}

/// Before a caller's own registration of `mem`: the cache drops its
/// registrations of that allocation ([`Cache::release`]).
fn release(rt: &Gpu, mem: &DeviceMemory) {
    if let Some(r) = running() {
        r.cache.release(rt, mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads of this process named `name`.
    fn threads_named(name: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|d| {
                d.filter_map(|t| t.ok())
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim_end() == name)
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// [`threads_named`] once it is `n` (a new thread names itself once
    /// it runs), or after 5 s.
    fn reapers_become(n: usize) -> usize {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let now = threads_named("fgds-regcache");
            if now == n || std::time::Instant::now() > until {
                return now;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn a_shutdown_joins_the_reaper_and_a_later_call_gets_a_fresh_runtime() {
        let _one = crate::gpu::TEST_GLOBALS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let before = threads_named("fgds-regcache");
        let first = get();
        first.cache.start_reaper();
        first.cache.start_reaper(); // one reaper per runtime
        assert_eq!(reapers_become(before + 1), before + 1);
        assert!(Arc::ptr_eq(&first, &get()), "one runtime while it runs");
        // A call that holds the runtime keeps it through a shutdown.
        shutdown();
        assert!(running().is_none());
        assert_eq!(first.cache.occupancy(), (0, 0));
        assert_eq!(
            threads_named("fgds-regcache"),
            before + 1,
            "dropped under a holder"
        );
        let second = get();
        assert!(!Arc::ptr_eq(&first, &second), "a fresh runtime");
        // The last holder lets go: the reaper is told to stop and joined.
        drop(first);
        assert_eq!(threads_named("fgds-regcache"), before);
        second.cache.start_reaper();
        assert_eq!(reapers_become(before + 1), before + 1);
        drop(second);
        shutdown();
        assert_eq!(threads_named("fgds-regcache"), before);
        assert!(running().is_none());
    }
}
