//! Tunables of a [`FileHandle`](crate::FileHandle): [`Config`], its built-in
//! defaults and the limits of a request. The defaults a process starts
//! from are these, or what the `FGDS_*` environment sets
//! ([`crate::env`], which also makes [`Config::default`] and
//! [`Config::validate`]).
//!
//! # Defaults
//!
//! [`Config::default`] uses 1 MiB chunks and a queue depth of 16 per call.
//! They were chosen with `fgds bench` on the development host (2 vCPUs,
//! virtio disk on ext4, no GPU); see `tools/lib/fgds/README.md` for the
//! measured table. Larger chunks gave no more bandwidth there, and deeper
//! queues only added latency; 1 MiB also keeps each request below the usual
//! NVMe MDTS split (and 1 MiB is what KvikIO and cuFile default to).
//!
//! A call larger than [`Config::split_size`] (16 MiB) runs on up to
//! [`Config::parallel`] threads (the I/O threads' count): the calling
//! thread and I/O threads take parts of about `split_size` bytes in file
//! order, each with its own ring and bounce buffers, so that the bounce
//! copies of one overlap the reads of the others. Measured on the H200
//! machine with `tools/testing/fgds-bench/gpu-tune.py` (one `pread` of
//! 4 GiB into CUDA memory through the page cache: 4471 MiB/s on the
//! calling thread alone, 39362 on 16 threads with 16 MiB parts, a batch of
//! 64 x 32 MiB 37039); the table is in `tools/lib/fgds/README.md`.
//!
//! The bounce path has sizes of its own ([`Config::bounce_chunk_size`],
//! 4 MiB pieces, and [`Config::bounce_split_size`], 8 MiB parts, for a call
//! mostly through it), so that `chunk_size` stays the size of every
//! O_DIRECT request of the direct path (below an NVMe's MDTS) while the
//! bounce path pays its per-piece costs (a system call, a queued copy, a
//! wait) over fewer pieces. Measured on the H200 machine with
//! `gpu-tune.py --only bounce` (the table is in the README). A read whose
//! bounce reads go O_DIRECT (cold data, [`BounceRead`]) takes pieces and
//! parts of twice and four times those sizes (the engine's
//! `COLD_BOUNCE_CHUNKS` and `COLD_BOUNCE_SPLITS`).

use crate::error::{Error, Result};

/// Most segments one vectored call may have.
pub const FGDS_IOV_MAX: usize = 1024;
/// Most segments one vectored batch element may have.
pub const FGDS_BATCH_IOV_MAX: usize = 128;
/// Most iovecs one READV/WRITEV request carries (the kernel's UIO_MAXIOV).
pub const UIO_MAXIOV: usize = 1024;
/// Largest byte count one request may carry (the kernel's MAX_RW_COUNT).
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

/// Default chunk size (see the module documentation).
pub const DEFAULT_CHUNK_SIZE: usize = 1 << 20;
/// Default queue depth (see the module documentation).
pub const DEFAULT_QUEUE_DEPTH: u32 = 16;
/// Default bytes of a call each of its threads takes at a time (see the
/// module documentation).
pub const DEFAULT_SPLIT_SIZE: usize = 16 << 20;
/// Default bytes of one piece of the bounce path (see the module
/// documentation).
pub const DEFAULT_BOUNCE_CHUNK_SIZE: usize = 4 << 20;
/// Default bytes of a bounced call each of its threads takes at a time
/// (see the module documentation).
pub const DEFAULT_BOUNCE_SPLIT_SIZE: usize = 8 << 20;

/// How the bounce path's reads reach the bounce buffers (see the module
/// documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BounceRead {
    /// O_DIRECT unless `cachestat(2)` finds at least half of the range in
    /// the page cache (where it cannot tell: a probe of a few bytes with
    /// `RWF_NOWAIT`; where that cannot tell either: the page cache).
    Auto,
    /// Always O_DIRECT (where the file has an O_DIRECT descriptor).
    Direct,
    /// Always through the page cache.
    Buffered,
}

