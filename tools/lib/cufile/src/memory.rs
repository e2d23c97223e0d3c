//! Memory: registered buffers (`cuFileBufRegister`, fgds's
//! `cuFileBufRegisterDmabufFGDS`, `cuFileBufDeregister`) and what the memory
//! of a request is (a registered buffer, unregistered CUDA memory served by
//! `fgds::gpucache`, or host memory).

use crate::abi::*;
use crate::config::LogLevel;
use crate::driver::{driver, log};
use crate::errors::status_of;
use crate::stats;
use fgds::{Buffer, Error};
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// A registered buffer and the GPU whose memory it is (its PCI address).
#[derive(Clone)]
pub(crate) struct RegBuf {
    pub(crate) buf: Arc<Buffer>,
    pub(crate) gpu: Option<Arc<str>>,
}

/// The registered buffers, by base address.
fn bufs() -> &'static RwLock<BTreeMap<usize, RegBuf>> {
    static BUFS: RwLock<BTreeMap<usize, RegBuf>> = RwLock::new(BTreeMap::new());
    &BUFS
}

/// The GPU (PCI address, else `cuda<ordinal>`) owning `addr`, if the CUDA
/// driver knows the address as device memory.
fn cuda_gpu(addr: u64) -> Option<Arc<str>> {
    let rt = fgds::gpu::Runtime::cuda().ok()?;
    let m = rt.describe(addr).ok()?;
    Some(
        m.pci_address
            .unwrap_or_else(|| format!("cuda{}", m.ordinal))
            .into(),
    )
}

/// A buffer for `[addr, addr + len)` that the caller registers
/// (`cuFileBufRegister`): CUDA memory if the CUDA driver knows the address
/// (the library's cached registration of its allocation, if any, is
/// dropped first), host memory otherwise.
fn make_buffer(addr: usize, len: usize) -> fgds::Result<RegBuf> {
    let gpu = cuda_gpu(addr as u64);
    let buf = if gpu.is_some() {
        Buffer::from_cuda(addr as u64, len as u64)?
    } else {
        // SAFETY: cuFile's contract: the caller's memory stays valid while it
        // is registered.
        unsafe { Buffer::from_host_ptr(addr as *mut u8, len)? }
    };
    Ok(RegBuf {
        buf: Arc::new(buf),
        gpu,
    })
}

/// What a request's memory is: within a registered buffer (or host memory,
/// wrapped for the request), or CUDA memory the caller did not register
/// (served by `fgds::gpucache`: a staging buffer or a cached registration
/// of its allocation, never a registration per request).
pub(crate) enum Target {
    Buf(RegBuf, usize),
    Gpu {
        addr: u64,
        gpu: Arc<str>,
        rt: Arc<fgds::gpu::Runtime>,
    },
}

/// The registered buffer containing `addr` and `addr`'s offset in it.
fn registered(addr: usize) -> Option<(RegBuf, usize)> {
    let g = bufs().read().unwrap_or_else(|p| p.into_inner());
    let (base, b) = g.range(..=addr).next_back()?;
    let off = addr - base;
    (off < b.buf.len()).then(|| (b.clone(), off))
}

pub(crate) fn offset(v: libc::off_t, what: &str) -> fgds::Result<usize> {
    usize::try_from(v).map_err(|_| Error::InvalidArgument(format!("negative {what} {v}")))
}

/// The memory of `size` bytes at `base + buf_off`: within a registered
/// buffer, else CUDA memory the caller did not register, else host memory
/// (cuFile accepts unregistered memory).
pub(crate) fn target(
    base: *const c_void,
    buf_off: libc::off_t,
    size: usize,
) -> fgds::Result<Target> {
    let bo = offset(buf_off, "buffer offset")?;
    if base.is_null() {
        return Err(Error::InvalidArgument("buffer is NULL".into()));
    }
    if let Some((b, off)) = registered(base as usize) {
        return Ok(Target::Buf(b, off + bo));
    }
    let start = (base as usize)
        .checked_add(bo)
        .ok_or_else(|| Error::InvalidArgument("buffer offset overflows".into()))?;
    if let (Some(gpu), Ok(rt)) = (cuda_gpu(start as u64), fgds::gpu::Runtime::cuda()) {
        return Ok(Target::Gpu {
            addr: start as u64,
            gpu,
            rt,
        });
    }
    // SAFETY: cuFile's contract: the caller's memory stays valid while the
    // call using it runs.
    let buf = unsafe { Buffer::from_host_ptr(start as *mut u8, size.max(1))? };
    Ok(Target::Buf(
        RegBuf {
            buf: Arc::new(buf),
            gpu: None,
        },
        0,
    ))
}

/// The buffer, offset and GPU for a request that holds its buffer until
/// done (a batch's, a stream-ordered one): for unregistered CUDA memory the
/// cached registration of its allocation (`fgds::gpucache::buffer_for`).
pub(crate) fn held_target(
    base: *const c_void,
    buf_off: libc::off_t,
    size: usize,
) -> fgds::Result<(Arc<Buffer>, usize, Option<Arc<str>>)> {
    match target(base, buf_off, size)? {
        Target::Buf(rb, off) => Ok((rb.buf, off, rb.gpu)),
        Target::Gpu { addr, gpu, rt } => {
            let (b, off, _) = fgds::gpucache::buffer_for(&rt, addr, size.max(1))?;
            Ok((b, off, Some(gpu)))
        }
    }
}

