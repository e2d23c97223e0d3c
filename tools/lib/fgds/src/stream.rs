//! Stream-ordered I/O: cuFile's `cuFileReadAsync`/`cuFileWriteAsync` model on a CUDA stream.
//!
//! [`FileHandle::read_on_stream`] enqueues two things on the caller's stream:
//!
//! 1. a host function (`cuLaunchHostFunc`) that hands the request to the I/O threads when the
//!    stream reaches it: the arguments behind the [`LateArgs`] pointers are read then, not at
//!    enqueue time (late binding);
//! 2. a wait (`cuStreamWaitValue32`) on a word of device memory (a *gate*) that the I/O thread
//!    opens, by writing the value the stream waits for, once the request is done and its byte
//!    count (or negative error code) is stored.
//!
//! Work queued on the stream after the request therefore starts after its I/O, and the calling
//! thread does not wait for its I/O. The I/O itself is the library's ordinary path: peer to peer
//! through fgds, or the bounce path, whose copies run on the I/O thread's own non-blocking stream
//! so that they do not wait for the stream held at the gate. A third host function gives the gate
//! back.
//!
//! # Requests in flight on one stream
//!
//! A stream holds at most [`MAX_QUEUED_PER_STREAM`] of these requests that it has not passed
//! yet; the enqueuing thread waits for the oldest to pass before it enqueues more (in the
//! library, holding nothing that the requests need). CUDA bounds the waits pending on a stream:
//! on the H200 machine (driver 580.159) the 57th `cuStreamWaitValue32` behind closed gates
//! blocks in the driver until the stream passes one. On a created stream that only makes the
//! caller wait. On the legacy default stream (the NULL stream) it hangs: while a thread is
//! blocked there, other threads block as well in a `cuMemsetD32Async` or `cuMemcpyHtoDAsync`
//! on a non-blocking stream with its `cuStreamSynchronize`, in `cuStreamCreate`,
//! `cuEventCreate` and `cuMemHostAlloc`: the I/O thread's copies and the gate's write, which
//! would let the stream pass the request at its head. Kept well below the driver's bound,
//! the library's own requests never make an enqueue block in the driver.

use crate::buffer::Buffer;
use crate::engine::{do_io, Op};
use crate::error::{Error, Result};
use crate::file::FileHandle;
use crate::gpu::Runtime;
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// Gates allocated at a time.
const GATES_PER_BLOCK: usize = 1024;

/// Requests one stream may hold that it has not passed yet (see the module documentation): each
/// has one `cuStreamWaitValue32`, of which the driver let 56 wait on one stream before the next
/// call blocked (H200, driver 580.159); the margin is for the caller's own waits.
pub const MAX_QUEUED_PER_STREAM: usize = 16;

/// Requests enqueued and not yet passed, by stream, and a wait for one to pass.
struct Queued<K> {
    counts: Mutex<Vec<(K, usize)>>,
    passed: Condvar,
    limit: usize,
}

impl<K: PartialEq + Copy> Queued<K> {
    const fn new(limit: usize) -> Self {
        Queued {
            counts: Mutex::new(Vec::new()),
            passed: Condvar::new(),
            limit,
        }
    }

    /// Counts one more request on `key`, first waiting while it holds `limit`. The lock is held
    /// only here and in [`Queued::release`], never across a runtime call: the host function that
    /// releases never waits for a thread blocked in the driver.
    fn acquire(&self, key: K) {
        let mut g = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match g.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) if *n >= self.limit => {}
                Some((_, n)) => {
                    *n += 1;
                    return;
                }
                None => {
                    g.push((key, 1));
                    return;
                }
            }
            g = self.passed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The stream passed a request of `key` (or it was never enqueued).
    fn release(&self, key: K) {
        let mut g = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = g.iter().position(|(k, _)| *k == key) {
            g[i].1 -= 1;
            if g[i].1 == 0 {
                g.swap_remove(i);
            }
        }
        drop(g);
        self.passed.notify_all();
    }
}

/// A stream: its context and handle (the legacy stream's two names, NULL and
/// `CU_STREAM_LEGACY`, as one).
type StreamKey = (usize, usize);

fn stream_key(ctx: usize, stream: *mut c_void) -> StreamKey {
    /// `CU_STREAM_LEGACY`.
    const LEGACY: usize = 1;
    match stream as usize {
        LEGACY => (ctx, 0),
        s => (ctx, s),
    }
}

