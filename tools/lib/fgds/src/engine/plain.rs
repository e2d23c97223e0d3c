//! Plain (one-buffer) calls: the checks of the arguments, the plan and its
//! run, the counters a call adds to (and a batch's requests on its own
//! ring, through [`single_direct`] and [`count_direct`]).

use super::plan::{direct_blocker, plan, Op};
use super::split::run_call;
use crate::buffer::{page_size, Buffer};
use crate::error::{Error, Result};
use crate::file::FileHandle;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

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
/// [`run_pieces`](super::pieces::run_pieces) (a batch's ring).
pub(crate) fn count_direct(file: &FileHandle, op: Op, n: usize) {
    let st = &file.stats;
    st.direct_ops.fetch_add(1, Ordering::Relaxed);
    st.direct_bytes.fetch_add(n as u64, Ordering::Relaxed);
    count_moved(file, op, n as u64);
}

/// Counts `n` bytes a call (or a batch's request) read or wrote.
pub(super) fn count_moved(file: &FileHandle, op: Op, n: u64) {
    let st = &file.stats;
    match op {
        Op::Read => st.read_bytes.fetch_add(n, Ordering::Relaxed),
        Op::Write => st.write_bytes.fetch_add(n, Ordering::Relaxed),
    };
}

#[allow(clippy::too_many_arguments)]
pub(super) fn plain(
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

pub(super) fn counted<T>(file: &FileHandle, r: Result<T>) -> Result<T> {
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
