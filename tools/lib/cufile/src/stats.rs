//! cuFile's statistics (`cuFileSetStatsLevel`, `cuFileStatsStart/Stop/Reset`,
//! `cuFileGetStatsL1/L2/L3`), kept by this library for the calls it serves.
//!
//! What is counted: the synchronous `cuFileRead`/`cuFileWrite` calls (ops,
//! bytes, latency, a size histogram), `cuFileReadv`/`cuFileWritev` in their
//! own counters (cuFile 1.19's), registrations, and batches (set-up,
//! submit, the requests enqueued, and every completion `GetStatus` hands
//! out, with its bytes and latency since its submit). Stream-ordered
//! requests (`cuFileReadAsync`/`WriteAsync`) are counted as
//! `cuFileRead`/`cuFileWrite` are, when the stream has run them.
//! Per GPU (level 3, keyed by the GPU's PCI address, which fills `uuid` as
//! text): reads and writes of GPU memory, split into `n_p2p_*` (the direct
//! path through an fgds mapping of the BAR) and `n_posix_*` (the bounce
//! path); `n_nvfs_*` and `n_dr_*` stay 0 (no nvidia-fs, no dynamic routing).

use crate::abi::*;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Which way a request of GPU memory went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Peer to peer through an fgds mapping.
    P2p,
    /// Bounced through host memory.
    Posix,
}

/// The GPU side of one request, for the level 3 counters.
#[derive(Debug, Clone)]
pub struct GpuIo<'a> {
    /// The GPU (its PCI address).
    pub gpu: &'a str,
    /// Which path carried it.
    pub path: Path,
    /// Misaligned for O_DIRECT (its edges bounced).
    pub unaligned: bool,
}

struct Inner {
    s: CUfileStatsLevel3_t,
    gpus: Vec<String>,
    since: Instant,
}

static LEVEL: AtomicI32 = AtomicI32::new(-1);
static RUNNING: AtomicBool = AtomicBool::new(true);
static INNER: Mutex<Option<Inner>> = Mutex::new(None);

/// The level when nobody set one (`profile.cufile_stats`, or a staged
/// `CUFILE_PARAM_PROFILE_STATS`): called once the settings are known.
pub fn init_level(level: u32) {
    let _ = LEVEL.compare_exchange(-1, level as i32, Ordering::Relaxed, Ordering::Relaxed);
}

/// The level in force (0: off).
pub fn level() -> u32 {
    LEVEL.load(Ordering::Relaxed).max(0) as u32
}

/// `cuFileSetStatsLevel`: 0..=3, else `false`.
pub fn set_level(level: i32) -> bool {
    if !(0..=3).contains(&level) {
        return false;
    }
    LEVEL.store(level, Ordering::Relaxed);
    true
}

/// `cuFileStatsStart` / `cuFileStatsStop`.
pub fn set_running(on: bool) {
    RUNNING.store(on, Ordering::Relaxed);
}

/// `cuFileStatsReset`.
pub fn reset() {
    *lock() = None;
}

fn lock() -> MutexGuard<'static, Option<Inner>> {
    INNER.lock().unwrap_or_else(|p| p.into_inner())
}

fn with(f: impl FnOnce(&mut Inner)) {
    if level() == 0 || !RUNNING.load(Ordering::Relaxed) {
        return;
    }
    let mut g = lock();
    let inner = g.get_or_insert_with(|| Inner {
        s: CUfileStatsLevel3_t::default(),
        gpus: Vec::new(),
        since: Instant::now(),
    });
    f(inner);
}

fn count(c: &mut CUfileOpCounter_t, ok: bool) {
    if ok {
        c.ok += 1;
    } else {
        c.err += 1;
    }
}

fn us(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

/// The histogram bucket of a request of `size` bytes: bucket `i` counts
/// sizes of at most 2^i KiB (bucket 0: up to 1 KiB; 31: the rest).
pub fn bucket(size: usize) -> usize {
    let kib = size.div_ceil(1024).max(1);
    (usize::BITS - (kib - 1).leading_zeros()).min(31) as usize
}

fn gpu_slot<'a>(i: &'a mut Inner, gpu: &str) -> Option<&'a mut CUfilePerGpuStats_t> {
    let n = match i.gpus.iter().position(|g| g == gpu) {
        Some(n) => n,
        None if i.gpus.len() < CUFILE_STATS_MAX_GPUS => {
            let n = i.gpus.len();
            i.gpus.push(gpu.to_string());
            let u = &mut i.s.per_gpu_stats[n].uuid;
            let b = gpu.as_bytes();
            let k = b.len().min(CUFILE_GPU_UUID_LEN);
            u[..k].copy_from_slice(&b[..k]);
            i.s.num_gpus = i.gpus.len() as u32;
            n
        }
        None => return None,
    };
    Some(&mut i.s.per_gpu_stats[n])
}

