//! GPU memory the caller never registered: a per-GPU pool of registered
//! staging buffers and a bounded cache of registrations of allocations
//! (whole, or in windows),
//! so that such I/O never costs a registration (`FGDS_IOCTL_REG_BUFFER`,
//! `mmap`, and on the way out `munmap` and `FGDS_IOCTL_UNREG_BUFFER`, 30 to
//! 48 ms in the VM) per call. libcufile (`cuFileRead` on memory never given
//! to `cuFileBufRegister`: KvikIO's, torch's and LMCache's way), the Python
//! package and the C ABI (`fgds_read`, `fgds_write`; `fgds_readv`,
//! `fgds_writev` and batches) go through it ([`read`], [`write`],
//! [`buffer_for`]).
//!
//! # Which path a request takes
//!
//! For a synchronous request ([`read`], [`write`]) of `size` bytes at a
//! device pointer:
//!
//! 1. No fgds node serves the pointer's GPU: the bounce path, as before
//!    ([`Route::Bounce`]; nothing is registered).
//! 2. `size >= reg_cache_min` (`FGDS_REG_CACHE_MIN`, 1 MiB): peer to peer
//!    into a registration of the pointer's allocation (`cuMemGetAddressRange`)
//!    made on the first such request and kept in the cache
//!    ([`Route::Cached`]): the whole allocation up to `FGDS_REG_CACHE_WINDOW`
//!    (64 MiB), else the window of that size (counted from the allocation's
//!    start) that holds the request; a request across a window's end is one
//!    request per window. The allocation must start on a page (CUDA's export
//!    rule: host pages) and the range lie in its whole pages. A smaller
//!    request on a window the cache holds already uses that registration
//!    too (it costs nothing more).
//! 3. Otherwise, or where 2 cannot be used: peer to peer into one of the
//!    GPU's staging buffers (`per_buffer_cache_size`, 1 MiB each, allocated
//!    and registered once, up to `max_device_cache_size`, 128 MiB per GPU:
//!    cuFile's properties and defaults), then a device-to-device copy to
//!    the caller's memory on a private stream, piece by piece; a write
//!    copies first, then writes ([`Route::Staged`]). When every staging
//!    buffer is in use the request waits for one.
//! 4. Where neither can be used (the pool is off, a staging buffer could
//!    not be allocated or registered): a registration of the request's
//!    range for that request only ([`Route::Uncached`]), as before. A pool
//!    whose growth failed is not given up: it keeps the staging buffers it
//!    has, and tries to grow again [`POOL_RETRY_MIN`] later, the wait
//!    doubling after each failure in a row up to [`POOL_RETRY_MAX`] (one
//!    try per wait, not one per request); [`Counters::pool_failures`]
//!    counts the failures.
//!
//! A request that ends on the bounce path (1, or 4 refused) is counted in
//! [`Counters::bounced`] and, with its cause, in
//! [`crate::stats::fallbacks`].
//!
//! A batch's and a stream-ordered request ([`buffer_for`]) need a buffer
//! that stays valid until the request ran and whose range a stream-ordered
//! request learns only then: they use the cached registration of the
//! allocation whatever their size (one registration per allocation, none
//! per request; two requests in flight on the same memory share it), else
//! a registration of their own.
//!
//! The threshold, from `cufile_unreg_bench` in the VM (`docs/benchmarks.md`,
//! "Unregistered GPU memory"; four runs of the debug kernel): through the
//! staging pool a 1 MiB read ran at 0.71x to 0.81x and a 16 MiB one at
//! 0.69x to 0.83x of the same read into registered memory (the copy
//! through the emulated BAR, and the pieces of one staging buffer in turn,
//! on top of the read), through the cache at 0.87x to 1.02x and 0.96x to
//! 1.02x; a 64 KiB read staged at 0.69x to 0.71x, where the cache would
//! register a whole allocation for a small read (a one-off read into a
//! fresh tensor would pay a registration and, later, its UNREG: about
//! 100 ms a call in the same runs with neither pool nor cache). So requests
//! from 1 MiB on use the cache, smaller ones the pool unless the cache
//! holds their allocation already.
//!
//! # The cache's bounds
//!
//! An entry is keyed by the allocation (runtime, context, base, size), the
//! window registered, and the allocation's buffer id
//! (`CU_POINTER_ATTRIBUTE_BUFFER_ID`, which a freed and re-allocated range
//! does not keep: CUDA 13 hands a freed address out again at once, with a
//! new id, while the old memory stays behind an open dma-buf): a request on
//! a range freed and allocated again never uses the old registration; it
//! drops it. One entry registers at most `FGDS_REG_CACHE_WINDOW` bytes (a
//! 1 MiB read into a 40 GiB tensor registers 64 MiB, not 40 GiB). At most
//! [`REG_CACHE_ENTRIES`] entries and `FGDS_REG_CACHE_SIZE` bytes (4 GiB) are
//! kept. A full cache makes room only by dropping entries no request used
//! for [`REG_CACHE_IDLE`], least recently used first; while it cannot, a
//! miss is not registered ([`Counters::cache_full`]) and goes to the
//! staging pool, so a working set larger than the cache costs no
//! registration per pass. A thread checks every
//! [`REG_CACHE_CHECK`] that each cached allocation still has its buffer id
//! and drops those freed: freed GPU memory stays registered (and, behind
//! its dma-buf, allocated) at most that long plus a request still using it.
//! Registering memory of the cache oneself ([`crate::Buffer::from_cuda`],
//! `cuFileBufRegister`) first drops the cache's registrations of that
//! allocation (the driver registers a BAR page once at a time).
//!
//! # Whose they are
//!
//! The pools and the cache belong to the library's runtime (`runtime.rs`),
//! made on the first request that needs them; `fgds_shutdown()` drops it
//! (the cache's thread stopped and joined, its registrations unregistered,
//! the staging buffers unregistered and freed) and the next request makes
//! a fresh one. The [`Settings`] and the [`Counters`] are the process's:
//! they outlive a shutdown.

