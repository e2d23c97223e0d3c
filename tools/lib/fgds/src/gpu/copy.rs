//! Copies between host and device memory (and device to device) on the
//! thread's own non-blocking copy stream per context, and the waits for
//! them (sleeping on an event where the driver has them); the record of
//! every such stream and event, destroyed with its generation
//! ([`CopyStreams`]).

use super::runtime::{unavailable, FnStream, Runtime};
use super::stream::STREAM_NON_BLOCKING;
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::LocalKey;

/// `CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING`: a wait for the event
/// sleeps rather than spins.
const EVENT_BLOCKING_NO_TIMING: c_uint = 0x1 | 0x2;

/// A thread's copy streams or events: the generation they belong to
/// ([`CopyStreams`]'s id; 0: none yet) and `(context, handle)` pairs.
type PerThread = RefCell<(u64, Vec<(usize, usize)>)>;

thread_local! {
    /// This thread's non-blocking copy streams, by context.
    static COPY_STREAMS: PerThread = const { RefCell::new((0, Vec::new())) };
    /// This thread's blocking-sync events, by context.
    static COPY_EVENTS: PerThread = const { RefCell::new((0, Vec::new())) };
}

/// A stream or event a thread made, and the driver's call that destroys it
/// (`None`: the driver has none; it stays to the end of the process).
struct Made {
    handle: usize,
    destroy: Option<FnStream>,
}

/// One generation of the threads' copy streams and events: every one made,
/// by any thread, since the generation began. The library's runtime holds
/// the generation that began with it ([`crate::gpucache::runtime`]), and a
/// copy holds the one its stream belongs to while it runs; a shutdown ends
/// the generation ([`retire_copy_streams`]), and its streams and events are
/// destroyed when the last holder lets go. A thread whose streams belong to
/// an ended generation makes new ones: it never uses a destroyed one.
pub(crate) struct CopyStreams {
    id: u64,
    made: Mutex<Vec<Made>>,
}

impl Drop for CopyStreams {
    fn drop(&mut self) {
        let made = std::mem::take(self.made.get_mut().unwrap_or_else(|p| p.into_inner()));
        for m in made {
            if let Some(destroy) = m.destroy {
                // SAFETY: made by the driver, destroyed once, here; no
                // thread uses it any more (none holds the generation, and
                // a thread's later copies make streams of a new one).
                let _ = unsafe { destroy(m.handle as *mut c_void) };
            }
        }
    }
}

fn live() -> &'static Mutex<Option<Arc<CopyStreams>>> {
    static LIVE: Mutex<Option<Arc<CopyStreams>>> = Mutex::new(None);
    &LIVE
}

/// The generation of copy streams now, begun if none is.
pub(crate) fn copy_streams() -> Arc<CopyStreams> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    live()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(|| {
            Arc::new(CopyStreams {
                id: NEXT.fetch_add(1, Ordering::Relaxed),
                made: Mutex::new(Vec::new()),
            })
        })
        .clone()
}

/// Ends the generation of copy streams now: its streams and events are
/// destroyed once no runtime and no copy holds it; the next copy of every
/// thread makes new ones.
pub(crate) fn retire_copy_streams() {
    let old = live().lock().unwrap_or_else(|p| p.into_inner()).take();
    drop(old);
}

/// This thread's stream or event in `list` for context `ctx` of generation
/// `g`, made by `make` (and recorded in `g`, with `destroy`) if it has none.
fn per_thread(
    list: &'static LocalKey<PerThread>,
    g: &CopyStreams,
    ctx: usize,
    make: impl FnOnce() -> Option<usize>,
    destroy: Option<FnStream>,
) -> Option<usize> {
    list.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != g.id {
            // made in an ended generation: destroyed, or soon
            *c = (g.id, Vec::new());
        }
        if let Some(&(_, h)) = c.1.iter().find(|(x, _)| *x == ctx) {
            return Some(h);
        }
        let h = make()?;
        g.made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Made { handle: h, destroy });
        c.1.push((ctx, h));
        Some(h)
    })
}

