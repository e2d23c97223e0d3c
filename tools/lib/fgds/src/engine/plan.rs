//! What a call is made of: its direction and segments ([`Op`],
//! [`Segment`]), and the plan of one buffer's range as pieces, each going
//! O_DIRECT, buffered or through a bounce buffer, with the alignment rules
//! and the reasons the direct path cannot be taken.

use crate::buffer::{page_size, Buffer};
use crate::error::{Error, Result};
use crate::file::FileHandle;
use crate::stats::FallbackCause;
use std::sync::atomic::{AtomicBool, Ordering};

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
pub(super) enum Mode {
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
pub(super) struct Piece {
    pub(super) file_off: u64,
    /// Index of the buffer in the call's buffers.
    pub(super) buf: usize,
    pub(super) buf_off: usize,
    pub(super) len: usize,
    pub(super) mode: Mode,
    /// A staged read of several segments (`merge_staged` in
    /// [`super::vectored`]): every destination `(buffer, offset, bytes)`
    /// in file order, `buf`/`buf_off` the first's; empty for one
    /// destination.
    pub(super) more: Vec<(usize, usize, usize)>,
}

impl Piece {
    pub(super) fn new(file_off: u64, buf: usize, buf_off: usize, len: usize, mode: Mode) -> Piece {
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
pub(super) fn direct_span(file: &FileHandle, p: &Piece) -> (u64, usize) {
    let a = file.off_align.max(1);
    let start = round_down(p.file_off, a);
    let end = round_up(p.file_off + p.len as u64, a);
    (start, (end - start) as usize)
}

/// What stops a call between requests: the caller's cancel flag, and the
/// flag the threads of a split call raise when one of them failed.
#[derive(Clone, Copy)]
pub(super) struct Stop<'a> {
    pub(super) user: Option<&'a AtomicBool>,
    pub(super) split: Option<&'a AtomicBool>,
}

impl Stop<'_> {
    pub(super) fn is_set(&self) -> bool {
        self.user.is_some_and(|c| c.load(Ordering::Acquire))
            || self.split.is_some_and(|c| c.load(Ordering::Acquire))
    }
}

pub(super) fn round_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}
pub(super) fn round_down(v: u64, a: u64) -> u64 {
    v / a * a
}

pub(super) fn is_fallback_errno(e: i32) -> bool {
    matches!(
        e,
        libc::EINVAL | libc::EFAULT | libc::EREMOTEIO | libc::EOPNOTSUPP | libc::EXDEV
    )
}

// ---------------------------------------------------------------- plain I/O

pub(super) fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
    }
}

pub(super) fn indirect_mode(buf: &Buffer) -> Mode {
    if buf.is_host() {
        Mode::Buffered
    } else {
        Mode::Staged
    }
}

/// Why the direct path is impossible for this file and buffer, if it is.
pub(super) fn direct_blocker(file: &FileHandle, buf: &Buffer) -> Option<String> {
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
pub(super) fn blocker_cause(file: &FileHandle, bufs: &[&Buffer]) -> FallbackCause {
    if file.no_direct_reason.is_some() {
        return FallbackCause::NoDirect;
    }
    bufs.iter()
        .find(|b| b.io_ptr().is_none())
        .map_or(FallbackCause::NoDirect, |b| {
            b.p2p_unavailable_cause().unwrap_or(FallbackCause::Other)
        })
}

pub(super) fn check_strict_alignment(
    file: &FileHandle,
    addr: u64,
    size: u64,
    file_off: u64,
) -> Result<()> {
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

pub(super) fn plan(
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
