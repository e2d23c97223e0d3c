//! The C ABI's batches (`fgds_batch_*` in `include/fgds.h`): their ids in the
//! handle registry, and requests resolved as the vectored calls resolve theirs.

use super::*;
use crate::batch::{IoParams, IoTarget, OwnedSegment, Status};
use std::time::Duration;

/// Creates a batch of `capacity` requests. Returns its id (> 0) or a negative code.
#[no_mangle]
pub extern "C" fn fgds_batch_create(capacity: c_uint) -> c_int {
    let r = Batch::new(capacity as usize).and_then(|b| {
        let id = new_id()?;
        reg()
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::new(Mutex::new(b)));
        Ok(id)
    });
    r.unwrap_or_else(fail)
}

fn batch(id: c_int) -> Result<Arc<Mutex<Batch>>> {
    reg()
        .batches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .cloned()
        .ok_or_else(|| Error::BadHandle(format!("{id} is not a batch")))
}

/// Submits `n` requests (all or none).
///
/// # Safety
/// `params` must point to `n` valid requests.
#[no_mangle]
pub unsafe extern "C" fn fgds_batch_submit(
    id: c_int,
    params: *const fgds_io_params,
    n: c_uint,
) -> c_int {
    let r = (|| -> Result<()> {
        let b = batch(id)?;
        if n > 0 && params.is_null() {
            return Err(Error::InvalidArgument("params is NULL".into()));
        }
        let ps = if n == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(params, n as usize)
        };
        let mut v = Vec::with_capacity(ps.len());
        for (i, p) in ps.iter().enumerate() {
            let f = file(p.handle).map_err(|e| Error::segment(i, e))?;
            let op = match p.opcode {
                FGDS_OP_READ => Op::Read,
                FGDS_OP_WRITE => Op::Write,
                o => {
                    return Err(Error::segment(
                        i,
                        Error::InvalidArgument(format!("opcode {o}")),
                    ))
                }
            };
            let file_off = off(p.file_offset, "file offset").map_err(|e| Error::segment(i, e))?;
            let target = if p.segments.is_null() {
                let bo = off(p.buf_offset, "buffer offset").map_err(|e| Error::segment(i, e))?;
                let (b, o) = held(p.base as u64, bo, p.size).map_err(|e| Error::segment(i, e))?;
                IoTarget::Plain {
                    buffer: b,
                    buf_off: o,
                    size: p.size,
                }
            } else {
                let segs = resolve_segments(p.segments, p.nsegments, FGDS_BATCH_IOV_MAX)
                    .map_err(|e| Error::segment(i, e))?;
                IoTarget::Vectored(
                    segs.into_iter()
                        .map(|(buffer, offset, size)| OwnedSegment {
                            buffer,
                            offset,
                            size,
                        })
                        .collect(),
                )
            };
            v.push(IoParams {
                cookie: p.cookie,
                file: f,
                op,
                file_off,
                target,
            });
        }
        let r = b.lock().unwrap_or_else(|p| p.into_inner()).submit(&v);
        r
    })();
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Waits for at least `min_nr` completions or `timeout_ms` (< 0: forever;
/// 0: poll) and writes up to `max_nr` events. Returns the number written.
/// Events not written because of `max_nr` stay in the batch.
///
/// # Safety
/// `events` must have room for `max_nr` events.
#[no_mangle]
pub unsafe extern "C" fn fgds_batch_wait(
    id: c_int,
    min_nr: c_uint,
    max_nr: c_uint,
    events: *mut fgds_io_event,
    timeout_ms: c_int,
) -> c_int {
    let b = match batch(id) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    if max_nr > 0 && events.is_null() {
        return fail(Error::InvalidArgument("events is NULL".into()));
    }
    let mut g = b.lock().unwrap_or_else(|p| p.into_inner());
    let timeout = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
    let ev = g.wait((min_nr as usize).min(max_nr as usize), timeout);
    let mut n = 0usize;
    let mut leftover = Vec::new();
    for e in ev {
        if n < max_nr as usize {
            let status = match e.status {
                Status::Complete => 0,
                Status::Failed => 1,
                Status::Canceled => 2,
                Status::Pending => 3,
                Status::Timeout => 4,
            };
            *events.add(n) = fgds_io_event {
                cookie: e.cookie,
                status,
                pad: 0,
                result: e.result,
            };
            n += 1;
        } else if matches!(
            e.status,
            Status::Complete | Status::Failed | Status::Canceled
        ) {
            leftover.push(e);
        }
    }
    g.requeue(leftover);
    n as c_int
}

/// Cancels every request of the batch. Returns how many were unfinished.
#[no_mangle]
pub extern "C" fn fgds_batch_cancel(id: c_int) -> c_int {
    match batch(id) {
        Ok(b) => b.lock().unwrap_or_else(|p| p.into_inner()).cancel() as c_int,
        Err(e) => fail(e),
    }
}

/// Cancels and waits for the batch's requests, then frees it.
#[no_mangle]
pub extern "C" fn fgds_batch_destroy(id: c_int) -> c_int {
    match reg()
        .batches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id)
    {
        Some(_) => 0,
        None => fail(Error::BadHandle(format!("{id} is not a batch"))),
    }
}
