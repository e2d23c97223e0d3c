//! The C ABI (`include/fgds.h`). Every function is thread-safe. Errors are
//! negative errno-style codes; `fgds_last_error` gives the detailed message
//! of the calling thread's last failure.
#![allow(non_camel_case_types, missing_docs)]

use crate::batch::Batch;
use crate::buffer::Buffer;
use crate::config::{Config, FGDS_BATCH_IOV_MAX, FGDS_IOV_MAX};
use crate::engine::{Op, Segment};
use crate::error::{strerror, Error, Result};
use crate::file::FileHandle;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

mod batch;
pub use batch::*;

/// `struct fgds_config`: its size first, so that it can grow (as
/// `openat2(2)`'s `struct open_how`): the library reads the fields within
/// `size`, and bytes past the fields it knows must be 0.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct fgds_config {
    /// `sizeof(struct fgds_config)` of the caller's header, or 0 for
    /// [`FGDS_CONFIG_SIZE_VER0`] (`= { 0 }` and `{ .flags = ... }`
    /// initialisers).
    pub size: u32,
    pub flags: u32,
    pub chunk_size: u64,
    pub queue_depth: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// The size of the first `struct fgds_config` (this one).
pub const FGDS_CONFIG_SIZE_VER0: u32 = 24;

/// The library's version: `10000 * major + 100 * minor + patch`.
pub const FGDS_VERSION: u32 = {
    const fn num(s: &str) -> u32 {
        let b = s.as_bytes();
        let mut i = 0;
        let mut n = 0;
        while i < b.len() {
            n = n * 10 + (b[i] - b'0') as u32;
            i += 1;
        }
        n
    }
    num(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + num(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + num(env!("CARGO_PKG_VERSION_PATCH"))
};

/// The library's version, `10000 * major + 100 * minor + patch`
/// (`FGDS_VERSION` of the header it was built with).
#[no_mangle]
pub extern "C" fn fgds_version() -> u32 {
    FGDS_VERSION
}
/// `fgds_config.flags`: strict mode.
pub const FGDS_CONFIG_STRICT: u32 = 1 << 0;
/// `fgds_config.flags`: do not use io_uring.
pub const FGDS_CONFIG_NO_IO_URING: u32 = 1 << 1;
/// `fgds_config.flags`: do not open O_DIRECT.
pub const FGDS_CONFIG_NO_DIRECT: u32 = 1 << 2;

/// `struct fgds_io_segment`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fgds_io_segment {
    pub base: *mut c_void,
    pub offset: libc::off_t,
    pub size: usize,
}

/// `struct fgds_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct fgds_stats {
    pub direct_bytes: u64,
    pub bounce_bytes: u64,
    pub fallbacks: u64,
    pub direct_ops: u64,
    pub bounce_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
}

/// `struct fgds_fallbacks`: fallbacks to the bounce path by cause
/// ([`crate::stats::Fallbacks`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct fgds_fallbacks {
    pub busy: u64,
    pub not_supported: u64,
    pub no_device: u64,
    pub misaligned: u64,
    pub no_direct: u64,
    pub asked: u64,
    pub other: u64,
}

impl From<crate::stats::Fallbacks> for fgds_fallbacks {
    fn from(f: crate::stats::Fallbacks) -> Self {
        fgds_fallbacks {
            busy: f.busy,
            not_supported: f.not_supported,
            no_device: f.no_device,
            misaligned: f.misaligned,
            no_direct: f.no_direct,
            asked: f.asked,
            other: f.other,
        }
    }
}

/// `struct fgds_gpucache_counters`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct fgds_gpucache_counters {
    pub registrations: u64,
    pub unregistrations: u64,
    pub staged: u64,
    pub cached: u64,
    pub uncached: u64,
    pub pool_buffers: u64,
    pub cache_hits: u64,
    pub cache_registrations: u64,
    pub cache_stale: u64,
    pub cache_evicted: u64,
    pub cache_entries: u64,
    pub cache_bytes: u64,
    pub cache_full: u64,
}

/// `struct fgds_io_params`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fgds_io_params {
    pub handle: c_int,
    pub opcode: c_int,
    pub cookie: u64,
    pub file_offset: libc::off_t,
    pub base: *mut c_void,
    pub buf_offset: libc::off_t,
    pub size: usize,
    pub segments: *const fgds_io_segment,
    pub nsegments: c_int,
}
pub const FGDS_OP_READ: c_int = 0;
pub const FGDS_OP_WRITE: c_int = 1;

