//! Asynchronous requests and cuFile-style batches.
//!
//! Asynchronous requests run on a small pool of worker threads (each with
//! its own io_uring). A batch has a ring of its own besides: a request that
//! is one O_DIRECT transfer (a chunk or less, aligned, into memory the
//! device reaches) goes on it from the submitting thread, and whoever waits
//! reaps it, the way fio's io_uring engine works: no thread is woken per
//! request, and one system call submits two (`SUBMIT_GROUP`) or waits for
//! many. Anything
//! else (large, unaligned, vectored, through a bounce buffer) runs on the
//! worker threads through the engine, as does a ring request that did not
//! move all its bytes (short at the end of the file, refused by the device,
//! ...), which the engine then retries, falls back or reports.

use crate::buffer::Buffer;
use crate::config::FGDS_BATCH_IOV_MAX;
use crate::engine::{count_direct, do_io, do_vectored, single_direct, without_split, Op, Segment};
use crate::error::{Error, Result};
use crate::file::FileHandle;
use crate::pool::spawn;
use io_uring::{opcode, types, IoUring};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Runs batch request `seq` through the engine on a worker thread.
fn spawn_entry(shared: &Arc<Shared>, p: IoParams, seq: u64, cancel: Arc<AtomicBool>) -> Result<()> {
    let shared = shared.clone();
    spawn(Box::new(move || {
        // The batch keeps the I/O threads busy itself: its requests are
        // not split over them again.
        let r = without_split(|| execute(&p, &cancel));
        shared.finish(seq, r);
    }))
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
    /// The flag a worker thread running the request checks. A request on
    /// the batch's ring has none until it moves to a worker thread or
    /// [`Batch::cancel`] sets one.
    cancel: Option<Arc<AtomicBool>>,
}

impl Entry {
    /// The request's cancel flag, made (unset) on first use.
    fn cancel_flag(&mut self) -> Arc<AtomicBool> {
        self.cancel
            .get_or_insert_with(|| Arc::new(AtomicBool::new(false)))
            .clone()
    }
}

struct Shared {
    entries: Mutex<Vec<Entry>>,
    cv: Condvar,
    /// An eventfd the worker threads' jobs write when they finish, once the
    /// batch has a ring: the ring polls it while requests of both kinds are
    /// out, so one wait sees either.
    wake: OnceLock<OwnedFd>,
}

impl Shared {
    fn finish(&self, seq: u64, r: Result<usize>) {
        let mut g = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = entry(&mut g, seq) {
            e.result = Some(r);
        }
        drop(g);
        self.cv.notify_all();
        if let Some(fd) = self.wake.get() {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a live u64 to an eventfd this
            // batch owns; a full counter (EAGAIN) already means "wake up".
            unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }
}

/// The entry of request `seq`. Entries are pushed with rising seqs and only
/// ever removed, so they stay sorted: a binary search, not a scan per
/// completion (a batch holds up to 4096).
fn entry(entries: &mut [Entry], seq: u64) -> Option<&mut Entry> {
    let i = entries.binary_search_by_key(&seq, |e| e.seq).ok()?;
    entries.get_mut(i)
}

/// user_data of the eventfd poll and of cancel requests on a batch's ring
/// (never a request's: those are its seq, counted up from 1).
const POLL_TAG: u64 = u64::MAX;
const CANCEL_TAG: u64 = u64::MAX - 1;

/// Requests handed to the kernel per io_uring_enter while submitting. More
/// than two in one call make io_uring plug the block queue until the call
/// ends, so the device sees them as a burst, completes them as one and the
/// next round goes out as a burst again: 4 KiB random reads from a virtio
/// disk ran at 250 and 290 MiB/s at 8 and 32 in flight submitted in one
/// call, at 300-340 and 440-480 submitted two by two (a bare io_uring loop,
/// same file and host); fio's engine, one per call, at 285 and 385.
const SUBMIT_GROUP: usize = 2;

/// A batch's own io_uring (see the module documentation).
struct BatchRing {
    ring: IoUring,
    /// Requests on the ring, by seq. Their parameters hold the file and the
    /// buffer, so the memory the kernel transfers to stays alive until the
    /// request's completion has been reaped.
    flights: HashMap<u64, (IoParams, usize)>,
    /// The eventfd poll is on the ring.
    poll_armed: bool,
}

impl BatchRing {
    fn new(capacity: usize, shared: &Shared) -> Option<BatchRing> {
        let entries = capacity.next_power_of_two().clamp(8, 4096) as u32;
        // Completions are posted when this thread enters the kernel (it
        // does to wait, and poll() does when it sees none), not by
        // interrupting it (5.19; older kernels refuse the flag).
        let ring = IoUring::builder()
            .setup_coop_taskrun()
            .build(entries)
            .or_else(|_| IoUring::new(entries))
            .ok()?;
        // Timed waits need IORING_ENTER_EXT_ARG (5.11), a full CQ must not
        // drop completions (5.5).
        if !ring.params().is_feature_ext_arg() || !ring.params().is_feature_nodrop() {
            return None;
        }
        if shared.wake.get().is_none() {
            // SAFETY: eventfd(2) takes no pointers; the result is checked.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return None;
            }
            // SAFETY: fd is a new descriptor nothing else owns.
            let _ = shared.wake.set(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        Some(BatchRing {
            ring,
            flights: HashMap::new(),
            poll_armed: false,
        })
    }

    /// Queues one SQE, flushing the submission queue when it is full.
    fn push(&mut self, sqe: &io_uring::squeue::Entry) -> bool {
        for _ in 0..64 {
            // SAFETY: every SQE this batch queues points at memory held by
            // `flights` (released only after the completion is reaped) or
            // at nothing (poll, cancel).
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return true;
            }
            if let Err(e) = self.ring.submit() {
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) {
                    return false;
                }
            }
        }
        false
    }

