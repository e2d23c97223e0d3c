//! The synchronous I/O engine: chunking, io_uring submission, unaligned
//! edges, fallback to bounce buffers, vectored requests. Its sizes and
//! their defaults are [`Config`]'s ([`crate::config`]). A read whose bounce
//! reads go O_DIRECT takes pieces and parts of `COLD_BOUNCE_CHUNKS` and
//! `COLD_BOUNCE_SPLITS` times the bounce path's sizes.
//!
//! # The bounce path
//!
//! Memory the kernel cannot reach directly (GPU memory without an fgds
//! mapping) is read through pinned host bounce buffers and copied on to the
//! GPU with copies queued on the thread's stream, waited for once per part
//! of a call (or when the thread runs out of bounce buffers: at most
//! 8 MiB of them a thread, 2 pieces at least). Reads through the page
//! cache into the bounce buffers go one at a time, so that the copy of one
//! piece overlaps the read of the next (such a read completes when it is
//! submitted: submitted together, a part's reads would all be done before
//! its first copy); O_DIRECT bounce reads keep `queue_depth` in flight. Reads reach the bounce buffers
//! in one of two ways, chosen per call (per part of a split call) from the
//! page cache's state, which `cachestat(2)` measures
//! ([`BounceRead::Auto`]): through the page cache when it holds at least
//! half of the range, else with `O_DIRECT` (the aligned blocks around each
//! piece, so unaligned edges and the end of the file need nothing else),
//! which skips the page cache's copy and its CPU cost on cold data.
//! `FGDS_BOUNCE_READ` / [`Config::bounce_read`] force either. Writes from
//! such memory stay buffered: an O_DIRECT write cannot write a file's
//! unaligned end without a read-modify-write, and the page cache lets the
//! writer go on before the disk has the data.

use crate::backend::{with_backend, Req};
use crate::buffer::{page_size, Buffer, QueuedCopy, Staging};
pub use crate::config::{
    BounceRead, Config, DEFAULT_BOUNCE_CHUNK_SIZE, DEFAULT_BOUNCE_SPLIT_SIZE, DEFAULT_CHUNK_SIZE,
    DEFAULT_QUEUE_DEPTH, DEFAULT_SPLIT_SIZE, FGDS_BATCH_IOV_MAX, FGDS_IOV_MAX, MAX_RW_COUNT,
    UIO_MAXIOV,
};
use crate::error::{Error, Result};
use crate::file::FileHandle;
use crate::stats::FallbackCause;
pub use crate::stats::Stats;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Pinned bounce buffers one thread of a call holds at most, in bytes (and
/// at least two pieces' worth): the bounce path's buffers of a thread are
/// `min(8, queue_depth, this / bounce_chunk_size)` pieces, at least 2. On
/// the H200 machine a batch of 32 MiB reads with 4 MiB pieces ran 41262
/// MiB/s with 2 buffers a thread and 35375 with 4 (tools/lib/fgds/README.md).
const BOUNCE_BYTES_PER_THREAD: usize = 8 << 20;
/// A read that reaches the bounce buffers with O_DIRECT (cold data, see
/// [`BounceRead`]) goes in pieces of this many `bounce_chunk_size` and
/// parts of this many `bounce_split_size`: 8 MiB pieces in 32 MiB parts by
/// default. On the H200 machine's virtual disk a cold 4 GiB read into CUDA
/// memory ran 1395 MiB/s (1371-1419) against 1108 (1090-1125) with the
/// page-cache path's 4 MiB pieces in 8 MiB parts and 1016 (974-1058) with
/// 4 MiB pieces in 32 MiB parts, the settings taking turns round by round
/// (`tools/testing/fgds-bench/gpu-peer-tune.py`); warm, the larger sizes
/// were slower (19726 MiB/s against 25399). In the GPU suite's publishing
/// run, taking turns over 3 rounds, cold, the two ran alike (1688 MiB/s
/// against 1692, `docs/benchmarks.md`).
const COLD_BOUNCE_CHUNKS: usize = 2;
const COLD_BOUNCE_SPLITS: usize = 4;

/// Direction of an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// File to buffer.
    Read,
    /// Buffer to file.
    Write,
}

/// One segment of a vectored request.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// The buffer.
    pub buffer: &'a Buffer,
    /// Offset in the buffer.
    pub offset: usize,
    /// Bytes.
    pub size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// O_DIRECT straight into the caller's memory.
    Direct,
    /// Buffered fd straight into host memory.
    Buffered,
    /// Buffered fd into a staging buffer, then copied.
    Staged,
    /// O_DIRECT fd into a staging buffer (the aligned blocks around the
    /// piece), then the piece's bytes copied (reads only).
    StagedDirect,
}

#[derive(Debug, Clone)]
struct Piece {
    file_off: u64,
    /// Index of the buffer in the call's buffers.
    buf: usize,
    buf_off: usize,
    len: usize,
    mode: Mode,
    /// A staged read of several segments ([`merge_staged`]): every
    /// destination `(buffer, offset, bytes)` in file order, `buf`/`buf_off`
    /// the first's; empty for one destination.
    more: Vec<(usize, usize, usize)>,
}

impl Piece {
    fn new(file_off: u64, buf: usize, buf_off: usize, len: usize, mode: Mode) -> Piece {
        Piece {
            file_off,
            buf,
            buf_off,
            len,
            mode,
            more: Vec::new(),
        }
    }
}

/// The aligned file range `(offset, bytes)` a [`Mode::StagedDirect`] read
/// of `p` covers.
fn direct_span(file: &FileHandle, p: &Piece) -> (u64, usize) {
    let a = file.off_align.max(1);
    let start = round_down(p.file_off, a);
    let end = round_up(p.file_off + p.len as u64, a);
    (start, (end - start) as usize)
}

/// What stops a call between requests: the caller's cancel flag, and the
/// flag the threads of a split call raise when one of them failed.
#[derive(Clone, Copy)]
struct Stop<'a> {
    user: Option<&'a AtomicBool>,
    split: Option<&'a AtomicBool>,
}

impl Stop<'_> {
    fn is_set(&self) -> bool {
        self.user.is_some_and(|c| c.load(Ordering::Acquire))
            || self.split.is_some_and(|c| c.load(Ordering::Acquire))
    }
}

fn round_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}
fn round_down(v: u64, a: u64) -> u64 {
    v / a * a
}

fn is_fallback_errno(e: i32) -> bool {
    matches!(
        e,
        libc::EINVAL | libc::EFAULT | libc::EREMOTEIO | libc::EOPNOTSUPP | libc::EXDEV
    )
}

// ---------------------------------------------------------------- plain I/O

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
    }
}

fn indirect_mode(buf: &Buffer) -> Mode {
    if buf.is_host() {
        Mode::Buffered
    } else {
        Mode::Staged
    }
}

/// Why the direct path is impossible for this file and buffer, if it is.
fn direct_blocker(file: &FileHandle, buf: &Buffer) -> Option<String> {
    if let Some(r) = &file.no_direct_reason {
        return Some(r.clone());
    }
    if buf.io_ptr().is_none() {
        return Some(format!(
            "the {:?} buffer is not registered with fgds: {}",
            buf.kind(),
            buf.p2p_unavailable_reason().unwrap_or("no mapping")
        ));
    }
    None
}

/// The cause of a call's fallback planned before it ran: what
/// [`direct_blocker`] found first (the file, then its buffers in order),
/// else a bounce asked for after the kernel refused `O_DIRECT` (a retry of
/// refused requests, the remainder of a short write).
fn blocker_cause(file: &FileHandle, bufs: &[&Buffer]) -> FallbackCause {
    if file.no_direct_reason.is_some() {
        return FallbackCause::NoDirect;
    }
    bufs.iter()
        .find(|b| b.io_ptr().is_none())
        .map_or(FallbackCause::NoDirect, |b| {
            b.p2p_unavailable_cause().unwrap_or(FallbackCause::Other)
        })
}

