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

pub use crate::config::{
    BounceRead, Config, DEFAULT_BOUNCE_CHUNK_SIZE, DEFAULT_BOUNCE_SPLIT_SIZE, DEFAULT_CHUNK_SIZE,
    DEFAULT_QUEUE_DEPTH, DEFAULT_SPLIT_SIZE, FGDS_BATCH_IOV_MAX, FGDS_IOV_MAX, MAX_RW_COUNT,
    UIO_MAXIOV,
};
pub use crate::stats::Stats;

use crate::buffer::Buffer;
use crate::error::Result;
use crate::file::FileHandle;

mod pieces;
mod plain;
mod plan;
mod split;
mod vectored;

pub(crate) use plain::{count_direct, do_io, single_direct};
pub use plan::{Op, Segment};
pub(crate) use split::without_split;
pub(crate) use vectored::do_vectored;
pub use vectored::packed_requests;

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
mod tests;
