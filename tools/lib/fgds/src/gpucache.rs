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

use crate::buffer::Buffer;
use crate::device::list_devices;
use crate::error::{Error, Result};
use crate::file::FileHandle;
use crate::gpu::{self, DeviceMemory, Kind, Runtime};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

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

/// What the pool and the cache did, since the process started.
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
    /// failed); the pool tries again later ([`POOL_RETRY_MIN`]).
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
    /// Registrations it dropped to stay within its bounds, or for a caller's own.
    pub cache_evicted: u64,
    /// Misses it did not register because it was full of registrations in
    /// use ([`REG_CACHE_IDLE`]).
    pub cache_full: u64,
    /// Allocations cached now.
    pub cache_entries: u64,
    /// Bytes registered in the cache now.
    pub cache_bytes: u64,
}

static STAGED: AtomicU64 = AtomicU64::new(0);
static CACHED: AtomicU64 = AtomicU64::new(0);
static UNCACHED: AtomicU64 = AtomicU64::new(0);
static POOL_BUFFERS: AtomicU64 = AtomicU64::new(0);
static POOL_FAILURES: AtomicU64 = AtomicU64::new(0);
static BOUNCED: AtomicU64 = AtomicU64::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);
static CACHE_REGS: AtomicU64 = AtomicU64::new(0);
static STALE: AtomicU64 = AtomicU64::new(0);
static EVICTED: AtomicU64 = AtomicU64::new(0);
static FULL: AtomicU64 = AtomicU64::new(0);

/// The counters now.
pub fn counters() -> Counters {
    let (entries, bytes) = {
        let c = cache().lock().unwrap_or_else(|p| p.into_inner());
        (c.entries.len() as u64, c.bytes)
    };
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

// ------------------------------------------------------------------ cache

/// A registered range: the allocation, as the runtime names it, and the
/// window of it registered (`[base + off, base + off + len)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    cuda: bool,
    ctx: usize,
    ordinal: i32,
    base: u64,
    size: u64,
    off: u64,
    len: u64,
}

impl Key {
    /// The whole allocation (to drop every registration of it).
    fn of(rt: &Runtime, mem: &DeviceMemory) -> Key {
        Key::window(rt, mem, 0, mem.size)
    }

    fn window(rt: &Runtime, mem: &DeviceMemory, off: u64, len: u64) -> Key {
        Key {
            cuda: rt.kind() == Kind::Cuda,
            ctx: mem.ctx,
            ordinal: mem.ordinal,
            base: mem.base,
            size: mem.size,
            off,
            len,
        }
    }

    fn overlaps(&self, other: &Key) -> bool {
        let (a, b) = (self.base + self.off, other.base + other.off);
        self.cuda == other.cuda
            && self.ordinal == other.ordinal
            && a < b + other.len
            && b < a + self.len
    }
}

/// The window of an allocation of `alloc_len` registrable bytes that a
/// cached registration for `[at, at + size)` (offsets in the allocation)
/// covers: the whole allocation up to `window` bytes, else the window of
/// `window` bytes (counted from the allocation's start) holding `at`.
/// `None` where the request crosses that window's end.
pub(crate) fn window_of(alloc_len: u64, at: u64, size: u64, window: u64) -> Option<(u64, u64)> {
    let (off, len) = if alloc_len <= window {
        (0, alloc_len)
    } else {
        let off = at / window * window;
        (off, window.min(alloc_len - off))
    };
    (at >= off && at + size <= off + len).then_some((off, len))
}

struct Entry<V> {
    key: Key,
    id: u64,
    /// `None`: the allocation cannot be registered whole (not tried again
    /// while it lives).
    value: Option<V>,
    bytes: u64,
    last_use: u64,
    used_at: Instant,
}