/// A `cuFileRead` (`write` false) or `cuFileWrite` of `size` bytes that
/// moved `done` bytes (`None`: failed) in `took`.
pub fn io(write: bool, size: usize, done: Option<usize>, took: Duration, gpu: Option<GpuIo<'_>>) {
    with(|i| {
        let t = us(took);
        call(&mut i.s.detailed.basic, false, write, done, t);
        let hist = if write {
            &mut i.s.detailed.write_size_kb_hist
        } else {
            &mut i.s.detailed.read_size_kb_hist
        };
        hist[bucket(size)] += 1;
        if let Some(g) = gpu {
            gpu_io(i, write, done, t, &g);
        }
    });
}

/// A `cuFileReadv` (`write` false) or `cuFileWritev` of `size` bytes that
/// moved `done` bytes (`None`: failed) in `took` (cuFile 1.19's counters,
/// apart from `cuFileRead`/`cuFileWrite`'s).
pub fn vectored(write: bool, done: Option<usize>, took: Duration) {
    with(|i| call(&mut i.s.detailed.basic, true, write, done, us(took)));
}

/// Level 1's counters of one kind of call (`cuFileRead`, `cuFileWrite`,
/// or with `vectored` `cuFileReadv`, `cuFileWritev`): ops, bytes and the
/// latency sum.
#[rustfmt::skip] // a table: one row a kind of call
fn calls(
    l1: &mut CUfileStatsLevel1_t,
    vectored: bool,
    write: bool,
) -> (&mut CUfileOpCounter_t, &mut u64, &mut u64) {
    match (vectored, write) {
        (false, false) => (&mut l1.read_ops, &mut l1.read_bytes, &mut l1.read_lat_sum_us),
        (false, true) => (&mut l1.write_ops, &mut l1.write_bytes, &mut l1.write_lat_sum_us),
        (true, false) => (&mut l1.readv_ops, &mut l1.readv_bytes, &mut l1.readv_lat_sum_us),
        (true, true) => (&mut l1.writev_ops, &mut l1.writev_bytes, &mut l1.writev_lat_sum_us),
    }
}

/// One call of a kind (see [`calls`]) that moved `done` bytes (`None`:
/// failed) in `t` microseconds.
fn call(l1: &mut CUfileStatsLevel1_t, vectored: bool, write: bool, done: Option<usize>, t: u64) {
    let (ops, bytes, lat_sum_us) = calls(l1, vectored, write);
    count(ops, done.is_some());
    *bytes += done.unwrap_or(0) as u64;
    *lat_sum_us += t;
}

/// Level 3's counters of a GPU for reads or for writes: bytes, duration,
/// requests, P2P, POSIX, unaligned, failed.
#[rustfmt::skip] // a table: one row a direction
fn per_gpu(p: &mut CUfilePerGpuStats_t, write: bool) -> [&mut u64; 7] {
    if write {
        [&mut p.writes_bytes, &mut p.write_duration_us, &mut p.n_total_writes, &mut p.n_p2p_writes,
         &mut p.n_posix_writes, &mut p.n_unaligned_writes, &mut p.n_writes_err]
    } else {
        [&mut p.read_bytes, &mut p.read_duration_us, &mut p.n_total_reads, &mut p.n_p2p_reads,
         &mut p.n_posix_reads, &mut p.n_unaligned_reads, &mut p.n_reads_err]
    }
}

fn gpu_io(i: &mut Inner, write: bool, done: Option<usize>, t: u64, g: &GpuIo<'_>) {
    let Some(p) = gpu_slot(i, g.gpu) else {
        return;
    };
    let p2p = g.path == Path::P2p;
    let [bytes, duration_us, total, n_p2p, n_posix, n_unaligned, n_err] = per_gpu(p, write);
    *bytes += done.unwrap_or(0) as u64;
    *duration_us += t;
    *total += 1;
    *n_p2p += p2p as u64;
    *n_posix += !p2p as u64;
    *n_unaligned += g.unaligned as u64;
    *n_err += done.is_none() as u64;
}