fn check_strict_alignment(file: &FileHandle, addr: u64, size: u64, file_off: u64) -> Result<()> {
    if file_off % file.off_align != 0 {
        return Err(Error::Misaligned {
            what: "file offset",
            value: file_off,
            align: file.off_align,
        });
    }
    if size % file.off_align != 0 {
        return Err(Error::Misaligned {
            what: "size",
            value: size,
            align: file.off_align,
        });
    }
    if addr % file.mem_align != 0 {
        return Err(Error::Misaligned {
            what: "buffer address",
            value: addr,
            align: file.mem_align,
        });
    }
    Ok(())
}

fn plan(
    file: &FileHandle,
    buf: &Buffer,
    buf_idx: usize,
    buf_off: usize,
    size: usize,
    file_off: u64,
    force_bounce: Option<&str>,
) -> Result<(Vec<Piece>, Option<String>)> {
    let cfg = &file.config;
    let end = file_off + size as u64;
    let blocker = force_bounce
        .map(str::to_string)
        .or_else(|| direct_blocker(file, buf));
    if cfg.strict {
        if let Some(r) = blocker {
            return Err(Error::P2pUnavailable { reason: r });
        }
        let addr = buf.io_ptr().map_or(0, |p| p as u64 + buf_off as u64);
        check_strict_alignment(file, addr, size as u64, file_off)?;
    }
    let mut pieces = Vec::new();
    let ind = indirect_mode(buf);
    let push_range = |pieces: &mut Vec<Piece>, from: u64, to: u64, mode: Mode| {
        let mut o = from;
        // The bounce path's pieces have their own size (Config::bounce_chunk_size).
        let chunk = if mode == Mode::Staged {
            cfg.bounce_chunk_size
        } else {
            cfg.chunk_size
        };
        while o < to {
            // A bounced piece ends on a chunk boundary of the file, so that
            // the aligned blocks an O_DIRECT bounce read covers stay within
            // one chunk (bounce buffers of one size).
            let cut = if mode == Mode::Staged && chunk as u64 % file.off_align == 0 {
                round_down(o, chunk as u64) + chunk as u64
            } else {
                o + chunk as u64
            };
            let len = (to.min(cut) - o) as usize;
            pieces.push(Piece::new(
                o,
                buf_idx,
                buf_off + (o - file_off) as usize,
                len,
                mode,
            ));
            o += len as u64;
        }
    };
    if let Some(reason) = blocker {
        push_range(&mut pieces, file_off, end, ind);
        return Ok((pieces, Some(reason)));
    }
    let a = if cfg.strict {
        file.off_align
    } else {
        file.off_align.max(page_size() as u64)
    };
    let head_end = round_up(file_off, a).min(end);
    let tail_start = round_down(end, a).max(head_end);
    let base = buf.io_ptr().map_or(0, |p| p as u64);
    let mid_addr = base + buf_off as u64 + (head_end - file_off);
    if head_end < tail_start && mid_addr % file.mem_align != 0 {
        push_range(&mut pieces, file_off, end, ind);
        return Ok((
            pieces,
            Some(format!(
                "buffer address {mid_addr:#x} for file offset {head_end} is not {}-byte aligned",
                file.mem_align
            )),
        ));
    }
    push_range(&mut pieces, file_off, head_end, ind);
    push_range(&mut pieces, head_end, tail_start, Mode::Direct);
    push_range(&mut pieces, tail_start, end, ind);
    Ok((pieces, None))
}

struct Slots {
    free: Vec<Staging>,
    count: usize,
    max: usize,
}

impl Slots {
    fn take(&mut self, buf: &Buffer, len: usize, force: bool) -> Result<Option<Staging>> {
        if let Some(i) = self.free.iter().position(|s| s.len >= len) {
            return Ok(Some(self.free.swap_remove(i)));
        }
        if self.count < self.max || force {
            self.count += 1;
            return buf
                .staging(round_up(len as u64, page_size() as u64) as usize)
                .map(Some);
        }
        if let Some(small) = self.free.pop() {
            drop(small);
            return buf
                .staging(round_up(len as u64, page_size() as u64) as usize)
                .map(Some);
        }
        Ok(None)
    }
}

/// Bounce buffers whose copies into GPU memory are queued on a stream and
/// not yet waited for. Dropping it waits (an error path must not hand a
/// buffer a copy still reads back to the free list or the pinned cache).
struct Copies {
    streams: Vec<QueuedCopy>,
    busy: Vec<Staging>,
    /// Bytes queued since the last wait.
    bytes: usize,
}

/// Queued bytes from which a wait sleeps rather than spins: a few
/// microseconds of a sleeping thread's wake-up are nothing against such a
/// copy, and the spinning would cost a CPU for its whole length (the warm
/// one-call rows of the GPU suite wait for 4 MiB at a time on each of 16
/// threads); a small call's one short copy is waited for spinning.
const SLEEPING_WAIT_BYTES: usize = 1 << 20;

impl Copies {
    /// Notes a queued copy's stream.
    fn queued(&mut self, q: QueuedCopy) {
        if !self.streams.iter().any(|s| s.same_stream(&q)) {
            self.streams.push(q);
        }
    }

    /// Waits for every queued copy and returns the buffers to `free`.
    /// `more`: more pieces of the call follow (a wait that ends the call
    /// spins: its caller waits for it, and a sleeping thread's wake-up
    /// would add to the call's latency).
    fn wait(&mut self, free: &mut Vec<Staging>, more: bool) -> Result<()> {
        let mut first: Option<Error> = None;
        let sleep = more && self.bytes >= SLEEPING_WAIT_BYTES;
        self.bytes = 0;
        for q in self.streams.drain(..) {
            if let Err(e) = q.wait(sleep) {
                first.get_or_insert(e);
            }
        }
        match first {
            None => {
                free.append(&mut self.busy);
                Ok(())
            }
            Some(e) => {
                // The stream failed: whether its copies still read the
                // buffers is unknown, so they are never reused.
                for s in self.busy.drain(..) {
                    std::mem::forget(s);
                }
                Err(e)
            }
        }
    }
}

impl Drop for Copies {
    fn drop(&mut self) {
        if !self.busy.is_empty() || !self.streams.is_empty() {
            let mut sink = Vec::new();
            let _ = self.wait(&mut sink, false);
        }
    }
}

/// Whether `[start, end)` of the file is mostly in the page cache, as
/// `cachestat(2)` counts (a probe of one byte at up to 4 places with
/// `RWF_NOWAIT` where it is missing); `None` when neither can tell.
fn mostly_cached(file: &FileHandle, start: u64, end: u64) -> Option<bool> {
    if start >= end {
        return Some(true);
    }
    // Pages past the end of the file count as not cached: a read that runs
    // past it may go O_DIRECT, which reads what there is as well (and every
    // call is spared an fstat).
    let fd = file.buffered.as_raw_fd();
    let ps = page_size() as u64;
    match crate::sys::cachestat(fd, start, end - start) {
        Ok(c) => {
            let pages = (round_up(end, ps) - round_down(start, ps)) / ps;
            return Some(c.nr_cache * 2 >= pages);
        }
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => return None,
        Err(_) => {}
    }
    let mut hits = 0;
    let mut probes = 0;
    let step = ((end - start) / 4).max(1);
    let mut at = start;
    while at < end && probes < 4 {
        let mut byte = 0u8;
        let iov = libc::iovec {
            iov_base: (&raw mut byte).cast(),
            iov_len: 1,
        };
        // SAFETY: one iovec of one live byte.
        let r = unsafe { libc::preadv2(fd, &iov, 1, at as libc::off_t, libc::RWF_NOWAIT) };
        if r >= 0 {
            hits += 1;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
            return None; // RWF_NOWAIT not supported here
        }
        probes += 1;
        at += step;
    }
    Some(hits * 2 >= probes)
}