/// What a lookup found.
pub(crate) enum Lookup<V> {
    /// A live entry (`None`: known not to be registrable).
    Hit(Option<V>),
    /// None for this allocation; what was there for an earlier allocation
    /// of the range (its buffer id differs), now out of the cache.
    Miss(Vec<V>),
}

/// The bookkeeping of the registration cache: least recently used first
/// out, bounded in entries and bytes, keyed by allocation and buffer id.
pub(crate) struct RegCache<V> {
    entries: Vec<Entry<V>>,
    bytes: u64,
    tick: u64,
    max_entries: usize,
}

impl<V: Clone> RegCache<V> {
    pub(crate) const fn new(max_entries: usize) -> Self {
        RegCache {
            entries: Vec::new(),
            bytes: 0,
            tick: 0,
            max_entries,
        }
    }

    fn take(&mut self, i: usize) -> Option<V> {
        let e = self.entries.swap_remove(i);
        self.bytes -= e.bytes;
        e.value
    }

    /// The entry of `key` with buffer id `id`; entries of the key with
    /// another id are removed and handed back.
    pub(crate) fn lookup(&mut self, key: &Key, id: u64) -> Lookup<V> {
        self.tick += 1;
        let mut stale = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            let e = &mut self.entries[i];
            if e.key.overlaps(key) && (e.key != *key || e.id != id) {
                stale.extend(self.take(i));
                continue;
            }
            if e.key == *key {
                e.last_use = self.tick;
                e.used_at = Instant::now();
                return Lookup::Hit(e.value.clone());
            }
            i += 1;
        }
        Lookup::Miss(stale)
    }

    /// Makes room for one more entry of `bytes` within the entry bound and
    /// `max_bytes`, dropping the least recently used entries not used since
    /// `idle_since`: what was dropped, or `None` (nothing dropped) where
    /// that is not enough. An empty cache always takes one entry, even one
    /// above `max_bytes`.
    pub(crate) fn admit(
        &mut self,
        bytes: u64,
        max_bytes: u64,
        idle_since: Instant,
    ) -> Option<Vec<V>> {
        let fits = |n: usize, b: u64| n == 0 || (n < self.max_entries && b + bytes <= max_bytes);
        let mut idle: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.entries[i].used_at <= idle_since)
            .collect();
        idle.sort_by_key(|&i| self.entries[i].last_use);
        let (mut n, mut b, mut k) = (self.entries.len(), self.bytes, 0);
        while !fits(n, b) {
            let &i = idle.get(k)?;
            n -= 1;
            b -= self.entries[i].bytes;
            k += 1;
        }
        let mut drop: Vec<usize> = idle[..k].to_vec();
        drop.sort_unstable_by(|a, b| b.cmp(a)); // swap_remove from the end first
        Some(drop.into_iter().filter_map(|i| self.take(i)).collect())
    }

    /// Adds an entry of `bytes` (after [`RegCache::admit`] made room);
    /// returns the entries it replaces (those overlapping its range).
    pub(crate) fn insert(&mut self, key: Key, id: u64, value: Option<V>, bytes: u64) -> Vec<V> {
        self.tick += 1;
        let out = self.remove_overlapping(&key);
        self.entries.push(Entry {
            key,
            id,
            value,
            bytes,
            last_use: self.tick,
            used_at: Instant::now(),
        });
        self.bytes += bytes;
        out
    }

    /// Removes the entries whose allocation overlaps `key`'s.
    pub(crate) fn remove_overlapping(&mut self, key: &Key) -> Vec<V> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            if self.entries[i].key.overlaps(key) {
                out.extend(self.take(i));
            } else {
                i += 1;
            }
        }
        out
    }

    /// Removes the entries for which `alive(key, id, value)` is false.
    pub(crate) fn retain(
        &mut self,
        mut alive: impl FnMut(&Key, u64, Option<&V>) -> bool,
    ) -> Vec<V> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            if alive(&e.key, e.id, e.value.as_ref()) {
                i += 1;
            } else {
                out.extend(self.take(i));
            }
        }
        out
    }
}