fn queued() -> &'static Queued<StreamKey> {
    static QUEUED: Queued<StreamKey> = Queued::new(MAX_QUEUED_PER_STREAM);
    &QUEUED
}

/// The arguments of a stream-ordered request, read when the stream reaches it.
///
/// `size`, `file_off` and `buf_off` are read then; `bytes_done` gets the bytes moved (short at
/// the end of the file) or a negative errno-style code.
#[derive(Debug, Clone, Copy)]
pub struct LateArgs {
    /// Bytes to move.
    pub size: *const usize,
    /// Offset in the file (negative: `EINVAL`).
    pub file_off: *const i64,
    /// Offset in the buffer, from the base given at enqueue time (negative: `EINVAL`).
    pub buf_off: *const i64,
    /// The result.
    pub bytes_done: *mut isize,
}

// SAFETY: the caller of read_on_stream/write_on_stream keeps the pointees valid and untouched
// until the request completed; only the I/O thread that runs the request uses them.
unsafe impl Send for LateArgs {}

/// A word of device memory a stream waits on, until it holds `value`.
///
/// Each use waits for the next value (skipping 0), so a gate needs no reset: it is reused only
/// after its stream passed the previous wait.
#[derive(Clone, Copy)]
struct Gate {
    ctx: usize,
    dptr: u64,
    value: u32,
}

impl Gate {
    /// Lets the stream go on. A runtime call: never from a host function.
    fn open(&self, rt: &Runtime) -> Result<()> {
        // The result and the I/O's own writes are visible before the stream goes on: the
        // write below is a runtime call made after them, and waited for.
        let _cur = rt.enter_context(self.ctx)?;
        rt.fill32_sync(self.dptr, self.value)
    }
}

/// Free gates of every context; their memory is kept for the process's life.
fn gates() -> &'static Mutex<Vec<Gate>> {
    static GATES: OnceLock<Mutex<Vec<Gate>>> = OnceLock::new();
    GATES.get_or_init(|| Mutex::new(Vec::new()))
}

/// A free gate of the current context, with its next value.
fn take_gate(rt: &Runtime) -> Result<Gate> {
    let ctx = rt.current_context()?;
    let mut free = gates().lock().unwrap_or_else(|p| p.into_inner());
    if !free.iter().any(|g| g.ctx == ctx) {
        let block = rt.mem_alloc(GATES_PER_BLOCK * 4)?;
        if let Err(e) = rt.fill32_sync_n(block, 0, GATES_PER_BLOCK) {
            let _ = rt.mem_free(block);
            return Err(e);
        }
        free.extend((0..GATES_PER_BLOCK as u64).map(|i| Gate {
            ctx,
            dptr: block + 4 * i,
            value: 0,
        }));
    }
    let i = free
        .iter()
        .rposition(|g| g.ctx == ctx)
        .ok_or_else(|| Error::InvalidArgument("no stream gate left".into()))?;
    let mut gate = free.swap_remove(i);
    gate.value = gate.value.wrapping_add(1).max(1);
    Ok(gate)
}

/// Whether the enqueuing thread finished setting a request up.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    Pending,
    Armed,
    Abandoned,
}

fn give_back(gate: Gate) {
    gates().lock().unwrap_or_else(|p| p.into_inner()).push(gate);
}

/// A request handed from the stream's host function to an I/O thread.
struct Request {
    rt: Arc<Runtime>,
    file: Arc<FileHandle>,
    op: Op,
    buffer: Arc<Buffer>,
    base_off: usize,
    args: LateArgs,
    gate: Gate,
    setup: Arc<(Mutex<Setup>, Condvar)>,
    finished: bool,
    /// The arguments, when the library owns them ([`StreamRequest`]).
    _owned: Option<Arc<OwnedArgs>>,
    /// Told the outcome before the stream goes on.
    notify: Option<Notify>,
}

/// What a stream-ordered request did, for its [`Notify`].
#[derive(Debug, Clone, Copy)]
pub struct StreamDone {
    /// Read or write.
    pub op: Op,
    /// `*size` when the stream reached it.
    pub size: usize,
    /// `*file_off` then.
    pub file_off: i64,
    /// `*buf_off` then.
    pub buf_off: i64,
    /// Bytes moved, or the errno.
    pub result: std::result::Result<usize, i32>,
    /// From the stream reaching it to its end.
    pub took: std::time::Duration,
}

/// Called on the I/O thread with a stream-ordered request's outcome before
/// the stream goes on (libcufile's statistics). It must not call the GPU runtime on the
/// request's stream nor block.
pub type Notify = Box<dyn FnOnce(&StreamDone) + Send>;

