//! What a [`FileHandle`](crate::FileHandle) counts: which path its bytes
//! took; and what the whole process counts: every fall back from peer to
//! peer to the bounce path, by cause ([`fallbacks`]), and the handles'
//! counters summed ([`totals`]).
//!
//! # Falling back, counted
//!
//! GPU memory goes to the bounce path (pinned host buffers) instead of
//! peer to peer for a [`FallbackCause`]. Two things are counted, each by
//! cause, never silently:
//!
//! - a registration that bounces ([`Fallbacks`] in
//!   [`ProcessFallbacks::registrations`]): a caller's own registration of
//!   GPU memory ([`Buffer::from_cuda`](crate::Buffer::from_cuda),
//!   `fgds_buf_register`, `cuFileBufRegister`, the Python binding) that got
//!   no fgds mapping, and a request on memory the caller never registered
//!   that the library could serve neither from its cache, nor its staging
//!   pool nor a registration of its own ([`crate::gpucache`]); once each;
//! - a call (or batch element) that fell back from direct to bounce
//!   ([`Stats::fallbacks`], by cause in [`Stats::fallback_causes`], and
//!   summed over every handle in [`ProcessFallbacks::calls`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Why GPU memory (or a call) went to the bounce path instead of peer to peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FallbackCause {
    /// The driver refused the registration with `EBUSY`: a BAR page of its
    /// range is in another registration already (two buffers of one
    /// allocation whose page-widened exports overlap).
    Busy,
    /// `EOPNOTSUPP`: the driver, the GPU or the platform cannot do peer to
    /// peer DMA for this memory or this file.
    NotSupported,
    /// No fgds node serves the GPU (the module is not loaded, the GPU not bound).
    NoDevice,
    /// The range cannot be exported (CUDA's export rule, host pages: the widened
    /// range leaves the allocation).
    Misaligned,
    /// The file cannot be opened `O_DIRECT`, or the kernel refused an
    /// `O_DIRECT` request (`EINVAL`, `EFAULT`, `EREMOTEIO`, `EXDEV`), or the
    /// remainder of a short write.
    NoDirect,
    /// The bounce path was asked for ([`Buffer::from_gpu_staged`](crate::Buffer::from_gpu_staged),
    /// [`Buffer::alloc_host_bounced`](crate::Buffer::alloc_host_bounced)).
    Asked,
    /// Any other error of the export or the registration.
    Other,
}

impl FallbackCause {
    /// Every cause, in the order of [`Fallbacks`]'s fields.
    pub const ALL: [FallbackCause; 7] = [
        FallbackCause::Busy,
        FallbackCause::NotSupported,
        FallbackCause::NoDevice,
        FallbackCause::Misaligned,
        FallbackCause::NoDirect,
        FallbackCause::Asked,
        FallbackCause::Other,
    ];

    /// The cause of a failed export or registration.
    pub fn of_error(e: &crate::Error) -> FallbackCause {
        match e {
            crate::Error::NoDevice(_) => FallbackCause::NoDevice,
            crate::Error::Misaligned { .. } => FallbackCause::Misaligned,
            e => match e.errno() {
                libc::EBUSY => FallbackCause::Busy,
                libc::EOPNOTSUPP => FallbackCause::NotSupported,
                libc::ENODEV => FallbackCause::NoDevice,
                _ => FallbackCause::Other,
            },
        }
    }

    /// The cause of an `O_DIRECT` request the kernel refused with `errno`.
    pub fn of_direct_errno(errno: i32) -> FallbackCause {
        if errno == libc::EOPNOTSUPP {
            FallbackCause::NotSupported
        } else {
            FallbackCause::NoDirect
        }
    }