    /// Blocks until a completion arrives, `deadline` passes (false) or a
    /// signal interrupts.
    fn wait(&mut self, deadline: Option<Instant>) -> bool {
        let r = match deadline {
            None => self.ring.submit_and_wait(1),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return false;
                }
                let ts = types::Timespec::from(d - now);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match r {
            Ok(_) => true,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => true,
            Err(_) => {
                // Not expected (EBUSY: the CQ overflowed and is being
                // flushed); do not spin on it.
                std::thread::sleep(Duration::from_millis(1));
                true
            }
        }
    }
}

/// A cuFile-style batch: up to `capacity` requests in flight, reaped with
/// [`Batch::poll`]/[`Batch::wait`]. Dropping it cancels what has not started
/// and waits for the rest.
pub struct Batch {
    capacity: usize,
    shared: Arc<Shared>,
    seq: u64,
    /// The ring of single-transfer requests, made at the first such request.
    ring: Option<BatchRing>,
    /// Making the ring failed once (no io_uring here): do not try again.
    no_ring: bool,
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
                wake: OnceLock::new(),
            }),
            seq: 0,
            ring: None,
            no_ring: false,
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
        let shared = self.shared.clone();
        let mut g = shared.entries.lock().unwrap_or_else(|e| e.into_inner());
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
            // Only this thread reaps the ring, after the entry is in.
            let on_ring = self.ring_submit(p, seq);
            let cancel = (!on_ring).then(|| Arc::new(AtomicBool::new(false)));
            g.push(Entry {
                cookie: p.cookie,
                seq,
                result: None,
                cancel: cancel.clone(),
            });
            let Some(cancel) = cancel else {
                continue;
            };
            if let Err(e) = spawn_entry(&shared, p.clone(), seq, cancel) {
                g.retain(|e| e.seq != seq);
                return Err(e);
            }
        }
        drop(g);
        if let Some(r) = self.ring.as_mut() {
            if !r.ring.submission().is_empty() {
                // What this does not submit (EINTR, EAGAIN), the next wait
                // does.
                let _ = r.ring.submit();
            }
        }
        Ok(())
    }

    /// Queues `p` on the batch's ring when it is one direct transfer.
    fn ring_submit(&mut self, p: &IoParams, seq: u64) -> bool {
        let IoTarget::Plain {
            buffer,
            buf_off,
            size,
        } = &p.target
        else {
            return false;
        };
        let Some((fd, ptr)) = single_direct(&p.file, buffer, *buf_off, *size, p.file_off) else {
            return false;
        };
        if self.ring.is_none() && !self.no_ring {
            self.ring = BatchRing::new(self.capacity, &self.shared);
            self.no_ring = self.ring.is_none();
        }
        let Some(r) = self.ring.as_mut() else {
            return false;
        };
        // single_direct: size fits in u32.
        let len = *size as u32;
        let sqe = match p.op {
            Op::Read => opcode::Read::new(types::Fd(fd), ptr, len)
                .offset(p.file_off)
                .build(),
            Op::Write => opcode::Write::new(types::Fd(fd), ptr, len)
                .offset(p.file_off)
                .build(),
        }
        .user_data(seq);
        // The parameters are in `flights` before the kernel can see the SQE.
        r.flights.insert(seq, (p.clone(), *size));
        if r.push(&sqe) {
            if r.ring.submission().len() >= SUBMIT_GROUP {
                // What this does not submit (EINTR, EAGAIN), the next
                // submit or wait does.
                let _ = r.ring.submit();
            }
            return true;
        }
        r.flights.remove(&seq);
        false
    }

    /// Moves the ring's completions into the entries: whole transfers are
    /// done; anything else goes to the engine on a worker thread.
    fn reap_ring(&mut self) {
        let Some(r) = self.ring.as_mut() else {
            return;
        };
        let cqes: Vec<(u64, i32)> = r
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        if cqes.is_empty() {
            return;
        }
        let mut g = self
            .shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (seq, res) in cqes {
            if seq == POLL_TAG {
                r.poll_armed = false;
                if let Some(fd) = self.shared.wake.get() {
                    let mut v = 0u64;
                    // SAFETY: reads 8 bytes into a live u64 from a
                    // non-blocking eventfd (EAGAIN when already drained).
                    unsafe { libc::read(fd.as_raw_fd(), (&raw mut v).cast(), 8) };
                }
                continue;
            }
            let Some((p, len)) = r.flights.remove(&seq) else {
                continue; // CANCEL_TAG
            };
            let Some(e) = entry(&mut g, seq) else {
                continue;
            };
            if usize::try_from(res).is_ok_and(|n| n == len) {
                count_direct(&p.file, p.op, len);
                e.result = Some(Ok(len));
            } else if let Err(err) = spawn_entry(&self.shared, p, seq, e.cancel_flag()) {
                e.result = Some(Err(err));
            }
        }
        drop(g);
        // No condition variable to signal: only the owner of the batch
        // (&mut self) waits on it, and that is this thread.
    }

    /// Blocks until the ring or a worker thread finishes a request, or
    /// `deadline` passes (false).
    fn wait_ring(&mut self, workers_out: bool, deadline: Option<Instant>) -> bool {
        let Some(r) = self.ring.as_mut() else {
            return false;
        };
        if workers_out && !r.poll_armed {
            if let Some(fd) = self.shared.wake.get() {
                let sqe = opcode::PollAdd::new(types::Fd(fd.as_raw_fd()), libc::POLLIN as u32)
                    .build()
                    .user_data(POLL_TAG);
                r.poll_armed = r.push(&sqe);
            }
        }
        r.wait(deadline)
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
        if let Some(r) = self.ring.as_mut() {
            if !r.flights.is_empty() && r.ring.completion().is_empty() {
                // Submits what is queued and lets finished requests post.
                let _ = r.ring.submit();
            }
        }
        self.reap_ring();
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
        let mut timed_out = false;
        loop {
            self.reap_ring();
            let g = self
                .shared
                .entries
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let done = g.iter().filter(|e| e.result.is_some()).count();
            if done >= min_nr.min(g.len()) {
                break;
            }
            let on_ring = self.ring.as_ref().map_or(0, |r| r.flights.len());
            if on_ring > 0 {
                let workers_out = g.len() - done > on_ring;
                drop(g);
                if !self.wait_ring(workers_out, deadline) {
                    timed_out = true;
                    break;
                }
                continue;
            }
            match deadline {
                None => drop(self.shared.cv.wait(g).unwrap_or_else(|e| e.into_inner())),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        timed_out = true;
                        break;
                    }
                    drop(
                        self.shared
                            .cv
                            .wait_timeout(g, d - now)
                            .unwrap_or_else(|e| e.into_inner()),
                    );
                }
            }
        }
        let mut g = self
            .shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
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
        let mut g = self
            .shared
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        for e in g.iter_mut().filter(|e| e.result.is_none()) {
            // A ring request's flag, made here, goes with it to a worker
            // thread if its completion sends it there.
            e.cancel_flag().store(true, Ordering::Release);
            n += 1;
        }
        drop(g);
        if let Some(r) = self.ring.as_mut() {
            // A transfer the device already has finishes; one still queued
            // in the kernel ends with ECANCELED and then, its cancel flag
            // set, as Canceled on a worker thread.
            let seqs: Vec<u64> = r.flights.keys().copied().collect();
            for seq in seqs {
                let sqe = opcode::AsyncCancel::new(seq).build().user_data(CANCEL_TAG);
                if !r.push(&sqe) {
                    break;
                }
            }
            let _ = r.ring.submit();
        }
        n
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.cancel();
        // The kernel may still be transferring into memory the ring's
        // requests hold: reap every one before anything is freed.
        while self.ring.as_ref().is_some_and(|r| !r.flights.is_empty()) {
            self.wait_ring(false, None);
            self.reap_ring();
        }
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
                cancel: None,
            });
        }
    }
}