/// `struct fgds_io_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct fgds_io_event {
    pub cookie: u64,
    pub status: c_int,
    pub pad: c_int,
    pub result: i64,
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(e: Error) -> c_int {
    let msg = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = msg);
    -e.errno()
}

fn ret(r: Result<usize>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => fail(e) as isize,
    }
}

struct Registry {
    files: RwLock<HashMap<c_int, Arc<FileHandle>>>,
    bufs: RwLock<BTreeMap<u64, Arc<Buffer>>>,
    batches: Mutex<HashMap<c_int, Arc<Mutex<Batch>>>>,
    next: AtomicI64,
}

fn reg() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Registry {
        files: RwLock::new(HashMap::new()),
        bufs: RwLock::new(BTreeMap::new()),
        batches: Mutex::new(HashMap::new()),
        next: AtomicI64::new(1),
    })
}

fn new_id() -> Result<c_int> {
    let id = reg().next.fetch_add(1, Ordering::Relaxed);
    c_int::try_from(id).map_err(|_| Error::BadHandle("out of handle numbers".into()))
}

fn file(h: c_int) -> Result<Arc<FileHandle>> {
    reg()
        .files
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&h)
        .cloned()
        .ok_or_else(|| Error::BadHandle(format!("{h} is not an open fgds handle")))
}

/// The registered buffer containing `[addr, addr+size)` and the offset of `addr` in it.
fn lookup(addr: u64, size: u64) -> Result<(Arc<Buffer>, usize)> {
    let g = reg().bufs.read().unwrap_or_else(|p| p.into_inner());
    if let Some((base, b)) = g.range(..=addr).next_back() {
        let off = addr - base;
        if off.checked_add(size).is_some_and(|e| e <= b.len() as u64) {
            return Ok((b.clone(), off as usize));
        }
        if off < b.len() as u64 {
            return Err(Error::OutOfBounds {
                what: "registered buffer",
                offset: off,
                size,
                len: b.len() as u64,
            });
        }
    }
    Err(Error::NotRegistered { addr, size })
}

/// `addr + off`, in GPU memory that no registration holds, and the runtime that knows it:
/// CUDA's, else HIP's (each loaded once, only on this path); `None` for anything else.
fn unregistered_gpu(addr: u64, off: u64) -> Option<(u64, Arc<crate::gpu::Runtime>)> {
    let at = addr.checked_add(off)?;
    [crate::gpu::Runtime::cuda, crate::gpu::Runtime::hip]
        .into_iter()
        .filter_map(|get| get().ok())
        .find(|rt| rt.describe(at).is_ok())
        .map(|rt| (at, rt))
}

