//! What a [`FileHandle`](crate::FileHandle) counts: which path its bytes took.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
    /// Why the last fallback happened.
    pub last_fallback_reason: Option<String>,
}

/// The live counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct StatsCounters {
    pub(crate) direct_bytes: AtomicU64,
    pub(crate) bounce_bytes: AtomicU64,
    pub(crate) bounce_direct_bytes: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    pub(crate) direct_ops: AtomicU64,
    pub(crate) bounce_ops: AtomicU64,
    pub(crate) read_bytes: AtomicU64,
    pub(crate) write_bytes: AtomicU64,
    pub(crate) errors: AtomicU64,
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
            last_fallback_reason: self
                .reason
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
    pub(crate) fn reset(&self) {
        for a in [
            &self.direct_bytes,
            &self.bounce_bytes,
            &self.bounce_direct_bytes,
            &self.fallbacks,
            &self.direct_ops,
            &self.bounce_ops,
            &self.read_bytes,
            &self.write_bytes,
            &self.errors,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
    /// Counts a fallback and keeps its reason.
    pub(crate) fn fallback(&self, reason: &str) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_string());
    }
}
