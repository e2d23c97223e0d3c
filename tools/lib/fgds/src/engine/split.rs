//! One call over several threads: a call larger than `split_size` cut into
//! parts that the calling thread and I/O threads take in file order, each
//! on its own ring ([`run_call`]); and the switch that keeps a batch's
//! requests whole ([`without_split`]).

use super::pieces::{bounce_direct, run_pieces};
use super::plan::{blocker_cause, round_down, Mode, Op, Piece, Stop};
use crate::buffer::Buffer;
use crate::config::{Config, MAX_RW_COUNT};
use crate::error::{Error, Result};
use crate::file::FileHandle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A read that reaches the bounce buffers with O_DIRECT (cold data, see
/// [`BounceRead`](crate::BounceRead)) goes in pieces of this many
/// `bounce_chunk_size` and parts of this many `bounce_split_size`: 8 MiB
/// pieces in 32 MiB parts by default. On the H200 machine's virtual disk a
/// cold 4 GiB read into CUDA memory ran 1395 MiB/s (1371-1419) against 1108
/// (1090-1125) with the page-cache path's 4 MiB pieces in 8 MiB parts and
/// 1016 (974-1058) with 4 MiB pieces in 32 MiB parts, the settings taking
/// turns round by round (`tools/testing/fgds-bench/gpu-peer-tune.py`);
/// warm, the larger sizes were slower (19726 MiB/s against 25399). In the
/// GPU suite's publishing run, taking turns over 3 rounds, cold, the two
/// ran alike (1688 MiB/s against 1692, `docs/benchmarks.md`).
const COLD_BOUNCE_CHUNKS: usize = 2;
const COLD_BOUNCE_SPLITS: usize = 4;

thread_local! {
    /// Set while this thread runs a batch's request: the batch already
    /// keeps the I/O threads busy, so its requests are not split again.
    static NO_SPLIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with splitting off on this thread (a batch's request).
pub(crate) fn without_split<T>(f: impl FnOnce() -> T) -> T {
    let old = NO_SPLIT.with(|c| c.replace(true));
    let r = f();
    NO_SPLIT.with(|c| c.set(old));
    r
}

/// The parts of a split call and what the threads report back.
struct SplitState {
    parts: Vec<Option<Vec<Piece>>>,
    /// Bytes each part asks for.
    lens: Vec<u64>,
    next: usize,
    /// Threads running a part now.
    active: usize,
    /// The caller is done taking parts: no thread takes one any more.
    closed: bool,
    results: Vec<Option<Result<usize>>>,
}

struct SplitCtl {
    state: Mutex<SplitState>,
    cv: std::sync::Condvar,
    /// A part failed: the others stop between requests.
    stop: AtomicBool,
    /// A fallback of the call was counted.
    fell_back: AtomicBool,
}

/// What the threads of a split call borrow from the caller. Only a thread
/// that took a part (under [`SplitCtl::state`], before the caller closed it)
/// reads it, and the caller returns only once no thread runs a part.
struct SplitRefs<'a> {
    file: &'a FileHandle,
    bufs: &'a [&'a Buffer],
    op: Op,
    cancel: Option<&'a AtomicBool>,
}

/// A [`SplitRefs`] of the caller's stack, as an I/O thread's job holds it.
struct RefsPtr(*const ());
// SAFETY: SplitRefs holds shared references to Sync data (FileHandle and
// Buffer are used from many threads at once); see SplitRefs for how long
// the pointer is valid.
unsafe impl Send for RefsPtr {}

/// Takes parts and runs them until none is left.
fn split_work(ctl: &SplitCtl, refs: &SplitRefs<'_>) {
    loop {
        let (i, part, more_parts) = {
            let mut g = ctl.state.lock().unwrap_or_else(|p| p.into_inner());
            if g.closed || g.next >= g.parts.len() {
                return;
            }
            let i = g.next;
            g.next += 1;
            g.active += 1;
            (
                i,
                g.parts[i].take().unwrap_or_default(),
                g.next < g.parts.len(),
            )
        };
        let stop = Stop {
            user: refs.cancel,
            split: Some(&ctl.stop),
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_pieces(
                refs.file,
                refs.bufs,
                refs.op,
                part,
                stop,
                &ctl.fell_back,
                more_parts,
            )
        }))
        .unwrap_or_else(|_| {
            Err(Error::InvalidArgument(
                "internal: an I/O thread panicked".into(),
            ))
        });
        if r.is_err() {
            ctl.stop.store(true, Ordering::Release);
        }
        let mut g = ctl.state.lock().unwrap_or_else(|p| p.into_inner());
        g.results[i] = Some(r);
        g.active -= 1;
        drop(g);
        ctl.cv.notify_all();
    }
}

