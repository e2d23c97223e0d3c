//! cuFile's batch API (`cuFileBatchIOSetUp`, `Submit`, `GetStatus`,
//! `Cancel`, `Destroy`) on fgds's `Batch` (one io_uring per batch).

use crate::abi::*;
use crate::driver::driver;
use crate::errors::status_of;
use crate::handle::{handle, new_id};
use crate::memory::{held_target, offset};
use crate::stats;
use fgds::{Batch, Event, IoParams, IoTarget, Op, Status};
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_uint, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What the statistics need of a batch request until it completes: write
/// or read, bounced (not into an fgds mapping), submitted when.
type Pending = (bool, bool, Instant);

/// A batch and the events reaped but not yet handed out.
struct BatchState {
    batch: Mutex<Batch>,
    ready: Mutex<VecDeque<Event>>,
    /// By cookie, oldest first (cookies may repeat).
    pending: Mutex<HashMap<u64, VecDeque<Pending>>>,
}

/// The batches set up, by the id handed out for each.
fn batches() -> &'static Mutex<HashMap<usize, Arc<BatchState>>> {
    static BATCHES: OnceLock<Mutex<HashMap<usize, Arc<BatchState>>>> = OnceLock::new();
    BATCHES.get_or_init(Default::default)
}

fn batch(id: *mut c_void) -> Result<Arc<BatchState>, CUfileError_t> {
    batches()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(id as usize))
        .cloned()
        .ok_or(CUfileError_t::op(CU_FILE_INVALID_VALUE))
}

/// `cuFileBatchIOSetUp`: a batch of up to `nr` requests in flight
/// (`nr` <= `properties.io_batchsize`, 128 by default).
///
/// # Safety
/// `batch_idp` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOSetUp(
    batch_idp: *mut *mut c_void,
    nr: c_uint,
) -> CUfileError_t {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return e,
    };
    if batch_idp.is_null() || nr == 0 || nr as usize > d.settings.max_batch {
        stats::batch(stats::BatchCall::SetUp, false);
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    let r = Batch::new(nr as usize);
    stats::batch(stats::BatchCall::SetUp, r.is_ok());
    match r {
        Ok(b) => {
            let id = new_id();
            batches().lock().unwrap_or_else(|p| p.into_inner()).insert(
                id,
                Arc::new(BatchState {
                    batch: Mutex::new(b),
                    ready: Mutex::new(VecDeque::new()),
                    pending: Mutex::new(HashMap::new()),
                }),
            );
            // SAFETY: checked non-NULL.
            unsafe { batch_idp.write(id as *mut c_void) };
            CUfileError_t::OK
        }
        Err(e) => status_of("cuFileBatchIOSetUp", &e),
    }
}

/// `cuFileBatchIOSubmit`: all `nr` requests or none.
///
/// # Safety
/// `iocbp` points to `nr` requests whose memory stays valid until they complete.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOSubmit(
    batch_id: *mut c_void,
    nr: c_uint,
    iocbp: *mut CUfileIOParams_t,
    _flags: c_uint,
) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    let b = match batch(batch_id) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if nr == 0 {
        return CUfileError_t::OK;
    }
    if iocbp.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: the caller passes nr requests.
    let ps = unsafe { std::slice::from_raw_parts(iocbp, nr as usize) };
    let t0 = Instant::now();
    let mut v = Vec::with_capacity(ps.len());
    let mut info = Vec::with_capacity(ps.len());
    for p in ps {
        if p.mode != CUFILE_BATCH {
            return CUfileError_t::op(CU_FILE_INVALID_VALUE);
        }
        let op = match p.opcode {
            CUFILE_READ => Op::Read,
            CUFILE_WRITE => Op::Write,
            _ => return CUfileError_t::op(CU_FILE_INVALID_VALUE),
        };
        let h = match handle(p.fh) {
            Ok(h) => h,
            Err(c) => return CUfileError_t::op(c),
        };
        let r = offset(p.batch.file_offset, "file offset").and_then(|fo| {
            let size = p.batch.size.max(1);
            let (buffer, buf_off, _) =
                held_target(p.batch.dev_ptr_base, p.batch.dev_ptr_offset, size)?;
            let posix = !buffer.is_p2p() || h.file.no_direct_reason().is_some();
            info.push((p.cookie as u64, (op == Op::Write, posix, t0)));
            Ok(IoParams {
                cookie: p.cookie as u64,
                file: h.file.clone(),
                op,
                file_off: fo as u64,
                target: IoTarget::Plain {
                    buffer,
                    buf_off,
                    size: p.batch.size,
                },
            })
        });
        match r {
            Ok(x) => v.push(x),
            Err(e) => return status_of("cuFileBatchIOSubmit", &e),
        }
    }
    // Known before the submit, which may complete requests at once.
    if stats::level() > 0 {
        let mut pend = b.pending.lock().unwrap_or_else(|p| p.into_inner());
        for (c, x) in &info {
            pend.entry(*c).or_default().push_back(*x);
        }
    }
    let r = b.batch.lock().unwrap_or_else(|p| p.into_inner()).submit(&v);
    let posix = info.iter().filter(|(_, x)| x.1).count() as u64;
    let io_uring = driver().is_ok_and(|d| d.settings.fgds.use_io_uring);
    stats::batch_submit(
        r.is_ok(),
        info.len() as u64 - posix,
        posix,
        io_uring,
        t0.elapsed(),
    );
    match r {
        Ok(()) => CUfileError_t::OK,
        Err(e) => {
            let mut pend = b.pending.lock().unwrap_or_else(|p| p.into_inner());
            for (c, _) in &info {
                if let Some(q) = pend.get_mut(c) {
                    q.pop_back();
                }
            }
            status_of("cuFileBatchIOSubmit", &e)
        }
    }
}