impl Request {
    fn wait_setup(&self) -> Setup {
        let (m, cv) = &*self.setup;
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        while *g == Setup::Pending {
            g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        *g
    }

    /// Ends the request with `result` (bytes or a negative code) and lets the stream go on;
    /// when the enqueuing thread gave up on it, only frees its gate (no stream waits, and the
    /// caller may have freed the arguments).
    fn finish(&mut self, result: impl FnOnce(&Self) -> isize) -> Option<(Gate, Arc<Runtime>)> {
        self.finished = true;
        if self.wait_setup() == Setup::Abandoned {
            give_back(self.gate);
            return None;
        }
        let v = result(self);
        // An atomic store: a StreamRequest may be polled meanwhile.
        // SAFETY: LateArgs' contract: valid and aligned until the request completed, which is
        // now; nothing else writes it.
        unsafe { AtomicIsize::from_ptr(self.args.bytes_done).store(v, Ordering::Release) };
        Some((self.gate, self.rt.clone()))
    }

    fn run(mut self) {
        let t0 = std::time::Instant::now();
        let notify = self.notify.take();
        let open = self.finish(|r| match r.io_told(notify, t0) {
            Ok(n) => n as isize,
            Err(e) => {
                if let Some(o) = &r._owned {
                    *o.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                }
                -(e.errno() as isize)
            }
        });
        if let Some((gate, rt)) = open {
            // Nothing else can let the stream go on: retry a failing runtime for a while.
            let mut tries = 0;
            while gate.open(&rt).is_err() && tries < 100 {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }

    /// [`Request::io`], then `notify` told.
    fn io_told(&self, notify: Option<Notify>, t0: std::time::Instant) -> Result<usize> {
        let r = self.io();
        if let Some(n) = notify {
            // SAFETY: LateArgs' contract, as in io.
            let (size, file_off, buf_off) = unsafe {
                (
                    std::ptr::read_volatile(self.args.size),
                    std::ptr::read_volatile(self.args.file_off),
                    std::ptr::read_volatile(self.args.buf_off),
                )
            };
            n(&StreamDone {
                op: self.op,
                size,
                file_off,
                buf_off,
                result: r.as_ref().map(|n| *n).map_err(|e| e.errno()),
                took: t0.elapsed(),
            });
        }
        r
    }

    fn io(&self) -> Result<usize> {
        // SAFETY: LateArgs' contract: the stream reached the request, the values are set.
        let (size, file_off, buf_off) = unsafe {
            (
                std::ptr::read_volatile(self.args.size),
                std::ptr::read_volatile(self.args.file_off),
                std::ptr::read_volatile(self.args.buf_off),
            )
        };
        let file_off = u64::try_from(file_off)
            .map_err(|_| Error::InvalidArgument(format!("negative file offset {file_off}")))?;
        let buf_off = usize::try_from(buf_off)
            .map_err(|_| Error::InvalidArgument(format!("negative buffer offset {buf_off}")))?;
        let off = self
            .base_off
            .checked_add(buf_off)
            .ok_or(Error::OutOfBounds {
                what: "buffer",
                offset: buf_off as u64,
                size: size as u64,
                len: self.buffer.len() as u64,
            })?;
        do_io(&self.file, self.op, &self.buffer, off, size, file_off, None)
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if !self.finished {
            // Dropped unrun (no I/O thread could take it): fail it rather than hold the stream,
            // opening the gate from a thread of its own (this may be a host function).
            if let Some((gate, rt)) = self.finish(|_| -(libc::EAGAIN as isize)) {
                let _ = std::thread::Builder::new().spawn(move || gate.open(&rt));
            }
        }
    }
}

/// The host function: the stream reached the request.
///
/// # Safety
/// `user` is a `Box<Request>` leaked by [`enqueue`], passed once.
unsafe extern "C" fn reached(user: *mut c_void) {
    // SAFETY: As the contract says.
    let req = unsafe { Box::from_raw(user as *mut Request) };
    // No runtime call here (host functions must not make any): hand over to an I/O thread.
    // Should that fail, the dropped request fails itself and opens its gate.
    let _ = crate::pool::spawn_job(Box::new(move || req.run()));
}

/// What [`passed`] frees: the gate and the stream's place for another request.
struct Passed {
    gate: Gate,
    stream: StreamKey,
}

/// The host function after the wait: the stream passed the gate, which is free again, and has
/// room for another request.
///
/// # Safety
/// `user` is a `Box<Passed>` leaked by [`enqueue`], passed once.
unsafe extern "C" fn passed(user: *mut c_void) {
    // SAFETY: As the contract says.
    let p = unsafe { Box::from_raw(user as *mut Passed) };
    give_back(p.gate);
    queued().release(p.stream);
}

/// Enqueues `op` on `stream`.
///
/// # Safety
/// As [`FileHandle::read_on_stream`].
#[allow(clippy::too_many_arguments)]
unsafe fn enqueue(
    file: &Arc<FileHandle>,
    op: Op,
    buffer: Arc<Buffer>,
    base_off: usize,
    args: LateArgs,
    owned: Option<Arc<OwnedArgs>>,
    notify: Option<Notify>,
    stream: *mut c_void,
) -> Result<()> {
    if args.size.is_null()
        || args.file_off.is_null()
        || args.buf_off.is_null()
        || args.bytes_done.is_null()
    {
        return Err(Error::InvalidArgument(
            "stream-ordered I/O needs size, file offset, buffer offset and result pointers".into(),
        ));
    }
    if base_off > buffer.len() {
        return Err(Error::OutOfBounds {
            what: "buffer",
            offset: base_off as u64,
            size: 0,
            len: buffer.len() as u64,
        });
    }
    let rt = match buffer.gpu_runtime() {
        Some(rt) => rt,
        None => Runtime::cuda()?,
    };
    if rt.kind() != crate::gpu::Kind::Cuda {
        return Err(Error::RuntimeUnavailable {
            runtime: "HIP",
            reason: "stream-ordered I/O is implemented for CUDA streams only".into(),
        });
    }
    // The buffer's context is current while the request is enqueued, the caller's again after.
    let mem = buffer.device_memory().cloned();
    let _cur = mem.as_ref().map(|m| rt.make_current(m)).transpose()?;
    // The I/O threads run before anything is enqueued: `reached` only hands over.
    crate::pool::start_pool()?;
    // Room on the stream first (this may wait for earlier requests to pass), so that nothing
    // below blocks in the driver for a stream full of our requests.
    let key = stream_key(rt.current_context()?, stream);
    queued().acquire(key);
    // SAFETY: As this function's contract.
    let r = unsafe {
        enqueue_on(
            &rt, file, op, buffer, base_off, args, owned, notify, stream, key,
        )
    };
    if r.is_err() {
        queued().release(key);
    }
    r
}

/// [`enqueue`] once the stream has room for the request; an error: `passed` was not enqueued.
///
/// # Safety
/// As [`FileHandle::read_on_stream`].
#[allow(clippy::too_many_arguments)]
unsafe fn enqueue_on(
    rt: &Arc<Runtime>,
    file: &Arc<FileHandle>,
    op: Op,
    buffer: Arc<Buffer>,
    base_off: usize,
    args: LateArgs,
    owned: Option<Arc<OwnedArgs>>,
    notify: Option<Notify>,
    stream: *mut c_void,
    key: StreamKey,
) -> Result<()> {
    let gate = take_gate(rt)?;
    let setup = Arc::new((Mutex::new(Setup::Pending), Condvar::new()));
    let req = Box::into_raw(Box::new(Request {
        rt: rt.clone(),
        file: file.clone(),
        op,
        buffer,
        base_off,
        args,
        gate,
        setup: setup.clone(),
        finished: false,
        _owned: owned,
        notify,
    }));
    // SAFETY: the caller's stream; `req` is passed once, to `reached`.
    if let Err(e) = unsafe { rt.launch_host_func(stream, reached, req as *mut c_void) } {
        // Not enqueued: ours again; dropped as abandoned, it frees its gate.
        *setup.0.lock().unwrap_or_else(|p| p.into_inner()) = Setup::Abandoned;
        // SAFETY: `req` came from Box::into_raw above and was not handed over.
        drop(unsafe { Box::from_raw(req) });
        return Err(e);
    }
    let arm = |state| {
        let (m, cv) = &*setup;
        *m.lock().unwrap_or_else(|p| p.into_inner()) = state;
        cv.notify_all();
    };
    // SAFETY: the gate is device memory of this context, kept for the process's life.
    if let Err(e) = unsafe { rt.wait_value32(stream, gate.dptr, gate.value) } {
        // The host function will run; tell its request that nothing waits for it.
        arm(Setup::Abandoned);
        return Err(e);
    }
    let back = Box::into_raw(Box::new(Passed { gate, stream: key }));
    // SAFETY: `back` is passed once, to `passed`.
    if unsafe { rt.launch_host_func(stream, passed, back as *mut c_void) }.is_err() {
        // The gate stays taken (a word of device memory lost), the request is sound; its place
        // on the stream is given back now.
        // SAFETY: `back` was not handed over.
        drop(unsafe { Box::from_raw(back) });
        queued().release(key);
    }
    arm(Setup::Armed);
    Ok(())
}

impl FileHandle {
    /// Enqueues a read on a CUDA stream (`cuFileReadAsync`'s model): when `stream` reaches it,
    /// `*args.size` bytes at `*args.file_off` are read into `buffer` at
    /// `base_off + *args.buf_off`, and work queued on `stream` after it waits for the read,
    /// whose result goes to `*args.bytes_done`. Returns once enqueued, without waiting for the
    /// I/O, except that with [`MAX_QUEUED_PER_STREAM`] requests of this library on `stream`
    /// not passed yet it first waits for the oldest to pass (as CUDA blocks an enqueue on a full
    /// stream; see the [module documentation](self)). An error means that nothing was enqueued.
    ///
    /// # Safety
    /// `stream` is a CUDA stream (`CUstream`) of the context current on the calling thread, or
    /// of the buffer's context, or null for that context's default stream. The pointers in
    /// `args` stay valid, and the values behind them unchanged once the stream reached the
    /// request, until `*args.bytes_done` is written (synchronise the stream).
    pub unsafe fn read_on_stream(
        self: &Arc<Self>,
        buffer: Arc<Buffer>,
        base_off: usize,
        args: LateArgs,
        stream: *mut c_void,
    ) -> Result<()> {
        // SAFETY: As this function's contract.
        unsafe { enqueue(self, Op::Read, buffer, base_off, args, None, None, stream) }
    }

    /// Enqueues a write on a CUDA stream: as [`FileHandle::read_on_stream`], from `buffer` at
    /// `base_off + *args.buf_off` to the file at `*args.file_off`.
    ///
    /// # Safety
    /// As [`FileHandle::read_on_stream`].
    pub unsafe fn write_on_stream(
        self: &Arc<Self>,
        buffer: Arc<Buffer>,
        base_off: usize,
        args: LateArgs,
        stream: *mut c_void,
    ) -> Result<()> {
        // SAFETY: As this function's contract.
        unsafe { enqueue(self, Op::Write, buffer, base_off, args, None, None, stream) }
    }

    /// [`FileHandle::read_on_stream`] or [`FileHandle::write_on_stream`] (`op`), with
    /// `notify` told the outcome on the I/O thread before the stream goes on.
    ///
    /// # Safety
    /// As [`FileHandle::read_on_stream`].
    pub unsafe fn on_stream_notify(
        self: &Arc<Self>,
        op: Op,
        buffer: Arc<Buffer>,
        base_off: usize,
        args: LateArgs,
        stream: *mut c_void,
        notify: Notify,
    ) -> Result<()> {
        // SAFETY: As this function's contract.
        unsafe { enqueue(self, op, buffer, base_off, args, None, Some(notify), stream) }
    }

    /// Enqueues a read of `size` bytes at `file_off` into `buffer` at `buf_off` on a CUDA
    /// stream: as [`FileHandle::read_on_stream`] with the arguments fixed now and kept by the
    /// library; the [`StreamRequest`] gives the result.
    ///
    /// # Safety
    /// `stream` as for [`FileHandle::read_on_stream`].
    pub unsafe fn read_on_stream_with(
        self: &Arc<Self>,
        buffer: Arc<Buffer>,
        buf_off: usize,
        size: usize,
        file_off: u64,
        stream: *mut c_void,
    ) -> Result<StreamRequest> {
        // SAFETY: As this function's contract.
        unsafe { StreamRequest::start(self, Op::Read, buffer, buf_off, size, file_off, stream) }
    }

    /// Enqueues a write on a CUDA stream, as [`FileHandle::read_on_stream_with`].
    ///
    /// # Safety
    /// `stream` as for [`FileHandle::read_on_stream`].
    pub unsafe fn write_on_stream_with(
        self: &Arc<Self>,
        buffer: Arc<Buffer>,
        buf_off: usize,
        size: usize,
        file_off: u64,
        stream: *mut c_void,
    ) -> Result<StreamRequest> {
        // SAFETY: As this function's contract.
        unsafe { StreamRequest::start(self, Op::Write, buffer, buf_off, size, file_off, stream) }
    }
}

/// Arguments the library owns, for as long as the request or a [`StreamRequest`] needs them.
struct OwnedArgs {
    size: UnsafeCell<usize>,
    file_off: UnsafeCell<i64>,
    buf_off: UnsafeCell<i64>,
    done: AtomicIsize,
    /// What went wrong, set before `done`.
    error: Mutex<Option<String>>,
}

// SAFETY: the cells are written once, before the request is enqueued, and only read after;
// `done` is atomic.
unsafe impl Send for OwnedArgs {}
// SAFETY: As above.
unsafe impl Sync for OwnedArgs {}

/// Not yet run: no result is negative beyond `-4095`.
const PENDING: isize = isize::MIN;

/// A stream-ordered request with library-owned arguments
/// ([`FileHandle::read_on_stream_with`]).
#[derive(Clone)]
pub struct StreamRequest(Arc<OwnedArgs>);

impl std::fmt::Debug for StreamRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRequest")
            .field("done", &self.0.done.load(Ordering::Relaxed))
            .finish()
    }
}

impl StreamRequest {
    /// # Safety
    /// As [`FileHandle::read_on_stream`], for `stream`.
    unsafe fn start(
        file: &Arc<FileHandle>,
        op: Op,
        buffer: Arc<Buffer>,
        buf_off: usize,
        size: usize,
        file_off: u64,
        stream: *mut c_void,
    ) -> Result<StreamRequest> {
        // The arguments are known now: refuse a bad range before enqueueing anything.
        buffer.check_range("buffer", buf_off as u64, size as u64)?;
        let file_off = i64::try_from(file_off)
            .map_err(|_| Error::InvalidArgument(format!("file offset {file_off} too large")))?;
        let buf_off = i64::try_from(buf_off)
            .map_err(|_| Error::InvalidArgument(format!("buffer offset {buf_off} too large")))?;
        let owned = Arc::new(OwnedArgs {
            size: UnsafeCell::new(size),
            file_off: UnsafeCell::new(file_off),
            buf_off: UnsafeCell::new(buf_off),
            done: AtomicIsize::new(PENDING),
            error: Mutex::new(None),
        });
        let args = LateArgs {
            size: owned.size.get(),
            file_off: owned.file_off.get(),
            buf_off: owned.buf_off.get(),
            bytes_done: owned.done.as_ptr(),
        };
        // SAFETY: the request keeps `owned`, hence the arguments, alive until it completed;
        // `stream` as the caller promised.
        unsafe { enqueue(file, op, buffer, 0, args, Some(owned.clone()), None, stream) }?;
        Ok(StreamRequest(owned))
    }

