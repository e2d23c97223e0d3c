//! Asynchronous requests and cuFile-style batches, run on a small pool of
//! worker threads (each with its own io_uring).

use crate::buffer::Buffer;
use crate::engine::{do_io, do_vectored, Op, Segment, FGDS_BATCH_IOV_MAX};
use crate::error::{Error, Result};
use crate::file::FileHandle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

fn pool() -> Result<&'static Mutex<Sender<Job>>> {
    static POOL: OnceLock<std::result::Result<Mutex<Sender<Job>>, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let n = std::thread::available_parallelism()
            .map_or(4, |n| n.get())
            .clamp(4, 16);
        for i in 0..n {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("fgds-io-{i}"))
                .spawn(move || loop {
                    let job = {
                        let g = rx.lock().unwrap_or_else(|p| p.into_inner());
                        g.recv()
                    };
                    match job {
                        Ok(j) => j(),
                        Err(_) => return,
                    }
                })
                .map_err(|e| e.to_string())?;
        }
        Ok(Mutex::new(tx))
    })
    .as_ref()
    .map_err(|e| Error::InvalidArgument(format!("cannot start I/O threads: {e}")))
}

/// Starts the I/O threads if they are not running.
pub(crate) fn start_pool() -> Result<()> {
    pool().map(|_| ())
}

/// Hands `job` to an I/O thread; gives it back when there is none.
pub(crate) fn spawn_job(job: Job) -> std::result::Result<(), Job> {
    let Ok(tx) = pool() else {
        return Err(job);
    };
    tx.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .map_err(|e| e.0)
}

fn spawn(job: Job) -> Result<()> {
    let tx = pool()?;
    tx.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .map_err(|_| Error::InvalidArgument("I/O threads are gone".into()))
}

/// A segment that owns a reference to its buffer (for async/batch use).
#[derive(Debug, Clone)]
pub struct OwnedSegment {
    /// The buffer.
    pub buffer: Arc<Buffer>,
    /// Offset in the buffer.
    pub offset: usize,
    /// Bytes.
    pub size: usize,
}

/// What one request moves.
#[derive(Debug, Clone)]
pub enum IoTarget {
    /// `size` bytes at `buf_off` of `buffer`.
    Plain {
        /// The buffer.
        buffer: Arc<Buffer>,
        /// Offset in it.
        buf_off: usize,
        /// Bytes.
        size: usize,
    },
    /// Segments (at most [`FGDS_BATCH_IOV_MAX`]).
    Vectored(Vec<OwnedSegment>),
}

/// One request of a batch.
#[derive(Debug, Clone)]
pub struct IoParams {
    /// Returned in the [`Event`].
    pub cookie: u64,
    /// The file.
    pub file: Arc<FileHandle>,
    /// Read or write.
    pub op: Op,
    /// Offset in the file.
    pub file_off: u64,
    /// The memory.
    pub target: IoTarget,
}

fn execute(p: &IoParams, cancel: &AtomicBool) -> Result<usize> {
    if cancel.load(Ordering::Acquire) {
        return Err(Error::Canceled);
    }
    match &p.target {
        IoTarget::Plain {
            buffer,
            buf_off,
            size,
        } => do_io(
            &p.file,
            p.op,
            buffer,
            *buf_off,
            *size,
            p.file_off,
            Some(cancel),
        ),
        IoTarget::Vectored(segs) => {
            let s: Vec<Segment<'_>> = segs
                .iter()
                .map(|s| Segment {
                    buffer: &s.buffer,
                    offset: s.offset,
                    size: s.size,
                })
                .collect();
            do_vectored(
                &p.file,
                p.op,
                &s,
                p.file_off,
                FGDS_BATCH_IOV_MAX,
                Some(cancel),
            )
        }
    }
}

struct Slot {
    done: Mutex<Option<Result<usize>>>,
    cv: Condvar,
    cancel: AtomicBool,
}

/// An asynchronous read or write ([`FileHandle::read_async`]).
pub struct IoHandle {
    slot: Arc<Slot>,
    taken: bool,
}

impl std::fmt::Debug for IoHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoHandle").finish_non_exhaustive()
    }
}

impl IoHandle {
    fn start(p: IoParams) -> Result<IoHandle> {
        let slot = Arc::new(Slot {
            done: Mutex::new(None),
            cv: Condvar::new(),
            cancel: AtomicBool::new(false),
        });
        let s2 = slot.clone();
        spawn(Box::new(move || {
            let r = execute(&p, &s2.cancel);
            *s2.done.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            s2.cv.notify_all();
        }))?;
        Ok(IoHandle { slot, taken: false })
    }

