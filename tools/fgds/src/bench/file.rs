//! The file `fgds bench` runs on: whether the run may write it (a file the
//! benchmark did not create is only read unless --overwrite), creating and
//! marking it, and filling it up to what a read run needs.

use super::workload::{geometry, BenchArgs, Rw};
use crate::human;
use fgds::{Buffer, Config, FileHandle};
use std::os::fd::AsRawFd;

/// The extended attribute that marks a file `fgds bench` created itself, so
/// that a later run may grow or write it without `--overwrite`.
const OWNER_XATTR: &std::ffi::CStr = c"user.fgds.bench";

/// Why `fgds bench` will not write a file.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The file exists, `fgds bench` did not create it, and the run would
    /// write it.
    #[error(
        "{file}: not created by fgds bench ({have} of its bytes), and this run would {what}; \
         fgds bench never writes a file it did not create: pass --overwrite to allow it, \
         or give a new file with -f"
    )]
    WouldWrite {
        /// The file.
        file: String,
        /// Its size now, in words.
        have: String,
        /// What the run would do to it.
        what: String,
    },
    /// A library or system call failed.
    #[error(transparent)]
    Fgds(#[from] fgds::Error),
}

fn io_err(op: String, source: std::io::Error) -> fgds::Error {
    fgds::Error::Io { op, source }
}

/// Whether `fd` carries the mark of a file `fgds bench` created.
fn is_ours(fd: i32) -> bool {
    let mut v = [0u8; 8];
    // SAFETY: fd is open, the name is NUL-terminated and `v` is a writable
    // buffer of the length passed.
    let n = unsafe { libc::fgetxattr(fd, OWNER_XATTR.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
    n == 1 && v[0] == b'1'
}

/// Marks `fd` as created by `fgds bench`; says so when the file system has
/// no user extended attributes (the next run then needs --overwrite).
fn mark_ours(fd: i32, file: &std::path::Path) {
    // SAFETY: fd is open, the name is NUL-terminated, the value is 1 byte.
    let r = unsafe { libc::fsetxattr(fd, OWNER_XATTR.as_ptr(), c"1".as_ptr().cast(), 1, 0) };
    if r < 0 {
        eprintln!(
            "fgds bench: note: cannot mark {} as created by fgds bench ({}): a later run that \
             writes it will need --overwrite",
            file.display(),
            std::io::Error::last_os_error()
        );
    }
}

/// Bytes of a regular file or a block device.
fn length_of(f: &std::fs::File, file: &std::path::Path) -> Result<u64, fgds::Error> {
    use std::io::Seek;
    let mut f = f;
    f.seek(std::io::SeekFrom::End(0))
        .map_err(|e| io_err(format!("size of {}", file.display()), e))
}

/// Decides, before anything runs, whether the run may write the file, and
/// says on stderr what it will do to it: a missing file is created (and
/// marked as the benchmark's); an existing one that `fgds bench` did not
/// create is only read unless `--overwrite`. Then fills it up to the bytes a
/// read run needs (only past its current end: existing bytes are kept).
pub(super) fn prepare(a: &BenchArgs, always: bool) -> Result<(), BenchError> {
    let need = a.size.max(geometry(a).span);
    let fill_needed = |have: u64| (always || a.rw == Rw::Read) && have < need;
    let name = a.file.display().to_string();
    let existing = match std::fs::File::open(&a.file) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(format!("open {name}"), e).into()),
    };
    let have = match existing {
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&a.file)
                .map_err(|e| io_err(format!("create {name}"), e))?;
            mark_ours(f.as_raw_fd(), &a.file);
            eprintln!(
                "fgds bench: {name} does not exist: creating it for the benchmark ({})",
                human(if a.rw == Rw::Read || always {
                    need
                } else {
                    geometry(a).span
                })
            );
            0
        }
        Some(f) => {
            let have = length_of(&f, &a.file)?;
            let regular = f.metadata().map(|m| m.is_file()).unwrap_or(false);
            if !regular && have < need {
                return Err(fgds::Error::InvalidArgument(format!(
                    "{name} is not a regular file and holds {}, less than the {} this run needs: \
                     lower -s/--file-size",
                    human(have),
                    human(need)
                ))
                .into());
            }
            let what = if fill_needed(have) {
                Some(format!(
                    "grow it from {} to {} (bytes from {} on written)",
                    human(have),
                    human(need),
                    have
                ))
            } else if a.rw == Rw::Write && !always {
                Some(format!(
                    "overwrite its first {} with the write benchmark's data",
                    human(geometry(a).span)
                ))
            } else {
                None
            };
            match what {
                None => {}
                Some(_) if regular && is_ours(f.as_raw_fd()) => {}
                Some(what) if a.overwrite => {
                    eprintln!("fgds bench: --overwrite: will {what} of {name}");
                }
                Some(what) => {
                    return Err(BenchError::WouldWrite {
                        file: name,
                        have: human(have),
                        what,
                    })
                }
            }
            if !regular {
                // A block device is large enough (above): nothing to fill.
                return Ok(());
            }
            have
        }
    };
    if fill_needed(have) {
        let f = FileHandle::open(&a.file, libc::O_RDWR, 0o644, Config::default())?;
        let chunk = 8usize << 20;
        let b = Buffer::alloc_host(chunk)?;
        let fill: Vec<u8> = (0..chunk).map(|i| (i * 131 % 251) as u8).collect();
        b.write_bytes(0, &fill)?;
        // Byte `o` of the file is fill[o % chunk]; start at the current end
        // so that no byte already there is rewritten.
        let pb = fill_progress(a, need - have);
        let mut off = have;
        while off < need {
            let at = (off % chunk as u64) as usize;
            let n = (need - off).min((chunk - at) as u64) as usize;
            f.write(&b, at, n, off)?;
            off += n as u64;
            pb.inc(n as u64);
        }
        pb.finish_and_clear();
        // SAFETY: valid fd.
        if unsafe { libc::fsync(f.raw_fd()) } < 0 {
            return Err(io_err(format!("fsync {name}"), std::io::Error::last_os_error()).into());
        }
    }
    Ok(())
}

/// A progress bar for filling `bytes` of the file: on a terminal (stderr)
/// only, and only when the fill is long enough to be seen waiting.
fn fill_progress(a: &BenchArgs, bytes: u64) -> indicatif::ProgressBar {
    if bytes < (256 << 20) {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(bytes);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb.set_message(format!("filling {}", a.file.display()));
    pb
}
