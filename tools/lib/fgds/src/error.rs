//! The typed error of the library and its errno-style codes.

use std::io;

/// Result alias of the library.
pub type Result<T> = std::result::Result<T, Error>;

/// Every error the library returns. [`Error::errno`] maps it to a positive
/// errno value; the C ABI returns its negation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A range lies outside a buffer.
    #[error("out of bounds: {what}: offset {offset} + size {size} > length {len}")]
    OutOfBounds {
        /// Which range.
        what: &'static str,
        /// Start of the range.
        offset: u64,
        /// Size of the range.
        size: u64,
        /// Length of the object.
        len: u64,
    },
    /// An offset, size or address is not aligned as O_DIRECT (strict mode) needs.
    #[error("misaligned {what}: {value:#x} is not a multiple of {align}")]
    Misaligned {
        /// Which value.
        what: &'static str,
        /// The value.
        value: u64,
        /// The alignment it needs.
        align: u64,
    },
    /// A segment of a vectored request is invalid.
    #[error("segment {index}: {source}")]
    Segment {
        /// Index of the segment in the caller's array.
        index: usize,
        /// What is wrong with it.
        #[source]
        source: Box<Error>,
    },
    /// Too many segments in one vectored request.
    #[error("too many segments: {count} > {max}")]
    TooManySegments {
        /// Segments passed.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An address is not inside a registered buffer.
    #[error("address {addr:#x} (+{size}) is not inside a registered buffer")]
    NotRegistered {
        /// The address.
        addr: u64,
        /// Bytes from it.
        size: u64,
    },
    /// An address range overlaps a buffer that is already registered.
    #[error("address {addr:#x} is already registered")]
    AlreadyRegistered {
        /// The address.
        addr: u64,
    },
    /// No fgds device (module not loaded, no GPU, node missing).
    #[error("no fgds device: {0}")]
    NoDevice(String),
    /// The driver speaks another API version.
    #[error("fgds driver API version {found}, this library needs {expected}")]
    ApiVersion {
        /// Version of the driver.
        found: u32,
        /// Version of the library.
        expected: u32,
    },
    /// Direct peer-to-peer I/O cannot be done and `Config::strict` forbids the fallback.
    #[error("peer-to-peer I/O unavailable: {reason}")]
    P2pUnavailable {
        /// Why.
        reason: String,
    },
    /// A batch has no room for the request.
    #[error("batch full: {in_flight} in flight + {requested} > capacity {capacity}")]
    BatchFull {
        /// Capacity of the batch.
        capacity: usize,
        /// Requests submitted and not reaped yet.
        in_flight: usize,
        /// Requests in this submission.
        requested: usize,
    },
    /// The request was canceled.
    #[error("canceled")]
    Canceled,
    /// A wait timed out.
    #[error("timed out")]
    Timeout,
    /// The GPU runtime library (CUDA/HIP) cannot be used.
    #[error("{runtime} unavailable: {reason}")]
    RuntimeUnavailable {
        /// "CUDA" or "HIP".
        runtime: &'static str,
        /// Why.
        reason: String,
    },
    /// A CUDA/HIP call failed.
    #[error("{call} failed with code {code}")]
    Runtime {
        /// The function.
        call: &'static str,
        /// Its return code.
        code: i32,
    },
    /// The handle is closed or invalid.
    #[error("bad handle: {0}")]
    BadHandle(String),
}

impl Error {
    /// Positive errno-style code of the error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::InvalidArgument(_) | Error::Misaligned { .. } => libc::EINVAL,
            Error::OutOfBounds { .. } => libc::ERANGE,
            Error::Segment { source, .. } => source.errno(),
            Error::TooManySegments { .. } => libc::E2BIG,
            Error::NotRegistered { .. } => libc::EFAULT,
            Error::AlreadyRegistered { .. } => libc::EEXIST,
            Error::NoDevice(_) => libc::ENODEV,
            Error::ApiVersion { .. } => libc::EPROTO,
            Error::P2pUnavailable { .. } => libc::EREMOTEIO,
            Error::BatchFull { .. } => libc::EAGAIN,
            Error::Canceled => libc::ECANCELED,
            Error::Timeout => libc::ETIMEDOUT,
            Error::RuntimeUnavailable { .. } => libc::ENOSYS,
            Error::Runtime { .. } => libc::EIO,
            Error::BadHandle(_) => libc::EBADF,
        }
    }

    /// Wraps the current `errno` (or an explicit one) as [`Error::Io`].
    pub(crate) fn os(op: impl Into<String>, errno: i32) -> Self {
        Error::Io {
            op: op.into(),
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// Wraps the last OS error as [`Error::Io`].
    pub(crate) fn last_os(op: impl Into<String>) -> Self {
        Error::Io {
            op: op.into(),
            source: io::Error::last_os_error(),
        }
    }

    pub(crate) fn segment(index: usize, e: Error) -> Self {
        Error::Segment {
            index,
            source: Box::new(e),
        }
    }
}

/// Short description of an errno-style code (positive or negative), as
/// used by `fgds_strerror`.
pub fn strerror(code: i32) -> &'static str {
    match code.unsigned_abs() as i32 {
        0 => "success",
        libc::EPERM => "operation not permitted",
        libc::ENOENT => "no such file, device or registration",
        libc::EIO => "I/O error (or a CUDA/HIP call failed)",
        libc::EBADF => "bad file descriptor or handle",
        libc::EAGAIN => "batch full, try again after reaping events",
        libc::ENOMEM => "out of memory",
        libc::EACCES => "permission denied",
        libc::EFAULT => "address is not inside a registered buffer",
        libc::EBUSY => "pages already registered",
        libc::EEXIST => "buffer already registered",
        libc::EXDEV => "dma-buf memory is not in this GPU's BARs",
        libc::ENODEV => "no fgds device, GPU gone or buffer revoked",
        libc::EINVAL => "invalid argument or misaligned offset/size/address",
        libc::E2BIG => "too many segments",
        libc::ERANGE => "range out of bounds",
        libc::ENOSYS => "CUDA/HIP runtime not available",
        libc::EPROTO => "fgds driver API version mismatch",
        libc::EOPNOTSUPP => "operation not supported (exporter refuses peer-to-peer)",
        libc::ETIMEDOUT => "timed out",
        libc::ECANCELED => "canceled",
        libc::EREMOTEIO => "peer-to-peer I/O unavailable (strict mode forbids fallback)",
        libc::ENOSPC => "no space left on device",
        _ => "unknown error",
    }
}