/// Says that a `cuFileBufRegister` of GPU memory got no fgds mapping (its
/// I/O bounces through host memory), why and what to do: once per cause in
/// the process (`FGDS_LOG=debug`: every time). Each one is counted
/// (`fgds::stats::fallbacks`'s `registrations`, and `n_mmap_err` in the
/// level 3 statistics).
fn warn_bounced_registration(start: usize, length: usize, buf: &Buffer) {
    static SAID: [AtomicBool; 7] = [const { AtomicBool::new(false) }; 7];
    let cause = buf
        .p2p_unavailable_cause()
        .unwrap_or(fgds::FallbackCause::Other);
    let why = buf.p2p_unavailable_reason().unwrap_or("no fgds mapping");
    let i = fgds::FallbackCause::ALL
        .iter()
        .position(|c| *c == cause)
        .unwrap_or(SAID.len() - 1);
    let first = !SAID[i].swap(true, Ordering::Relaxed);
    let strict = if cause == fgds::FallbackCause::Asked {
        ""
    } else {
        "; FGDS_STRICT=1 makes it an error"
    };
    log(
        if first {
            LogLevel::Info
        } else {
            LogLevel::Debug
        },
        format_args!(
            "cuFileBufRegister: {start:#x} ({length} bytes): registered, but its I/O bounces \
             through host memory ({cause}: {why}): {}{strict}{}",
            cause.hint(),
            if first {
                " (said once per cause; FGDS_LOG=debug says each)"
            } else {
                ""
            }
        ),
    );
}

/// `cuFileBufRegister`: CUDA device memory (exported to fgds, P2P, where a
/// node serves its GPU) or host memory.
///
/// # Safety
/// `[base, base + length)` stays valid until `cuFileBufDeregister`.
#[no_mangle]
pub unsafe extern "C" fn cuFileBufRegister(
    base: *const c_void,
    length: usize,
    _flags: c_int,
) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if base.is_null() || length == 0 {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    let start = base as usize;
    let Some(end) = start.checked_add(length) else {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    };
    let mut g = bufs().write().unwrap_or_else(|p| p.into_inner());
    let overlaps = g
        .range(..end)
        .next_back()
        .is_some_and(|(b, x)| b + x.buf.len() > start);
    if overlaps {
        return CUfileError_t::op(CU_FILE_MEMORY_ALREADY_REGISTERED);
    }
    match make_buffer(start, length) {
        Ok(b) => {
            let bounced = b.gpu.is_some() && !b.buf.is_p2p();
            if bounced {
                warn_bounced_registration(start, length, &b.buf);
            }
            let what = if bounced {
                stats::Reg::BufBounced
            } else {
                stats::Reg::Buf
            };
            stats::reg(what, true, b.gpu.as_deref(), length);
            g.insert(start, b);
            CUfileError_t::OK
        }
        Err(e) => {
            stats::reg(
                stats::Reg::Buf,
                false,
                cuda_gpu(start as u64).as_deref(),
                length,
            );
            status_of("cuFileBufRegister", &e)
        }
    }
}

/// fgds's extension of cuFile for memory no CUDA driver knows (a dma-buf
/// of another GPU, or of a device standing in for one): registers `length`
/// bytes at `offset` of the dma-buf `dmabuf_fd` on the fgds node whose GPU
/// exports it (the nodes are tried in order, as libfgds does), maps them
/// and writes the mapping's address to `*buf_ptr_base`. That address is a
/// registered buffer for `cuFileRead`, `cuFileWrite` and batches (I/O into
/// it goes peer to peer) until `cuFileBufDeregister(*buf_ptr_base)`.
/// `CU_FILE_INVALID_VALUE` for a NULL `buf_ptr_base`, a zero `length` or a
/// bad descriptor; `CU_FILE_DEVICE_NOT_FOUND` when no fgds node takes it;
/// `CU_FILE_INVALID_MAPPING_RANGE` outside the dma-buf.
///
/// # Safety
/// `buf_ptr_base` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuFileBufRegisterDmabufFGDS(
    dmabuf_fd: c_int,
    offset: u64,
    length: usize,
    buf_ptr_base: *mut *mut c_void,
) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if buf_ptr_base.is_null() || length == 0 || dmabuf_fd < 0 {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    let nodes = match fgds::list_devices() {
        Ok(n) => n,
        Err(e) => return status_of("cuFileBufRegisterDmabufFGDS", &e),
    };
    let mut last = Error::NoDevice("no fgds node (module not loaded or no GPU bound)".into());
    for n in nodes {
        match Buffer::register_dmabuf(Some(&n.dev_path), dmabuf_fd, offset, length as u64) {
            Ok(b) => {
                let gpu: Arc<str> = n.pci_address.unwrap_or(n.name).into();
                let base = b.base_addr() as usize;
                stats::reg(stats::Reg::Buf, true, Some(&gpu), length);
                bufs().write().unwrap_or_else(|p| p.into_inner()).insert(
                    base,
                    RegBuf {
                        buf: Arc::new(b),
                        gpu: Some(gpu),
                    },
                );
                // SAFETY: checked non-NULL.
                unsafe { buf_ptr_base.write(base as *mut c_void) };
                return CUfileError_t::OK;
            }
            // Not this node's GPU.
            Err(e) if e.errno() == libc::EXDEV => last = e,
            Err(e) => {
                last = e;
                break;
            }
        }
    }
    stats::reg(stats::Reg::Buf, false, None, length);
    status_of("cuFileBufRegisterDmabufFGDS", &last)
}

/// `cuFileBufDeregister`: `base` as registered; `CU_FILE_INVALID_VALUE` if
/// it is not.
#[no_mangle]
pub extern "C" fn cuFileBufDeregister(base: *const c_void) -> CUfileError_t {
    let b = bufs()
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(base as usize));
    stats::reg(
        stats::Reg::BufFree,
        b.is_some(),
        b.as_ref().and_then(|b| b.gpu.as_deref()),
        0,
    );
    match b {
        Some(_) => CUfileError_t::OK,
        None => CUfileError_t::op(CU_FILE_INVALID_VALUE),
    }
}