/// The part size of a call of `total` bytes, `staged` of them through the
/// bounce path: `bounce_split_size` when that is most of them.
pub(super) fn split_size(cfg: &Config, staged: u64, total: u64) -> usize {
    if staged * 2 > total {
        cfg.bounce_split_size
    } else {
        cfg.split_size
    }
}

/// Joins neighbouring bounce-path pieces of one destination (in the file
/// and in the buffer) into pieces of up to `size` bytes that stay within
/// one `size`-aligned stretch of the file, as
/// [`plan`](super::plan::plan()) cuts them.
pub(super) fn coarsen(pieces: Vec<Piece>, size: u64) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::with_capacity(pieces.len());
    for p in pieces {
        if let Some(q) = out.last_mut() {
            let end = p.file_off + p.len as u64;
            if q.mode == Mode::Staged
                && p.mode == Mode::Staged
                && q.more.is_empty()
                && p.more.is_empty()
                && q.buf == p.buf
                && q.file_off + q.len as u64 == p.file_off
                && q.buf_off + q.len == p.buf_off
                && end - q.file_off <= size
                && round_down(q.file_off, size) == round_down(end - 1, size)
            {
                q.len += p.len;
                continue;
            }
        }
        out.push(p);
    }
    out
}

/// Runs a call's pieces: on the calling thread alone when the call is at
/// most `split_size` bytes (or `parallel` is 1), else cut into parts of
/// about `split_size` bytes that the calling thread and up to
/// `parallel - 1` I/O threads take in file order, each on its own ring
/// with its own bounce buffers, so that one thread's copies overlap the
/// others' reads (what a batch of large requests does). Returns the bytes
/// moved from the first piece on, up to the first short part.
pub(super) fn run_call(
    file: &FileHandle,
    bufs: &[&Buffer],
    op: Op,
    pieces: Vec<Piece>,
    cancel: Option<&AtomicBool>,
    plan_reason: Option<String>,
) -> Result<usize> {
    if let Some(r) = &plan_reason {
        file.stats.fallback(blocker_cause(file, bufs), r);
    }
    let fell_back = AtomicBool::new(plan_reason.is_some());
    let cfg = &file.config;
    let total: u64 = pieces.iter().map(|p| p.len as u64).sum();
    let staged: u64 = pieces
        .iter()
        .filter(|p| p.mode == Mode::Staged)
        .map(|p| p.len as u64)
        .sum();
    // A read mostly through the bounce path that goes O_DIRECT (one
    // cachestat(2) of the call's range; each part asks again) runs in
    // larger pieces and parts (COLD_BOUNCE_CHUNKS).
    let cold = op == Op::Read && staged * 2 > total && {
        let s = pieces.iter().map(|p| p.file_off).min().unwrap_or(0);
        let e = pieces
            .iter()
            .map(|p| p.file_off + p.len as u64)
            .max()
            .unwrap_or(s);
        bounce_direct(file, s, e)
    };
    let (pieces, split) = if cold {
        let piece = cfg
            .bounce_chunk_size
            .saturating_mul(COLD_BOUNCE_CHUNKS)
            .min(MAX_RW_COUNT);
        let split = cfg.bounce_split_size.saturating_mul(COLD_BOUNCE_SPLITS);
        (coarsen(pieces, piece as u64), split as u64)
    } else {
        (pieces, split_size(cfg, staged, total) as u64)
    };
    let threads = (cfg.parallel as usize).min(crate::env::env().threads + 1);
    // Writes through the page cache take the file's inode lock one at a
    // time (ext4, xfs): more threads only contend for it (4 GiB from GPU
    // memory on the H200 machine: 954 MiB/s on one thread, 866 on 16, and
    // the waiters' spinning cost CPU), so such a write stays on one thread.
    let direct: u64 = pieces
        .iter()
        .filter(|p| p.mode == Mode::Direct)
        .map(|p| p.len as u64)
        .sum();
    let buffered_write = op == Op::Write && direct < total / 2;
    if threads <= 1
        || total <= split
        || pieces.len() < 2
        || buffered_write
        || NO_SPLIT.with(|c| c.get())
    {
        let stop = Stop {
            user: cancel,
            split: None,
        };
        return run_pieces(file, bufs, op, pieces, stop, &fell_back, false);
    }
    // Parts of whole pieces, about split_size bytes each.
    let mut parts: Vec<Option<Vec<Piece>>> = Vec::new();
    let mut lens: Vec<u64> = Vec::new();
    let mut cur: Vec<Piece> = Vec::new();
    let mut cur_len = 0u64;
    for p in pieces {
        cur_len += p.len as u64;
        cur.push(p);
        if cur_len >= split {
            parts.push(Some(std::mem::take(&mut cur)));
            lens.push(cur_len);
            cur_len = 0;
        }
    }
    if !cur.is_empty() {
        parts.push(Some(cur));
        lens.push(cur_len);
    }
    let n = parts.len();
    let ctl = std::sync::Arc::new(SplitCtl {
        state: Mutex::new(SplitState {
            parts,
            lens,
            next: 0,
            active: 0,
            closed: false,
            results: (0..n).map(|_| None).collect(),
        }),
        cv: std::sync::Condvar::new(),
        stop: AtomicBool::new(false),
        fell_back,
    });
    let refs = SplitRefs {
        file,
        bufs,
        op,
        cancel,
    };
    for _ in 0..(threads - 1).min(n - 1) {
        let c = ctl.clone();
        let ptr = RefsPtr((&raw const refs).cast::<()>());
        let job: crate::pool::Job = Box::new(move || {
            let ptr = ptr;
            // SAFETY: split_work reads *ptr only after taking a part, which
            // it can do only while the caller waits (see SplitRefs).
            split_work(&c, unsafe { &*ptr.0.cast::<SplitRefs<'_>>() });
        });
        if crate::pool::spawn_job(job).is_err() {
            break; // no I/O threads: the calling thread does it all
        }
    }
    let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| split_work(&ctl, &refs)));
    let mut g = ctl.state.lock().unwrap_or_else(|p| p.into_inner());
    g.closed = true;
    while g.active > 0 {
        g = ctl.cv.wait(g).unwrap_or_else(|p| p.into_inner());
    }
    if let Err(p) = mine {
        std::panic::resume_unwind(p);
    }
    // The first failure in file order wins over the parts it stopped.
    let mut results = std::mem::take(&mut g.results);
    let failed =
        |r: &Option<Result<usize>>| matches!(r, Some(Err(e)) if !matches!(e, Error::Canceled));
    if let Some(i) = results.iter().position(failed) {
        if let Some(Err(e)) = results.swap_remove(i) {
            return Err(e);
        }
    }
    if results.iter().any(|r| matches!(r, Some(Err(_)))) {
        return Err(Error::Canceled);
    }
    let mut done = 0u64;
    for (r, &len) in results.iter().zip(&g.lens) {
        let got = match r {
            Some(Ok(k)) => *k as u64,
            _ => 0,
        };
        done += got;
        if got < len {
            break;
        }
    }
    Ok(done as usize)
}