/// Where `size` bytes at `addr + off` are, for a request that holds its buffer until done
/// (vectored, batch): the caller's registration that holds them, else, for GPU memory the
/// caller did not register, the library's cached registration of its allocation
/// (`gpucache::buffer_for`: none per call); the buffer and the bytes' offset in it.
fn held(addr: u64, off: u64, size: usize) -> Result<(Arc<Buffer>, usize)> {
    match lookup(addr, off.saturating_add(size as u64)) {
        Ok((b, o)) => Ok((b, o + off as usize)),
        Err(e @ Error::NotRegistered { .. }) => match unregistered_gpu(addr, off) {
            Some((at, rt)) => {
                crate::gpucache::buffer_for(&rt, at, size.max(1)).map(|(b, o, _)| (b, o))
            }
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

fn insert(b: Buffer) -> Result<u64> {
    let base = b.base_addr();
    let end = base + b.len() as u64;
    let mut g = reg().bufs.write().unwrap_or_else(|p| p.into_inner());
    let overlaps = g
        .range(..end)
        .next_back()
        .is_some_and(|(a, x)| a + x.len() as u64 > base);
    if overlaps {
        return Err(Error::AlreadyRegistered { addr: base });
    }
    g.insert(base, Arc::new(b));
    Ok(base)
}

/// The configuration a caller's `struct fgds_config` (NULL: the defaults)
/// gives.
///
/// # Safety
/// `cfg` is NULL or valid for `cfg->size` bytes (24 when it is 0).
unsafe fn config(cfg: *const fgds_config) -> Result<Config> {
    if cfg.is_null() {
        return Ok(Config::default());
    }
    // SAFETY: the caller's struct, at least its size field.
    let size = unsafe { cfg.cast::<u32>().read_unaligned() };
    let size = if size == 0 {
        FGDS_CONFIG_SIZE_VER0
    } else {
        size
    };
    let known = std::mem::size_of::<fgds_config>() as u32;
    if size < FGDS_CONFIG_SIZE_VER0 {
        return Err(Error::InvalidArgument(format!(
            "struct fgds_config: size {size} is less than the first version's \
             {FGDS_CONFIG_SIZE_VER0}: set .size = sizeof(struct fgds_config)"
        )));
    }
    if size > known {
        // SAFETY: the caller's struct is size bytes.
        let tail = unsafe {
            std::slice::from_raw_parts(
                cfg.cast::<u8>().add(known as usize),
                (size - known) as usize,
            )
        };
        if let Some(i) = tail.iter().position(|&b| b != 0) {
            return Err(Error::InvalidArgument(format!(
                "struct fgds_config: byte {} of {size} is set, and this library \
                 (version {FGDS_VERSION}) knows only the first {known}: an option it \
                 does not have",
                known as usize + i
            )));
        }
    }
    // SAFETY: at least the first version's bytes, checked above.
    let c = unsafe { cfg.read_unaligned() };
    if c.reserved != 0 {
        return Err(Error::InvalidArgument(
            "struct fgds_config: reserved must be 0".into(),
        ));
    }
    // Zero fields and flags that are not set mean the default, which
    // the FGDS_* environment may change (crate::env).
    let d = Config::default();
    Ok(Config {
        chunk_size: if c.chunk_size == 0 {
            d.chunk_size
        } else {
            c.chunk_size as usize
        },
        queue_depth: if c.queue_depth == 0 {
            d.queue_depth
        } else {
            c.queue_depth
        },
        strict: d.strict || c.flags & FGDS_CONFIG_STRICT != 0,
        use_io_uring: d.use_io_uring && c.flags & FGDS_CONFIG_NO_IO_URING == 0,
        disable_direct: d.disable_direct || c.flags & FGDS_CONFIG_NO_DIRECT != 0,
        ..d
    })
}

/// Opens `path` for fgds I/O. Returns a handle (> 0) or a negative code.
///
/// # Safety
/// `path` must be a NUL-terminated string; `cfg` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn fgds_open(
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
    cfg: *const fgds_config,
) -> c_int {
    if path.is_null() {
        return fail(Error::InvalidArgument("path is NULL".into()));
    }
    let p = CStr::from_ptr(path).to_string_lossy().into_owned();
    // SAFETY: the caller's cfg.
    unsafe { open_handle(cfg, |c| FileHandle::open(p, flags, mode, c)) }
}

/// Wraps an open descriptor (duplicated; the caller keeps `fd`).
///
/// # Safety
/// `cfg` must be NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn fgds_open_fd(fd: c_int, cfg: *const fgds_config) -> c_int {
    // SAFETY: the caller's cfg.
    unsafe { open_handle(cfg, |c| FileHandle::from_fd(fd, c)) }
}

/// The configuration `cfg` asks for, a file `open` opens with it, and a
/// handle for that file: the handle (> 0) or a negative code, for
/// [`fgds_open`] and [`fgds_open_fd`].
///
/// # Safety
/// `cfg` must be NULL or valid.
unsafe fn open_handle(
    cfg: *const fgds_config,
    open: impl FnOnce(Config) -> Result<FileHandle>,
) -> c_int {
    // SAFETY: the caller's cfg.
    let r = unsafe { config(cfg) }.and_then(open).and_then(|f| {
        let id = new_id()?;
        reg()
            .files
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::new(f));
        Ok(id)
    });
    r.unwrap_or_else(fail)
}

/// Closes a handle (I/O in flight on it completes first).
#[no_mangle]
pub extern "C" fn fgds_close(handle: c_int) -> c_int {
    match reg()
        .files
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&handle)
    {
        Some(_) => 0,
        None => fail(Error::BadHandle(format!(
            "{handle} is not an open fgds handle"
        ))),
    }
}

/// Registers caller-owned host memory.
///
/// # Safety
/// `ptr..ptr+len` must stay valid until `fgds_buf_deregister`.
#[no_mangle]
pub unsafe extern "C" fn fgds_buf_register_host(
    ptr: *mut c_void,
    len: usize,
    flags: c_uint,
) -> c_int {
    if flags != 0 {
        return fail(Error::InvalidArgument("flags must be 0".into()));
    }
    match Buffer::from_host_ptr(ptr as *mut u8, len).and_then(insert) {
        Ok(_) => 0,
        Err(e) => fail(e),
    }
}

