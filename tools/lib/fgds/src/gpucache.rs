//! GPU memory the caller never registered: a per-GPU pool of registered
//! staging buffers and a bounded cache of whole-allocation registrations,
//! so that such I/O never costs a registration (`FGDS_IOCTL_REG_BUFFER`,
//! `mmap`, and on the way out `munmap` and `FGDS_IOCTL_UNREG_BUFFER`, 30 to
//! 48 ms in the VM) per call. libcufile (`cuFileRead` on memory never given
//! to `cuFileBufRegister`: KvikIO's, torch's and LMCache's way), the Python
//! package and C callers ([`read`], [`write`], [`buffer_for`]) go through it.
//!
//! # Which path a request takes
//!
//! For a synchronous request ([`read`], [`write`]) of `size` bytes at a
//! device pointer:
//!
//! 1. No fgds node serves the pointer's GPU: the bounce path, as before
//!    ([`Route::Bounce`]; nothing is registered).
//! 2. `size >= reg_cache_min` (`FGDS_REG_CACHE_MIN`, 1 MiB): peer to peer
//!    into a registration of the pointer's whole allocation
//!    (`cuMemGetAddressRange`), made on the first such request and kept in
//!    the cache ([`Route::Cached`]). The allocation must start on a page
//!    (CUDA's export rule: host pages) and the range lie in its whole pages.
//!    A smaller request on an allocation the cache holds already uses
//!    that registration too (it costs nothing more).
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
//! An entry is keyed by the allocation (runtime, context, base, size) and
//! its buffer id (`CU_POINTER_ATTRIBUTE_BUFFER_ID`, which a freed and
//! re-allocated range does not keep): a request on a range freed and
//! allocated again never uses the old registration; it drops it. At most
//! [`REG_CACHE_ENTRIES`] allocations and `FGDS_REG_CACHE_SIZE` bytes (4 GiB)
//! are kept, the least recently used evicted first. A thread checks every
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
        }
    }

    fn check(&self) -> Result<()> {
        let pb = self.per_buffer_size;
        if pb == 0 || pb % 4096 != 0 || pb > crate::config::MAX_RW_COUNT {
            return Err(Error::InvalidArgument(format!(
                "per-buffer cache size {pb} must be a non-zero multiple of 4096 up to 2 GiB - 4 KiB"
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
    /// Registrations it dropped because their allocation was freed (its buffer id changed).
    pub cache_stale: u64,
    /// Registrations it dropped to stay within its bounds, or for a caller's own.
    pub cache_evicted: u64,
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
        cache_entries: entries,
        cache_bytes: bytes,
    }
}

// ------------------------------------------------------------------ cache

/// An allocation, as the runtime names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    cuda: bool,
    ctx: usize,
    ordinal: i32,
    base: u64,
    size: u64,
}

impl Key {
    fn of(rt: &Runtime, mem: &DeviceMemory) -> Key {
        Key {
            cuda: rt.kind() == Kind::Cuda,
            ctx: mem.ctx,
            ordinal: mem.ordinal,
            base: mem.base,
            size: mem.size,
        }
    }

    fn overlaps(&self, other: &Key) -> bool {
        self.cuda == other.cuda
            && self.ordinal == other.ordinal
            && self.base < other.base + other.size
            && other.base < self.base + self.size
    }
}

struct Entry<V> {
    key: Key,
    id: u64,
    /// `None`: the allocation cannot be registered whole (not tried again
    /// while it lives).
    value: Option<V>,
    bytes: u64,
    last_use: u64,
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
                return Lookup::Hit(e.value.clone());
            }
            i += 1;
        }
        Lookup::Miss(stale)
    }

    /// Adds an entry of `bytes` and removes the least recently used ones
    /// until at most `max_bytes` and the entry bound are held (the new one
    /// stays, even alone above `max_bytes`); returns what was removed.
    pub(crate) fn insert(
        &mut self,
        key: Key,
        id: u64,
        value: Option<V>,
        bytes: u64,
        max_bytes: u64,
    ) -> Vec<V> {
        self.tick += 1;
        let mut out = self.remove_overlapping(&key);
        self.entries.push(Entry {
            key,
            id,
            value,
            bytes,
            last_use: self.tick,
        });
        self.bytes += bytes;
        while self.entries.len() > 1
            && (self.entries.len() > self.max_entries || self.bytes > max_bytes)
        {
            let Some((i, _)) = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.last_use != self.tick)
                .min_by_key(|(_, e)| e.last_use)
            else {
                break;
            };
            out.extend(self.take(i));
        }
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
                STALE.fetch_add(dead.len() as u64, Ordering::Relaxed);
                drop(dead); // munmap and UNREG, with no lock held
            });
    });
}

