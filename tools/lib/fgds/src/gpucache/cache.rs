//! The registration cache: registrations of GPU allocations (whole, or in
//! windows) keyed by allocation, window and buffer id, bounded in entries
//! and bytes ([`RegCache`]), emptied of freed memory by a thread of its own
//! that can be told to stop ([`Cache`], one per
//! [`super::runtime::Runtime`]).

use super::settings::{
    settings, CACHE_REGS, EVICTED, FULL, HITS, REG_CACHE_CHECK, REG_CACHE_ENTRIES, REG_CACHE_IDLE,
    STALE,
};
use crate::buffer::Buffer;
use crate::gpu::{self, DeviceMemory, Kind, Runtime};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

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

/// The registration cache of a [`super::runtime::Runtime`]: its entries,
/// the lock that makes registrations one at a time, and the thread that
/// drops the registrations of freed memory ([`Reaper`]).
pub(super) struct Cache {
    entries: Mutex<RegCache<Cached>>,
    /// Registrations are made one at a time: two requests missing on the
    /// same allocation must not both register it (the second would get
    /// `EBUSY`).
    reg_lock: Mutex<()>,
    reaper: Mutex<Option<Reaper>>,
}

/// The thread that drops the registrations of freed memory every
/// [`REG_CACHE_CHECK`]; told to stop and joined by [`Cache::stop_reaper`].
struct Reaper {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: JoinHandle<()>,
}

impl Cache {
    pub(super) fn new() -> Cache {
        Cache {
            entries: Mutex::new(RegCache::new(REG_CACHE_ENTRIES)),
            reg_lock: Mutex::new(()),
            reaper: Mutex::new(None),
        }
    }

    fn entries(&self) -> MutexGuard<'_, RegCache<Cached>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The allocations cached now, and the bytes registered for them.
    pub(super) fn occupancy(&self) -> (u64, u64) {
        let c = self.entries();
        (c.entries.len() as u64, c.bytes)
    }

    /// Starts the thread that drops the registrations of freed memory, if
    /// it does not run yet. Called before the cache holds its first.
    pub(super) fn start_reaper(self: &Arc<Self>) {
        let mut g = self.reaper.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_some() {
            return;
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (cache, told) = (Arc::downgrade(self), stop.clone());
        let thread = std::thread::Builder::new()
            .name("fgds-regcache".into())
            .spawn(move || loop {
                let (m, cv) = &*told;
                let g = m.lock().unwrap_or_else(|p| p.into_inner());
                let (g, _) = cv
                    .wait_timeout_while(g, REG_CACHE_CHECK, |stop| !*stop)
                    .unwrap_or_else(|p| p.into_inner());
                if *g {
                    return;
                }
                drop(g);
                match cache.upgrade() {
                    Some(c) => c.reap(),
                    None => return,
                }
            });
        if let Ok(thread) = thread {
            *g = Some(Reaper { stop, thread });
        }
    }

    /// Tells the reaper to stop and waits for it (at most the end of the
    /// pass it is in).
    pub(super) fn stop_reaper(&self) {
        let Some(r) = self.reaper.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        let (m, cv) = &*r.stop;
        *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        if r.thread.thread().id() != std::thread::current().id() {
            let _ = r.thread.join();
        }
    }

    /// Drops the registrations of freed memory (the allocation's buffer id changed).
    fn reap(&self) {
        let dead = self.entries().retain(|k, id, v| match v {
            Some(c) => c.rt.buffer_id(k.base).is_ok_and(|now| now == id),
            None => true,
        });
        let n = dead.len() as u64;
        // munmap and UNREG, with no lock held; counted after, so that a caller that
        // sees the count sees the UNREG done (unless a request still uses it)
        drop(dead);
        STALE.fetch_add(n, Ordering::Relaxed);
    }

    /// The cached registration of the window of the allocation holding
    /// `[dptr, dptr + size)` ([`window_of`]) and `dptr`'s offset in it, made if
    /// there is none and `register` is set (else only one there is already);
    /// `None` where it cannot be registered (no buffer id, not page aligned,
    /// the range past its last whole page or across the window's end, refused
    /// by the driver) or the cache is full of registrations in use.
    pub(super) fn cached(
        self: &Arc<Self>,
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
        let stale = match self.entries().lookup(&key, id) {
            Lookup::Hit(v) => return hit(v),
            Lookup::Miss(stale) => stale,
        };
        let n = stale.len() as u64;
        drop(stale);
        STALE.fetch_add(n, Ordering::Relaxed);
        if !register {
            return None;
        }
        let _one = self.reg_lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Lookup::Hit(v) = self.entries().lookup(&key, id) {
            return hit(v);
        }
        self.start_reaper();
        let idle_since = Instant::now()
            .checked_sub(REG_CACHE_IDLE)
            .unwrap_or_else(Instant::now);
        let Some(out) = self.entries().admit(len, s.reg_cache_size, idle_since) else {
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
        let out = self.entries().insert(key, id, value.clone(), bytes);
        let n = out.len() as u64;
        drop(out);
        EVICTED.fetch_add(n, Ordering::Relaxed);
        value.map(|c| (c.buf, (dptr - start) as usize))
    }

    /// Drops the cache's registrations of the allocation of `mem`: before a
    /// caller registers that memory itself (a BAR page is in one registration
    /// at a time).
    pub(super) fn release(&self, rt: &Runtime, mem: &DeviceMemory) {
        let out = self.entries().remove_overlapping(&Key::of(rt, mem));
        let n = out.len() as u64;
        drop(out);
        EVICTED.fetch_add(n, Ordering::Relaxed);
    }

    /// Drops every registration of the cache (those still used by a request
    /// go once it is done).
    pub(super) fn clear(&self) {
        let out = self.entries().retain(|_, _, _| false);
        let n = out.len() as u64;
        drop(out);
        EVICTED.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
}