/// A cached registration: the buffer and the runtime that names its memory.
#[derive(Clone)]
struct Cached {
    buf: Arc<Buffer>,
    rt: Arc<Runtime>,
}

fn cache() -> &'static Mutex<RegCache<Cached>> {
    static C: Mutex<RegCache<Cached>> = Mutex::new(RegCache::new(REG_CACHE_ENTRIES));
    &C
}

/// Registrations are made one at a time: two requests missing on the same
/// allocation must not both register it (the second would get `EBUSY`).
fn reg_lock() -> &'static Mutex<()> {
    static L: Mutex<()> = Mutex::new(());
    &L
}

/// Starts the thread that drops the registrations of freed memory, and has
/// a caller's own registration of GPU memory drop the cache's of the same
/// allocation first ([`release`]). Called before the cache holds its first.
fn start_reaper() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        crate::buffer::before_own_registration(release);
        let _ = std::thread::Builder::new()
            .name("fgds-regcache".into())
            .spawn(|| loop {
                std::thread::sleep(REG_CACHE_CHECK);
                let dead = cache()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|k, id, v| match v {
                        Some(c) => c.rt.buffer_id(k.base).is_ok_and(|now| now == id),
                        None => true,
                    });
                let n = dead.len() as u64;
                // munmap and UNREG, with no lock held; counted after, so that a caller that
                // sees the count sees the UNREG done (unless a request still uses it)
                drop(dead);
                STALE.fetch_add(n, Ordering::Relaxed);
            });
    });
}

/// The cached registration of the window of the allocation holding
/// `[dptr, dptr + size)` ([`window_of`]) and `dptr`'s offset in it, made if
/// there is none; `None` where it cannot be registered (no buffer id, not
/// page aligned, the range past its last whole page or across the window's
/// end, refused by the driver) or the cache is full of registrations in
/// use.
fn cached(
    rt: &Arc<Runtime>,
    mem: &DeviceMemory,
    dptr: u64,
    size: u64,
) -> Option<(Arc<Buffer>, usize)> {
    cached_or(rt, mem, dptr, size, true)
}

/// [`cached`] without registering on a miss: the cached registration of the
/// allocation only if there is one already.
fn cached_hit(
    rt: &Arc<Runtime>,
    mem: &DeviceMemory,
    dptr: u64,
    size: u64,
) -> Option<(Arc<Buffer>, usize)> {
    cached_or(rt, mem, dptr, size, false)
}

fn cached_or(
    rt: &Arc<Runtime>,
    mem: &DeviceMemory,
    dptr: u64,
    size: u64,
    register: bool,
) -> Option<(Arc<Buffer>, usize)> {
    let s = settings();
    if s.reg_cache_size == 0 {
        return None;
    }
    let a = gpu::export_align();
    let alloc_len = mem.size / a * a;
    let window = s.reg_cache_window.div_ceil(a) * a;
    if mem.base % a != 0 || alloc_len == 0 || dptr < mem.base {
        return None;
    }
    let (off, len) = window_of(alloc_len, dptr - mem.base, size, window)?;
    let id = rt.buffer_id(dptr).ok()?;
    let key = Key::window(rt, mem, off, len);
    let start = mem.base + off;
    let hit = |v: Option<Cached>| {
        v.map(|c| {
            HITS.fetch_add(1, Ordering::Relaxed);
            (c.buf, (dptr - start) as usize)
        })
    };
    let stale = match cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .lookup(&key, id)
    {
        Lookup::Hit(v) => return hit(v),
        Lookup::Miss(stale) => stale,
    };
    let n = stale.len() as u64;
    drop(stale);
    STALE.fetch_add(n, Ordering::Relaxed);
    if !register {
        return None;
    }
    let _one = reg_lock().lock().unwrap_or_else(|p| p.into_inner());
    if let Lookup::Hit(v) = cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .lookup(&key, id)
    {
        return hit(v);
    }
    start_reaper();
    let idle_since = Instant::now()
        .checked_sub(REG_CACHE_IDLE)
        .unwrap_or_else(Instant::now);
    let Some(out) =
        cache()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(len, s.reg_cache_size, idle_since)
    else {
        FULL.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    let n = out.len() as u64;
    drop(out); // munmap and UNREG, with no lock held
    EVICTED.fetch_add(n, Ordering::Relaxed);
    let value = match Buffer::from_gpu_uncached(rt.clone(), start, len) {
        Ok(b) if b.is_p2p() => {
            CACHE_REGS.fetch_add(1, Ordering::Relaxed);
            Some(Cached {
                buf: Arc::new(b),
                rt: rt.clone(),
            })
        }
        _ => None,
    };
    let bytes = if value.is_some() { len } else { 0 };
    let out =
        cache()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, id, value.clone(), bytes);
    let n = out.len() as u64;
    drop(out);
    EVICTED.fetch_add(n, Ordering::Relaxed);
    value.map(|c| (c.buf, (dptr - start) as usize))
}

