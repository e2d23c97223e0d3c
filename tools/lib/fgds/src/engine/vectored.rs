//! Vectored calls (`readv`/`writev`): the segments checked and packed into
//! as few `READV`/`WRITEV` requests as the limits allow, staged pieces of
//! several segments merged, and the bounce retry of refused requests.

use super::plain::{count_moved, counted, plain};
use super::plan::{
    check_strict_alignment, direct_blocker, is_fallback_errno, op_name, plan, round_down, round_up,
    Mode, Op, Piece, Segment,
};
use super::split::run_call;
use crate::backend::{with_backend, Mem, Req};
use crate::buffer::Buffer;
use crate::config::UIO_MAXIOV;
use crate::error::{Error, Result};
use crate::file::FileHandle;
use crate::stats::FallbackCause;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

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

pub(super) fn plan_segments<'a>(
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
                let req = Req {
                    write,
                    fd: dfd,
                    off: r.file_off,
                    mem: Mem::Iov(r.iov.as_ptr(), r.iov.len()),
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