    /// `None` until the stream ran the request, then its result (bytes, short at the end of
    /// the file).
    pub fn result(&self) -> Option<Result<usize>> {
        match self.0.done.load(Ordering::Acquire) {
            PENDING => None,
            n if n >= 0 => Some(Ok(n as usize)),
            e => {
                let what = self
                    .0
                    .error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                Some(Err(Error::os(
                    what.unwrap_or_else(|| "stream-ordered request".into()),
                    (-e) as i32,
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[test]
    fn a_full_stream_waits_for_one_to_pass() {
        // What the legacy stream needs: the enqueuer waits in the library, not in the driver,
        // once a stream holds the limit, and the release (the `passed` host function) never
        // waits for it.
        let q = Arc::new(Queued::<StreamKey>::new(4));
        for _ in 0..4 {
            q.acquire((1, 0));
        }
        // Another stream, and the other name of the legacy stream's context, are not held up.
        q.acquire((1, 7));
        q.acquire((2, 0));
        assert_eq!(stream_key(1, 1 as *mut c_void), (1, 0));
        let enqueued = Arc::new(AtomicUsize::new(0));
        let t = {
            let (q, enqueued) = (q.clone(), enqueued.clone());
            std::thread::spawn(move || {
                for _ in 0..3 {
                    q.acquire(stream_key(1, std::ptr::null_mut()));
                    enqueued.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            enqueued.load(Ordering::SeqCst),
            0,
            "a fifth request was let in"
        );
        for i in 1..=3 {
            q.release((1, 0));
            while enqueued.load(Ordering::SeqCst) < i {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        t.join().unwrap();
        assert_eq!(enqueued.load(Ordering::SeqCst), 3);
        for _ in 0..4 {
            q.release((1, 0));
        }
        q.release((1, 7));
        q.release((2, 0));
        assert!(q.counts.lock().unwrap().is_empty());
    }
}