impl Runtime {
    /// Host to device copy.
    ///
    /// # Safety
    /// `src..src+len` must be readable and `dst..dst+len` device memory.
    pub unsafe fn htod(&self, dst: u64, src: *const u8, len: usize) -> Result<()> {
        if let (Some(f), Some((s, _held))) = (&self.stream, self.copy_stream()) {
            self.check(
                "MemcpyHtoDAsync",
                (f.htod_async)(dst, src as *const c_void, len, s),
            )?;
            return self.check("StreamSynchronize", (f.synchronize)(s));
        }
        self.check("MemcpyHtoD", (self.htod)(dst, src as *const c_void, len))
    }

    /// Queues a host to device copy on this thread's copy stream of the
    /// current context and returns that stream, for
    /// [`Runtime::copy_stream_sync`]; without stream entry points (HIP) the
    /// copy is made at once and `None` returned. The stream stays valid
    /// until `fgds_shutdown()`.
    ///
    /// # Safety
    /// `src..src+len` must be pinned host memory that stays readable until
    /// the stream was waited for, and `dst..dst+len` device memory.
    pub unsafe fn htod_queue(&self, dst: u64, src: *const u8, len: usize) -> Result<Option<usize>> {
        Ok(self.htod_queue_held(dst, src, len)?.map(|(s, _)| s))
    }