/// Which registration counter.
#[derive(Debug, Clone, Copy)]
pub enum Reg {
    /// `cuFileHandleRegister`.
    Handle,
    /// `cuFileHandleDeregister`.
    HandleFree,
    /// `cuFileBufRegister`.
    Buf,
    /// `cuFileBufRegister` of GPU memory that got no fgds mapping: the call
    /// succeeds (its I/O bounces), the mapping counts as failed
    /// (`n_mmap_err`).
    BufBounced,
    /// `cuFileBufDeregister`.
    BufFree,
}

/// A registration call; `gpu` and `len` for buffers of GPU memory.
pub fn reg(what: Reg, ok: bool, gpu: Option<&str>, len: usize) {
    with(|i| {
        let l1 = &mut i.s.detailed.basic;
        match what {
            Reg::Handle => count(&mut l1.hdl_register_ops, ok),
            Reg::HandleFree => count(&mut l1.hdl_deregister_ops, ok),
            Reg::Buf | Reg::BufBounced => count(&mut l1.buf_register_ops, ok),
            Reg::BufFree => count(&mut l1.buf_deregister_ops, ok),
        }
        let Some(p) = gpu.and_then(|g| gpu_slot(i, g)) else {
            return;
        };
        match what {
            Reg::Buf => {
                p.n_mmap += 1;
                if ok {
                    p.n_mmap_ok += 1;
                    p.reg_bytes += len as u64;
                } else {
                    p.n_mmap_err += 1;
                }
            }
            Reg::BufBounced => {
                p.n_mmap += 1;
                p.n_mmap_err += 1;
            }
            Reg::BufFree if ok => p.n_mmap_free += 1,
            _ => {}
        }
    });
}

/// Which batch call.
#[derive(Debug, Clone, Copy)]
pub enum BatchCall {
    /// `cuFileBatchIOSetUp`.
    SetUp,
    /// `cuFileBatchIOCancel`.
    Cancel,
    /// `cuFileBatchIODestroy`.
    Destroy,
}

/// A batch call other than submit and completion.
pub fn batch(what: BatchCall, ok: bool) {
    with(|i| {
        let l1 = &mut i.s.detailed.basic;
        match what {
            BatchCall::SetUp => count(&mut l1.batch_setup_ops, ok),
            BatchCall::Cancel => count(&mut l1.batch_cancel_ops, ok),
            BatchCall::Destroy => count(&mut l1.batch_destroy_ops, ok),
        }
    });
}

/// A `cuFileBatchIOSubmit` of `p2p` requests into fgds mappings and `posix`
/// others, through io_uring or not, in `took`.
pub fn batch_submit(ok: bool, p2p: u64, posix: u64, io_uring: bool, took: Duration) {
    with(|i| {
        let l1 = &mut i.s.detailed.basic;
        count(&mut l1.batch_submit_ops, ok);
        count(&mut l1.batch_total_submit_ops, ok);
        if io_uring {
            count(&mut l1.batch_iouring_submit_ops, ok);
        }
        match (p2p, posix) {
            (0, 0) => {}
            (_, 0) => count(&mut l1.batch_p2p_submit_ops, ok),
            (0, _) => {}
            _ => count(&mut l1.batch_mixed_io_submit_ops, ok),
        }
        if ok {
            l1.batch_enqueued_ops.ok += p2p + posix;
            l1.batch_posix_enqueued_ops.ok += posix;
        } else {
            l1.batch_enqueued_ops.err += p2p + posix;
            l1.batch_posix_enqueued_ops.err += posix;
        }
        l1.batch_submit_lat_sum_us += us(took);
    });
}

/// A request of a batch handed out by `cuFileBatchIOGetStatus`.
pub fn batch_done(write: bool, posix: bool, done: Option<usize>, since_submit: Duration) {
    with(|i| {
        let l1 = &mut i.s.detailed.basic;
        count(&mut l1.batch_complete_ops, done.is_some());
        count(&mut l1.batch_processed_ops, done.is_some());
        if posix {
            count(&mut l1.batch_posix_processed_ops, done.is_some());
        }
        let n = done.unwrap_or(0) as u64;
        if write {
            l1.batch_write_bytes += n;
            l1.last_batch_write_bytes = n;
        } else {
            l1.batch_read_bytes += n;
            l1.last_batch_read_bytes = n;
        }
        l1.batch_completion_lat_sum_us += us(since_submit);
    });
}

