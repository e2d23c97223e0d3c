//! CUDA streams for stream-ordered I/O: host functions and waits on a
//! word of device memory enqueued on the caller's stream, streams made
//! and waited for, asynchronous memset and device-to-host copies.

use super::runtime::{unavailable, HostFn, Runtime, StreamFns};
use crate::error::Result;
use std::ffi::{c_uint, c_void};

/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the legacy default stream.
pub const STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_STREAM_WAIT_VALUE_EQ`.
const WAIT_VALUE_EQ: c_uint = 1;

impl Runtime {
    pub(super) fn stream_fns(&self) -> Result<&StreamFns> {
        self.stream
            .as_ref()
            .ok_or_else(|| unavailable(self.kind, "no stream entry points (CUDA 11.7 or later)"))
    }

    /// Enqueues `f(user)` on `stream`: it runs when the stream reaches it, and the stream goes on
    /// when it returns. `f` must not call the runtime.
    ///
    /// # Safety
    /// `stream` is a stream of the current context (null: the default stream); `user` stays
    /// valid for `f`.
    pub unsafe fn launch_host_func(
        &self,
        stream: *mut c_void,
        f: HostFn,
        user: *mut c_void,
    ) -> Result<()> {
        let s = self.stream_fns()?;
        self.check("LaunchHostFunc", (s.launch_host_func)(stream, f, user))
    }

    /// Enqueues on `stream` a wait until the 32-bit word at `dptr` equals `value`.
    ///
    /// # Safety
    /// `stream` as for [`Runtime::launch_host_func`]; `dptr` is device-visible memory that
    /// stays valid until the stream passed the wait.
    pub unsafe fn wait_value32(&self, stream: *mut c_void, dptr: u64, value: u32) -> Result<()> {
        let s = self.stream_fns()?;
        self.check(
            "StreamWaitValue32",
            (s.wait_value32)(stream, dptr, value, WAIT_VALUE_EQ),
        )
    }

    /// Creates a stream on the current context (`flags`: e.g. [`STREAM_NON_BLOCKING`]).
    pub fn stream_create(&self, flags: c_uint) -> Result<*mut c_void> {
        let s = self.stream_fns()?;
        let mut st: *mut c_void = std::ptr::null_mut();
        // SAFETY: st is a valid out pointer.
        self.check("StreamCreate", unsafe { (s.create)(&mut st, flags) })?;
        Ok(st)
    }

    /// Waits until `stream` ran everything queued on it.
    ///
    /// # Safety
    /// `stream` is a stream of the current context (null: the default stream).
    pub unsafe fn stream_synchronize(&self, stream: *mut c_void) -> Result<()> {
        let s = self.stream_fns()?;
        self.check("StreamSynchronize", (s.synchronize)(stream))
    }

    /// Destroys a stream from [`Runtime::stream_create`].
    ///
    /// # Safety
    /// `stream` came from [`Runtime::stream_create`] and is not used afterwards.
    pub unsafe fn stream_destroy(&self, stream: *mut c_void) -> Result<()> {
        let s = self.stream_fns()?;
        self.check("StreamDestroy", (s.destroy)(stream))
    }

    /// Enqueues on `stream` a fill of `len` bytes at `dst` with `value`.
    ///
    /// # Safety
    /// `dst..dst+len` is device memory; `stream` as for [`Runtime::stream_synchronize`].
    pub unsafe fn memset_async(
        &self,
        dst: u64,
        value: u8,
        len: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        let s = self.stream_fns()?;
        self.check("MemsetD8Async", (s.memset_async)(dst, value, len, stream))
    }

    /// Enqueues on `stream` a copy of `len` bytes of device memory at `src` to `dst`.
    ///
    /// # Safety
    /// `dst..dst+len` is pinned host memory, writable until the stream passed the copy;
    /// `src..src+len` device memory; `stream` as for [`Runtime::stream_synchronize`].
    pub unsafe fn dtoh_async(
        &self,
        dst: *mut u8,
        src: u64,
        len: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        let s = self.stream_fns()?;
        self.check(
            "MemcpyDtoHAsync",
            (s.dtoh_async)(dst as *mut c_void, src, len, stream),
        )
    }
}