/// Drops the cache's registrations of the allocation of `mem`: before a
/// caller registers that memory itself (a BAR page is in one registration
/// at a time).
pub(crate) fn release(rt: &Runtime, mem: &DeviceMemory) {
    let out = cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove_overlapping(&Key::of(rt, mem));
    let n = out.len() as u64;
    drop(out);
    EVICTED.fetch_add(n, Ordering::Relaxed);
}

/// Drops every registration of the cache (those still used by a request
/// go once it is done).
pub fn clear() {
    let out = cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|_, _, _| false);
    let n = out.len() as u64;
    drop(out);
    EVICTED.fetch_add(n, Ordering::Relaxed);
}

// ------------------------------------------------------------------- pool

/// A staging buffer: device memory of the library, registered once.
struct Slot {
    dptr: u64,
    buf: Buffer,
}

/// How long the pool waits before it tries to grow again after its first
/// failed growth; doubled after each further failure in a row, up to
/// [`POOL_RETRY_MAX`]. A growth that succeeds starts over.
pub const POOL_RETRY_MIN: Duration = Duration::from_millis(100);
/// The longest wait between two tries to grow a pool that keeps failing.
pub const POOL_RETRY_MAX: Duration = Duration::from_secs(30);

/// The last failed growth of a pool, and when it may grow again.
struct Failure {
    why: String,
    /// Failures in a row.
    count: u32,
    retry_at: Instant,
}

/// The wait after `count` failed growths in a row.
fn retry_after(count: u32) -> Duration {
    let shift = count.saturating_sub(1).min(16);
    POOL_RETRY_MIN
        .saturating_mul(1 << shift)
        .min(POOL_RETRY_MAX)
}

struct PoolState<S> {
    free: Vec<S>,
    /// Staging buffers that exist (free or leased) or are being made.
    count: usize,
    max: usize,
    size: usize,
    /// Why the last staging buffer could not be made: until its
    /// `retry_at`, the pool does not grow (a request takes a free buffer,
    /// waits for one in use, or, with none made, goes another way), then
    /// one request tries again. Never for good: memory freed or a node
    /// bound later makes it grow again; at most one try per wait, so a
    /// pool that cannot grow costs no allocation per request.
    failed: Option<Failure>,
}

/// A pool of staging buffers of one GPU; `S` is a staging buffer ([`Slot`];
/// anything in the tests).
struct Pool<S = Slot> {
    state: Mutex<PoolState<S>>,
    freed: Condvar,
}

/// A staging buffer leased for one request.
struct Lease<S = Slot> {
    pool: Arc<Pool<S>>,
    slot: Option<S>,
}

impl<S> Drop for Lease<S> {
    fn drop(&mut self) {
        if let Some(s) = self.slot.take() {
            self.pool
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .free
                .push(s);
            self.pool.freed.notify_one();
        }
    }
}