/// Tunables of a [`FileHandle`](crate::FileHandle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Bytes per request a large I/O is split into on the direct path (peer
    /// to peer, O_DIRECT into host memory) and through the page cache into
    /// host memory (multiple of 4096).
    pub chunk_size: usize,
    /// Bytes per piece on the bounce path (memory the kernel cannot reach:
    /// a read into a pinned bounce buffer and its copy to the GPU, or a
    /// copy out of the GPU and its write), multiple of 4096. Apart from
    /// `chunk_size` so that the direct path keeps requests below an NVMe's
    /// transfer limit while the bounce path pays its per-piece costs (a
    /// system call, a queued copy, a wait) over fewer, larger pieces.
    pub bounce_chunk_size: usize,
    /// Requests in flight per thread of a call (io_uring entries of the
    /// thread's ring; a call split over `parallel` threads has up to
    /// `parallel * queue_depth`).
    pub queue_depth: u32,
    /// Refuse every bounce: misalignment is [`Error::Misaligned`] and an
    /// impossible direct path is [`Error::P2pUnavailable`].
    pub strict: bool,
    /// Use io_uring (otherwise pread/pwrite/preadv/pwritev, one at a time).
    pub use_io_uring: bool,
    /// Do not open an O_DIRECT descriptor (everything goes through the
    /// page cache / bounce buffers; reported as a fallback).
    pub disable_direct: bool,
    /// Most threads one call runs on: the calling thread plus up to
    /// `parallel - 1` of the I/O threads (`FGDS_THREADS`), each with its own
    /// io_uring and its own bounce buffers. 1: the calling thread only.
    pub parallel: u32,
    /// Bytes of a call each thread takes at a time (a multiple of 4096): a
    /// call of at most this many bytes runs on the calling thread alone.
    pub split_size: usize,
    /// `split_size` for a call that goes mostly through the bounce path.
    pub bounce_split_size: usize,
    /// How reads into memory that bounces reach the bounce buffers.
    pub bounce_read: BounceRead,
}

impl Config {
    /// Checks the values, not the environment ([`Config::validate`] checks both).
    pub(crate) fn check_values(&self) -> Result<()> {
        if self.chunk_size == 0 || self.chunk_size % 4096 != 0 || self.chunk_size > MAX_RW_COUNT {
            return Err(Error::InvalidArgument(format!(
                "chunk_size {} must be a non-zero multiple of 4096 up to {MAX_RW_COUNT}",
                self.chunk_size
            )));
        }
        if self.bounce_chunk_size == 0
            || self.bounce_chunk_size % 4096 != 0
            || self.bounce_chunk_size > MAX_RW_COUNT
        {
            return Err(Error::InvalidArgument(format!(
                "bounce_chunk_size {} must be a non-zero multiple of 4096 up to {MAX_RW_COUNT}",
                self.bounce_chunk_size
            )));
        }
        if self.queue_depth == 0 || self.queue_depth > 4096 {
            return Err(Error::InvalidArgument(format!(
                "queue_depth {} must be 1..=4096",
                self.queue_depth
            )));
        }
        if self.parallel == 0 || self.parallel > 256 {
            return Err(Error::InvalidArgument(format!(
                "parallel {} must be 1..=256",
                self.parallel
            )));
        }
        if self.split_size == 0 || self.split_size % 4096 != 0 {
            return Err(Error::InvalidArgument(format!(
                "split_size {} must be a non-zero multiple of 4096",
                self.split_size
            )));
        }
        if self.bounce_split_size == 0 || self.bounce_split_size % 4096 != 0 {
            return Err(Error::InvalidArgument(format!(
                "bounce_split_size {} must be a non-zero multiple of 4096",
                self.bounce_split_size
            )));
        }
        Ok(())
    }
}
