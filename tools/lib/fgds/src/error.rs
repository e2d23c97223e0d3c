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

/// What an errno means when fgds returns it, and what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrnoInfo {
    /// The positive errno value.
    pub errno: i32,
    /// Its symbolic name ("EBUSY").
    pub name: &'static str,
    /// What it means from fgds: the library's own errors and the driver's
    /// (`Documentation/misc-devices/fgds.rst`, "Errors").
    pub meaning: &'static str,
    /// What to do about it.
    pub hint: &'static str,
}

macro_rules! errnos {
    ($($name:ident: $meaning:literal, $hint:literal;)*) => {
        /// The one table of error text: every errno the library, the fgds
        /// driver and the bindings return, with its meaning and a hint. The
        /// C ABI (`fgds_strerror`, `fgds_strhint`), the Python bindings
        /// (`FgdsError` messages, `fgds.strerror`, `fgds.errno_table`) and
        /// the `fgds` CLI all take their text from here, and the library's
        /// README prints it (a test checks that it does).
        pub const ERRNOS: &[ErrnoInfo] = &[$(ErrnoInfo {
            errno: libc::$name,
            name: stringify!($name),
            meaning: $meaning,
            hint: $hint,
        }),*];
    };
}

errnos! {
    EPERM: "operation not permitted (also: mmap of a registration with PROT_EXEC)",
        "check the permissions of the file or the /dev/fgdsN node; map registrations without PROT_EXEC";
    ENOENT: "no such file or directory, or unknown registration cookie",
        "check the path (a file opened without creating it must exist, and its directory always), or use a cookie this open node returned";
    EIO: "I/O error, or a CUDA/HIP call failed",
        "see the detailed message (fgds_last_error, the exception text) and the kernel log";
    ENXIO: "mmap at an offset that is not a registration cookie of this open node",
        "mmap the cookie FGDS_IOCTL_REG_BUFFER returned, on the same open file";
    E2BIG: "too many segments (more than 1024 a call, 128 per batch request)",
        "split the request into at most 1024 segments (128 per batch request)";
    EBADF: "bad file descriptor or handle: not open, closed, not a dma-buf fd, or not open for this direction",
        "open the file for this direction (Python mode 'r+'/'w+', C O_RDWR) and use a handle or dma-buf fd that is still open";
    EAGAIN: "batch full: the submission exceeds the batch's capacity",
        "reap completed requests (wait/poll) before submitting more, or make the batch larger";
    ENOMEM: "out of memory (for a registration: its struct pages and arrays, 80 bytes per 4 KiB page, do not fit in memory or in the caller's memory cgroup)",
        "free memory, register or move less at once (smaller chunk_size or queue_depth), or raise the cgroup's memory.max";
    EACCES: "permission denied (also: mprotect adding PROT_EXEC to a registration)",
        "check the permissions of the file or the /dev/fgdsN node";
    EFAULT: "address not inside a registered buffer or a mapped registration (unregistered, revoked, or past the end of the mapping)",
        "register the memory first (C fgds_buf_register_*, Python fgds.Buffer) and keep requests inside it";
    EBUSY: "busy: a page of the range is already registered (a GPU BAR page belongs to one registration at a time), or a buffer is closed with I/O in flight",
        "unregister the other registration of these pages first, or wait for the I/O in flight on the buffer to finish";
    EEXIST: "an overlapping buffer is already registered, or a 2 MiB unit of the GPU's BAR range has struct pages made by its own driver (nvidia-uvm's over BAR1) in part only",
        "deregister the overlapping buffer first; register ranges wholly inside the pages the GPU's driver made, or let I/O fall back to bounce buffers";
    EXDEV: "the dma-buf's memory is in another device's BAR, or its exporter cannot map it for this GPU",
        "register the buffer on the /dev/fgdsN node of the GPU that owns its memory (fgds list)";
    ENODEV: "no fgds device: module not loaded, the GPU's driver does not offer its BAR, the driver was unbound or the GPU removed (the node went), or the buffer was revoked by its exporter or belongs to an earlier binding of the GPU's driver",
        "load the fgds module and bind the GPU's driver (fgds check says what is missing), open the node again after a rebind and export the buffer again, or use host memory; without it I/O falls back to bounce buffers unless strict mode is on";
    EINVAL: "invalid argument: zero or too large a size, offsets or sizes not page aligned where they must be (strict mode: not O_DIRECT aligned), non-zero reserved fields or flags, not a dma-buf; for O_DIRECT I/O into a mapping also: the storage device has no P2P path to the GPU (no shared switch, host bridge not on the allow list)",
        "check the arguments (sizes > 0, chunk_size a multiple of 4096; strict mode needs aligned offsets, sizes and addresses); if they are right, run fgds check FILE for the path between the file's device and the GPU";
    ENOSPC: "no space left on the device",
        "free space on the file system";
    ERANGE: "range out of bounds: past the end of a buffer, or offset + size past the end of the dma-buf",
        "keep size and buffer offset inside the buffer (and the registration inside the dma-buf)";
    ENOSYS: "CUDA/HIP runtime not available (libcuda.so.1 / libamdhip64.so missing or too old)",
        "install the GPU driver's user-space library, or use host memory";
    ENOTTY: "unknown ioctl: not an fgds node",
        "open a /dev/fgdsN node (fgds list)";
    EPROTO: "fgds driver API version mismatch",
        "rebuild and reinstall the fgds module and the library from one tree";
    EOPNOTSUPP: "the dma-buf's exporter does not describe it as PCI MMIO with a P2PDMA provider (no get_phys(): amdgpu, xe and virtio-gpu as of Linux 7.2, NVIDIA without nvidia-uvm's P2PDMA pages, or system memory), or refuses a peer-to-peer importer; the bounce path serves it",
        "use a GPU driver that exports P2P-capable dma-bufs (fgds check), or let I/O fall back to bounce buffers";
    ETIMEDOUT: "timed out",
        "wait again, or with a longer timeout";
    ECANCELED: "canceled",
        "the request was canceled; submit it again if it is still wanted";
    EREMOTEIO: "peer-to-peer I/O unavailable: the storage device cannot DMA to this GPU memory, and strict mode forbids the fallback",
        "turn strict mode off to allow the bounce-buffer fallback, or put the file on an NVMe that can reach the GPU (fgds check)";
}

/// The table entry of an errno-style code (positive or negative).
pub fn errno_info(code: i32) -> Option<&'static ErrnoInfo> {
    let e = code.unsigned_abs();
    ERRNOS.iter().find(|i| i.errno.unsigned_abs() == e)
}

/// Short description of an errno-style code (positive or negative), as
/// used by `fgds_strerror`: its meaning in [`ERRNOS`].
pub fn strerror(code: i32) -> &'static str {
    match code {
        0 => "success",
        _ => errno_info(code).map_or("unknown error", |i| i.meaning),
    }
}

/// What to do about an errno-style code (positive or negative), from
/// [`ERRNOS`].
pub fn hint(code: i32) -> &'static str {
    errno_info(code).map_or("see the errno and the detailed message", |i| i.hint)
}

impl Error {
    /// What to do about this error ([`hint`] of its errno).
    pub fn hint(&self) -> &'static str {
        hint(self.errno())
    }
}