impl<S> Pool<S> {
    fn new(max: usize, size: usize) -> Pool<S> {
        Pool {
            state: Mutex::new(PoolState {
                free: Vec::new(),
                count: 0,
                max,
                size,
                failed: None,
            }),
            freed: Condvar::new(),
        }
    }

    /// A staging buffer: a free one; else a new one from `grow(size)` while
    /// the pool is below its size and not waiting after a failed growth;
    /// else the next one given back; an error (the last growth's) when
    /// none exists and the pool may not grow now.
    fn lease(self: &Arc<Self>, grow: impl FnOnce(usize) -> Result<S>) -> Result<Lease<S>> {
        let size = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(slot) = st.free.pop() {
                    drop(st);
                    return Ok(Lease {
                        pool: self.clone(),
                        slot: Some(slot),
                    });
                }
                let waiting = st.failed.as_ref().filter(|f| Instant::now() < f.retry_at);
                if st.count < st.max && waiting.is_none() {
                    st.count += 1;
                    break st.size;
                }
                if st.count == 0 {
                    let why = waiting.map_or("no staging buffer", |f| f.why.as_str());
                    return Err(Error::P2pUnavailable {
                        reason: why.to_string(),
                    });
                }
                st = self.freed.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        match grow(size) {
            Ok(slot) => {
                self.state.lock().unwrap_or_else(|p| p.into_inner()).failed = None;
                Ok(Lease {
                    pool: self.clone(),
                    slot: Some(slot),
                })
            }
            Err(e) => {
                POOL_FAILURES.fetch_add(1, Ordering::Relaxed);
                let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                st.count -= 1;
                let count = st.failed.as_ref().map_or(0, |f| f.count) + 1;
                st.failed = Some(Failure {
                    why: format!("staging buffer: {e}"),
                    count,
                    retry_at: Instant::now() + retry_after(count),
                });
                // Those waiting for a buffer of a pool that has none go
                // another way.
                self.freed.notify_all();
                Err(e)
            }
        }
    }
}

/// The pool of the GPU (runtime, context, device) of `mem`.
fn pool_of(rt: &Runtime, mem: &DeviceMemory) -> Option<Arc<Pool>> {
    type Pools = Mutex<HashMap<(bool, usize, i32), Arc<Pool>>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let s = settings();
    if s.device_cache_size == 0 {
        return None;
    }
    let key = (rt.kind() == Kind::Cuda, mem.ctx, mem.ordinal);
    let mut g = POOLS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    Some(
        g.entry(key)
            .or_insert_with(|| {
                Arc::new(Pool::new(
                    (s.device_cache_size / s.per_buffer_size).max(1),
                    s.per_buffer_size,
                ))
            })
            .clone(),
    )
}

/// A staging buffer of `mem`'s GPU ([`Pool::lease`]).
fn lease(rt: &Arc<Runtime>, mem: &DeviceMemory) -> Result<Lease> {
    let pool = pool_of(rt, mem).ok_or_else(|| Error::InvalidArgument("no staging pool".into()))?;
    pool.lease(|size| {
        let s = new_slot(rt, mem, size)?;
        POOL_BUFFERS.fetch_add(1, Ordering::Relaxed);
        Ok(s)
    })
}

fn new_slot(rt: &Arc<Runtime>, mem: &DeviceMemory, size: usize) -> Result<Slot> {
    let dptr = {
        let _cur = rt.make_current(mem)?;
        rt.mem_alloc(size)?
    };
    match Buffer::from_gpu_uncached(rt.clone(), dptr, size as u64) {
        Ok(buf) if buf.is_p2p() => Ok(Slot { dptr, buf }),
        r => {
            let why = match r {
                Ok(b) => b
                    .p2p_unavailable_reason()
                    .unwrap_or("not registered")
                    .to_string(),
                Err(e) => e.to_string(),
            };
            let _cur = rt.make_current(mem)?;
            let _ = rt.mem_free(dptr);
            Err(Error::P2pUnavailable { reason: why })
        }
    }
}

