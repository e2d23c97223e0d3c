//! The pieces of one call (or of one part of a split call) on the calling
//! thread's ring: up to `queue_depth` in flight, the bounce buffers and the
//! copies queued from them into GPU memory, the page cache or O_DIRECT for
//! a bounce read (`cachestat(2)`), and the bounce retry of refused pieces.

use super::plan::{
    direct_span, indirect_mode, is_fallback_errno, op_name, round_down, round_up, Mode, Op, Piece,
    Stop,
};
use crate::backend::{with_backend, Mem, Req};
use crate::buffer::{page_size, Buffer, QueuedCopy, Staging};
use crate::config::BounceRead;
use crate::error::{Error, Result};
use crate::file::FileHandle;
use crate::stats::FallbackCause;
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Pinned bounce buffers one thread of a call holds at most, in bytes (and
/// at least two pieces' worth): the bounce path's buffers of a thread are
/// `min(8, queue_depth, this / bounce_chunk_size)` pieces, at least 2. On
/// the H200 machine a batch of 32 MiB reads with 4 MiB pieces ran 41262
/// MiB/s with 2 buffers a thread and 35375 with 4 (tools/lib/fgds/README.md).
const BOUNCE_BYTES_PER_THREAD: usize = 8 << 20;

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
pub(super) fn bounce_direct(file: &FileHandle, start: u64, end: u64) -> bool {
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
pub(super) fn run_pieces(
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
                let req = Req {
                    write,
                    fd,
                    off,
                    mem: Mem::Buf(ptr, len),
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