/// The cached registration of the allocation holding `[dptr, dptr + size)`
/// and `dptr`'s offset in it, made if there is none; `None` where the
/// allocation cannot be registered whole (no buffer id, not page aligned,
/// the range past its last whole page, refused by the driver).
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
    let len = mem.size / a * a;
    if mem.base % a != 0 || len == 0 || dptr + size > mem.base + len {
        return None;
    }
    let id = rt.buffer_id(dptr).ok()?;
    let key = Key::of(rt, mem);
    let hit = |v: Option<Cached>| {
        v.map(|c| {
            HITS.fetch_add(1, Ordering::Relaxed);
            (c.buf, (dptr - mem.base) as usize)
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
    STALE.fetch_add(stale.len() as u64, Ordering::Relaxed);
    drop(stale);
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
    let value = match Buffer::from_gpu_uncached(rt.clone(), mem.base, len) {
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
    start_reaper();
    let out = cache().lock().unwrap_or_else(|p| p.into_inner()).insert(
        key,
        id,
        value.clone(),
        bytes,
        s.reg_cache_size,
    );
    EVICTED.fetch_add(out.len() as u64, Ordering::Relaxed);
    drop(out);
    value.map(|c| (c.buf, (dptr - mem.base) as usize))
}

/// Drops the cache's registrations of the allocation of `mem`: before a
/// caller registers that memory itself (a BAR page is in one registration
/// at a time).
pub(crate) fn release(rt: &Runtime, mem: &DeviceMemory) {
    let out = cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove_overlapping(&Key::of(rt, mem));
    EVICTED.fetch_add(out.len() as u64, Ordering::Relaxed);
    drop(out);
}

/// Drops every registration of the cache (those still used by a request
/// go once it is done).
pub fn clear() {
    let out = cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|_, _, _| false);
    EVICTED.fetch_add(out.len() as u64, Ordering::Relaxed);
    drop(out);
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

fn io(
    file: &FileHandle,
    rt: &Arc<Runtime>,
    write: bool,
    dptr: u64,
    size: usize,
    file_off: u64,
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
    let mut tried_cache = false;
    // From the threshold on, the allocation is registered if it is not
    // yet; below it, its registration is used only if it exists already.
    let found = if size >= s.reg_cache_min {
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
    io(file, rt, false, dptr, size, file_off)
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
    io(file, rt, true, dptr, size, file_off)
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
        }
    }

    fn hit(c: &mut RegCache<u32>, k: &Key, id: u64) -> Option<u32> {
        match c.lookup(k, id) {
            Lookup::Hit(v) => v,
            Lookup::Miss(_) => None,
        }
    }

    #[test]
    fn a_freed_and_reallocated_range_is_not_reused() {
        // The same base and size, as a range freed and allocated again
        // gets: another buffer id, so a miss that drops the old entry.
        let mut c = RegCache::new(8);
        let k = key(0x10_0000, 2 << 20);
        assert!(c.insert(k, 7, Some(1), 2 << 20, u64::MAX).is_empty());
        assert_eq!(hit(&mut c, &k, 7), Some(1));
        match c.lookup(&k, 8) {
            Lookup::Miss(old) => assert_eq!(old, vec![1], "the stale registration comes out"),
            Lookup::Hit(_) => panic!("a new allocation hit the old one's registration"),
        }
        assert_eq!(c.entries.len(), 0);
        assert_eq!(c.bytes, 0);
        // A smaller allocation inside the old range: the old one goes too.
        c.insert(k, 7, Some(1), 2 << 20, u64::MAX);
        let inner = key(0x10_0000 + (1 << 20), 64 << 10);
        match c.lookup(&inner, 9) {
            Lookup::Miss(old) => assert_eq!(old, vec![1]),
            Lookup::Hit(_) => panic!("hit across allocations"),
        }
    }

    #[test]
    fn least_recently_used_goes_first_within_both_bounds() {
        let mut c = RegCache::new(3);
        let ks: Vec<Key> = (0..4).map(|i| key((i + 1) << 30, 1 << 20)).collect();
        for (i, k) in ks.iter().take(3).enumerate() {
            assert!(c
                .insert(*k, i as u64, Some(i as u32), 1 << 20, u64::MAX)
                .is_empty());
        }
        assert_eq!(hit(&mut c, &ks[0], 0), Some(0)); // 1 is now the oldest
        assert_eq!(c.insert(ks[3], 3, Some(3), 1 << 20, u64::MAX), vec![1]);
        assert_eq!(hit(&mut c, &ks[1], 1), None);
        // The byte bound: 2 MiB of 1 MiB entries keeps the newest two.
        let out = c.insert(key(9 << 30, 1 << 20), 9, Some(9), 1 << 20, 2 << 20);
        assert_eq!(out.len(), 2);
        assert_eq!(c.bytes, 2 << 20);
        assert_eq!(hit(&mut c, &key(9 << 30, 1 << 20), 9), Some(9));
        // A single entry above the byte bound stays (it is in use).
        let mut one = RegCache::new(3);
        assert!(one.insert(ks[0], 0, Some(0), 8 << 20, 1 << 20).is_empty());
        assert_eq!(one.entries.len(), 1);
    }

    #[test]
    fn negative_entries_overlap_removal_and_retain() {
        let mut c: RegCache<u32> = RegCache::new(8);
        let k = key(1 << 30, 1 << 20);
        c.insert(k, 1, None, 0, u64::MAX);
        assert!(
            matches!(c.lookup(&k, 1), Lookup::Hit(None)),
            "known unregistrable"
        );
        c.insert(key(2 << 30, 1 << 20), 2, Some(2), 1 << 20, u64::MAX);
        c.insert(key(3 << 30, 1 << 20), 3, Some(3), 1 << 20, u64::MAX);
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