/// `size` bytes between the file and `dptr` through a staging buffer.
#[allow(clippy::too_many_arguments)]
fn staged(
    file: &FileHandle,
    rt: &Arc<Runtime>,
    mem: &DeviceMemory,
    lease: &Lease,
    write: bool,
    dptr: u64,
    size: usize,
    file_off: u64,
) -> Result<usize> {
    let slot = lease
        .slot
        .as_ref()
        .ok_or_else(|| Error::InvalidArgument("internal: empty lease".into()))?;
    let piece = slot.buf.len();
    let mut done = 0usize;
    while done < size {
        let n = (size - done).min(piece);
        let at = dptr + done as u64;
        if write {
            {
                let _cur = rt.make_current(mem)?;
                // SAFETY: both ranges are device memory of mem's context:
                // the caller's (checked against its allocation) and the slot.
                unsafe { rt.dtod(slot.dptr, at, n) }?;
            }
            let put = file.write(&slot.buf, 0, n, file_off + done as u64)?;
            done += put;
            if put < n {
                break;
            }
        } else {
            let got = file.read(&slot.buf, 0, n, file_off + done as u64)?;
            if got > 0 {
                let _cur = rt.make_current(mem)?;
                // SAFETY: as above.
                unsafe { rt.dtod(at, slot.dptr, got) }?;
            }
            done += got;
            if got < n {
                break;
            }
        }
    }
    Ok(done)
}