    /// `None` while in flight, then the result (once).
    pub fn poll(&mut self) -> Option<Result<usize>> {
        if self.taken {
            return Some(Err(Error::InvalidArgument("result already taken".into())));
        }
        let r = self
            .slot
            .done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if r.is_some() {
            self.taken = true;
        }
        r
    }

    /// Blocks until done.
    pub fn wait(mut self) -> Result<usize> {
        self.wait_inner(None)
    }

    /// Blocks until done or `timeout` ([`Error::Timeout`]; the request stays in flight).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<usize> {
        self.wait_inner(Some(timeout))
    }

    fn wait_inner(&mut self, timeout: Option<Duration>) -> Result<usize> {
        if self.taken {
            return Err(Error::InvalidArgument("result already taken".into()));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut g = self.slot.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = g.take() {
                self.taken = true;
                return r;
            }
            match deadline {
                None => g = self.slot.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Timeout);
                    }
                    g = self
                        .slot
                        .cv
                        .wait_timeout(g, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    /// Asks the request to stop; it completes with [`Error::Canceled`]
    /// unless it already finished.
    pub fn cancel(&self) {
        self.slot.cancel.store(true, Ordering::Release);
    }
}

impl Drop for IoHandle {
    fn drop(&mut self) {
        // The memory is kept alive by the Arc<Buffer> the job holds; wait so
        // no I/O outlives its handle.
        if !self.taken {
            let _ = self.wait_inner(None);
        }
    }
}

impl FileHandle {
    /// Starts an asynchronous read.
    pub fn read_async(
        self: &Arc<Self>,
        buffer: Arc<Buffer>,
        buf_off: usize,
        size: usize,
        file_off: u64,
    ) -> Result<IoHandle> {
        self.start_async(Op::Read, buffer, buf_off, size, file_off)
    }

    /// Starts an asynchronous write.
    pub fn write_async(
        self: &Arc<Self>,
        buffer: Arc<Buffer>,
        buf_off: usize,
        size: usize,
        file_off: u64,
    ) -> Result<IoHandle> {
        self.start_async(Op::Write, buffer, buf_off, size, file_off)
    }

    fn start_async(
        self: &Arc<Self>,
        op: Op,
        buffer: Arc<Buffer>,
        buf_off: usize,
        size: usize,
        file_off: u64,
    ) -> Result<IoHandle> {
        buffer.check_range("buffer range", buf_off as u64, size as u64)?;
        IoHandle::start(IoParams {
            cookie: 0,
            file: self.clone(),
            op,
            file_off,
            target: IoTarget::Plain {
                buffer,
                buf_off,
                size,
            },
        })
    }
}

/// State of a batch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done; `result` is the byte count.
    Complete,
    /// Failed; `result` is a negative errno-style code.
    Failed,
    /// Canceled before it finished.
    Canceled,
    /// Still in flight (from [`Batch::poll`]).
    Pending,
    /// Still in flight when [`Batch::wait`] timed out.
    Timeout,
}

/// One reaped (or still pending) request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The request's cookie.
    pub cookie: u64,
    /// Its state.
    pub status: Status,
    /// Bytes (Complete) or negative errno (Failed/Canceled), 0 otherwise.
    pub result: i64,
}

struct Entry {
    cookie: u64,
    seq: u64,
    result: Option<Result<usize>>,
    cancel: Arc<AtomicBool>,
}

struct Shared {
    entries: Mutex<Vec<Entry>>,
    cv: Condvar,
}