/// Whether this call's bounced reads of `[start, end)` go O_DIRECT into
/// the bounce buffers ([`BounceRead`]).
fn bounce_direct(file: &FileHandle, start: u64, end: u64) -> bool {
    if file.direct.is_none() {
        return false;
    }
    match file.config.bounce_read {
        BounceRead::Buffered => false,
        BounceRead::Direct => true,
        BounceRead::Auto => mostly_cached(file, start, end) == Some(false),
    }
}

/// Copies what a staged read brought (`n` bytes at `src`) to the piece's
/// destinations; returns whether a copy was queued (the bounce buffer
/// stays busy until `copies` is waited for).
fn copy_out(
    bufs: &[&Buffer],
    p: &Piece,
    src: *const u8,
    n: usize,
    copies: &mut Copies,
) -> Result<bool> {
    let single = [(p.buf, p.buf_off, p.len)];
    let dests: &[(usize, usize, usize)] = if p.more.is_empty() { &single } else { &p.more };
    let mut done = 0usize;
    let mut queued = false;
    for &(b, off, len) in dests {
        if done >= n {
            break;
        }
        let k = len.min(n - done);
        // SAFETY: src has n valid bytes (the kernel wrote them) and
        // done + k <= n.
        let s = unsafe { std::slice::from_raw_parts(src.add(done), k) };
        // SAFETY: src is a bounce buffer, which stays alive and untouched
        // until `copies` was waited for (the caller puts it there).
        if let Some(q) = unsafe { bufs[b].write_bytes_queued(off, s) }? {
            copies.bytes += k;
            copies.queued(q);
            queued = true;
        }
        done += k;
    }
    Ok(queued)
}

/// Runs the pieces on the calling thread's ring, up to `queue_depth` in
/// flight; `fell_back` is the call's "a fallback was counted" flag.
/// `more_parts`: the pieces are a part of a split call that other parts
/// follow, so the last wait for copies to the GPU does not end the call.
fn run_pieces(
    file: &FileHandle,
    bufs: &[&Buffer],
    op: Op,
    mut pieces: Vec<Piece>,
    stop: Stop<'_>,
    fell_back: &AtomicBool,
    more_parts: bool,
) -> Result<usize> {
    if pieces.is_empty() {
        return Ok(0);
    }
    let start = pieces[0].file_off;
    let end = pieces
        .iter()
        .map(|p| p.file_off + p.len as u64)
        .max()
        .unwrap_or(start);
    let cfg = &file.config;
    let st = &file.stats;
    let qd = cfg.queue_depth as usize;
    let write = op == Op::Write;
    if !write && pieces.iter().any(|p| p.mode == Mode::Staged) {
        let staged = pieces.iter().filter(|p| p.mode == Mode::Staged);
        let s = staged.clone().map(|p| p.file_off).min().unwrap_or(start);
        let e = staged.map(|p| p.file_off + p.len as u64).max().unwrap_or(s);
        if bounce_direct(file, s, e) {
            for p in pieces.iter_mut().filter(|p| p.mode == Mode::Staged) {
                p.mode = Mode::StagedDirect;
            }
        }
    }
    let mut slots = Slots {
        free: Vec::new(),
        count: 0,
        max: qd
            .min(8)
            .min(BOUNCE_BYTES_PER_THREAD / cfg.bounce_chunk_size.max(1))
            .max(2),
    };
    let mut slot_of: Vec<Option<Staging>> = (0..pieces.len()).map(|_| None).collect();
    let mut pending: VecDeque<usize> = (0..pieces.len()).collect();
    let mut eof: Option<u64> = None;
    let mut err: Option<Error> = None;
    // Declared after `slots` and `slot_of`: dropped (so waited for) first.
    let mut copies = Copies {
        streams: Vec::new(),
        busy: Vec::new(),
        bytes: 0,
    };

    with_backend(cfg, pieces.len(), |be| -> Result<()> {
        let mut inflight = 0usize;
        loop {
            while err.is_none() && inflight < qd {
                let Some(&i) = pending.front() else { break };
                if stop.is_set() {
                    err = Some(Error::Canceled);
                    break;
                }
                let p = &pieces[i];
                // A read of the page cache into a bounce buffer completes
                // when it is submitted: one at a time, so that the copy to
                // the GPU queued when one completes runs while the next is
                // read (all of them submitted together would read every
                // piece first, and copy them after).
                if !write && p.mode == Mode::Staged && inflight > 0 {
                    break;
                }
                let buf = bufs[p.buf];
                let (mut off, mut len) = (p.file_off, p.len);
                let (fd, ptr) = match p.mode {
                    Mode::Direct | Mode::Buffered => {
                        let Some(base) = buf.io_ptr() else {
                            err = Some(Error::InvalidArgument("internal: no CPU mapping".into()));
                            break;
                        };
                        let fd = match (p.mode, &file.direct) {
                            (Mode::Direct, Some(d)) => d.as_raw_fd(),
                            _ => file.buffered.as_raw_fd(),
                        };
                        // SAFETY: buf_off + len was bounds-checked against the buffer.
                        (fd, unsafe { base.add(p.buf_off) })
                    }
                    Mode::Staged | Mode::StagedDirect => {
                        let (fd, need) = match (p.mode, &file.direct) {
                            (Mode::StagedDirect, Some(d)) => {
                                let (o, n) = direct_span(file, p);
                                (off, len) = (o, n);
                                (d.as_raw_fd(), n)
                            }
                            _ => (file.buffered.as_raw_fd(), p.len),
                        };
                        if slot_of[i].as_ref().is_some_and(|s| s.len < need) {
                            if let Some(s) = slot_of[i].take() {
                                slots.free.push(s);
                            }
                        }
                        if slot_of[i].is_none() {
                            // Out of bounce buffers: wait for the queued
                            // copies once half of them wait for theirs (or
                            // nothing else is in flight); until then reap
                            // reads, so that the copies of some overlap the
                            // reads of others.
                            if slots.free.iter().all(|s| s.len < need)
                                && slots.count >= slots.max
                                && !copies.busy.is_empty()
                                && (inflight == 0 || copies.busy.len() * 2 >= slots.max)
                            {
                                if let Err(e) = copies.wait(&mut slots.free, true) {
                                    err = Some(e);
                                    break;
                                }
                            }
                            match slots.take(buf, need, inflight == 0) {
                                Ok(Some(s)) => {
                                    if write {
                                        // SAFETY: s.ptr has at least p.len bytes.
                                        let dst =
                                            unsafe { std::slice::from_raw_parts_mut(s.ptr, p.len) };
                                        if let Err(e) = buf.read_bytes_into(p.buf_off, dst) {
                                            err = Some(e);
                                            slots.free.push(s);
                                            break;
                                        }
                                    }
                                    slot_of[i] = Some(s);
                                }
                                Ok(None) => break,
                                Err(e) => {
                                    err = Some(e);
                                    break;
                                }
                            }
                        }
                        let ptr = slot_of[i].as_ref().map_or(std::ptr::null_mut(), |s| s.ptr);
                        (fd, ptr)
                    }
                };
                pending.pop_front();
                if p.mode == Mode::Direct {
                    st.direct_ops.fetch_add(1, Ordering::Relaxed);
                } else {
                    st.bounce_ops.fetch_add(1, Ordering::Relaxed);
                }
                let req = Req::Rw {
                    write,
                    fd,
                    ptr,
                    len,
                    off,
                };
                if let Err(e) = be.push(i as u64, &req) {
                    err = Some(e);
                    break;
                }
                inflight += 1;
            }
            if inflight == 0 {
                return Ok(());
            }
            let (id, res) = be.wait_one()?;
            inflight -= 1;
            let i = id as usize;
            let mode = pieces[i].mode;
            let buf = bufs[pieces[i].buf];
            if res < 0 {
                let e = -res;
                if e == libc::EAGAIN || e == libc::EINTR {
                    pending.push_front(i);
                    continue;
                }
                if let Some(s) = slot_of[i].take() {
                    slots.free.push(s);
                }
                let direct = matches!(mode, Mode::Direct | Mode::StagedDirect);
                if direct && is_fallback_errno(e) && err.is_none() {
                    let reason = format!(
                        "O_DIRECT {} of {} bytes at {} refused: {}",
                        op_name(op),
                        pieces[i].len,
                        pieces[i].file_off,
                        std::io::Error::from_raw_os_error(e)
                    );
                    if cfg.strict && mode == Mode::Direct {
                        err = Some(Error::P2pUnavailable { reason });
                    } else {
                        if !fell_back.swap(true, Ordering::Relaxed) {
                            st.fallback(FallbackCause::of_direct_errno(e), &reason);
                        }
                        pieces[i].mode = if mode == Mode::StagedDirect {
                            Mode::Staged
                        } else {
                            indirect_mode(buf)
                        };
                        pending.push_front(i);
                    }
                    continue;
                }
                if err.is_none() {
                    err = Some(Error::os(
                        format!(
                            "{} {} bytes at offset {}",
                            op_name(op),
                            pieces[i].len,
                            pieces[i].file_off
                        ),
                        e,
                    ));
                }
                continue;
            }
            // Bytes of the piece the request moved: an O_DIRECT bounce read
            // began at the aligned block before the piece.
            let (n, skip) = if mode == Mode::StagedDirect {
                let skip = (pieces[i].file_off - direct_span(file, &pieces[i]).0) as usize;
                ((res as usize).saturating_sub(skip).min(pieces[i].len), skip)
            } else {
                (res as usize, 0)
            };
            match mode {
                Mode::Direct => st.direct_bytes.fetch_add(n as u64, Ordering::Relaxed),
                Mode::StagedDirect => {
                    st.bounce_direct_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                    st.bounce_bytes.fetch_add(n as u64, Ordering::Relaxed)
                }
                _ => st.bounce_bytes.fetch_add(n as u64, Ordering::Relaxed),
            };
            if let Some(s) = slot_of[i].take() {
                let mut busy = false;
                if !write && n > 0 {
                    // SAFETY: skip + n <= what the kernel wrote <= s.len.
                    let src = unsafe { s.ptr.add(skip) };
                    match copy_out(bufs, &pieces[i], src, n, &mut copies) {
                        Ok(q) => busy = q,
                        Err(e) => {
                            // A copy may have been queued before the error.
                            busy = !copies.streams.is_empty();
                            err.get_or_insert(e);
                        }
                    }
                }
                if busy {
                    copies.busy.push(s);
                } else {
                    slots.free.push(s);
                }
            }
            if n < pieces[i].len {
                let p = &mut pieces[i];
                if !write {
                    let at = p.file_off + n as u64;
                    eof = Some(eof.map_or(at, |e| e.min(at)));
                } else if n == 0 {
                    err.get_or_insert(Error::os(
                        format!("write at offset {}", p.file_off),
                        libc::EIO,
                    ));
                } else {
                    p.file_off += n as u64;
                    p.buf_off += n;
                    p.len -= n;
                    if p.mode == Mode::Direct
                        && (p.file_off % file.off_align != 0 || p.len as u64 % file.off_align != 0)
                    {
                        p.mode = indirect_mode(buf);
                    }
                    pending.push_front(i);
                }
            }
        }
    })?;
    // The last wait of a part that other parts of the call follow may sleep:
    // the call does not end with it.
    let waited = copies.wait(&mut slots.free, more_parts);
    if let Some(e) = err {
        return Err(e);
    }
    waited?;
    let total = (eof.unwrap_or(end).min(end) - start) as usize;
    Ok(total)
}

