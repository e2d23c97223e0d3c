//! `libcufile.so.0` on fgds: NVIDIA cuFile's C ABI (`include/cufile.h`),
//! so that programs written for cuFile (directly, through
//! `torch.cuda.gds`, KvikIO, ...) run unmodified on fgds: peer to peer
//! where an fgds node serves the GPU, through the visible bounce path
//! elsewhere (or an error, in strict mode). See `README.md` beside this file.

pub mod abi;
pub mod config;
mod driver;
mod errors;
pub mod params;
mod params_api;
mod platform;
pub mod stats;
mod stats_api;

use abi::*;
use config::LogLevel;
use driver::{driver, log, FELL_BACK};
use errors::{io_ret, status_of};
use fgds::{Batch, Buffer, BufferKind, Error, Event, FileHandle, IoParams, IoTarget, Op, Status};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

pub use driver::{
    cuFileDriverClose, cuFileDriverClose_v2, cuFileDriverGetProperties, cuFileDriverOpen,
    cuFileDriverSetMaxCacheSize, cuFileDriverSetMaxDirectIOSize, cuFileDriverSetMaxPinnedMemSize,
    cuFileDriverSetPollMode, cuFileGetVersion, cuFileUseCount,
};
pub use errors::cuFileOpErrorStringFGDS;
pub use params_api::{
    cuFileGetParameterBool, cuFileGetParameterGpuBounceBufferSlabArray,
    cuFileGetParameterMinMaxValue, cuFileGetParameterPosixPoolSlabArray, cuFileGetParameterSizeT,
    cuFileGetParameterString, cuFileSetParameterBool, cuFileSetParameterGpuBounceBufferSlabArray,
    cuFileSetParameterPosixPoolSlabArray, cuFileSetParameterSizeT, cuFileSetParameterString,
};
pub use platform::{
    cuFileDriverGetP2PFlags, cuFileDriverSetP2PFlags, cuFileExportPCIeTopology,
    cuFileGetBARSizeInKB,
};
pub use stats_api::{
    cuFileGetStatsL1, cuFileGetStatsL2, cuFileGetStatsL3, cuFileGetStatsLevel, cuFileSetStatsLevel,
    cuFileStatsReset, cuFileStatsStart, cuFileStatsStop,
};

/// The newest cuFile version this library implements (`1000 * major + 10 *
/// minor`); `FGDS_CUFILE_VERSION` may present an older one.
pub const CUFILE_VERSION: c_int = 1200;

/// A registered file.
struct Handle {
    file: Arc<FileHandle>,
    fd: c_int,
    warned: AtomicBool,
}

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

/// A registered buffer and the GPU whose memory it is (its PCI address).
#[derive(Clone)]
struct RegBuf {
    buf: Arc<Buffer>,
    gpu: Option<Arc<str>>,
}

#[derive(Default)]
struct Registry {
    handles: RwLock<HashMap<usize, Arc<Handle>>>,
    bufs: RwLock<BTreeMap<usize, RegBuf>>,
    batches: Mutex<HashMap<usize, Arc<BatchState>>>,
    streams: Mutex<HashMap<usize, c_uint>>,
    next: AtomicUsize,
}

fn reg() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Registry {
        next: AtomicUsize::new(1),
        ..Default::default()
    })
}

/// Handles and batch ids are small integers handed out as pointers, so that
/// a bad one is an error rather than a wild dereference.
fn new_id() -> usize {
    reg().next.fetch_add(1, Ordering::Relaxed)
}

fn handle(fh: *mut c_void) -> Result<Arc<Handle>, CUfileOpError> {
    reg()
        .handles
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(fh as usize))
        .cloned()
        .ok_or(CU_FILE_HANDLE_NOT_REGISTERED)
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
enum Target {
    Buf(RegBuf, usize),
    Gpu {
        addr: u64,
        gpu: Arc<str>,
        rt: Arc<fgds::gpu::Runtime>,
    },
}

/// The registered buffer containing `addr` and `addr`'s offset in it.
fn registered(addr: usize) -> Option<(RegBuf, usize)> {
    let g = reg().bufs.read().unwrap_or_else(|p| p.into_inner());
    let (base, b) = g.range(..=addr).next_back()?;
    let off = addr - base;
    (off < b.buf.len()).then(|| (b.clone(), off))
}