    /// Its name, as the Python binding's dictionaries and `fgds run`'s
    /// summary write it (the field of [`Fallbacks`]).
    pub fn name(self) -> &'static str {
        match self {
            FallbackCause::Busy => "busy",
            FallbackCause::NotSupported => "not_supported",
            FallbackCause::NoDevice => "no_device",
            FallbackCause::Misaligned => "misaligned",
            FallbackCause::NoDirect => "no_direct",
            FallbackCause::Asked => "asked",
            FallbackCause::Other => "other",
        }
    }

    /// What to do about it, in a few words.
    pub fn hint(self) -> &'static str {
        match self {
            FallbackCause::Busy => {
                "another registration covers part of its page-aligned range: register the \
                 whole allocation once instead of pieces of it, or leave it unregistered (the \
                 library's staging pool serves it peer to peer)"
            }
            FallbackCause::NotSupported => {
                "the platform refuses peer-to-peer DMA between this GPU and the storage: \
                 `fgds check` says why"
            }
            FallbackCause::NoDevice => {
                "load the fgds module and bind the GPU (`fgds check` lists the nodes)"
            }
            FallbackCause::Misaligned => {
                "register a range whose first and last pages lie inside its allocation, or \
                 leave it unregistered"
            }
            FallbackCause::NoDirect => {
                "the file system or the request does not take O_DIRECT peer to peer: align \
                 offsets and sizes to its block size, or use a file system that does"
            }
            FallbackCause::Asked => "the bounce path was asked for",
            FallbackCause::Other => "`fgds check` and the reason logged say more",
        }
    }
}