/// A cuFile-style batch: up to `capacity` requests in flight, reaped with
/// [`Batch::poll`]/[`Batch::wait`]. Dropping it cancels what has not started
/// and waits for the rest.
pub struct Batch {
    capacity: usize,
    shared: Arc<Shared>,
    seq: u64,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Batch {
    /// Most requests one batch may hold.
    pub const MAX_CAPACITY: usize = 4096;

    /// Creates a batch.
    pub fn new(capacity: usize) -> Result<Batch> {
        if capacity == 0 || capacity > Self::MAX_CAPACITY {
            return Err(Error::InvalidArgument(format!(
                "batch capacity {capacity} must be 1..={}",
                Self::MAX_CAPACITY
            )));
        }
        Ok(Batch {
            capacity,
            shared: Arc::new(Shared {
                entries: Mutex::new(Vec::new()),
                cv: Condvar::new(),
            }),
            seq: 0,
        })
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Requests submitted and not reaped yet.
    pub fn in_flight(&self) -> usize {
        self.shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Submits requests. All or nothing: an invalid request (index named in
    /// [`Error::Segment`]) or no room ([`Error::BatchFull`]) submits none.
    pub fn submit(&mut self, params: &[IoParams]) -> Result<()> {
        for (i, p) in params.iter().enumerate() {
            match &p.target {
                IoTarget::Plain {
                    buffer,
                    buf_off,
                    size,
                } => buffer
                    .check_range("buffer range", *buf_off as u64, *size as u64)
                    .map_err(|e| Error::segment(i, e))?,
                IoTarget::Vectored(s) => {
                    if s.len() > FGDS_BATCH_IOV_MAX {
                        return Err(Error::segment(
                            i,
                            Error::TooManySegments {
                                count: s.len(),
                                max: FGDS_BATCH_IOV_MAX,
                            },
                        ));
                    }
                }
            }
        }
        let mut g = self
            .shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if g.len() + params.len() > self.capacity {
            return Err(Error::BatchFull {
                capacity: self.capacity,
                in_flight: g.len(),
                requested: params.len(),
            });
        }
        for p in params {
            self.seq += 1;
            let seq = self.seq;
            let cancel = Arc::new(AtomicBool::new(false));
            g.push(Entry {
                cookie: p.cookie,
                seq,
                result: None,
                cancel: cancel.clone(),
            });
            let shared = self.shared.clone();
            let p = p.clone();
            let job: Job = Box::new(move || {
                let r = execute(&p, &cancel);
                let mut g = shared.entries.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(e) = g.iter_mut().find(|e| e.seq == seq) {
                    e.result = Some(r);
                }
                shared.cv.notify_all();
            });
            if let Err(e) = spawn(job) {
                g.retain(|e| e.seq != seq);
                return Err(e);
            }
        }
        Ok(())
    }

    fn event(e: &Entry, pending: Status) -> Event {
        match &e.result {
            None => Event {
                cookie: e.cookie,
                status: pending,
                result: 0,
            },
            Some(Ok(n)) => Event {
                cookie: e.cookie,
                status: Status::Complete,
                result: *n as i64,
            },
            Some(Err(Error::Canceled)) => Event {
                cookie: e.cookie,
                status: Status::Canceled,
                result: -i64::from(libc::ECANCELED),
            },
            Some(Err(err)) => Event {
                cookie: e.cookie,
                status: Status::Failed,
                result: -i64::from(err.errno()),
            },
        }
    }

    /// Without blocking: reaps finished requests and reports the others as
    /// [`Status::Pending`] (they stay in the batch).
    pub fn poll(&mut self) -> Vec<Event> {
        let mut g = self
            .shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let ev = g.iter().map(|e| Self::event(e, Status::Pending)).collect();
        g.retain(|e| e.result.is_none());
        ev
    }

    /// Blocks until at least `min_nr` requests finished (all in flight if
    /// fewer) or `timeout` passed; reaps the finished ones. On timeout the
    /// unfinished ones are also listed with [`Status::Timeout`] and stay in
    /// the batch.
    pub fn wait(&mut self, min_nr: usize, timeout: Option<Duration>) -> Vec<Event> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut g = self
            .shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut timed_out = false;
        loop {
            let done = g.iter().filter(|e| e.result.is_some()).count();
            if done >= min_nr.min(g.len()) {
                break;
            }
            match deadline {
                None => g = self.shared.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        timed_out = true;
                        break;
                    }
                    g = self
                        .shared
                        .cv
                        .wait_timeout(g, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
        let ev = g
            .iter()
            .filter(|e| timed_out || e.result.is_some())
            .map(|e| Self::event(e, Status::Timeout))
            .collect();
        g.retain(|e| e.result.is_none());
        ev
    }

    /// Cancels every request in flight: those not started complete as
    /// [`Status::Canceled`], running ones stop between chunks. Returns how
    /// many were still unfinished.
    pub fn cancel(&mut self) -> usize {
        let g = self
            .shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        for e in g.iter().filter(|e| e.result.is_none()) {
            e.cancel.store(true, Ordering::Release);
            n += 1;
        }
        n
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.cancel();
        let mut g = self
            .shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        while g.iter().any(|e| e.result.is_none()) {
            g = self.shared.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Batch {
    /// Puts reaped events back (used by the C ABI when the caller's event
    /// array is full).
    pub(crate) fn requeue(&mut self, events: Vec<Event>) {
        let mut g = self
            .shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for e in events {
            self.seq += 1;
            let result = match e.status {
                Status::Complete => Ok(e.result as usize),
                Status::Canceled => Err(Error::Canceled),
                _ => Err(Error::os("batch request", (-e.result) as i32)),
            };
            g.push(Entry {
                cookie: e.cookie,
                seq: self.seq,
                result: Some(result),
                cancel: Arc::new(AtomicBool::new(false)),
            });
        }
    }
}
