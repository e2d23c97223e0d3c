//! The staging pool: per GPU, registered staging buffers leased to
//! requests, grown on demand and tried again after a failure; and the
//! staged request, read or written through them with device copies.

use super::settings::{settings, POOL_BUFFERS, POOL_FAILURES};
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::file::FileHandle;
use crate::gpu::{DeviceMemory, Kind, Runtime};
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A staging buffer: device memory of the library, registered once;
/// dropped (with its pool, when the runtime that owns the pool goes:
/// [`super::runtime`]), unregistered, then freed.
pub(super) struct Slot {
    dptr: u64,
    buf: ManuallyDrop<Buffer>,
    rt: Arc<Runtime>,
    mem: DeviceMemory,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, and not used after: munmap and UNREG
        // before the memory goes.
        unsafe { ManuallyDrop::drop(&mut self.buf) };
        if let Ok(_cur) = self.rt.make_current(&self.mem) {
            let _ = self.rt.mem_free(self.dptr);
        }
    }
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
pub(super) struct Lease<S = Slot> {
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

/// The staging pools of every GPU, by (runtime, context, device).
#[derive(Default)]
pub(super) struct Pools(Mutex<HashMap<(bool, usize, i32), Arc<Pool>>>);

impl Pools {
    /// The pool of the GPU (runtime, context, device) of `mem`.
    fn pool_of(&self, rt: &Runtime, mem: &DeviceMemory) -> Option<Arc<Pool>> {
        let s = settings();
        if s.device_cache_size == 0 {
            return None;
        }
        let key = (rt.kind() == Kind::Cuda, mem.ctx, mem.ordinal);
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
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
    pub(super) fn lease(&self, rt: &Arc<Runtime>, mem: &DeviceMemory) -> Result<Lease> {
        let pool = self
            .pool_of(rt, mem)
            .ok_or_else(|| Error::InvalidArgument("no staging pool".into()))?;
        pool.lease(|size| {
            let s = new_slot(rt, mem, size)?;
            POOL_BUFFERS.fetch_add(1, Ordering::Relaxed);
            Ok(s)
        })
    }
}

fn new_slot(rt: &Arc<Runtime>, mem: &DeviceMemory, size: usize) -> Result<Slot> {
    let dptr = {
        let _cur = rt.make_current(mem)?;
        rt.mem_alloc(size)?
    };
    match Buffer::from_gpu_uncached(rt.clone(), dptr, size as u64) {
        Ok(buf) if buf.is_p2p() => Ok(Slot {
            dptr,
            buf: ManuallyDrop::new(buf),
            rt: rt.clone(),
            mem: mem.clone(),
        }),
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
pub(super) fn staged(
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_dropped_pool_drops_its_staging_buffers() {
        use std::sync::atomic::AtomicUsize;
        static DROPPED: AtomicUsize = AtomicUsize::new(0);
        struct Counted;
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        let pool: Arc<Pool<Counted>> = Arc::new(Pool::new(2, 4096));
        let (a, b) = (pool.lease(|_| Ok(Counted)), pool.lease(|_| Ok(Counted)));
        assert!(a.is_ok() && b.is_ok());
        drop(a);
        drop(pool); // the runtime lets go: a buffer still leased stays
        assert_eq!(
            DROPPED.load(Ordering::Relaxed),
            0,
            "given back, not dropped"
        );
        drop(b); // the last lease: the pool goes, and both buffers with it
        assert_eq!(DROPPED.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_wait_doubles_and_is_bounded() {
        assert_eq!(retry_after(1), POOL_RETRY_MIN);
        assert_eq!(retry_after(2), POOL_RETRY_MIN * 2);
        assert_eq!(retry_after(3), POOL_RETRY_MIN * 4);
        assert_eq!(retry_after(40), POOL_RETRY_MAX);
        assert_eq!(retry_after(u32::MAX), POOL_RETRY_MAX);
    }
}