impl std::fmt::Display for FallbackCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Fallbacks to the bounce path, counted by [`FallbackCause`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fallbacks {
    /// [`FallbackCause::Busy`] (`EBUSY`).
    pub busy: u64,
    /// [`FallbackCause::NotSupported`] (`EOPNOTSUPP`).
    pub not_supported: u64,
    /// [`FallbackCause::NoDevice`].
    pub no_device: u64,
    /// [`FallbackCause::Misaligned`].
    pub misaligned: u64,
    /// [`FallbackCause::NoDirect`].
    pub no_direct: u64,
    /// [`FallbackCause::Asked`].
    pub asked: u64,
    /// [`FallbackCause::Other`].
    pub other: u64,
}

impl Fallbacks {
    /// The count of `cause`.
    pub fn get(&self, cause: FallbackCause) -> u64 {
        match cause {
            FallbackCause::Busy => self.busy,
            FallbackCause::NotSupported => self.not_supported,
            FallbackCause::NoDevice => self.no_device,
            FallbackCause::Misaligned => self.misaligned,
            FallbackCause::NoDirect => self.no_direct,
            FallbackCause::Asked => self.asked,
            FallbackCause::Other => self.other,
        }
    }

    /// Every cause together.
    pub fn total(&self) -> u64 {
        FallbackCause::ALL.iter().map(|c| self.get(*c)).sum()
    }

    /// The causes counted, as `name=count` pairs in [`FallbackCause::ALL`]'s order.
    pub fn nonzero(&self) -> Vec<(FallbackCause, u64)> {
        FallbackCause::ALL
            .iter()
            .map(|c| (*c, self.get(*c)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// Live per-cause counters.
#[derive(Debug, Default)]
pub(crate) struct CauseCounters([AtomicU64; 7]);

impl CauseCounters {
    pub(crate) const fn new() -> Self {
        CauseCounters([const { AtomicU64::new(0) }; 7])
    }
    fn index(cause: FallbackCause) -> usize {
        FallbackCause::ALL
            .iter()
            .position(|c| *c == cause)
            .unwrap_or(6)
    }
    pub(crate) fn add(&self, cause: FallbackCause) {
        self.0[Self::index(cause)].fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn snapshot(&self) -> Fallbacks {
        let g = |c| self.0[Self::index(c)].load(Ordering::Relaxed);
        Fallbacks {
            busy: g(FallbackCause::Busy),
            not_supported: g(FallbackCause::NotSupported),
            no_device: g(FallbackCause::NoDevice),
            misaligned: g(FallbackCause::Misaligned),
            no_direct: g(FallbackCause::NoDirect),
            asked: g(FallbackCause::Asked),
            other: g(FallbackCause::Other),
        }
    }
    fn reset(&self) {
        for a in &self.0 {
            a.store(0, Ordering::Relaxed);
        }
    }
}

/// The process's fallbacks since it started (see the module's documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessFallbacks {
    /// Calls (or batch elements) of every handle that fell back, by cause.
    pub calls: Fallbacks,
    /// Registrations of GPU memory that bounce, by cause: a caller's own
    /// that got no fgds mapping, and requests on unregistered memory that
    /// the library served through the bounce path.
    pub registrations: Fallbacks,
}

static CALLS: CauseCounters = CauseCounters::new();
static REGISTRATIONS: CauseCounters = CauseCounters::new();

/// The process's fallbacks to the bounce path, by cause.
pub fn fallbacks() -> ProcessFallbacks {
    ProcessFallbacks {
        calls: CALLS.snapshot(),
        registrations: REGISTRATIONS.snapshot(),
    }
}

/// Counts a registration of GPU memory that bounces.
pub(crate) fn registration_fallback(cause: FallbackCause) {
    REGISTRATIONS.add(cause);
}

/// One counter of a handle, summed over every handle of the process too
/// ([`totals`]); `I` is its place in [`TOTALS`].
#[derive(Debug, Default)]
pub(crate) struct Counter<const I: usize>(AtomicU64);

impl<const I: usize> Counter<I> {
    pub(crate) fn fetch_add(&self, n: u64, o: Ordering) -> u64 {
        TOTALS[I].fetch_add(n, o);
        self.0.fetch_add(n, o)
    }
    pub(crate) fn load(&self, o: Ordering) -> u64 {
        self.0.load(o)
    }
    fn store(&self, v: u64, o: Ordering) {
        self.0.store(v, o)
    }
}

static TOTALS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];

/// Every handle's counters summed, since the process started (a handle's
/// [`FileHandle::reset_stats`](crate::FileHandle) leaves them); its
/// `fallback_causes` are [`ProcessFallbacks::calls`], and
/// `last_fallback_reason` is `None`.
pub fn totals() -> Stats {
    let t = |i: usize| TOTALS[i].load(Ordering::Relaxed);
    Stats {
        direct_bytes: t(0),
        bounce_bytes: t(1),
        bounce_direct_bytes: t(2),
        fallbacks: t(3),
        direct_ops: t(4),
        bounce_ops: t(5),
        read_bytes: t(6),
        write_bytes: t(7),
        errors: t(8),
        fallback_causes: CALLS.snapshot(),
        last_fallback_reason: None,
    }
}

/// Which path the bytes of a handle took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes moved with O_DIRECT straight to/from the caller's buffer
    /// (peer to peer for fgds/GPU buffers).
    pub direct_bytes: u64,
    /// Bytes moved through the page cache or a host bounce buffer
    /// (unaligned edges and fallbacks).
    pub bounce_bytes: u64,
    /// Of `bounce_bytes`, those read with O_DIRECT into the bounce buffers
    /// (the page cache was skipped).
    pub bounce_direct_bytes: u64,
    /// Calls (or batch elements) that fell back from direct to bounce.
    pub fallbacks: u64,
    /// Requests submitted on the direct path.
    pub direct_ops: u64,
    /// Requests submitted on the bounce path.
    pub bounce_ops: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Calls that returned an error.
    pub errors: u64,
    /// `fallbacks` by cause.
    pub fallback_causes: Fallbacks,
    /// Why the last fallback happened.
    pub last_fallback_reason: Option<String>,
}

/// The live counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct StatsCounters {
    pub(crate) direct_bytes: Counter<0>,
    pub(crate) bounce_bytes: Counter<1>,
    pub(crate) bounce_direct_bytes: Counter<2>,
    fallbacks: Counter<3>,
    pub(crate) direct_ops: Counter<4>,
    pub(crate) bounce_ops: Counter<5>,
    pub(crate) read_bytes: Counter<6>,
    pub(crate) write_bytes: Counter<7>,
    pub(crate) errors: Counter<8>,
    causes: CauseCounters,
    reason: Mutex<Option<String>>,
}

impl StatsCounters {
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            direct_bytes: self.direct_bytes.load(Ordering::Relaxed),
            bounce_bytes: self.bounce_bytes.load(Ordering::Relaxed),
            bounce_direct_bytes: self.bounce_direct_bytes.load(Ordering::Relaxed),
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
            direct_ops: self.direct_ops.load(Ordering::Relaxed),
            bounce_ops: self.bounce_ops.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            fallback_causes: self.causes.snapshot(),
            last_fallback_reason: self
                .reason
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
    pub(crate) fn reset(&self) {
        self.direct_bytes.store(0, Ordering::Relaxed);
        self.bounce_bytes.store(0, Ordering::Relaxed);
        self.bounce_direct_bytes.store(0, Ordering::Relaxed);
        self.fallbacks.store(0, Ordering::Relaxed);
        self.direct_ops.store(0, Ordering::Relaxed);
        self.bounce_ops.store(0, Ordering::Relaxed);
        self.read_bytes.store(0, Ordering::Relaxed);
        self.write_bytes.store(0, Ordering::Relaxed);
        self.errors.store(0, Ordering::Relaxed);
        self.causes.reset();
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
    /// Counts a fallback of a call, its cause (here and for the process)
    /// and keeps its reason.
    pub(crate) fn fallback(&self, cause: FallbackCause, reason: &str) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        self.causes.add(cause);
        CALLS.add(cause);
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallbacks_are_counted_by_cause_per_handle_and_for_the_process() {
        let before = fallbacks();
        let t0 = totals();
        let s = StatsCounters::default();
        s.fallback(FallbackCause::Busy, "EBUSY");
        s.fallback(FallbackCause::NoDirect, "refused");
        s.fallback(FallbackCause::Busy, "EBUSY again");
        s.bounce_bytes.fetch_add(4096, Ordering::Relaxed);
        let st = s.snapshot();
        assert_eq!(st.fallbacks, 3);
        assert_eq!(st.fallback_causes.busy, 2);
        assert_eq!(st.fallback_causes.no_direct, 1);
        assert_eq!(st.fallback_causes.total(), 3);
        assert_eq!(
            st.fallback_causes.nonzero(),
            vec![(FallbackCause::Busy, 2), (FallbackCause::NoDirect, 1)]
        );
        assert_eq!(st.last_fallback_reason.as_deref(), Some("EBUSY again"));
        // The process's counts keep what a handle's reset clears (other
        // tests may count too: at least).
        s.reset();
        assert_eq!(s.snapshot(), Stats::default());
        let after = fallbacks();
        assert!(after.calls.busy >= before.calls.busy + 2);
        assert!(after.calls.no_direct > before.calls.no_direct);
        let t1 = totals();
        assert!(t1.fallbacks >= t0.fallbacks + 3);
        assert!(t1.bounce_bytes >= t0.bounce_bytes + 4096);
        registration_fallback(FallbackCause::NoDevice);
        assert!(fallbacks().registrations.no_device > before.registrations.no_device);
    }

    #[test]
    fn causes_of_errors() {
        use crate::Error;
        let os = |e| Error::os("REG_BUFFER", e);
        assert_eq!(
            FallbackCause::of_error(&os(libc::EBUSY)),
            FallbackCause::Busy
        );
        assert_eq!(
            FallbackCause::of_error(&os(libc::EOPNOTSUPP)),
            FallbackCause::NotSupported
        );
        assert_eq!(
            FallbackCause::of_error(&Error::NoDevice("none".into())),
            FallbackCause::NoDevice
        );
        assert_eq!(
            FallbackCause::of_error(&Error::Misaligned {
                what: "range",
                value: 1,
                align: 65536
            }),
            FallbackCause::Misaligned
        );
        assert_eq!(
            FallbackCause::of_error(&os(libc::ENOMEM)),
            FallbackCause::Other
        );
        assert_eq!(
            FallbackCause::of_direct_errno(libc::EOPNOTSUPP),
            FallbackCause::NotSupported
        );
        assert_eq!(
            FallbackCause::of_direct_errno(libc::EINVAL),
            FallbackCause::NoDirect
        );
        for c in FallbackCause::ALL {
            assert!(!c.hint().is_empty());
            assert_eq!(c.to_string(), c.name());
        }
    }
}