/// Registers `size` bytes at `offset` of a dma-buf on `device` (NULL: the
/// node whose GPU owns the memory) and maps them; `*out` receives the mapping address.
///
/// # Safety
/// `device` NULL or a C string; `out` a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn fgds_buf_register_dmabuf(
    device: *const c_char,
    dmabuf_fd: c_int,
    offset: u64,
    size: u64,
    out: *mut *mut c_void,
) -> c_int {
    if out.is_null() {
        return fail(Error::InvalidArgument("out is NULL".into()));
    }
    let dev = (!device.is_null())
        .then(|| std::path::PathBuf::from(CStr::from_ptr(device).to_string_lossy().into_owned()));
    match Buffer::register_dmabuf(dev.as_deref(), dmabuf_fd, offset, size).and_then(insert) {
        Ok(base) => {
            *out = base as *mut c_void;
            0
        }
        Err(e) => fail(e),
    }
}

/// Registers CUDA device memory (exported to fgds when possible; the bounce
/// path through pinned memory otherwise, or an error in strict use).
#[no_mangle]
pub extern "C" fn fgds_buf_register_cuda(dptr: u64, size: usize, flags: c_uint) -> c_int {
    register_device(Buffer::from_cuda, dptr, size, flags)
}

/// Registers HIP device memory (see `fgds_buf_register_cuda`).
#[no_mangle]
pub extern "C" fn fgds_buf_register_hip(dptr: u64, size: usize, flags: c_uint) -> c_int {
    register_device(Buffer::from_hip, dptr, size, flags)
}

/// The CUDA and HIP registrations: `from` makes the buffer of `[dptr, dptr + size)`.
fn register_device(
    from: fn(u64, u64) -> Result<Buffer>,
    dptr: u64,
    size: usize,
    flags: c_uint,
) -> c_int {
    if flags != 0 {
        return fail(Error::InvalidArgument("flags must be 0".into()));
    }
    match from(dptr, size as u64).and_then(insert) {
        Ok(_) => 0,
        Err(e) => fail(e),
    }
}

/// Deregisters the buffer whose base is `base` (unmaps fgds registrations
/// once I/O in flight on them completes).
#[no_mangle]
pub extern "C" fn fgds_buf_deregister(base: *mut c_void) -> c_int {
    match reg()
        .bufs
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(base as u64))
    {
        Some(_) => 0,
        None => fail(Error::NotRegistered {
            addr: base as u64,
            size: 0,
        }),
    }
}

fn off(v: libc::off_t, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::InvalidArgument(format!("negative {what}")))
}