// ---------------------------------------------------------------- one call, many threads

thread_local! {
    /// Set while this thread runs a batch's request: the batch already
    /// keeps the I/O threads busy, so its requests are not split again.
    static NO_SPLIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with splitting off on this thread (a batch's request).
pub(crate) fn without_split<T>(f: impl FnOnce() -> T) -> T {
    let old = NO_SPLIT.with(|c| c.replace(true));
    let r = f();
    NO_SPLIT.with(|c| c.set(old));
    r
}

/// The parts of a split call and what the threads report back.
struct SplitState {
    parts: Vec<Option<Vec<Piece>>>,
    /// Bytes each part asks for.
    lens: Vec<u64>,
    next: usize,
    /// Threads running a part now.
    active: usize,
    /// The caller is done taking parts: no thread takes one any more.
    closed: bool,
    results: Vec<Option<Result<usize>>>,
}

struct SplitCtl {
    state: Mutex<SplitState>,
    cv: std::sync::Condvar,
    /// A part failed: the others stop between requests.
    stop: AtomicBool,
    /// A fallback of the call was counted.
    fell_back: AtomicBool,
}

/// What the threads of a split call borrow from the caller. Only a thread
/// that took a part (under [`SplitCtl::state`], before the caller closed it)
/// reads it, and the caller returns only once no thread runs a part.
struct SplitRefs<'a> {
    file: &'a FileHandle,
    bufs: &'a [&'a Buffer],
    op: Op,
    cancel: Option<&'a AtomicBool>,
}

/// A [`SplitRefs`] of the caller's stack, as an I/O thread's job holds it.
struct RefsPtr(*const ());
// SAFETY: SplitRefs holds shared references to Sync data (FileHandle and
// Buffer are used from many threads at once); see SplitRefs for how long
// the pointer is valid.
unsafe impl Send for RefsPtr {}

/// Takes parts and runs them until none is left.
fn split_work(ctl: &SplitCtl, refs: &SplitRefs<'_>) {
    loop {
        let (i, part, more_parts) = {
            let mut g = ctl.state.lock().unwrap_or_else(|p| p.into_inner());
            if g.closed || g.next >= g.parts.len() {
                return;
            }
            let i = g.next;
            g.next += 1;
            g.active += 1;
            (
                i,
                g.parts[i].take().unwrap_or_default(),
                g.next < g.parts.len(),
            )
        };
        let stop = Stop {
            user: refs.cancel,
            split: Some(&ctl.stop),
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_pieces(
                refs.file,
                refs.bufs,
                refs.op,
                part,
                stop,
                &ctl.fell_back,
                more_parts,
            )
        }))
        .unwrap_or_else(|_| {
            Err(Error::InvalidArgument(
                "internal: an I/O thread panicked".into(),
            ))
        });
        if r.is_err() {
            ctl.stop.store(true, Ordering::Release);
        }
        let mut g = ctl.state.lock().unwrap_or_else(|p| p.into_inner());
        g.results[i] = Some(r);
        g.active -= 1;
        drop(g);
        ctl.cv.notify_all();
    }
}

/// The part size of a call of `total` bytes, `staged` of them through the
/// bounce path: `bounce_split_size` when that is most of them.
fn split_size(cfg: &Config, staged: u64, total: u64) -> usize {
    if staged * 2 > total {
        cfg.bounce_split_size
    } else {
        cfg.split_size
    }
}

/// Joins neighbouring bounce-path pieces of one destination (in the file
/// and in the buffer) into pieces of up to `size` bytes that stay within
/// one `size`-aligned stretch of the file, as [`plan`] cuts them.
fn coarsen(pieces: Vec<Piece>, size: u64) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::with_capacity(pieces.len());
    for p in pieces {
        if let Some(q) = out.last_mut() {
            let end = p.file_off + p.len as u64;
            if q.mode == Mode::Staged
                && p.mode == Mode::Staged
                && q.more.is_empty()
                && p.more.is_empty()
                && q.buf == p.buf
                && q.file_off + q.len as u64 == p.file_off
                && q.buf_off + q.len == p.buf_off
                && end - q.file_off <= size
                && round_down(q.file_off, size) == round_down(end - 1, size)
            {
                q.len += p.len;
                continue;
            }
        }
        out.push(p);
    }
    out
}