fn offset(v: libc::off_t, what: &str) -> fgds::Result<usize> {
    usize::try_from(v).map_err(|_| Error::InvalidArgument(format!("negative {what} {v}")))
}

/// The memory of `size` bytes at `base + buf_off`: within a registered
/// buffer, else CUDA memory the caller did not register, else host memory
/// (cuFile accepts unregistered memory).
fn target(base: *const c_void, buf_off: libc::off_t, size: usize) -> fgds::Result<Target> {
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
fn held_target(
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

/// Whether a request is misaligned for the file's O_DIRECT (its edges bounce).
fn unaligned(h: &Handle, addr: u64, size: usize, file_off: u64) -> bool {
    let (ma, oa) = h.file.dio_alignment();
    let (ma, oa) = (ma.max(1), oa.max(1));
    addr % ma != 0 || file_off % oa != 0 || size as u64 % oa != 0
}

/// Says once per handle that its I/O bounced, and why.
fn note_path(h: &Handle) {
    let st = h.file.stats();
    if st.fallbacks == 0 && st.bounce_bytes == 0 {
        return;
    }
    FELL_BACK.store(true, Ordering::Relaxed);
    if !h.warned.swap(true, Ordering::Relaxed) {
        let why = st
            .last_fallback_reason
            .unwrap_or_else(|| "unaligned head or tail of a request".into());
        log(
            LogLevel::Info,
            format_args!(
                "fd {}: bounce path ({} bytes so far): {why}",
                h.fd, st.bounce_bytes
            ),
        );
    }
}

fn sync_io(
    fh: *mut c_void,
    op: Op,
    base: *const c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_off: libc::off_t,
) -> isize {
    let call = if op == Op::Read {
        "cuFileRead"
    } else {
        "cuFileWrite"
    };
    if let Err(e) = driver() {
        return -(e.err as isize);
    }
    let h = match handle(fh) {
        Ok(h) => h,
        Err(c) => return -(c as isize),
    };
    if size == 0 {
        return 0;
    }
    let t0 = Instant::now();
    let fell_back = h.file.stats().fallbacks;
    let mut gpu = None;
    let r = offset(file_offset, "file offset").and_then(|fo| {
        let fo = fo as u64;
        match target(base, buf_off, size)? {
            Target::Buf(rb, off) => {
                let b = &rb.buf;
                if let Some(g) = rb.gpu.clone() {
                    let un = unaligned(&h, b.base_addr() + off as u64, size, fo);
                    gpu = Some((g, b.is_p2p(), un));
                }
                match op {
                    Op::Read => h.file.read(b, off, size, fo),
                    Op::Write => h.file.write(b, off, size, fo),
                }
            }
            Target::Gpu { addr, gpu: g, rt } => {
                let un = unaligned(&h, addr, size, fo);
                let r = match op {
                    Op::Read => fgds::gpucache::read(&h.file, &rt, addr, size, fo),
                    Op::Write => fgds::gpucache::write(&h.file, &rt, addr, size, fo),
                };
                let p2p = r.as_ref().map_or(true, |(_, route)| route.is_p2p());
                gpu = Some((g, p2p, un));
                r.map(|(n, _)| n)
            }
        }
    });
    note_path(&h);
    if stats::level() > 0 {
        // P2P: into an fgds mapping, and no fallback on this handle meanwhile.
        let bounced = h.file.stats().fallbacks != fell_back;
        let g = gpu.as_ref().map(|(g, p2p, un)| stats::GpuIo {
            gpu: g,
            path: if *p2p && !bounced {
                stats::Path::P2p
            } else {
                stats::Path::Posix
            },
            unaligned: *un,
        });
        let done = r.as_ref().ok().copied();
        stats::io(op == Op::Write, size, done, t0.elapsed(), g);
    }
    match r {
        Ok(n) => n as isize,
        Err(e) => io_ret(call, &e),
    }
}

/// `cuFileHandleRegister`: a file descriptor (`CU_FILE_HANDLE_TYPE_OPAQUE_FD`),
/// opened with or without `O_DIRECT`.
///
/// # Safety
/// `fh` and `descr` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cuFileHandleRegister(
    fh: *mut *mut c_void,
    descr: *mut CUfileDescr_t,
) -> CUfileError_t {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return e,
    };
    if fh.is_null() || descr.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: checked non-NULL; the caller's descriptor.
    let descr = unsafe { &*descr };
    if descr.type_ != CU_FILE_HANDLE_TYPE_OPAQUE_FD {
        return CUfileError_t::op(CU_FILE_INVALID_FILE_TYPE);
    }
    // SAFETY: type OPAQUE_FD: the union holds the fd.
    let fd = unsafe { descr.handle.fd };
    let mut cfg = d.settings.fgds.clone();
    cfg.chunk_size = d.chunk.load(Ordering::Relaxed);
    let r = FileHandle::from_fd(fd, cfg);
    stats::reg(stats::Reg::Handle, r.is_ok(), None, 0);
    match r {
        Ok(f) => {
            let id = new_id();
            let h = Arc::new(Handle {
                file: Arc::new(f),
                fd,
                warned: AtomicBool::new(false),
            });
            reg()
                .handles
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, h);
            // SAFETY: checked non-NULL.
            unsafe { fh.write(id as *mut c_void) };
            CUfileError_t::OK
        }
        Err(e @ (Error::Io { .. } | Error::InvalidArgument(_))) => {
            log(
                LogLevel::Debug,
                format_args!("cuFileHandleRegister: fd {fd}: {e}"),
            );
            CUfileError_t::op(if e.errno() == libc::EBADF {
                CU_FILE_INVALID_VALUE
            } else {
                CU_FILE_INVALID_FILE_TYPE
            })
        }
        Err(e) => status_of("cuFileHandleRegister", &e),
    }
}