fn per_sec(n: u64, us: u64) -> u64 {
    if us == 0 {
        0
    } else {
        (n as u128 * 1_000_000 / us as u128).min(u64::MAX as u128) as u64
    }
}

/// Everything counted since the start (or the last reset), with the
/// averages and rates filled in: latencies are sums over the calls; the
/// bandwidths are bytes over those sums (per-call throughput); the per
/// second rates and the per-GPU utilisation (duration over the span, in
/// percent, at most 100) are over the span since the reset.
pub fn snapshot() -> CUfileStatsLevel3_t {
    let g = lock();
    let Some(i) = g.as_ref() else {
        return CUfileStatsLevel3_t::default();
    };
    let mut s = i.s;
    let span = us(i.since.elapsed()).max(1);
    let l1 = &mut s.detailed.basic;
    l1.read_lat_avg_us = l1.read_lat_sum_us / (l1.read_ops.ok + l1.read_ops.err).max(1);
    l1.write_lat_avg_us = l1.write_lat_sum_us / (l1.write_ops.ok + l1.write_ops.err).max(1);
    l1.read_bw_bytes_per_sec = per_sec(l1.read_bytes, l1.read_lat_sum_us);
    l1.write_bw_bytes_per_sec = per_sec(l1.write_bytes, l1.write_lat_sum_us);
    l1.read_ops_per_sec = per_sec(l1.read_ops.ok, span);
    l1.write_ops_per_sec = per_sec(l1.write_ops.ok, span);
    let subs = l1.batch_submit_ops.ok + l1.batch_submit_ops.err;
    let dones = l1.batch_complete_ops.ok + l1.batch_complete_ops.err;
    l1.batch_submit_lat_avg_us = l1.batch_submit_lat_sum_us / subs.max(1);
    l1.batch_completion_lat_avg_us = l1.batch_completion_lat_sum_us / dones.max(1);
    l1.batch_submit_ops_per_sec = per_sec(subs, span);
    l1.batch_complete_ops_per_sec = per_sec(dones, span);
    let rv = l1.readv_ops.ok + l1.readv_ops.err;
    let wv = l1.writev_ops.ok + l1.writev_ops.err;
    l1.readv_lat_avg_us = l1.readv_lat_sum_us / rv.max(1);
    l1.writev_lat_avg_us = l1.writev_lat_sum_us / wv.max(1);
    l1.readv_bw_bytes_per_sec = per_sec(l1.readv_bytes, l1.readv_lat_sum_us);
    l1.writev_bw_bytes_per_sec = per_sec(l1.writev_bytes, l1.writev_lat_sum_us);
    l1.readv_ops_per_sec = per_sec(l1.readv_ops.ok, span);
    l1.writev_ops_per_sec = per_sec(l1.writev_ops.ok, span);
    l1.batch_read_bw_bytes = per_sec(l1.batch_read_bytes, span);
    l1.batch_write_bw_bytes = per_sec(l1.batch_write_bytes, span);
    for p in s.per_gpu_stats.iter_mut().take(s.num_gpus as usize) {
        p.read_bw_bytes_per_sec = per_sec(p.read_bytes, p.read_duration_us);
        p.write_bw_bytes_per_sec = per_sec(p.writes_bytes, p.write_duration_us);
        p.read_utilization = (p.read_duration_us * 100 / span).min(100);
        p.write_utilization = (p.write_duration_us * 100 / span).min(100);
    }
    s
}

/// The bytes of a plain-data struct.
fn raw<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: the statistics structs are repr(C) integers and byte arrays;
    // their padding (after num_gpus) is zeroed by Default and never read
    // as a value.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// Statistics of `level` (1 to 3) in the layout of cuFile `version`
