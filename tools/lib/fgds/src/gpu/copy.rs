//! Copies between host and device memory (and device to device) on the
//! thread's own non-blocking copy stream per context, and the waits for
//! them (sleeping on an event where the driver has them).

use super::runtime::{unavailable, Runtime};
use super::stream::STREAM_NON_BLOCKING;
use crate::error::{Error, Result};
use std::ffi::{c_uint, c_void};

/// `CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING`: a wait for the event
/// sleeps rather than spins.
const EVENT_BLOCKING_NO_TIMING: c_uint = 0x1 | 0x2;

thread_local! {
    /// This thread's non-blocking copy streams, by context: `(context, stream)`.
    static COPY_STREAMS: std::cell::RefCell<Vec<(usize, usize)>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// This thread's blocking-sync events, by context: `(context, event)`.
    static COPY_EVENTS: std::cell::RefCell<Vec<(usize, usize)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Runtime {
    /// Host to device copy.
    ///
    /// # Safety
    /// `src..src+len` must be readable and `dst..dst+len` device memory.
    pub unsafe fn htod(&self, dst: u64, src: *const u8, len: usize) -> Result<()> {
        if let (Some(f), Some(s)) = (&self.stream, self.copy_stream()) {
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
    /// copy is made at once and `None` returned.
    ///
    /// # Safety
    /// `src..src+len` must be pinned host memory that stays readable until
    /// the stream was waited for, and `dst..dst+len` device memory.
    pub unsafe fn htod_queue(&self, dst: u64, src: *const u8, len: usize) -> Result<Option<usize>> {
        if let (Some(f), Some(s)) = (&self.stream, self.copy_stream()) {
            self.check(
                "MemcpyHtoDAsync",
                (f.htod_async)(dst, src as *const c_void, len, s),
            )?;
            return Ok(Some(s as usize));
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
                let ev = COPY_EVENTS.with(|c| {
                    let mut c = c.borrow_mut();
                    if let Some(&(_, e)) = c.iter().find(|(x, _)| *x == ctx as usize) {
                        return Some(e);
                    }
                    let mut e: *mut c_void = std::ptr::null_mut();
                    // SAFETY: e is a valid out pointer; a context is current.
                    if unsafe { create(&mut e, EVENT_BLOCKING_NO_TIMING) } != 0 {
                        return None;
                    }
                    c.push((ctx as usize, e as usize));
                    Some(e as usize)
                });
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
        let (Some(copy), Some(s)) = (f.dtod_async, self.copy_stream()) else {
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
        if let (Some(f), Some(s)) = (&self.stream, self.copy_stream()) {
            self.check(
                "MemcpyDtoHAsync",
                (f.dtoh_async)(dst as *mut c_void, src, len, s),
            )?;
            return self.check("StreamSynchronize", (f.synchronize)(s));
        }
        self.check("MemcpyDtoH", (self.dtoh)(dst as *mut c_void, src, len))
    }

    /// This thread's non-blocking stream for the current context, made on first use.
    ///
    /// The bounce path copies on it rather than with the synchronous copies, which run on the
    /// legacy default stream and so wait for every blocking stream of the context: a stream
    /// held by stream-ordered I/O ([`crate::stream`]) would then wait for its own copies.
    fn copy_stream(&self) -> Option<*mut c_void> {
        let f = self.stream.as_ref()?;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: ctx is a valid out pointer.
        if unsafe { (f.ctx_get)(&mut ctx) } != 0 || ctx.is_null() {
            return None;
        }
        COPY_STREAMS.with(|c| {
            let mut c = c.borrow_mut();
            if let Some(&(_, s)) = c.iter().find(|(x, _)| *x == ctx as usize) {
                return Some(s as *mut c_void);
            }
            let mut s: *mut c_void = std::ptr::null_mut();
            // SAFETY: s is a valid out pointer; a context is current.
            if unsafe { (f.create)(&mut s, STREAM_NON_BLOCKING) } != 0 {
                return None;
            }
            c.push((ctx as usize, s as usize));
            Some(s)
        })
    }

    /// Sets the 32-bit word at `dptr` to `value` and waits for it, on this thread's
    /// non-blocking stream (never behind other streams' work).
    pub fn fill32_sync(&self, dptr: u64, value: u32) -> Result<()> {
        self.fill32_sync_n(dptr, value, 1)
    }

    /// Sets `n` 32-bit words from `dptr` to `value`, as [`Runtime::fill32_sync`].
    pub fn fill32_sync_n(&self, dptr: u64, value: u32, n: usize) -> Result<()> {
        let f = self.stream_fns()?;
        let s = self.copy_stream().ok_or(Error::Runtime {
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