mod cache;
mod pool;
pub(crate) mod runtime;
mod settings;

pub use pool::{POOL_RETRY_MAX, POOL_RETRY_MIN};
pub use settings::{
    configure, settings, Counters, Route, Settings, REG_CACHE_CHECK, REG_CACHE_ENTRIES,
    REG_CACHE_IDLE,
};

use crate::buffer::Buffer;
use crate::device::list_devices;
use crate::error::{Error, Result};
use crate::file::FileHandle;
use crate::gpu::{self, DeviceMemory, Runtime};
use pool::staged;
use settings::{
    BOUNCED, CACHED, CACHE_REGS, EVICTED, FULL, HITS, POOL_BUFFERS, POOL_FAILURES, STAGED, STALE,
    UNCACHED,
};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

/// Drops every registration of the cache (those still used by a request
/// go once it is done).
pub fn clear() {
    if let Some(r) = runtime::running() {
        r.cache.clear();
    }
}

/// The counters now.
pub fn counters() -> Counters {
    let (entries, bytes) = runtime::running().map_or((0, 0), |r| r.cache.occupancy());
    Counters {
        staged: STAGED.load(Ordering::Relaxed),
        cached: CACHED.load(Ordering::Relaxed),
        uncached: UNCACHED.load(Ordering::Relaxed),
        pool_buffers: POOL_BUFFERS.load(Ordering::Relaxed),
        pool_failures: POOL_FAILURES.load(Ordering::Relaxed),
        bounced: BOUNCED.load(Ordering::Relaxed),
        cache_hits: HITS.load(Ordering::Relaxed),
        cache_registrations: CACHE_REGS.load(Ordering::Relaxed),
        cache_stale: STALE.load(Ordering::Relaxed),
        cache_evicted: EVICTED.load(Ordering::Relaxed),
        cache_full: FULL.load(Ordering::Relaxed),
        cache_entries: entries,
        cache_bytes: bytes,
    }
}

/// Whether an fgds node serves the GPU of `mem` (a yes is remembered; a no
/// is asked again, as a node may come with the module or a bind).
fn served(mem: &DeviceMemory) -> bool {
    static SEEN: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let pci = mem.pci_address.clone().unwrap_or_default();
    if pci.is_empty() {
        return false;
    }
    let seen = SEEN.get_or_init(|| Mutex::new(Vec::new()));
    if seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&pci)
    {
        return true;
    }
    let yes = list_devices().is_ok_and(|d| {
        d.iter().any(|d| {
            d.pci_address.as_deref().is_some_and(|a| {
                a.eq_ignore_ascii_case(&pci) || a.ends_with(&pci) || pci.ends_with(a)
            })
        })
    });
    if yes {
        seen.lock().unwrap_or_else(|p| p.into_inner()).push(pci);
    }
    yes
}

fn describe(rt: &Runtime, dptr: u64, size: usize) -> Result<DeviceMemory> {
    if dptr == 0 || size == 0 {
        return Err(Error::InvalidArgument(
            "null device pointer or zero size".into(),
        ));
    }
    let mem = rt.describe(dptr)?;
    if dptr < mem.base || dptr + size as u64 > mem.base + mem.size {
        return Err(Error::OutOfBounds {
            what: "device allocation",
            offset: dptr.saturating_sub(mem.base),
            size: size as u64,
            len: mem.size,
        });
    }
    Ok(mem)
}