/// Runs a call's pieces: on the calling thread alone when the call is at
/// most `split_size` bytes (or `parallel` is 1), else cut into parts of
/// about `split_size` bytes that the calling thread and up to
/// `parallel - 1` I/O threads take in file order, each on its own ring
/// with its own bounce buffers, so that one thread's copies overlap the
/// others' reads (what a batch of large requests does). Returns the bytes
/// moved from the first piece on, up to the first short part.
fn run_call(
    file: &FileHandle,
    bufs: &[&Buffer],
    op: Op,
    pieces: Vec<Piece>,
    cancel: Option<&AtomicBool>,
    plan_reason: Option<String>,
) -> Result<usize> {
    if let Some(r) = &plan_reason {
        file.stats.fallback(blocker_cause(file, bufs), r);
    }
    let fell_back = AtomicBool::new(plan_reason.is_some());
    let cfg = &file.config;
    let total: u64 = pieces.iter().map(|p| p.len as u64).sum();
    let staged: u64 = pieces
        .iter()
        .filter(|p| p.mode == Mode::Staged)
        .map(|p| p.len as u64)
        .sum();
    // A read mostly through the bounce path that goes O_DIRECT (one
    // cachestat(2) of the call's range; each part asks again) runs in
    // larger pieces and parts (COLD_BOUNCE_CHUNKS).
    let cold = op == Op::Read && staged * 2 > total && {
        let s = pieces.iter().map(|p| p.file_off).min().unwrap_or(0);
        let e = pieces
            .iter()
            .map(|p| p.file_off + p.len as u64)
            .max()
            .unwrap_or(s);
        bounce_direct(file, s, e)
    };
    let (pieces, split) = if cold {
        let piece = cfg
            .bounce_chunk_size
            .saturating_mul(COLD_BOUNCE_CHUNKS)
            .min(MAX_RW_COUNT);
        let split = cfg.bounce_split_size.saturating_mul(COLD_BOUNCE_SPLITS);
        (coarsen(pieces, piece as u64), split as u64)
    } else {
        (pieces, split_size(cfg, staged, total) as u64)
    };
    let threads = (cfg.parallel as usize).min(crate::env::env().threads + 1);
    // Writes through the page cache take the file's inode lock one at a
    // time (ext4, xfs): more threads only contend for it (4 GiB from GPU
    // memory on the H200 machine: 954 MiB/s on one thread, 866 on 16, and
    // the waiters' spinning cost CPU), so such a write stays on one thread.
    let direct: u64 = pieces
        .iter()
        .filter(|p| p.mode == Mode::Direct)
        .map(|p| p.len as u64)
        .sum();
    let buffered_write = op == Op::Write && direct < total / 2;
    if threads <= 1
        || total <= split
        || pieces.len() < 2
        || buffered_write
        || NO_SPLIT.with(|c| c.get())
    {
        let stop = Stop {
            user: cancel,
            split: None,
        };
        return run_pieces(file, bufs, op, pieces, stop, &fell_back, false);
    }
    // Parts of whole pieces, about split_size bytes each.
    let mut parts: Vec<Option<Vec<Piece>>> = Vec::new();
    let mut lens: Vec<u64> = Vec::new();
    let mut cur: Vec<Piece> = Vec::new();
    let mut cur_len = 0u64;
    for p in pieces {
        cur_len += p.len as u64;
        cur.push(p);
        if cur_len >= split {
            parts.push(Some(std::mem::take(&mut cur)));
            lens.push(cur_len);
            cur_len = 0;
        }
    }
    if !cur.is_empty() {
        parts.push(Some(cur));
        lens.push(cur_len);
    }
    let n = parts.len();
    let ctl = std::sync::Arc::new(SplitCtl {
        state: Mutex::new(SplitState {
            parts,
            lens,
            next: 0,
            active: 0,
            closed: false,
            results: (0..n).map(|_| None).collect(),
        }),
        cv: std::sync::Condvar::new(),
        stop: AtomicBool::new(false),
        fell_back,
    });
    let refs = SplitRefs {
        file,
        bufs,
        op,
        cancel,
    };
    for _ in 0..(threads - 1).min(n - 1) {
        let c = ctl.clone();
        let ptr = RefsPtr((&raw const refs).cast::<()>());
        let job: crate::pool::Job = Box::new(move || {
            let ptr = ptr;
            // SAFETY: split_work reads *ptr only after taking a part, which
            // it can do only while the caller waits (see SplitRefs).
            split_work(&c, unsafe { &*ptr.0.cast::<SplitRefs<'_>>() });
        });
        if crate::pool::spawn_job(job).is_err() {
            break; // no I/O threads: the calling thread does it all
        }
    }
    let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| split_work(&ctl, &refs)));
    let mut g = ctl.state.lock().unwrap_or_else(|p| p.into_inner());
    g.closed = true;
    while g.active > 0 {
        g = ctl.cv.wait(g).unwrap_or_else(|p| p.into_inner());
    }
    if let Err(p) = mine {
        std::panic::resume_unwind(p);
    }
    // The first failure in file order wins over the parts it stopped.
    let mut results = std::mem::take(&mut g.results);
    let failed =
        |r: &Option<Result<usize>>| matches!(r, Some(Err(e)) if !matches!(e, Error::Canceled));
    if let Some(i) = results.iter().position(failed) {
        if let Some(Err(e)) = results.swap_remove(i) {
            return Err(e);
        }
    }
    if results.iter().any(|r| matches!(r, Some(Err(_)))) {
        return Err(Error::Canceled);
    }
    let mut done = 0u64;
    for (r, &len) in results.iter().zip(&g.lens) {
        let got = match r {
            Some(Ok(k)) => *k as u64,
            _ => 0,
        };
        done += got;
        if got < len {
            break;
        }
    }
    Ok(done as usize)
}

/// The one O_DIRECT request a plain I/O is, when it is exactly one: the
/// buffer is reachable directly, the size is at most a chunk, and offsets,
/// size and address meet the alignment [`plan`] asks of the direct path.
/// Returns the descriptor and the address to hand the kernel. Batches put
/// such requests on a ring of their own ([`crate::batch`]).
pub(crate) fn single_direct(
    file: &FileHandle,
    buf: &Buffer,
    buf_off: usize,
    size: usize,
    file_off: u64,
) -> Option<(RawFd, *mut u8)> {
    let cfg = &file.config;
    if !cfg.use_io_uring || size == 0 || size > cfg.chunk_size || u32::try_from(size).is_err() {
        return None;
    }
    if direct_blocker(file, buf).is_some()
        || buf.check_range("", buf_off as u64, size as u64).is_err()
    {
        return None;
    }
    if file_off
        .checked_add(size as u64)
        .is_none_or(|e| e > i64::MAX as u64)
    {
        return None;
    }
    let fd = file.direct.as_ref()?.as_raw_fd();
    let base = buf.io_ptr()?;
    let a = if cfg.strict {
        file.off_align
    } else {
        file.off_align.max(page_size() as u64)
    };
    let addr = base as u64 + buf_off as u64;
    if file_off % a != 0 || size as u64 % a != 0 || addr % file.mem_align != 0 {
        return None;
    }
    // SAFETY: buf_off + size is inside the buffer (check_range above).
    Some((fd, unsafe { base.add(buf_off) }))
}

