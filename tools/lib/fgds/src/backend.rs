//! Where the engine's requests go: the calling thread's io_uring, or
//! pread/pwrite/preadv/pwritev one at a time.

use crate::config::Config;
use crate::error::{Error, Result};
use io_uring::{opcode, squeue, types, IoUring};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::RawFd;

/// One request: a read (`write` false) or write at `off` of `fd`, of one
/// buffer or of an iovec array.
pub(crate) struct Req {
    pub(crate) write: bool,
    pub(crate) fd: RawFd,
    pub(crate) off: u64,
    pub(crate) mem: Mem,
}

/// The memory of a [`Req`].
#[derive(Clone, Copy)]
pub(crate) enum Mem {
    /// One buffer: its address and bytes.
    Buf(*mut u8, usize),
    /// An iovec array: its address and entries.
    Iov(*const libc::iovec, usize),
}

impl Req {
    /// The io_uring entry of the request (`READ`, `WRITE`, `READV`, `WRITEV`).
    fn sqe(&self) -> squeue::Entry {
        let (fd, off) = (types::Fd(self.fd), self.off);
        match (self.mem, self.write) {
            (Mem::Buf(p, n), false) => opcode::Read::new(fd, p, n as u32).offset(off).build(),
            (Mem::Buf(p, n), true) => opcode::Write::new(fd, p, n as u32).offset(off).build(),
            (Mem::Iov(v, n), false) => opcode::Readv::new(fd, v, n as u32).offset(off).build(),
            (Mem::Iov(v, n), true) => opcode::Writev::new(fd, v, n as u32).offset(off).build(),
        }
    }

    /// Runs the request on the calling thread (`pread`, `pwrite`, `preadv`,
    /// `pwritev`): bytes, or -1 and `errno`.
    ///
    /// # Safety
    /// The request's memory is live for its length.
    unsafe fn run(&self) -> isize {
        let (fd, off) = (self.fd, self.off as libc::off_t);
        match (self.mem, self.write) {
            (Mem::Buf(p, n), false) => libc::pread(fd, p as *mut libc::c_void, n, off),
            (Mem::Buf(p, n), true) => libc::pwrite(fd, p as *const libc::c_void, n, off),
            (Mem::Iov(v, n), false) => libc::preadv(fd, v, n as i32, off),
            (Mem::Iov(v, n), true) => libc::pwritev(fd, v, n as i32, off),
        }
    }
}

struct Ring {
    ring: IoUring,
    entries: u32,
}

thread_local! {
    static RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// The calling thread's ring, or the synchronous backend and the results it
/// has not handed out yet.
pub(crate) enum Backend<'a> {
    Ring(&'a mut IoUring),
    Sync(VecDeque<(u64, i32)>),
}

impl Backend<'_> {
    /// Starts `req` (the synchronous backend runs it), tagged `id`.
    pub(crate) fn push(&mut self, id: u64, req: &Req) -> Result<()> {
        match self {
            Backend::Ring(ring) => {
                let sqe = req.sqe().user_data(id);
                loop {
                    // SAFETY: the memory each SQE points at outlives its
                    // completion: run() reaps every request before returning.
                    if unsafe { ring.submission().push(&sqe) }.is_ok() {
                        return Ok(());
                    }
                    ring.submit().map_err(|e| Error::Io {
                        op: "io_uring submit".into(),
                        source: e,
                    })?;
                }
            }
            Backend::Sync(q) => {
                // SAFETY: pointers describe live memory of the request.
                let r = unsafe { req.run() };
                let r = if r < 0 {
                    -std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO)
                } else {
                    r as i32
                };
                q.push_back((id, r));
                Ok(())
            }
        }
    }

    /// The tag and result (bytes, or a negative errno) of a finished request.
    pub(crate) fn wait_one(&mut self) -> Result<(u64, i32)> {
        match self {
            Backend::Ring(ring) => loop {
                if let Some(cqe) = ring.completion().next() {
                    return Ok((cqe.user_data(), cqe.result()));
                }
                match ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) => {
                        return Err(Error::Io {
                            op: "io_uring wait".into(),
                            source: e,
                        })
                    }
                }
            },
            Backend::Sync(q) => q
                .pop_front()
                .ok_or_else(|| Error::InvalidArgument("internal: no request in flight".into())),
        }
    }
}

/// Runs `f` with this thread's ring (created or grown to `qd` entries), or
/// with the synchronous backend when io_uring is off or unavailable, or
/// when the call is a single request: one pread/pwrite is one system call
/// and no more, where the ring would add its own enter and completion work
/// (and, for a request it cannot start at once, a hand-off to an io-wq
/// worker) with nothing to overlap.
pub(crate) fn with_backend<T, F: FnOnce(&mut Backend<'_>) -> T>(
    cfg: &Config,
    requests: usize,
    f: F,
) -> T {
    let f = if cfg.use_io_uring && requests > 1 {
        let want = cfg.queue_depth.next_power_of_two().max(8);
        let r = RING.with(move |cell| {
            let Ok(mut slot) = cell.try_borrow_mut() else {
                return Err(f); // re-entered: use the sync backend
            };
            if slot.as_ref().is_none_or(|r| r.entries < want) {
                *slot = IoUring::new(want).ok().map(|ring| Ring {
                    ring,
                    entries: want,
                });
            }
            match slot.as_mut() {
                Some(ring) => Ok(f(&mut Backend::Ring(&mut ring.ring))),
                None => Err(f),
            }
        });
        match r {
            Ok(v) => return v,
            Err(f) => f,
        }
    } else {
        f
    };
    f(&mut Backend::Sync(VecDeque::new()))
}