// ------------------------------------------------------------------ entry

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
    if let Some((b, off)) = cached(rt, &mem, dptr, size as u64) {
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
    let mut tried_cache = false;
    // From the threshold on, the allocation is registered if it is not
    // yet; below it, its registration is used only if it exists already.
    let found = if large {
        tried_cache = true;
        cached(rt, &mem, dptr, size as u64)
    } else {
        cached_hit(rt, &mem, dptr, size as u64)
    };
    if let Some((b, off)) = found {
        CACHED.fetch_add(1, Ordering::Relaxed);
        return run(&b, off).map(|n| (n, Route::Cached));
    }
    if let Ok(l) = lease(rt, &mem) {
        STAGED.fetch_add(1, Ordering::Relaxed);
        return staged(file, rt, &mem, &l, write, dptr, size, file_off).map(|n| (n, Route::Staged));
    }
    if !tried_cache {
        if let Some((b, off)) = cached(rt, &mem, dptr, size as u64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(base: u64, size: u64) -> Key {
        Key {
            cuda: true,
            ctx: 1,
            ordinal: 0,
            base,
            size,
            off: 0,
            len: size,
        }
    }

    fn hit(c: &mut RegCache<u32>, k: &Key, id: u64) -> Option<u32> {
        match c.lookup(k, id) {
            Lookup::Hit(v) => v,
            Lookup::Miss(_) => None,
        }
    }

    /// Admitted within `max_bytes` with nothing idle, then inserted.
    fn add(c: &mut RegCache<u32>, k: Key, id: u64, v: Option<u32>, bytes: u64) -> Vec<u32> {
        let mut out = c.admit(bytes, u64::MAX, Instant::now()).expect("room");
        out.extend(c.insert(k, id, v, bytes));
        out
    }

    #[test]
    fn a_freed_and_reallocated_range_is_not_reused() {
        // The same base and size, as a range freed and allocated again
        // gets: another buffer id, so a miss that drops the old entry.
        let mut c = RegCache::new(8);
        let k = key(0x10_0000, 2 << 20);
        assert!(add(&mut c, k, 7, Some(1), 2 << 20).is_empty());
        assert_eq!(hit(&mut c, &k, 7), Some(1));
        match c.lookup(&k, 8) {
            Lookup::Miss(old) => assert_eq!(old, vec![1], "the stale registration comes out"),
            Lookup::Hit(_) => panic!("a new allocation hit the old one's registration"),
        }
        assert_eq!(c.entries.len(), 0);
        assert_eq!(c.bytes, 0);
        // A smaller allocation inside the old range: the old one goes too.
        add(&mut c, k, 7, Some(1), 2 << 20);
        let inner = key(0x10_0000 + (1 << 20), 64 << 10);
        match c.lookup(&inner, 9) {
            Lookup::Miss(old) => assert_eq!(old, vec![1]),
            Lookup::Hit(_) => panic!("hit across allocations"),
        }
    }

    #[test]
    fn windows_of_one_allocation_are_apart() {
        let mb = 1u64 << 20;
        // Up to a window: the whole allocation, wherever the request lies.
        assert_eq!(window_of(20 * mb, 3 * mb, mb, 64 * mb), Some((0, 20 * mb)));
        // A 40 GiB allocation: the 64 MiB window of the request, not 40 GiB.
        assert_eq!(
            window_of(40 << 30, 100 * mb, mb, 64 * mb),
            Some((64 * mb, 64 * mb))
        );
        // The last window is what is left.
        assert_eq!(
            window_of(100 * mb, 70 * mb, mb, 64 * mb),
            Some((64 * mb, 36 * mb))
        );
        // Across a window's end: none (io() splits such a request).
        assert_eq!(window_of(200 * mb, 63 * mb, 2 * mb, 64 * mb), None);
        // Two windows of one allocation never overlap; a window and the
        // whole allocation (a caller's own registration drops them all) do.
        let w = |off, len| Key {
            off,
            len,
            ..key(1 << 40, 200 * mb)
        };
        assert!(!w(0, 64 * mb).overlaps(&w(64 * mb, 64 * mb)));
        assert!(w(64 * mb, 64 * mb).overlaps(&key(1 << 40, 200 * mb)));
        let mut c = RegCache::new(8);
        add(&mut c, w(0, 64 * mb), 1, Some(0), 64 * mb);
        add(&mut c, w(64 * mb, 64 * mb), 1, Some(1), 64 * mb);
        assert_eq!(hit(&mut c, &w(64 * mb, 64 * mb), 1), Some(1));
        assert_eq!(hit(&mut c, &w(0, 64 * mb), 1), Some(0));
        let mut gone = c.remove_overlapping(&key(1 << 40, 200 * mb));
        gone.sort_unstable();
        assert_eq!(gone, vec![0, 1]);
    }

    #[test]
    fn room_only_from_idle_entries_least_recently_used_first() {
        let mut c = RegCache::new(3);
        let ks: Vec<Key> = (0..4).map(|i| key((i + 1) << 30, 1 << 20)).collect();
        for (i, k) in ks.iter().take(3).enumerate() {
            assert!(add(&mut c, *k, i as u64, Some(i as u32), 1 << 20).is_empty());
        }
        // Full, and every entry used just now: no room, nothing dropped.
        let long_ago = Instant::now() - Duration::from_secs(60);
        assert!(c.admit(1 << 20, u64::MAX, long_ago).is_none());
        assert_eq!(c.entries.len(), 3);
        // All idle: the least recently used goes first.
        assert_eq!(hit(&mut c, &ks[0], 0), Some(0)); // 1 is now the oldest
        let now = Instant::now();
        assert_eq!(c.admit(1 << 20, u64::MAX, now), Some(vec![1]));
        c.insert(ks[3], 3, Some(3), 1 << 20);
        assert_eq!(hit(&mut c, &ks[1], 1), None);
        // The byte bound: room for 2 MiB within 3 MiB drops the two oldest.
        let mut out = c.admit(2 << 20, 3 << 20, Instant::now()).expect("room");
        out.sort_unstable();
        assert_eq!(out, vec![0, 2]);
        assert_eq!(c.bytes, 1 << 20);
        // An empty cache takes one entry above the byte bound.
        let mut one: RegCache<u32> = RegCache::new(3);
        assert_eq!(one.admit(8 << 20, 1 << 20, long_ago), Some(vec![]));
    }

    #[test]
    fn negative_entries_overlap_removal_and_retain() {
        let mut c: RegCache<u32> = RegCache::new(8);
        let k = key(1 << 30, 1 << 20);
        add(&mut c, k, 1, None, 0);
        assert!(
            matches!(c.lookup(&k, 1), Lookup::Hit(None)),
            "known unregistrable"
        );
        add(&mut c, key(2 << 30, 1 << 20), 2, Some(2), 1 << 20);
        add(&mut c, key(3 << 30, 1 << 20), 3, Some(3), 1 << 20);
        assert_eq!(c.remove_overlapping(&key((2 << 30) + 4096, 4096)), vec![2]);
        // the reaper: an allocation whose id changed goes
        assert_eq!(
            c.retain(|k, id, _| !(k.base == 3 << 30 && id == 3)),
            vec![3]
        );
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.bytes, 0);
    }

    #[test]
    fn a_failed_growth_is_tried_again_later_not_for_good() {
        let pool: Arc<Pool<u32>> = Arc::new(Pool::new(2, 4096));
        let fail = |_: usize| -> Result<u32> {
            Err(Error::P2pUnavailable {
                reason: "no memory".into(),
            })
        };
        let failures = POOL_FAILURES.load(Ordering::Relaxed);
        assert!(pool.lease(fail).is_err());
        assert!(POOL_FAILURES.load(Ordering::Relaxed) > failures);
        // Within the wait: no new try (no retry storm), the last reason.
        let mut tried = false;
        let e = pool
            .lease(|_| {
                tried = true;
                Ok(1)
            })
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!tried, "grew again within the wait");
        assert!(
            e.contains("staging buffer: ") && e.contains("no memory"),
            "{e}"
        );
        // Past the wait: one try, which works, and the pool is back.
        if let Some(f) = pool
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failed
            .as_mut()
        {
            f.retry_at = Instant::now();
        }
        let first = pool.lease(|size| {
            assert_eq!(size, 4096);
            Ok(7)
        });
        assert!(first.is_ok());
        assert!(pool
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failed
            .is_none());
        drop(first);
        // A free buffer is leased whatever the pool's growth does.
        let again = pool.lease(fail).ok().and_then(|mut l| l.slot.take());
        assert_eq!(again, Some(7));
    }

    #[test]
    fn a_pool_waiting_to_grow_lends_what_it_has() {
        let pool: Arc<Pool<u32>> = Arc::new(Pool::new(2, 4096));
        let held = pool.lease(|_| Ok(1));
        assert!(held.is_ok());
        // The second buffer cannot be made: waiting to grow again, the
        // pool lends its first buffer once it is given back.
        let err = pool.lease(|_| {
            Err(Error::P2pUnavailable {
                reason: "no memory".into(),
            })
        });
        assert!(err.is_err());
        let p2 = pool.clone();
        let t = std::thread::spawn(move || {
            p2.lease(|_| -> Result<u32> { panic!("grew within the wait") })
                .ok()
                .and_then(|mut l| l.slot.take())
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(held);
        assert_eq!(t.join().ok().flatten(), Some(1));
    }

    #[test]
    fn the_wait_doubles_and_is_bounded() {
        assert_eq!(retry_after(1), POOL_RETRY_MIN);
        assert_eq!(retry_after(2), POOL_RETRY_MIN * 2);
        assert_eq!(retry_after(3), POOL_RETRY_MIN * 4);
        assert_eq!(retry_after(40), POOL_RETRY_MAX);
        assert_eq!(retry_after(u32::MAX), POOL_RETRY_MAX);
    }

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