/// Counts one request of `n` bytes that went the direct path outside
/// [`run_pieces`] (a batch's ring).
pub(crate) fn count_direct(file: &FileHandle, op: Op, n: usize) {
    let st = &file.stats;
    st.direct_ops.fetch_add(1, Ordering::Relaxed);
    st.direct_bytes.fetch_add(n as u64, Ordering::Relaxed);
    count_moved(file, op, n as u64);
}

/// Counts `n` bytes a call (or a batch's request) read or wrote.
fn count_moved(file: &FileHandle, op: Op, n: u64) {
    let st = &file.stats;
    match op {
        Op::Read => st.read_bytes.fetch_add(n, Ordering::Relaxed),
        Op::Write => st.write_bytes.fetch_add(n, Ordering::Relaxed),
    };
}

#[allow(clippy::too_many_arguments)]
fn plain(
    file: &FileHandle,
    op: Op,
    buf: &Buffer,
    buf_off: usize,
    size: usize,
    file_off: u64,
    cancel: Option<&AtomicBool>,
    force_bounce: Option<&str>,
) -> Result<usize> {
    buf.check_range("buffer range", buf_off as u64, size as u64)?;
    if file_off
        .checked_add(size as u64)
        .is_none_or(|e| e > i64::MAX as u64)
    {
        return Err(Error::InvalidArgument(format!(
            "file offset {file_off} + size {size} overflows"
        )));
    }
    if size == 0 {
        return Ok(0);
    }
    let (pieces, reason) = plan(file, buf, 0, buf_off, size, file_off, force_bounce)?;
    let n = run_call(file, &[buf], op, pieces, cancel, reason)?;
    count_moved(file, op, n as u64);
    Ok(n)
}

fn counted<T>(file: &FileHandle, r: Result<T>) -> Result<T> {
    if r.is_err() {
        file.stats.errors.fetch_add(1, Ordering::Relaxed);
    }
    r
}

pub(crate) fn do_io(
    file: &FileHandle,
    op: Op,
    buf: &Buffer,
    buf_off: usize,
    size: usize,
    file_off: u64,
    cancel: Option<&AtomicBool>,
) -> Result<usize> {
    counted(
        file,
        plain(file, op, buf, buf_off, size, file_off, cancel, None),
    )
}

// ---------------------------------------------------------------- vectored I/O

struct VReq {
    file_off: u64,
    len: usize,
    iov: Vec<libc::iovec>,
    /// (segment index, offset in segment, bytes) for the bounce retry.
    parts: Vec<(usize, usize, usize)>,
}

fn validate_segments(
    file: &FileHandle,
    segs: &[Segment<'_>],
    file_off: u64,
    max: usize,
) -> Result<()> {
    if segs.len() > max {
        return Err(Error::TooManySegments {
            count: segs.len(),
            max,
        });
    }
    let mut total: u64 = 0;
    for (i, s) in segs.iter().enumerate() {
        if s.size == 0 {
            return Err(Error::segment(
                i,
                Error::InvalidArgument("segment size is zero".into()),
            ));
        }
        s.buffer
            .check_range("segment", s.offset as u64, s.size as u64)
            .map_err(|e| Error::segment(i, e))?;
        if file.config.strict {
            if let Some(r) = direct_blocker(file, s.buffer) {
                return Err(Error::segment(i, Error::P2pUnavailable { reason: r }));
            }
            let addr = s.buffer.io_ptr().map_or(0, |p| p as u64 + s.offset as u64);
            check_strict_alignment(file, addr, s.size as u64, file_off + total)
                .map_err(|e| Error::segment(i, e))?;
        }
        total += s.size as u64;
    }
    if file_off
        .checked_add(total)
        .is_none_or(|e| e > i64::MAX as u64)
    {
        return Err(Error::InvalidArgument(
            "file offset + total size overflows".into(),
        ));
    }
    Ok(())
}

/// Packs segments into READV/WRITEV requests: memory-contiguous neighbours
/// share an iovec, a request holds at most UIO_MAXIOV iovecs and
/// `chunk_size` bytes (a larger segment is split across requests).
fn pack(segs: &[Segment<'_>], file_off: u64, chunk: usize) -> Vec<VReq> {
    let mut out: Vec<VReq> = Vec::new();
    let mut cur = VReq {
        file_off,
        len: 0,
        iov: Vec::new(),
        parts: Vec::new(),
    };
    let mut off = file_off;
    for (i, s) in segs.iter().enumerate() {
        let base = s.buffer.io_ptr().map_or(0, |p| p as usize) + s.offset;
        let mut done = 0;
        while done < s.size {
            if cur.len == chunk || cur.iov.len() == UIO_MAXIOV {
                let next = VReq {
                    file_off: off,
                    len: 0,
                    iov: Vec::new(),
                    parts: Vec::new(),
                };
                out.push(std::mem::replace(&mut cur, next));
            }
            let n = (s.size - done).min(chunk - cur.len);
            let addr = base + done;
            match cur.iov.last_mut() {
                Some(last) if last.iov_base as usize + last.iov_len == addr => last.iov_len += n,
                _ => cur.iov.push(libc::iovec {
                    iov_base: addr as *mut libc::c_void,
                    iov_len: n,
                }),
            }
            cur.parts.push((i, done, n));
            cur.len += n;
            done += n;
            off += n as u64;
        }
    }
    if cur.len > 0 {
        out.push(cur);
    }
    out
}

/// Joins neighbouring staged reads of a vectored call (segments next to each
/// other in the file) into one read of up to a chunk into one bounce buffer,
/// copied out to each segment: a readv of small segments into GPU memory
/// then costs what a read of the same bytes costs, plus a queued copy per
/// segment.
fn merge_staged(file: &FileHandle, pieces: Vec<Piece>) -> Vec<Piece> {
    let chunk = file.config.bounce_chunk_size;
    let a = file.off_align.max(1);
    let mut out: Vec<Piece> = Vec::with_capacity(pieces.len());
    for p in pieces {
        if let Some(last) = out.last_mut() {
            let end = p.file_off + p.len as u64;
            let span = round_up(end, a) - round_down(last.file_off, a);
            if last.mode == Mode::Staged
                && p.mode == Mode::Staged
                && last.file_off + last.len as u64 == p.file_off
                && span <= chunk as u64
            {
                if last.more.is_empty() {
                    last.more.push((last.buf, last.buf_off, last.len));
                }
                match last.more.last_mut() {
                    Some(d) if d.0 == p.buf && d.1 + d.2 == p.buf_off => d.2 += p.len,
                    _ => last.more.push((p.buf, p.buf_off, p.len)),
                }
                last.len += p.len;
                continue;
            }
        }
        out.push(p);
    }
    out
}

/// The distinct buffers of the segments (the same [`Buffer`] once) and each
/// segment's index among them: segments side by side in one buffer then
/// merge into one destination, so one copy ([`merge_staged`]).
fn distinct_buffers<'a>(segs: &[Segment<'a>]) -> (Vec<&'a Buffer>, Vec<usize>) {
    let mut bufs: Vec<&'a Buffer> = Vec::new();
    let mut seen: std::collections::HashMap<*const Buffer, usize> =
        std::collections::HashMap::new();
    let idx = segs
        .iter()
        .map(|s| {
            *seen.entry(std::ptr::from_ref(s.buffer)).or_insert_with(|| {
                bufs.push(s.buffer);
                bufs.len() - 1
            })
        })
        .collect();
    (bufs, idx)
}

/// Number of READV/WRITEV requests `vectored` would submit for these
/// segments with this chunk size (for tests and tuning).
pub fn packed_requests(segs: &[Segment<'_>], chunk_size: usize) -> usize {
    pack(segs, 0, chunk_size.max(1)).len()
}

/// A vectored call's segments planned as plain I/Os, neighbouring staged
/// reads merged ([`merge_staged`]): the call's distinct buffers, its
/// pieces and the reason it bounces, if it does.
type Planned<'a> = (Vec<&'a Buffer>, Vec<Piece>, Option<String>);