/// `cuFileHandleDeregister`: I/O in flight on the handle completes first.
#[no_mangle]
pub extern "C" fn cuFileHandleDeregister(fh: *mut c_void) {
    let h = reg()
        .handles
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(fh as usize));
    stats::reg(stats::Reg::HandleFree, h.is_some(), None, 0);
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
    let mut g = reg().bufs.write().unwrap_or_else(|p| p.into_inner());
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
                reg()
                    .bufs
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(
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
    let b = reg()
        .bufs
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

/// `cuFileRead`: bytes read (short at the end of the file), `-1` with
/// `errno` for a system call error, or a negative `CUfileOpError`.
///
/// # Safety
/// `[base + buf_off, base + buf_off + size)` is valid memory.
#[no_mangle]
pub unsafe extern "C" fn cuFileRead(
    fh: *mut c_void,
    base: *mut c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_off: libc::off_t,
) -> isize {
    sync_io(fh, Op::Read, base, size, file_offset, buf_off)
}

/// `cuFileWrite`: as [`cuFileRead`].
///
/// # Safety
/// As [`cuFileRead`].
#[no_mangle]
pub unsafe extern "C" fn cuFileWrite(
    fh: *mut c_void,
    base: *const c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_off: libc::off_t,
) -> isize {
    sync_io(fh, Op::Write, base, size, file_offset, buf_off)
}

fn batch(id: *mut c_void) -> Result<Arc<BatchState>, CUfileError_t> {
    reg()
        .batches
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
            reg()
                .batches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
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
    let b = reg()
        .batches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(batch_id as usize));
    stats::batch(stats::BatchCall::Destroy, b.is_some());
    drop(b);
}