fn rw(
    handle: c_int,
    op: Op,
    base: *mut c_void,
    size: usize,
    file_off: libc::off_t,
    buf_off: libc::off_t,
) -> Result<usize> {
    let f = file(handle)?;
    let fo = off(file_off, "file offset")?;
    let bo = off(buf_off, "buffer offset")?;
    match lookup(base as u64, bo.saturating_add(size as u64)) {
        Ok((b, o)) => crate::engine::do_io(&f, op, &b, o + bo as usize, size, fo, None),
        // GPU memory the caller did not register: a staging buffer or a cached registration of
        // its allocation (`gpucache`), never a registration per call.
        Err(e @ Error::NotRegistered { .. }) => match unregistered_gpu(base as u64, bo) {
            Some((at, rt)) => match op {
                Op::Read => crate::gpucache::read(&f, &rt, at, size, fo),
                Op::Write => crate::gpucache::write(&f, &rt, at, size, fo),
            }
            .map(|(n, _)| n),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Reads `size` bytes at `file_offset` into `base + buf_offset`: `base`
/// inside a registered buffer, or GPU memory (CUDA, HIP) the caller did not
/// register, which the library serves through its staging pool or its cached
/// registration of the allocation, never a registration per call. Returns
/// bytes read (short at EOF) or a negative code.
#[no_mangle]
pub extern "C" fn fgds_read(
    handle: c_int,
    base: *mut c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_offset: libc::off_t,
) -> isize {
    ret(rw(handle, Op::Read, base, size, file_offset, buf_offset))
}

/// Writes `size` bytes from `base + buf_offset` at `file_offset`.
#[no_mangle]
pub extern "C" fn fgds_write(
    handle: c_int,
    base: *mut c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_offset: libc::off_t,
) -> isize {
    ret(rw(handle, Op::Write, base, size, file_offset, buf_offset))
}

/// # Safety
/// As [`fgds_read_async`].
unsafe fn rw_async(
    handle: c_int,
    op: Op,
    base: *mut c_void,
    args: crate::stream::LateArgs,
    stream: *mut c_void,
) -> c_int {
    let r = (|| {
        let f = file(handle)?;
        // The base must be registered now; the range is checked when the stream reaches it.
        let (b, o) = lookup(base as u64, 0)?;
        // SAFETY: As fgds_read_async's contract.
        unsafe {
            match op {
                Op::Read => f.read_on_stream(b, o, args, stream),
                Op::Write => f.write_on_stream(b, o, args, stream),
            }
        }
        .map(|()| 0)
    })();
    ret(r) as c_int
}

/// Enqueues a read on a CUDA stream (`cuFileReadAsync`'s model). When `stream` reaches it,
/// `*size` bytes at `*file_offset` are read into `base + *buf_offset` (the values are read then);
/// work queued on `stream` after it waits for the read, whose result (bytes, or a negative code)
/// goes to `*bytes_done`. Returns 0 once enqueued (with 16 requests on `stream` not passed yet,
/// after waiting for the oldest to pass), or a negative code (nothing enqueued).
///
/// # Safety
/// `stream` is a `CUstream` of the calling thread's current context or of the buffer's (NULL:
/// its default stream). The four pointers stay valid, and the values unchanged once the stream
/// reached the request, until `*bytes_done` is written.
#[no_mangle]
pub unsafe extern "C" fn fgds_read_async(
    handle: c_int,
    base: *mut c_void,
    size: *const usize,
    file_offset: *const libc::off_t,
    buf_offset: *const libc::off_t,
    bytes_done: *mut isize,
    stream: *mut c_void,
) -> c_int {
    let args = crate::stream::LateArgs {
        size,
        file_off: file_offset,
        buf_off: buf_offset,
        bytes_done,
    };
    // SAFETY: As this function's contract.
    unsafe { rw_async(handle, Op::Read, base, args, stream) }
}

/// Enqueues a write on a CUDA stream: as [`fgds_read_async`], from `base + *buf_offset` to the
/// file at `*file_offset`.
///
/// # Safety
/// As [`fgds_read_async`].
#[no_mangle]
pub unsafe extern "C" fn fgds_write_async(
    handle: c_int,
    base: *mut c_void,
    size: *const usize,
    file_offset: *const libc::off_t,
    buf_offset: *const libc::off_t,
    bytes_done: *mut isize,
    stream: *mut c_void,
) -> c_int {
    let args = crate::stream::LateArgs {
        size,
        file_off: file_offset,
        buf_off: buf_offset,
        bytes_done,
    };
    // SAFETY: As this function's contract.
    unsafe { rw_async(handle, Op::Write, base, args, stream) }
}

fn resolve_segments(
    segs: *const fgds_io_segment,
    n: c_int,
    max: usize,
) -> Result<Vec<(Arc<Buffer>, usize, usize)>> {
    if n < 0 {
        return Err(Error::InvalidArgument("negative segment count".into()));
    }
    let n = n as usize;
    if n > max {
        return Err(Error::TooManySegments { count: n, max });
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if segs.is_null() {
        return Err(Error::InvalidArgument("segments is NULL".into()));
    }
    // SAFETY: the caller passes n valid segments.
    let s = unsafe { std::slice::from_raw_parts(segs, n) };
    s.iter()
        .enumerate()
        .map(|(i, s)| {
            let o = off(s.offset, "segment offset").map_err(|e| Error::segment(i, e))?;
            let (b, bo) = held(s.base as u64, o, s.size).map_err(|e| Error::segment(i, e))?;
            Ok((b, bo, s.size))
        })
        .collect()
}

fn rwv(
    handle: c_int,
    op: Op,
    segs: *const fgds_io_segment,
    n: c_int,
    file_off: libc::off_t,
) -> Result<usize> {
    let f = file(handle)?;
    let fo = off(file_off, "file offset")?;
    let r = resolve_segments(segs, n, FGDS_IOV_MAX)?;
    let s: Vec<Segment<'_>> = r
        .iter()
        .map(|(b, o, n)| Segment {
            buffer: b,
            offset: *o,
            size: *n,
        })
        .collect();
    crate::engine::do_vectored(&f, op, &s, fo, FGDS_IOV_MAX, None)
}

/// Reads into `nsegs` segments (at most FGDS_IOV_MAX) from `file_offset` on.
///
/// # Safety
/// `segs` must point to `nsegs` segments.
#[no_mangle]
pub unsafe extern "C" fn fgds_readv(
    handle: c_int,
    segs: *const fgds_io_segment,
    nsegs: c_int,
    file_offset: libc::off_t,
) -> isize {
    ret(rwv(handle, Op::Read, segs, nsegs, file_offset))
}

/// Writes `nsegs` segments from `file_offset` on.
///
/// # Safety
/// `segs` must point to `nsegs` segments.
#[no_mangle]
pub unsafe extern "C" fn fgds_writev(
    handle: c_int,
    segs: *const fgds_io_segment,
    nsegs: c_int,
    file_offset: libc::off_t,
) -> isize {
    ret(rwv(handle, Op::Write, segs, nsegs, file_offset))
}

/// Copies the handle's statistics into `*out`.
///
/// # Safety
/// `out` must be valid.
#[no_mangle]
pub unsafe extern "C" fn fgds_get_stats(handle: c_int, out: *mut fgds_stats) -> c_int {
    if out.is_null() {
        return fail(Error::InvalidArgument("out is NULL".into()));
    }
    match file(handle) {
        Ok(f) => {
            let s = f.stats();
            *out = fgds_stats {
                direct_bytes: s.direct_bytes,
                bounce_bytes: s.bounce_bytes,
                fallbacks: s.fallbacks,
                direct_ops: s.direct_ops,
                bounce_ops: s.bounce_ops,
                read_bytes: s.read_bytes,
                write_bytes: s.write_bytes,
                errors: s.errors,
            };
            0
        }
        Err(e) => fail(e),
    }
}

/// The handle's calls that fell back to the bounce path, by cause (their
/// sum is `fgds_stats.fallbacks`).
///
/// # Safety
/// `out` must be valid.
#[no_mangle]
pub unsafe extern "C" fn fgds_get_fallbacks(handle: c_int, out: *mut fgds_fallbacks) -> c_int {
    if out.is_null() {
        return fail(Error::InvalidArgument("out is NULL".into()));
    }
    match file(handle) {
        Ok(f) => {
            *out = f.stats().fallback_causes.into();
            0
        }
        Err(e) => fail(e),
    }
}

/// The process's fallbacks to the bounce path by cause, since it started
/// (`fgds::stats::fallbacks`): `calls`, the calls of every handle that fell
/// back; `registrations`, registrations of GPU memory that bounce (a
/// caller's own, and requests on memory it never registered). Either may
/// be NULL.
///
/// # Safety
/// `calls` and `registrations` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn fgds_process_fallbacks(
    calls: *mut fgds_fallbacks,
    registrations: *mut fgds_fallbacks,
) -> c_int {
    let f = crate::stats::fallbacks();
    if !calls.is_null() {
        *calls = f.calls.into();
    }
    if !registrations.is_null() {
        *registrations = f.registrations.into();
    }
    0
}

/// The process's registrations and what the staging pool and the
/// registration cache for GPU memory the caller never registered did
/// (`fgds::gpucache`).
///
/// # Safety
/// `out` must be valid.
#[no_mangle]
pub unsafe extern "C" fn fgds_gpucache_counters(out: *mut fgds_gpucache_counters) -> c_int {
    if out.is_null() {
        return fail(Error::InvalidArgument("out is NULL".into()));
    }
    let (registrations, unregistrations) = crate::device::registration_counts();
    let c = crate::gpucache::counters();
    *out = fgds_gpucache_counters {
        registrations,
        unregistrations,
        staged: c.staged,
        cached: c.cached,
        uncached: c.uncached,
        pool_buffers: c.pool_buffers,
        cache_hits: c.cache_hits,
        cache_registrations: c.cache_registrations,
        cache_stale: c.cache_stale,
        cache_evicted: c.cache_evicted,
        cache_full: c.cache_full,
        cache_entries: c.cache_entries,
        cache_bytes: c.cache_bytes,
    };
    0
}

/// Drops what the library keeps between calls for GPU memory the caller
/// never registered (`fgds::gpucache`'s runtime): stops and joins its
/// reaper thread, unregisters its cached registrations, unregisters and
/// frees its staging buffers, and destroys the threads' copy streams and
/// events (a thread that copies again makes new ones). Buffers the caller registered, open handles and batches stay
/// valid; a later call makes a fresh runtime. A call racing with it
/// finishes on the runtime it started on, dropped once it is done.
#[no_mangle]
pub extern "C" fn fgds_shutdown() {
    crate::gpucache::runtime::shutdown();
}

/// Copies `text` into `buf` as snprintf does (truncated to `len - 1` bytes
/// and NUL-terminated when `len > 0`); returns the length of `text`.
///
/// # Safety
///
/// `buf` is NULL with `len` 0, or points to `len` writable bytes.
unsafe fn copy_out(text: &str, buf: *mut c_char, len: usize) -> isize {
    if len > 0 && !buf.is_null() {
        let n = text.len().min(len - 1);
        // SAFETY: the caller gives `len` writable bytes at `buf`; n < len.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, n);
            *buf.add(n) = 0;
        }
    }
    text.len() as isize
}

/// Whether the registered buffer containing `ptr` is mapped for direct
/// peer-to-peer I/O (1: GPU memory through an fgds node) or not (0: host
/// memory, or GPU memory that bounces); -EFAULT when `ptr` is not in a
/// registered buffer. As `Buffer::is_p2p`.
#[no_mangle]
pub extern "C" fn fgds_buf_is_p2p(ptr: *const c_void) -> c_int {
    match lookup(ptr as u64, 0) {
        Ok((b, _)) => c_int::from(b.is_p2p()),
        Err(e) => fail(e),
    }
}

/// Why the registered buffer containing `ptr` cannot do peer-to-peer I/O,
/// copied into `buf` as snprintf does; returns the reason's length (0:
/// there is none: it is P2P, or host memory), or a negative code. As
/// `Buffer::p2p_unavailable_reason`.
///
/// # Safety
///
/// `buf` is NULL with `len` 0, or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn fgds_buf_p2p_reason(
    ptr: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> isize {
    match lookup(ptr as u64, 0) {
        // SAFETY: the caller's guarantee.
        Ok((b, _)) => unsafe { copy_out(b.p2p_unavailable_reason().unwrap_or(""), buf, len) },
        Err(e) => fail(e) as isize,
    }
}

/// Why the handle's last request fell back to the bounce path, copied into
/// `buf` as snprintf does; returns the reason's length (0: no fallback
/// yet), or a negative code. As `Stats::last_fallback_reason`.
///
/// # Safety
///
/// `buf` is NULL with `len` 0, or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn fgds_last_fallback_reason(
    handle: c_int,
    buf: *mut c_char,
    len: usize,
) -> isize {
    match file(handle) {
        Ok(f) => {
            let r = f.stats().last_fallback_reason.unwrap_or_default();
            // SAFETY: the caller's guarantee.
            unsafe { copy_out(&r, buf, len) }
        }
        Err(e) => fail(e) as isize,
    }
}

/// A C string of `text(code)` that lives as long as the process, one per
/// code.
fn static_text(
    table: &'static OnceLock<Mutex<HashMap<i32, CString>>>,
    code: c_int,
    text: fn(i32) -> &'static str,
) -> *const c_char {
    let t = table.get_or_init(|| Mutex::new(HashMap::new()));
    let mut g = t.lock().unwrap_or_else(|p| p.into_inner());
    let key = code.unsigned_abs() as i32;
    g.entry(key)
        .or_insert_with(|| CString::new(text(key)).unwrap_or_default())
        .as_ptr()
}

/// Static description of a code (negative or positive): its meaning in
/// [`crate::error::ERRNOS`].
#[no_mangle]
pub extern "C" fn fgds_strerror(code: c_int) -> *const c_char {
    static TABLE: OnceLock<Mutex<HashMap<i32, CString>>> = OnceLock::new();
    static_text(&TABLE, code, strerror)
}

/// Static hint of what to do about a code (negative or positive), from
/// [`crate::error::ERRNOS`].
#[no_mangle]
pub extern "C" fn fgds_strhint(code: c_int) -> *const c_char {
    static TABLE: OnceLock<Mutex<HashMap<i32, CString>>> = OnceLock::new();
    static_text(&TABLE, code, crate::error::hint)
}

/// Detailed message of the calling thread's last failure (valid until the
/// thread's next failing call).
#[no_mangle]
pub extern "C" fn fgds_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}