    /// [`Runtime::htod_queue`], with the generation of the stream: held
    /// until the stream was waited for, it keeps the stream from being
    /// destroyed by a shutdown meanwhile.
    ///
    /// # Safety
    /// As [`Runtime::htod_queue`].
    pub(crate) unsafe fn htod_queue_held(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> Result<Option<(usize, Arc<CopyStreams>)>> {
        if let (Some(f), Some((s, held))) = (&self.stream, self.copy_stream()) {
            self.check(
                "MemcpyHtoDAsync",
                (f.htod_async)(dst, src as *const c_void, len, s),
            )?;
            return Ok(Some((s as usize, held)));
        }
        self.check("MemcpyHtoD", (self.htod)(dst, src as *const c_void, len))?;
        Ok(None)
    }

    /// Waits for a stream [`Runtime::htod_queue`] returned. With `sleep`,
    /// on a blocking-sync event recorded on it, so that the thread sleeps
    /// rather than spins (CUDA's default for a process with fewer contexts
    /// than CPUs) while long copies run; else, or without event entry
    /// points, `cuStreamSynchronize`.
    ///
    /// # Safety
    /// `stream` came from [`Runtime::htod_queue`] on this thread, whose
    /// current context is the stream's.
    pub unsafe fn copy_stream_sync(&self, stream: usize, sleep: bool) -> Result<()> {
        let f = self.stream_fns()?;
        if let (true, Some((create, record, wait))) = (sleep, f.events) {
            let mut ctx: *mut c_void = std::ptr::null_mut();
            if (f.ctx_get)(&mut ctx) == 0 && !ctx.is_null() {
                // held to the end of the wait: the event is not destroyed meanwhile
                let held = copy_streams();
                let make = || {
                    let mut e: *mut c_void = std::ptr::null_mut();
                    // SAFETY: e is a valid out pointer; a context is current.
                    let r = unsafe { create(&mut e, EVENT_BLOCKING_NO_TIMING) };
                    (r == 0).then_some(e as usize)
                };
                let ev = per_thread(&COPY_EVENTS, &held, ctx as usize, make, f.event_destroy);
                if let Some(e) = ev {
                    self.check(
                        "EventRecord",
                        record(e as *mut c_void, stream as *mut c_void),
                    )?;
                    return self.check("EventSynchronize", wait(e as *mut c_void));
                }
            }
        }
        self.check("StreamSynchronize", (f.synchronize)(stream as *mut c_void))
    }

    /// Device to device copy of `len` bytes, done when this returns (CUDA:
    /// on this thread's non-blocking copy stream of the current context,
    /// then waited for; HIP: `hipMemcpyDtoD`, then `hipDeviceSynchronize`).
    ///
    /// # Safety
    /// `src..src+len` and `dst..dst+len` are device memory of the current
    /// context (CUDA) or device (HIP).
    pub unsafe fn dtod(&self, dst: u64, src: u64, len: usize) -> Result<()> {
        if let Some(f) = self.dtod {
            self.check("MemcpyDtoD", f(dst, src, len))?;
            if let Some(sync) = self.dev_sync {
                self.check("DeviceSynchronize", sync())?;
            }
            return Ok(());
        }
        let f = self.stream_fns()?;
        let (Some(copy), Some((s, _held))) = (f.dtod_async, self.copy_stream()) else {
            return Err(unavailable(
                self.kind,
                "no MemcpyDtoDAsync or no copy stream",
            ));
        };
        self.check("MemcpyDtoDAsync", copy(dst, src, len, s))?;
        self.check("StreamSynchronize", (f.synchronize)(s))
    }

    /// Device to host copy.
    ///
    /// # Safety
    /// `dst..dst+len` must be writable and `src..src+len` device memory.
    pub unsafe fn dtoh(&self, dst: *mut u8, src: u64, len: usize) -> Result<()> {
        if let (Some(f), Some((s, _held))) = (&self.stream, self.copy_stream()) {
            self.check(
                "MemcpyDtoHAsync",
                (f.dtoh_async)(dst as *mut c_void, src, len, s),
            )?;
            return self.check("StreamSynchronize", (f.synchronize)(s));
        }
        self.check("MemcpyDtoH", (self.dtoh)(dst as *mut c_void, src, len))
    }

    /// This thread's non-blocking stream for the current context, made on
    /// first use (and again after a shutdown ended its generation), and
    /// its generation, to hold while the stream is used.
    ///
    /// The bounce path copies on it rather than with the synchronous copies, which run on the
    /// legacy default stream and so wait for every blocking stream of the context: a stream
    /// held by stream-ordered I/O ([`crate::stream`]) would then wait for its own copies.
    pub(super) fn copy_stream(&self) -> Option<(*mut c_void, Arc<CopyStreams>)> {
        let f = self.stream.as_ref()?;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: ctx is a valid out pointer.
        if unsafe { (f.ctx_get)(&mut ctx) } != 0 || ctx.is_null() {
            return None;
        }
        let held = copy_streams();
        let make = || {
            let mut s: *mut c_void = std::ptr::null_mut();
            // SAFETY: s is a valid out pointer; a context is current.
            let r = unsafe { (f.create)(&mut s, STREAM_NON_BLOCKING) };
            (r == 0).then_some(s as usize)
        };
        let s = per_thread(&COPY_STREAMS, &held, ctx as usize, make, Some(f.destroy))?;
        Some((s as *mut c_void, held))
    }

    /// Sets the 32-bit word at `dptr` to `value` and waits for it, on this thread's
    /// non-blocking stream (never behind other streams' work).
    pub fn fill32_sync(&self, dptr: u64, value: u32) -> Result<()> {
        self.fill32_sync_n(dptr, value, 1)
    }

    /// Sets `n` 32-bit words from `dptr` to `value`, as [`Runtime::fill32_sync`].
    pub fn fill32_sync_n(&self, dptr: u64, value: u32, n: usize) -> Result<()> {
        let f = self.stream_fns()?;
        let (s, _held) = self.copy_stream().ok_or(Error::Runtime {
            call: "StreamCreate",
            code: -1,
        })?;
        // SAFETY: the caller's device memory; s is this thread's stream of the current context.
        unsafe {
            self.check("MemsetD32Async", (f.memset32_async)(dptr, value, n, s))?;
            self.check("StreamSynchronize", (f.synchronize)(s))
        }
    }
}