/// # Safety
/// As [`cuFileReadAsync`]; `args`' pointers may be NULL (an error).
unsafe fn stream_io(
    op: Op,
    fh: *mut c_void,
    base: *mut c_void,
    args: fgds::LateArgs,
    stream: *mut c_void,
) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    let h = match handle(fh) {
        Ok(h) => h,
        Err(c) => return CUfileError_t::op(c),
    };
    let (size_p, file_offset_p, buf_off_p, bytes_p) =
        (args.size, args.file_off, args.buf_off, args.bytes_done);
    if base.is_null()
        || size_p.is_null()
        || file_offset_p.is_null()
        || buf_off_p.is_null()
        || bytes_p.is_null()
    {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // Unregistered: a buffer as large as the request may become (*size_p
    // is its upper bound, cuFile's rule); for CUDA memory the cached
    // registration of its allocation, shared by every request on it.
    // SAFETY: the caller's pointers, checked non-NULL.
    let (size, bo) = unsafe { (*size_p, *buf_off_p) };
    let r = offset(bo, "buffer offset").and_then(|bo| held_target(base, 0, bo + size.max(1)));
    let (buffer, base_off, gpu) = match r {
        Ok(x) => x,
        Err(e) => return status_of("cuFileReadAsync", &e),
    };
    let host = matches!(buffer.kind(), BufferKind::Host | BufferKind::HostUser);
    if host && stream.is_null() && fgds::gpu::Runtime::cuda().is_err() {
        // No CUDA, so no work can be queued on the default stream: the
        // request runs now, in order.
        // SAFETY: the caller's pointers, checked non-NULL.
        let (size, fo, bo) = unsafe { (*size_p, *file_offset_p, *buf_off_p) };
        let r = offset(fo, "file offset").and_then(|fo| {
            let bo = offset(bo, "buffer offset")?;
            match op {
                Op::Read => h.file.read(&buffer, base_off + bo, size, fo as u64),
                Op::Write => h.file.write(&buffer, base_off + bo, size, fo as u64),
            }
        });
        note_path(&h);
        let v = match r {
            Ok(n) => n as isize,
            Err(e) => io_ret("cuFileReadAsync", &e),
        };
        // SAFETY: checked non-NULL.
        unsafe { bytes_p.write(v) };
        return CUfileError_t::OK;
    }
    // Counted as cuFileRead/cuFileWrite are, when the stream ran it.
    let path = if buffer.is_p2p() && h.file.no_direct_reason().is_none() {
        stats::Path::P2p
    } else {
        stats::Path::Posix
    };
    let file = h.file.clone();
    let addr = buffer.base_addr() + base_off as u64;
    let notify: fgds::Notify = Box::new(move |d: &fgds::StreamDone| {
        if stats::level() == 0 {
            return;
        }
        let un = {
            let (ma, oa) = file.dio_alignment();
            let (ma, oa) = (ma.max(1) as i64, oa.max(1) as i64);
            (addr as i64).wrapping_add(d.buf_off) % ma != 0
                || d.file_off % oa != 0
                || d.size as i64 % oa != 0
        };
        let g = gpu.as_deref().map(|g| stats::GpuIo {
            gpu: g,
            path,
            unaligned: un,
        });
        stats::io(op == Op::Write, d.size, d.result.ok(), d.took, g);
    });
    // SAFETY: cuFileReadAsync's contract is LateArgs's.
    let r = unsafe {
        h.file
            .on_stream_notify(op, buffer, base_off, args, stream, notify)
    };
    match r {
        Ok(()) => CUfileError_t::OK,
        Err(e @ Error::RuntimeUnavailable { .. }) => {
            log(LogLevel::Debug, format_args!("cuFileReadAsync: {e}"));
            CUfileError_t::op(CU_FILE_ASYNC_NOT_SUPPORTED)
        }
        Err(e) => status_of("cuFileReadAsync", &e),
    }
}

fn late(
    size: *mut usize,
    file_off: *mut libc::off_t,
    buf_off: *mut libc::off_t,
    bytes_done: *mut isize,
) -> fgds::LateArgs {
    fgds::LateArgs {
        size,
        file_off,
        buf_off,
        bytes_done,
    }
}

/// `cuFileReadAsync`: enqueued on `stream`; `*size_p`, `*file_offset_p`,
/// `*buf_off_p` are read when the stream reaches the request, the result
/// goes to `*bytes_read_p`. Without CUDA (host memory, NULL stream) it
/// runs before returning.
///
/// # Safety
/// The pointers stay valid until the stream has run the request.
#[no_mangle]
pub unsafe extern "C" fn cuFileReadAsync(
    fh: *mut c_void,
    base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut libc::off_t,
    buf_off_p: *mut libc::off_t,
    bytes_read_p: *mut isize,
    stream: *mut c_void,
) -> CUfileError_t {
    // SAFETY: As this function's contract.
    unsafe {
        stream_io(
            Op::Read,
            fh,
            base,
            late(size_p, file_offset_p, buf_off_p, bytes_read_p),
            stream,
        )
    }
}

/// `cuFileWriteAsync`: as [`cuFileReadAsync`].
///
/// # Safety
/// As [`cuFileReadAsync`].
#[no_mangle]
pub unsafe extern "C" fn cuFileWriteAsync(
    fh: *mut c_void,
    base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut libc::off_t,
    buf_off_p: *mut libc::off_t,
    bytes_written_p: *mut isize,
    stream: *mut c_void,
) -> CUfileError_t {
    // SAFETY: As this function's contract.
    unsafe {
        stream_io(
            Op::Write,
            fh,
            base,
            late(size_p, file_offset_p, buf_off_p, bytes_written_p),
            stream,
        )
    }
}