/// (`1000 * major + 10 * minor`): before 1.19 without the vectored
/// counters at the end of level 1, which every later field follows.
pub fn layout(s: &CUfileStatsLevel3_t, level: u32, version: u32) -> Vec<u8> {
    let l1 = raw(&s.detailed.basic);
    let l1 = if version < 1190 {
        &l1[..STATS_L1_SIZE_BEFORE_1190]
    } else {
        l1
    };
    let mut v = l1.to_vec();
    if level >= 2 {
        v.extend_from_slice(raw(&s.detailed.read_size_kb_hist));
        v.extend_from_slice(raw(&s.detailed.write_size_kb_hist));
    }
    if level >= 3 {
        v.extend_from_slice(&s.num_gpus.to_ne_bytes());
        v.extend_from_slice(&[0; 4]);
        v.extend_from_slice(raw(&s.per_gpu_stats));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_by_version() {
        let mut s = CUfileStatsLevel3_t::default();
        s.detailed.basic.last_batch_write_bytes = 7;
        s.detailed.basic.readv_ops.ok = 9;
        s.detailed.read_size_kb_hist[0] = 11;
        s.num_gpus = 2;
        s.per_gpu_stats[1].reg_bytes = 13;
        let u64_at = |v: &[u8], o: usize| u64::from_ne_bytes(v[o..o + 8].try_into().unwrap());
        for (version, l1) in [(1170, 512), (1180, 512), (1190, 624), (1200, 624)] {
            let a = layout(&s, 1, version);
            assert_eq!(a.len(), l1);
            assert_eq!(u64_at(&a, 504), 7);
            let b = layout(&s, 2, version);
            assert_eq!(b.len(), l1 + 512);
            assert_eq!(u64_at(&b, l1), 11);
            let c = layout(&s, 3, version);
            assert_eq!(c.len(), l1 + 512 + 8 + 16 * 248);
            assert_eq!(
                u32::from_ne_bytes(c[l1 + 512..l1 + 516].try_into().unwrap()),
                2
            );
            assert_eq!(u64_at(&c, l1 + 512 + 8 + 248 + 240), 13);
            if version >= 1190 {
                assert_eq!(u64_at(&a, 512), 9);
            }
        }
        assert_eq!(
            layout(&s, 3, 1200).len(),
            std::mem::size_of::<CUfileStatsLevel3_t>()
        );
    }

    #[test]
    fn each_call_counts_in_its_own_counters() {
        assert!(set_level(3));
        reset();
        let g = |path, unaligned| {
            Some(GpuIo {
                gpu: "0000:01:00.0",
                path,
                unaligned,
            })
        };
        let us = Duration::from_micros;
        io(false, 4096, Some(4096), us(10), g(Path::P2p, false));
        io(true, 8192, Some(100), us(20), g(Path::Posix, true));
        io(true, 1 << 20, None, us(40), g(Path::P2p, false));
        vectored(false, Some(3), us(5));
        vectored(true, None, us(7));
        let s = snapshot();
        let l1 = &s.detailed.basic;
        let ops = |c: &CUfileOpCounter_t| (c.ok, c.err);
        assert_eq!(ops(&l1.read_ops), (1, 0));
        assert_eq!((l1.read_bytes, l1.read_lat_sum_us), (4096, 10));
        assert_eq!(ops(&l1.write_ops), (1, 1));
        assert_eq!((l1.write_bytes, l1.write_lat_sum_us), (100, 60));
        assert_eq!(ops(&l1.readv_ops), (1, 0));
        assert_eq!((l1.readv_bytes, l1.readv_lat_sum_us), (3, 5));
        assert_eq!(ops(&l1.writev_ops), (0, 1));
        assert_eq!((l1.writev_bytes, l1.writev_lat_sum_us), (0, 7));
        assert_eq!(s.detailed.read_size_kb_hist[bucket(4096)], 1);
        assert_eq!(s.detailed.write_size_kb_hist[bucket(8192)], 1);
        assert_eq!(s.detailed.write_size_kb_hist[bucket(1 << 20)], 1);
        assert_eq!(s.detailed.write_size_kb_hist.iter().sum::<u64>(), 2);
        assert_eq!(s.num_gpus, 1);
        let p = &s.per_gpu_stats[0];
        let reads = [
            p.read_bytes,
            p.read_duration_us,
            p.n_total_reads,
            p.n_p2p_reads,
            p.n_posix_reads,
            p.n_unaligned_reads,
            p.n_reads_err,
        ];
        assert_eq!(reads, [4096, 10, 1, 1, 0, 0, 0]);
        let writes = [
            p.writes_bytes,
            p.write_duration_us,
            p.n_total_writes,
            p.n_p2p_writes,
            p.n_posix_writes,
            p.n_unaligned_writes,
            p.n_writes_err,
        ];
        assert_eq!(writes, [100, 60, 2, 1, 1, 1, 1]);
        reset();
    }

    #[test]
    fn buckets_are_powers_of_two_kib() {
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(1024), 0);
        assert_eq!(bucket(1025), 1);
        assert_eq!(bucket(4096), 2);
        assert_eq!(bucket(1 << 20), 10);
        assert_eq!(bucket((1 << 20) + 1), 11);
        assert_eq!(bucket(usize::MAX), 31);
    }
}