fn plan_segments<'a>(
    file: &FileHandle,
    op: Op,
    segs: &[Segment<'a>],
    file_off: u64,
    blocker: Option<String>,
) -> Result<Planned<'a>> {
    let (bufs, idx) = distinct_buffers(segs);
    let mut pieces: Vec<Piece> = Vec::new();
    let mut reason = blocker.clone();
    let mut off = file_off;
    for (s, &i) in segs.iter().zip(&idx) {
        let (p, r) = plan(file, s.buffer, i, s.offset, s.size, off, blocker.as_deref())?;
        pieces.extend(p);
        if reason.is_none() {
            reason = r;
        }
        off += s.size as u64;
    }
    if op == Op::Read {
        pieces = merge_staged(file, pieces);
    }
    Ok((bufs, pieces, reason))
}

fn vectored(
    file: &FileHandle,
    op: Op,
    segs: &[Segment<'_>],
    file_off: u64,
    max: usize,
    cancel: Option<&AtomicBool>,
) -> Result<usize> {
    validate_segments(file, segs, file_off, max)?;
    if segs.is_empty() {
        return Ok(0);
    }
    let st = &file.stats;
    let blocker = segs.iter().find_map(|s| direct_blocker(file, s.buffer));
    let aligned = file_off % file.off_align == 0
        && segs.iter().all(|s| {
            s.buffer
                .io_ptr()
                .is_some_and(|p| (p as u64 + s.offset as u64) % file.mem_align == 0)
                && s.size as u64 % file.off_align == 0
        });
    if blocker.is_some() || !aligned {
        // Each segment planned as a plain I/O (edges/bounce as needed), all
        // of them run as one call: in flight together, split over threads
        // like a plain call of the same size.
        let (bufs, pieces, reason) = plan_segments(file, op, segs, file_off, blocker)?;
        let n = run_call(file, &bufs, op, pieces, cancel, reason)?;
        count_moved(file, op, n as u64);
        return Ok(n);
    }
    let reqs = pack(segs, file_off, file.config.chunk_size);
    let cfg = &file.config;
    let qd = cfg.queue_depth as usize;
    let write = op == Op::Write;
    let Some(dfd) = file.direct.as_ref().map(|d| d.as_raw_fd()) else {
        return Err(Error::InvalidArgument(
            "internal: no O_DIRECT descriptor".into(),
        ));
    };
    let mut err: Option<Error> = None;
    let mut eof: Option<u64> = None;
    let mut redo: Vec<usize> = Vec::new(); // requests to retry through bounce
    let mut partial: Vec<(usize, usize)> = Vec::new(); // (request, bytes done) short writes
    let mut fallback_reason: Option<(i32, String)> = None;
    with_backend(cfg, reqs.len(), |be| -> Result<()> {
        let mut next = 0usize;
        let mut inflight = 0usize;
        loop {
            while err.is_none() && inflight < qd && next < reqs.len() {
                if cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
                    err = Some(Error::Canceled);
                    break;
                }
                let r = &reqs[next];
                let req = Req::Rwv {
                    write,
                    fd: dfd,
                    iov: r.iov.as_ptr(),
                    cnt: r.iov.len(),
                    off: r.file_off,
                };
                be.push(next as u64, &req)?;
                st.direct_ops.fetch_add(1, Ordering::Relaxed);
                inflight += 1;
                next += 1;
            }
            if inflight == 0 {
                return Ok(());
            }
            let (id, res) = be.wait_one()?;
            inflight -= 1;
            let r = &reqs[id as usize];
            if res < 0 {
                let e = -res;
                if is_fallback_errno(e) {
                    let reason = format!(
                        "O_DIRECT {}v at {} refused: {}",
                        op_name(op),
                        r.file_off,
                        std::io::Error::from_raw_os_error(e)
                    );
                    if cfg.strict {
                        err.get_or_insert(Error::P2pUnavailable { reason });
                    } else {
                        fallback_reason.get_or_insert((e, reason));
                        redo.push(id as usize);
                    }
                } else {
                    err.get_or_insert(Error::os(
                        format!("{}v at offset {}", op_name(op), r.file_off),
                        e,
                    ));
                }
                continue;
            }
            let n = res as usize;
            st.direct_bytes.fetch_add(n as u64, Ordering::Relaxed);
            if n < r.len {
                if write {
                    partial.push((id as usize, n));
                } else {
                    let at = r.file_off + n as u64;
                    eof = Some(eof.map_or(at, |e| e.min(at)));
                }
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    if let Some((e, r)) = &fallback_reason {
        st.fallback(FallbackCause::of_direct_errno(*e), r);
    }
    // Bounce retries and short-write remainders, outside the ring.
    let mut redo_parts: Vec<(usize, usize, usize, u64)> = Vec::new();
    for &ri in &redo {
        let r = &reqs[ri];
        let mut o = r.file_off;
        for &(si, so, n) in &r.parts {
            redo_parts.push((si, so, n, o));
            o += n as u64;
        }
    }
    for &(ri, done) in &partial {
        let r = &reqs[ri];
        let mut o = r.file_off;
        let mut skip = done;
        for &(si, so, n) in &r.parts {
            if skip >= n {
                skip -= n;
                o += n as u64;
                continue;
            }
            redo_parts.push((si, so + skip, n - skip, o + skip as u64));
            o += n as u64;
            skip = 0;
        }
    }
    redo_parts.sort_by_key(|p| p.3);
    let reason = fallback_reason
        .as_ref()
        .map_or("short write remainder", |(_, r)| r.as_str());
    let mut redo_bytes = 0u64;
    for (si, so, n, o) in redo_parts {
        if eof.is_some_and(|e| o >= e) {
            break;
        }
        let s = &segs[si];
        let got = plain(
            file,
            op,
            s.buffer,
            s.offset + so,
            n,
            o,
            cancel,
            Some(reason),
        )?;
        redo_bytes += got as u64;
        if got < n {
            let at = o + got as u64;
            eof = Some(eof.map_or(at, |e| e.min(at)));
            break;
        }
    }
    let total: u64 = segs.iter().map(|s| s.size as u64).sum();
    let end = file_off + total;
    let n = eof.unwrap_or(end).min(end) - file_off;
    // plain() counted the bounce retries itself
    count_moved(file, op, n.saturating_sub(redo_bytes));
    Ok(n as usize)
}

pub(crate) fn do_vectored(
    file: &FileHandle,
    op: Op,
    segs: &[Segment<'_>],
    file_off: u64,
    max: usize,
    cancel: Option<&AtomicBool>,
) -> Result<usize> {
    counted(file, vectored(file, op, segs, file_off, max, cancel))
}

// ---------------------------------------------------------------- public API

impl FileHandle {
    /// Reads `size` bytes at `file_off` into `buf[buf_off..]`. Returns the
    /// bytes read, fewer at end of file.
    pub fn read(&self, buf: &Buffer, buf_off: usize, size: usize, file_off: u64) -> Result<usize> {
        do_io(self, Op::Read, buf, buf_off, size, file_off, None)
    }

    /// Writes `size` bytes of `buf[buf_off..]` at `file_off`.
    pub fn write(&self, buf: &Buffer, buf_off: usize, size: usize, file_off: u64) -> Result<usize> {
        do_io(self, Op::Write, buf, buf_off, size, file_off, None)
    }

    /// Reads into the segments, in order, from `file_off` on (at most
    /// [`FGDS_IOV_MAX`] segments).
    pub fn readv(&self, segs: &[Segment<'_>], file_off: u64) -> Result<usize> {
        do_vectored(self, Op::Read, segs, file_off, FGDS_IOV_MAX, None)
    }

    /// Writes the segments, in order, from `file_off` on.
    pub fn writev(&self, segs: &[Segment<'_>], file_off: u64) -> Result<usize> {
        do_vectored(self, Op::Write, segs, file_off, FGDS_IOV_MAX, None)
    }
}

/// `file.read(buf, buf_off, size, file_off)`.
pub fn read(
    file: &FileHandle,
    buf: &Buffer,
    buf_off: usize,
    size: usize,
    file_off: u64,
) -> Result<usize> {
    file.read(buf, buf_off, size, file_off)
}

/// `file.write(buf, buf_off, size, file_off)`.
pub fn write(
    file: &FileHandle,
    buf: &Buffer,
    buf_off: usize,
    size: usize,
    file_off: u64,
) -> Result<usize> {
    file.write(buf, buf_off, size, file_off)
}

/// `file.readv(segs, file_off)`.
pub fn readv(file: &FileHandle, segs: &[Segment<'_>], file_off: u64) -> Result<usize> {
    file.readv(segs, file_off)
}

/// `file.writev(segs, file_off)`.
pub fn writev(file: &FileHandle, segs: &[Segment<'_>], file_off: u64) -> Result<usize> {
    file.writev(segs, file_off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarsen_joins_neighbours_within_aligned_stretches() {
        let m = 1u64 << 20;
        let staged =
            |off: u64, len: u64| Piece::new(off, 0, off as usize, len as usize, Mode::Staged);
        // 2 MiB..18 MiB in 4 MiB-aligned pieces: 2 MiB, then 4 MiB each
        let mut ps = vec![staged(2 * m, 2 * m)];
        ps.extend((1..4).map(|i| staged(i * 4 * m, 4 * m)));
        ps.push(staged(16 * m, 2 * m));
        let got: Vec<(u64, usize)> = coarsen(ps, 8 * m)
            .iter()
            .map(|p| (p.file_off, p.len))
            .collect();
        let mib = 1usize << 20;
        assert_eq!(
            got,
            vec![(2 * m, 6 * mib), (8 * m, 8 * mib), (16 * m, 2 * mib)]
        );
        // other modes, buffers and gaps stay apart
        let mut other = staged(4 * m, 4 * m);
        other.buf = 1;
        let direct = Piece::new(8 * m, 0, 8 << 20, 4 << 20, Mode::Direct);
        let ps = vec![staged(0, 4 * m), other, direct, staged(16 * m, 4 * m)];
        assert_eq!(coarsen(ps, 8 * m).len(), 4);
    }

    fn file(len: usize, cfg: Config) -> (tempfile::TempDir, FileHandle) {
        let d = tempfile::Builder::new()
            .prefix("fgds-test")
            .tempdir_in("/var/tmp")
            .expect("tempdir");
        let p = d.path().join("f");
        std::fs::write(&p, vec![7u8; len]).expect("write");
        let f = FileHandle::open(&p, libc::O_RDONLY, 0, cfg).expect("open");
        (d, f)
    }

    /// Bytes of each piece of a plain call (the destinations of a merged one).
    fn sizes(pieces: &[Piece]) -> Vec<usize> {
        pieces.iter().map(|p| p.len).collect()
    }

    #[test]
    fn bounce_pieces_and_direct_requests_have_their_own_sizes() {
        let cfg = Config {
            chunk_size: 64 << 10,
            bounce_chunk_size: 256 << 10,
            ..Config::default()
        };
        let (_d, f) = file(1 << 20, cfg);
        let bounced = Buffer::alloc_host_bounced(1 << 20).expect("alloc");
        let host = Buffer::alloc_host(1 << 20).expect("alloc");
        let (p, why) = plan(&f, &bounced, 0, 0, 1 << 20, 0, None).expect("plan");
        assert!(why.is_some(), "bounced memory bounces");
        assert_eq!(sizes(&p), vec![256 << 10; 4]);
        assert!(p.iter().all(|p| p.mode == Mode::Staged));
        let (p, why) = plan(&f, &host, 0, 0, 1 << 20, 0, None).expect("plan");
        assert!(why.is_none(), "{why:?}");
        assert_eq!(sizes(&p), vec![64 << 10; 16]);
        assert!(p.iter().all(|p| p.mode == Mode::Direct));
        // a bounced piece ends on a bounce-chunk boundary of the file
        let (p, _) = plan(&f, &bounced, 0, 0, 300 << 10, 100 << 10, None).expect("plan");
        assert_eq!(sizes(&p), vec![156 << 10, 144 << 10]);
        // the defaults differ: 4 MiB pieces, 1 MiB requests
        let d = Config::default();
        assert_eq!(
            (d.bounce_chunk_size, d.chunk_size),
            (DEFAULT_BOUNCE_CHUNK_SIZE, DEFAULT_CHUNK_SIZE)
        );
        assert_ne!(DEFAULT_BOUNCE_CHUNK_SIZE, DEFAULT_CHUNK_SIZE);
    }

    #[test]
    fn a_bounced_call_is_split_in_its_own_parts() {
        let cfg = Config {
            split_size: 16 << 20,
            bounce_split_size: 8 << 20,
            ..Config::default()
        };
        assert_eq!(split_size(&cfg, 0, 100), 16 << 20, "direct");
        assert_eq!(split_size(&cfg, 50, 100), 16 << 20, "half and half");
        assert_eq!(split_size(&cfg, 51, 100), 8 << 20, "mostly bounced");
        assert_eq!(split_size(&cfg, 100, 100), 8 << 20, "bounced");
        assert_ne!(DEFAULT_BOUNCE_SPLIT_SIZE, DEFAULT_SPLIT_SIZE);
    }

    #[test]
    fn segments_side_by_side_in_one_buffer_are_one_copy() {
        let cfg = Config {
            bounce_chunk_size: 1 << 20,
            ..Config::default()
        };
        let (_d, f) = file(1 << 20, cfg);
        let one = Buffer::alloc_host_bounced(64 << 10).expect("alloc");
        let four: Vec<Buffer> = (0..4)
            .map(|_| Buffer::alloc_host_bounced(16 << 10).expect("alloc"))
            .collect();
        let q = 16 << 10;
        let side_by_side: Vec<Segment<'_>> = (0..4)
            .map(|i| Segment {
                buffer: &one,
                offset: i * q,
                size: q,
            })
            .collect();
        let (bufs, p, why) =
            plan_segments(&f, Op::Read, &side_by_side, 0, Some("test".into())).expect("plan");
        assert!(why.is_some());
        assert_eq!(bufs.len(), 1, "one buffer, once");
        assert_eq!(p.len(), 1, "one read");
        assert_eq!(
            p[0].more,
            vec![(0, 0, 64 << 10)],
            "one destination: one copy"
        );
        let apart: Vec<Segment<'_>> = four
            .iter()
            .map(|b| Segment {
                buffer: b,
                offset: 0,
                size: q,
            })
            .collect();
        let (bufs, p, _) =
            plan_segments(&f, Op::Read, &apart, 0, Some("test".into())).expect("plan");
        assert_eq!((bufs.len(), p.len()), (4, 1), "one read");
        let dests: Vec<usize> = p[0].more.iter().map(|d| d.0).collect();
        assert_eq!(dests, vec![0, 1, 2, 3], "a copy into each buffer");
        // one buffer, but not side by side: a copy per segment
        let gaps: Vec<Segment<'_>> = (0..2)
            .map(|i| Segment {
                buffer: &one,
                offset: i * 2 * q,
                size: q,
            })
            .collect();
        let (bufs, p, _) =
            plan_segments(&f, Op::Read, &gaps, 0, Some("test".into())).expect("plan");
        assert_eq!((bufs.len(), p.len()), (1, 1));
        assert_eq!(p[0].more, vec![(0, 0, q), (0, 2 * q, q)]);
    }
}