fn terminal(e: &Event) -> bool {
    matches!(
        e.status,
        Status::Complete | Status::Failed | Status::Canceled
    )
}

/// `cuFileBatchIOGetStatus`: waits until `min_nr` requests are done or
/// `timeout` (NULL: no limit) passed, and writes up to `*nr` events of done
/// requests (`CUFILE_COMPLETE` with the bytes, `CUFILE_FAILED` with a
/// negative errno, `CUFILE_CANCELED`); `*nr` becomes their number.
///
/// # Safety
/// `nr` valid; `iocbp` has room for `*nr` events; `timeout` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOGetStatus(
    batch_id: *mut c_void,
    min_nr: c_uint,
    nr: *mut c_uint,
    iocbp: *mut CUfileIOEvents_t,
    timeout: *mut libc::timespec,
) -> CUfileError_t {
    let b = match batch(batch_id) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if nr.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: checked non-NULL.
    let max = unsafe { *nr } as usize;
    if (max > 0 && iocbp.is_null()) || min_nr as usize > max {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: NULL or the caller's timespec.
    let timeout = match unsafe { timeout.as_ref() } {
        None => None,
        Some(t) if t.tv_sec >= 0 && (0..1_000_000_000).contains(&t.tv_nsec) => {
            Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
        }
        Some(_) => return CUfileError_t::op(CU_FILE_INVALID_VALUE),
    };
    let mut out: Vec<Event> = Vec::with_capacity(max);
    let mut ready = b.ready.lock().unwrap_or_else(|p| p.into_inner());
    while out.len() < max {
        match ready.pop_front() {
            Some(e) => out.push(e),
            None => break,
        }
    }
    if out.len() < max {
        let mut g = b.batch.lock().unwrap_or_else(|p| p.into_inner());
        let want = (min_nr as usize).saturating_sub(out.len());
        let evs = if want == 0 {
            g.poll()
        } else {
            g.wait(want, timeout)
        };
        for e in evs.into_iter().filter(terminal) {
            if out.len() < max {
                out.push(e);
            } else {
                ready.push_back(e);
            }
        }
    }
    if stats::level() > 0 && !out.is_empty() {
        let mut pend = b.pending.lock().unwrap_or_else(|p| p.into_inner());
        for e in &out {
            let Some(q) = pend.get_mut(&e.cookie) else {
                continue;
            };
            if let Some((write, posix, t0)) = q.pop_front() {
                let done = (e.status == Status::Complete).then_some(e.result.max(0) as usize);
                stats::batch_done(write, posix, done, t0.elapsed());
            }
            if q.is_empty() {
                pend.remove(&e.cookie);
            }
        }
    }
    for (i, e) in out.iter().enumerate() {
        let status = match e.status {
            Status::Complete => CUFILE_COMPLETE,
            Status::Canceled => CUFILE_CANCELED,
            _ => CUFILE_FAILED,
        };
        // SAFETY: i < max, the caller's room.
        unsafe {
            iocbp.add(i).write(CUfileIOEvents_t {
                cookie: e.cookie as *mut c_void,
                status,
                ret: e.result as isize as usize,
            })
        };
    }
    // SAFETY: checked non-NULL.
    unsafe { nr.write(out.len() as c_uint) };
    CUfileError_t::OK
}

/// `cuFileBatchIOCancel`: cancels what has not started on the device.
#[no_mangle]
pub extern "C" fn cuFileBatchIOCancel(batch_id: *mut c_void) -> CUfileError_t {
    let r = batch(batch_id);
    stats::batch(stats::BatchCall::Cancel, r.is_ok());
    match r {
        Ok(b) => {
            b.batch.lock().unwrap_or_else(|p| p.into_inner()).cancel();
            CUfileError_t::OK
        }
        Err(e) => e,
    }
}

/// `cuFileBatchIODestroy`: cancels, waits for the requests, frees the batch.
#[no_mangle]
pub extern "C" fn cuFileBatchIODestroy(batch_id: *mut c_void) {
    let b = batches()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(batch_id as usize));
    stats::batch(stats::BatchCall::Destroy, b.is_some());
    drop(b);
}