/// A buffer for `[dptr, dptr + size)` of GPU memory the caller did not
/// register, for a request that holds it until done (a batch's, an
/// asynchronous or a stream-ordered one): the cached registration of the
/// allocation, else a buffer of that range alone. Returns the buffer, the
/// offset of `dptr` in it and the route.
pub fn buffer_for(
    rt: &Arc<Runtime>,
    dptr: u64,
    size: usize,
) -> Result<(Arc<Buffer>, usize, Route)> {
    let mem = describe(rt, dptr, size)?;
    if !served(&mem) {
        // the bounce path; the buffer says why (no node for this GPU)
        let b = Buffer::from_gpu_uncached(rt.clone(), dptr, size as u64)?;
        let route = route_of(&b);
        return Ok((Arc::new(b), 0, route));
    }
    if let Some((b, off)) = runtime::get()
        .cache
        .cached(rt, &mem, dptr, size as u64, true)
    {
        CACHED.fetch_add(1, Ordering::Relaxed);
        return Ok((b, off, Route::Cached));
    }
    UNCACHED.fetch_add(1, Ordering::Relaxed);
    let b = Buffer::from_gpu_uncached(rt.clone(), dptr, size as u64)?;
    let route = route_of(&b);
    Ok((Arc::new(b), 0, route))
}

/// The route of a request into a registration of the library's own: the
/// bounce path, counted with its cause, when it got no fgds mapping.
fn route_of(b: &Buffer) -> Route {
    if b.is_p2p() {
        return Route::Uncached;
    }
    BOUNCED.fetch_add(1, Ordering::Relaxed);
    crate::stats::registration_fallback(
        b.p2p_unavailable_cause()
            .unwrap_or(crate::stats::FallbackCause::Other),
    );
    Route::Bounce
}

/// A synchronous request; `large`: whether it may register its window (the
/// whole request, before a split across windows, is `reg_cache_min` or more).
fn io(
    file: &FileHandle,
    rt: &Arc<Runtime>,
    write: bool,
    dptr: u64,
    size: usize,
    file_off: u64,
    large: Option<bool>,
) -> Result<(usize, Route)> {
    if size == 0 {
        return Ok((0, Route::Staged));
    }
    let mem = describe(rt, dptr, size)?;
    let run = |b: &Buffer, off: usize| {
        if write {
            file.write(b, off, size, file_off)
        } else {
            file.read(b, off, size, file_off)
        }
    };
    if !served(&mem) {
        // the bounce path; the buffer says why (no node for this GPU)
        let b = Buffer::from_gpu_uncached(rt.clone(), dptr, size as u64)?;
        let route = route_of(&b);
        return run(&b, 0).map(|n| (n, route));
    }
    let s = settings();
    let large = large.unwrap_or(size >= s.reg_cache_min);
    // A request across a window's end of an allocation larger than one
    // window: a request per window, each counted, each as large as the
    // whole.
    let a = gpu::export_align();
    let window = s.reg_cache_window.div_ceil(a) * a;
    let at = dptr - mem.base;
    let window_end = (at / window + 1) * window;
    if s.reg_cache_size > 0 && mem.size > window && at + size as u64 > window_end {
        let first = (window_end - at) as usize;
        let (n, route) = io(file, rt, write, dptr, first, file_off, Some(large))?;
        if n < first {
            return Ok((n, route));
        }
        let (rest, at) = (size - first, dptr + first as u64);
        let (m, route) = io(
            file,
            rt,
            write,
            at,
            rest,
            file_off + first as u64,
            Some(large),
        )?;
        return Ok((n + m, route));
    }
    // From the threshold on, the allocation is registered if it is not
    // yet; below it, its registration is used only if it exists already.
    // The runtime is held to the end of the request (a shutdown meanwhile
    // drops it after).
    let lib = runtime::get();
    let found = lib.cache.cached(rt, &mem, dptr, size as u64, large);
    if let Some((b, off)) = found {
        CACHED.fetch_add(1, Ordering::Relaxed);
        return run(&b, off).map(|n| (n, Route::Cached));
    }
    if let Ok(l) = lib.pools.lease(rt, &mem) {
        STAGED.fetch_add(1, Ordering::Relaxed);
        return staged(file, rt, &mem, &l, write, dptr, size, file_off).map(|n| (n, Route::Staged));
    }
    if !large {
        if let Some((b, off)) = lib.cache.cached(rt, &mem, dptr, size as u64, true) {
            CACHED.fetch_add(1, Ordering::Relaxed);
            return run(&b, off).map(|n| (n, Route::Cached));
        }
    }
    UNCACHED.fetch_add(1, Ordering::Relaxed);
    let b = Buffer::from_gpu_uncached(rt.clone(), dptr, size as u64)?;
    let route = route_of(&b);
    run(&b, 0).map(|n| (n, route))
}

/// Reads `size` bytes at `file_off` into GPU memory at `dptr` that the
/// caller did not register (the module documentation says how); returns
/// the bytes read (short at the end of the file) and the route taken.
pub fn read(
    file: &FileHandle,
    rt: &Arc<Runtime>,
    dptr: u64,
    size: usize,
    file_off: u64,
) -> Result<(usize, Route)> {
    io(file, rt, false, dptr, size, file_off, None)
}

/// Writes `size` bytes of GPU memory at `dptr` that the caller did not
/// register at `file_off`, as [`read`].
pub fn write(
    file: &FileHandle,
    rt: &Arc<Runtime>,
    dptr: u64,
    size: usize,
    file_off: u64,
) -> Result<(usize, Route)> {
    io(file, rt, true, dptr, size, file_off, None)
}