/// `cuFileStreamRegister`: remembered; fgds needs no per-stream set-up.
#[no_mangle]
pub extern "C" fn cuFileStreamRegister(stream: *mut c_void, flags: c_uint) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if flags > 15 {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    reg()
        .streams
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(stream as usize, flags);
    CUfileError_t::OK
}

/// `cuFileStreamDeregister`.
#[no_mangle]
pub extern "C" fn cuFileStreamDeregister(stream: *mut c_void) -> CUfileError_t {
    match reg()
        .streams
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(stream as usize))
    {
        Some(_) => CUfileError_t::OK,
        None => CUfileError_t::op(CU_FILE_INVALID_VALUE),
    }
}

fn vectored_io(
    fh: *mut c_void,
    op: Op,
    iov: *const CUfileIOVec_t,
    iovcnt: usize,
    file_offset: libc::off_t,
    flags: c_uint,
) -> isize {
    let call = if op == Op::Read {
        "cuFileReadv"
    } else {
        "cuFileWritev"
    };
    if let Err(e) = driver() {
        return -(e.err as isize);
    }
    let h = match handle(fh) {
        Ok(h) => h,
        Err(c) => return -(c as isize),
    };
    if flags != 0 || (iov.is_null() && iovcnt > 0) {
        log(
            LogLevel::Debug,
            format_args!("{call}: flags {flags} (must be 0) or iov NULL"),
        );
        return -(CU_FILE_INVALID_VALUE as isize);
    }
    if iovcnt == 0 {
        return 0;
    }
    if iovcnt > fgds::FGDS_IOV_MAX {
        log(
            LogLevel::Debug,
            format_args!("{call}: {iovcnt} segments, at most {}", fgds::FGDS_IOV_MAX),
        );
        return -(CU_FILE_INVALID_VALUE as isize);
    }
    // SAFETY: cuFile's contract: iov holds iovcnt entries.
    let iov = unsafe { std::slice::from_raw_parts(iov, iovcnt) };
    let t0 = Instant::now();
    let r = offset(file_offset, "file offset").and_then(|fo| {
        // Each segment: its registered buffer, else the cached registration
        // of its CUDA allocation, else one for this call.
        let bufs = iov
            .iter()
            .filter(|v| v.len > 0)
            .map(|v| held_target(v.base, 0, v.len).map(|(b, off, _)| (b, off, v.len)))
            .collect::<fgds::Result<Vec<_>>>()?;
        let segs: Vec<fgds::Segment<'_>> = bufs
            .iter()
            .map(|(b, off, len)| fgds::Segment {
                buffer: b,
                offset: *off,
                size: *len,
            })
            .collect();
        if segs.is_empty() {
            return Ok(0);
        }
        match op {
            Op::Read => h.file.readv(&segs, fo as u64),
            Op::Write => h.file.writev(&segs, fo as u64),
        }
    });
    note_path(&h);
    if stats::level() > 0 {
        stats::vectored(op == Op::Write, r.as_ref().ok().copied(), t0.elapsed());
    }
    match r {
        Ok(n) => n as isize,
        Err(e) => io_ret(call, &e),
    }
}

/// `cuFileReadv` (cuFile 1.19): reads into the `iovcnt` segments of `iov`,
/// in order, from `file_offset` on, in one call of fgds's vectored engine
/// (P2P into registered GPU memory an fgds node maps, the bounce path
/// elsewhere); `flags` must be 0. Returns as `cuFileRead`.
///
/// # Safety
/// `iov` holds `iovcnt` entries whose memory is valid.
#[no_mangle]
pub unsafe extern "C" fn cuFileReadv(
    fh: *mut c_void,
    iov: *const CUfileIOVec_t,
    iovcnt: usize,
    file_offset: libc::off_t,
    flags: c_uint,
) -> isize {
    vectored_io(fh, Op::Read, iov, iovcnt, file_offset, flags)
}

/// `cuFileWritev` (cuFile 1.19): the writing [`cuFileReadv`].
///
/// # Safety
/// As [`cuFileReadv`].
#[no_mangle]
pub unsafe extern "C" fn cuFileWritev(
    fh: *mut c_void,
    iov: *const CUfileIOVec_t,
    iovcnt: usize,
    file_offset: libc::off_t,
    flags: c_uint,
) -> isize {
    vectored_io(fh, Op::Write, iov, iovcnt, file_offset, flags)
}
