//! Files opened for fgds I/O: an O_DIRECT descriptor plus a buffered one.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::stats::{Stats, StatsCounters};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// A file opened for fgds I/O (the analogue of a cuFile handle).
///
/// It holds a descriptor opened with `O_DIRECT` (when the file system
/// accepts it) for the aligned bulk of each request, and a buffered one for
/// unaligned edges and the fallback path. All methods take `&self` and may be
/// called from many threads at once.
#[derive(Debug)]
pub struct FileHandle {
    pub(crate) path: Option<PathBuf>,
    pub(crate) direct: Option<OwnedFd>,
    pub(crate) buffered: OwnedFd,
    pub(crate) no_direct_reason: Option<String>,
    pub(crate) mem_align: u64,
    pub(crate) off_align: u64,
    pub(crate) config: Config,
    pub(crate) stats: StatsCounters,
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::InvalidArgument("path contains NUL".into()))
}

/// `(dio_mem_align, dio_offset_align)` of an open file from statx
/// (STATX_DIOALIGN); 512/512 when the kernel or file system does not say.
pub fn dio_alignment(fd: RawFd) -> (u64, u64) {
    // SAFETY: statx writes into a zeroed, correctly typed struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: valid fd, empty path with AT_EMPTY_PATH, valid out pointer.
    let r = unsafe {
        libc::statx(
            fd,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if r == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align != 0 {
        (
            u64::from(stx.stx_dio_mem_align.max(1)),
            u64::from(stx.stx_dio_offset_align),
        )
    } else {
        (512, 512)
    }
}

impl FileHandle {
    /// Opens `path` with open(2) `flags` (O_RDONLY/O_WRONLY/O_RDWR, O_CREAT,
    /// O_TRUNC, O_EXCL; O_DIRECT is implied) and `mode`.
    pub fn open(path: impl AsRef<Path>, flags: i32, mode: u32, config: Config) -> Result<Self> {
        config.validate()?;
        let path = path.as_ref();
        let c = cpath(path)?;
        let bflags = (flags & !libc::O_DIRECT) | libc::O_CLOEXEC;
        // SAFETY: valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), bflags, mode as libc::c_uint) };
        if fd < 0 {
            return Err(Error::last_os(format!("open {}", path.display())));
        }
        // SAFETY: freshly opened fd.
        let buffered = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut h = Self::from_owned(buffered, flags, config)?;
        h.path = Some(path.to_path_buf());
        Ok(h)
    }

    /// Builds a handle from a descriptor the caller keeps owning (it is
    /// duplicated). EBADF if `fd` is not open.
    pub fn from_fd(fd: RawFd, config: Config) -> Result<Self> {
        config.validate()?;
        if fd < 0 {
            return Err(Error::os("file descriptor", libc::EBADF));
        }
        // SAFETY: F_GETFL/F_DUPFD_CLOEXEC on an arbitrary integer are safe.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if fl < 0 {
            return Err(Error::last_os(format!("file descriptor {fd}")));
        }
        let owned = if fl & libc::O_DIRECT != 0 {
            // The caller's descriptor is O_DIRECT (torch.cuda.gds-style callers open files
            // that way): the bounce path needs one through the page cache.
            let c = cpath(Path::new(&format!("/proc/self/fd/{fd}")))?;
            // SAFETY: valid C string.
            let b = unsafe {
                libc::open(
                    c.as_ptr(),
                    (fl & (libc::O_ACCMODE | libc::O_APPEND)) | libc::O_CLOEXEC,
                )
            };
            if b < 0 {
                return Err(Error::last_os(format!(
                    "reopening file descriptor {fd} without O_DIRECT"
                )));
            }
            // SAFETY: freshly opened fd we own.
            unsafe { OwnedFd::from_raw_fd(b) }
        } else {
            // SAFETY: as above.
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            if dup < 0 {
                return Err(Error::last_os("dup"));
            }
            // SAFETY: dup is a new fd we own.
            unsafe { OwnedFd::from_raw_fd(dup) }
        };
        Self::from_owned(owned, fl & (libc::O_ACCMODE | libc::O_APPEND), config)
    }

    fn from_owned(buffered: OwnedFd, flags: i32, config: Config) -> Result<Self> {
        // SAFETY: zeroed stat is a valid out value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and out pointer.
        if unsafe { libc::fstat(buffered.as_raw_fd(), &mut st) } < 0 {
            return Err(Error::last_os("fstat"));
        }
        let fmt = st.st_mode & libc::S_IFMT;
        if fmt != libc::S_IFREG && fmt != libc::S_IFBLK {
            return Err(Error::InvalidArgument(
                "not a regular file or block device".into(),
            ));
        }
        let (direct, no_direct_reason) = if config.disable_direct {
            (
                None,
                Some("O_DIRECT disabled by Config::disable_direct".to_string()),
            )
        } else {
            // Reopen through /proc/self/fd so both descriptors name the same file.
            let proc = format!("/proc/self/fd/{}", buffered.as_raw_fd());
            let c = cpath(Path::new(&proc))?;
            let dflags =
                (flags & (libc::O_ACCMODE | libc::O_APPEND)) | libc::O_DIRECT | libc::O_CLOEXEC;
            // SAFETY: valid C string.
            let fd = unsafe { libc::open(c.as_ptr(), dflags) };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                (
                    None,
                    Some(format!("the file cannot be opened with O_DIRECT: {e}")),
                )
            } else {
                // SAFETY: freshly opened fd.
                (Some(unsafe { OwnedFd::from_raw_fd(fd) }), None)
            }
        };
        let (mem_align, off_align) = dio_alignment(buffered.as_raw_fd());
        Ok(FileHandle {
            path: None,
            direct,
            buffered,
            no_direct_reason,
            mem_align,
            off_align,
            config,
            stats: StatsCounters::default(),
        })
    }

    /// The path it was opened with, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Whether an O_DIRECT descriptor is open.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Why there is no O_DIRECT descriptor, if there is none.
    pub fn no_direct_reason(&self) -> Option<&str> {
        self.no_direct_reason.as_deref()
    }

    /// `(memory, file offset)` alignment O_DIRECT needs on this file.
    pub fn dio_alignment(&self) -> (u64, u64) {
        (self.mem_align, self.off_align)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> Stats {
        self.stats.snapshot()
    }

    /// Resets the statistics.
    pub fn reset_stats(&self) {
        self.stats.reset()
    }

    /// Size of the file (fstat).
    pub fn size(&self) -> Result<u64> {
        // SAFETY: zeroed stat is a valid out value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and out pointer.
        if unsafe { libc::fstat(self.buffered.as_raw_fd(), &mut st) } < 0 {
            return Err(Error::last_os("fstat"));
        }
        Ok(st.st_size as u64)
    }

    /// The buffered descriptor (e.g. for fsync).
    pub fn raw_fd(&self) -> RawFd {
        self.buffered.as_raw_fd()
    }
}
