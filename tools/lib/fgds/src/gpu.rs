//! CUDA and HIP driver entry points, loaded at run time with `libloading`.
//!
//! Nothing here is needed to build the library or to use it without a GPU:
//! [`Runtime::cuda`]/[`Runtime::hip`] fail with
//! [`Error::RuntimeUnavailable`] when the library cannot be loaded.

use crate::error::{Error, Result};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::{Arc, OnceLock};

/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD` (and HIP's equivalent).
pub const RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
const POINTER_ATTRIBUTE_CONTEXT: c_int = 1;
const POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
/// `CU_POINTER_ATTRIBUTE_BUFFER_ID` (HIP's has the same value): a number
/// per allocation that a freed and re-allocated range does not keep.
const POINTER_ATTRIBUTE_BUFFER_ID: c_int = 7;
/// The alignment of a range `cuMemGetHandleForAddressRange` (and HIP's)
/// exports: the host's page size, as CUDA's documentation says. Driver 580
/// on an H200 exported 4 KiB ranges at 4 KiB offsets of a 2 MiB allocation
/// and refused one at 512 bytes
/// (`tools/testing/fgds-gpurt/cuda-facts-580-h200.json`).
pub fn export_align() -> u64 {
    crate::sys::page_size() as u64
}

type FnInit = unsafe extern "C" fn(c_uint) -> c_int;
type FnPtrAttr = unsafe extern "C" fn(*mut c_void, c_int, u64) -> c_int;
type FnAddrRange = unsafe extern "C" fn(*mut u64, *mut usize, u64) -> c_int;
type FnHandle = unsafe extern "C" fn(*mut c_void, u64, usize, c_int, c_ulonglong) -> c_int;
type FnHtoD = unsafe extern "C" fn(u64, *const c_void, usize) -> c_int;
type FnDtoH = unsafe extern "C" fn(*mut c_void, u64, usize) -> c_int;
type FnDtoD = unsafe extern "C" fn(u64, u64, usize) -> c_int;
type FnDtoDAsync = unsafe extern "C" fn(u64, u64, usize, *mut c_void) -> c_int;
type FnVoid = unsafe extern "C" fn() -> c_int;
type FnHostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> c_int;
type FnHostFree = unsafe extern "C" fn(*mut c_void) -> c_int;
type FnSetCtx = unsafe extern "C" fn(*mut c_void) -> c_int;
type FnSetDevice = unsafe extern "C" fn(c_int) -> c_int;
type FnGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnMemAlloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
type FnMemFree = unsafe extern "C" fn(u64) -> c_int;
type FnDevGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type FnPrimary = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type FnBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
/// A host function run by a stream (`CUhostFn`).
pub type HostFn = unsafe extern "C" fn(*mut c_void);
type FnLaunchHostFunc = unsafe extern "C" fn(*mut c_void, HostFn, *mut c_void) -> c_int;
type FnWaitValue32 = unsafe extern "C" fn(*mut c_void, u64, u32, c_uint) -> c_int;
type FnStreamCreate = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int;
type FnStream = unsafe extern "C" fn(*mut c_void) -> c_int;
type FnHtoDAsync = unsafe extern "C" fn(u64, *const c_void, usize, *mut c_void) -> c_int;
type FnDtoHAsync = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> c_int;
type FnMemsetAsync = unsafe extern "C" fn(u64, u8, usize, *mut c_void) -> c_int;
type FnMemset32Async = unsafe extern "C" fn(u64, c_uint, usize, *mut c_void) -> c_int;
type FnCtxGet = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type FnEventCreate = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int;
type FnEventRecord = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type FnEvent = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING`: a wait for the event
/// sleeps rather than spins.
const EVENT_BLOCKING_NO_TIMING: c_uint = 0x1 | 0x2;

/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the legacy default stream.
pub const STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_STREAM_WAIT_VALUE_EQ`.
const WAIT_VALUE_EQ: c_uint = 1;

/// CUDA's stream entry points (stream-ordered I/O, and the bounce path's own stream).
struct StreamFns {
    launch_host_func: FnLaunchHostFunc,
    wait_value32: FnWaitValue32,
    create: FnStreamCreate,
    synchronize: FnStream,
    destroy: FnStream,
    htod_async: FnHtoDAsync,
    dtoh_async: FnDtoHAsync,
    /// `cuMemcpyDtoDAsync_v2`: the staging pool's copies ([`crate::gpucache`]).
    dtod_async: Option<FnDtoDAsync>,
    memset_async: FnMemsetAsync,
    memset32_async: FnMemset32Async,
    ctx_get: FnCtxGet,
    /// `cuEventCreate`, `cuEventRecord`, `cuEventSynchronize`: the bounce
    /// path's sleeping waits (spinning waits without them).
    events: Option<(FnEventCreate, FnEventRecord, FnEvent)>,
}

impl StreamFns {
    unsafe fn resolve(lib: &libloading::Library, kind: Kind) -> Result<StreamFns> {
        Ok(StreamFns {
            launch_host_func: sym(lib, kind, "cuLaunchHostFunc")?,
            wait_value32: sym(lib, kind, "cuStreamWaitValue32_v2")
                .or_else(|_| sym(lib, kind, "cuStreamWaitValue32"))?,
            create: sym(lib, kind, "cuStreamCreate")?,
            synchronize: sym(lib, kind, "cuStreamSynchronize")?,
            destroy: sym(lib, kind, "cuStreamDestroy_v2")?,
            htod_async: sym(lib, kind, "cuMemcpyHtoDAsync_v2")?,
            dtoh_async: sym(lib, kind, "cuMemcpyDtoHAsync_v2")?,
            dtod_async: sym(lib, kind, "cuMemcpyDtoDAsync_v2").ok(),
            memset_async: sym(lib, kind, "cuMemsetD8Async")?,
            memset32_async: sym(lib, kind, "cuMemsetD32Async")?,
            ctx_get: sym(lib, kind, "cuCtxGetCurrent")?,
            events: match (
                sym(lib, kind, "cuEventCreate"),
                sym(lib, kind, "cuEventRecord"),
                sym(lib, kind, "cuEventSynchronize"),
            ) {
                (Ok(c), Ok(r), Ok(w)) => Some((c, r, w)),
                _ => None,
            },
        })
    }
}

thread_local! {
    /// This thread's non-blocking copy streams, by context: `(context, stream)`.
    static COPY_STREAMS: std::cell::RefCell<Vec<(usize, usize)>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// This thread's blocking-sync events, by context: `(context, event)`.
    static COPY_EVENTS: std::cell::RefCell<Vec<(usize, usize)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Which runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// NVIDIA CUDA driver API (`libcuda.so.1`).
    Cuda,
    /// AMD HIP (`libamdhip64.so`).
    Hip,
}

/// Loaded driver entry points.
pub struct Runtime {
    kind: Kind,
    _lib: libloading::Library,
    ptr_attr: Option<FnPtrAttr>,
    addr_range: FnAddrRange,
    handle: Option<FnHandle>,
    htod: FnHtoD,
    dtoh: FnDtoH,
    host_alloc: FnHostAlloc,
    host_free: FnHostFree,
    /// `hipMemcpyDtoD` (HIP; CUDA copies on a stream).
    dtod: Option<FnDtoD>,
    /// `hipDeviceSynchronize` (HIP).
    dev_sync: Option<FnVoid>,
    set_ctx: Option<FnSetCtx>,
    /// `cuCtxGetCurrent` (CUDA): what [`Current`] restores.
    get_ctx: Option<FnCtxGet>,
    set_device: Option<FnSetDevice>,
    /// `hipGetDevice` (HIP): what [`Current`] restores.
    get_device: Option<FnGetDevice>,
    bus_id: FnBusId,
    mem_alloc: Option<FnMemAlloc>,
    mem_free: Option<FnMemFree>,
    dev_get: Option<FnDevGet>,
    primary: Option<FnPrimary>,
    stream: Option<StreamFns>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("kind", &self.kind).finish()
    }
}

fn unavailable(kind: Kind, reason: impl Into<String>) -> Error {
    Error::RuntimeUnavailable {
        runtime: match kind {
            Kind::Cuda => "CUDA",
            Kind::Hip => "HIP",
        },
        reason: reason.into(),
    }
}

unsafe fn sym<T: Copy>(lib: &libloading::Library, kind: Kind, name: &str) -> Result<T> {
    lib.get::<T>(name.as_bytes())
        .map(|s| *s)
        .map_err(|e| unavailable(kind, format!("{name}: {e}")))
}

impl Runtime {
    fn load(kind: Kind) -> Result<Runtime> {
        let names: &[&str] = match kind {
            Kind::Cuda => &["libcuda.so.1", "libcuda.so"],
            Kind::Hip => &["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"],
        };
        let mut last = String::new();
        for n in names {
            // SAFETY: loading a vendor driver library runs its initialisers;
            // that is the documented way to use these libraries.
            match unsafe { libloading::Library::new(n) } {
                Ok(lib) => return unsafe { Self::resolve(kind, lib) },
                Err(e) => last = e.to_string(),
            }
        }
        Err(unavailable(kind, last))
    }

    unsafe fn resolve(kind: Kind, lib: libloading::Library) -> Result<Runtime> {
        let rt = match kind {
            Kind::Cuda => {
                let init: FnInit = sym(&lib, kind, "cuInit")?;
                let r = init(0);
                if r != 0 {
                    return Err(unavailable(kind, format!("cuInit returned {r}")));
                }
                Runtime {
                    kind,
                    ptr_attr: Some(sym(&lib, kind, "cuPointerGetAttribute")?),
                    addr_range: sym(&lib, kind, "cuMemGetAddressRange_v2")?,
                    handle: sym(&lib, kind, "cuMemGetHandleForAddressRange").ok(),
                    htod: sym(&lib, kind, "cuMemcpyHtoD_v2")?,
                    dtoh: sym(&lib, kind, "cuMemcpyDtoH_v2")?,
                    host_alloc: sym(&lib, kind, "cuMemHostAlloc")?,
                    host_free: sym(&lib, kind, "cuMemFreeHost")?,
                    dtod: None,
                    dev_sync: None,
                    set_ctx: Some(sym(&lib, kind, "cuCtxSetCurrent")?),
                    get_ctx: Some(sym(&lib, kind, "cuCtxGetCurrent")?),
                    set_device: None,
                    get_device: None,
                    bus_id: sym(&lib, kind, "cuDeviceGetPCIBusId")?,
                    mem_alloc: sym(&lib, kind, "cuMemAlloc_v2").ok(),
                    dev_get: sym(&lib, kind, "cuDeviceGet").ok(),
                    primary: sym(&lib, kind, "cuDevicePrimaryCtxRetain").ok(),
                    mem_free: sym(&lib, kind, "cuMemFree_v2").ok(),
                    stream: StreamFns::resolve(&lib, kind).ok(),
                    _lib: lib,
                }
            }
            Kind::Hip => {
                let init: FnInit = sym(&lib, kind, "hipInit")?;
                let r = init(0);
                if r != 0 {
                    return Err(unavailable(kind, format!("hipInit returned {r}")));
                }
                Runtime {
                    kind,
                    ptr_attr: sym(&lib, kind, "hipPointerGetAttribute").ok(),
                    addr_range: sym(&lib, kind, "hipMemGetAddressRange")?,
                    handle: sym(&lib, kind, "hipMemGetHandleForAddressRange").ok(),
                    htod: sym(&lib, kind, "hipMemcpyHtoD")?,
                    dtoh: sym(&lib, kind, "hipMemcpyDtoH")?,
                    host_alloc: sym(&lib, kind, "hipHostMalloc")?,
                    host_free: sym(&lib, kind, "hipHostFree")?,
                    dtod: sym(&lib, kind, "hipMemcpyDtoD").ok(),
                    dev_sync: sym(&lib, kind, "hipDeviceSynchronize").ok(),
                    set_ctx: None,
                    get_ctx: None,
                    set_device: Some(sym(&lib, kind, "hipSetDevice")?),
                    get_device: Some(sym(&lib, kind, "hipGetDevice")?),
                    bus_id: sym(&lib, kind, "hipDeviceGetPCIBusId")?,
                    mem_alloc: sym(&lib, kind, "hipMalloc").ok(),
                    dev_get: None,
                    primary: None,
                    mem_free: sym(&lib, kind, "hipFree").ok(),
                    stream: None,
                    _lib: lib,
                }
            }
        };
        Ok(rt)
    }

    /// The process-wide CUDA runtime (loaded once).
    pub fn cuda() -> Result<Arc<Runtime>> {
        static RT: OnceLock<std::result::Result<Arc<Runtime>, String>> = OnceLock::new();
        RT.get_or_init(|| {
            Runtime::load(Kind::Cuda)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|r| unavailable(Kind::Cuda, r))
    }

    /// The process-wide HIP runtime (loaded once).
    pub fn hip() -> Result<Arc<Runtime>> {
        static RT: OnceLock<std::result::Result<Arc<Runtime>, String>> = OnceLock::new();
        RT.get_or_init(|| {
            Runtime::load(Kind::Hip)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|r| unavailable(Kind::Hip, r))
    }

    /// Which runtime.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    fn check(&self, call: &'static str, code: c_int) -> Result<()> {
        if code == 0 {
            Ok(())
        } else {
            Err(Error::Runtime { call, code })
        }
    }

    /// Describes device memory at `dptr`: (allocation base, allocation size,
    /// device ordinal, context).
    pub fn describe(&self, dptr: u64) -> Result<DeviceMemory> {
        let mut base = 0u64;
        let mut size = 0usize;
        // SAFETY: out pointers are valid locals.
        let mut r = unsafe { (self.addr_range)(&mut base, &mut size, dptr) };
        if r == 201 && self.kind == Kind::Cuda {
            // CUDA_ERROR_INVALID_CONTEXT: a thread with no current context
            // (a caller's worker thread). Make the pointer's own context
            // current (the driver names it without one), else its device's
            // primary context, and ask again; the thread has no current
            // context again when this returns.
            let saved = self.save_current()?;
            if let Some(attr) = self.ptr_attr {
                let mut ctx: *mut c_void = std::ptr::null_mut();
                let mut ordinal: c_int = -1;
                // SAFETY: the attributes are written into correctly sized
                // locals; ctx came from the driver.
                let current = unsafe {
                    match self.set_ctx {
                        Some(set)
                            if attr(
                                &mut ctx as *mut *mut c_void as *mut c_void,
                                POINTER_ATTRIBUTE_CONTEXT,
                                dptr,
                            ) == 0
                                && !ctx.is_null() =>
                        {
                            set(ctx) == 0
                        }
                        _ => {
                            attr(
                                &mut ordinal as *mut c_int as *mut c_void,
                                POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                dptr,
                            ) == 0
                                && self.use_device(ordinal).is_ok()
                        }
                    }
                };
                if current {
                    // SAFETY: out pointers are valid locals.
                    r = unsafe { (self.addr_range)(&mut base, &mut size, dptr) };
                }
            }
            drop(saved);
        }
        self.check("MemGetAddressRange", r)?;
        let mut ordinal: c_int = 0;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        if let Some(attr) = self.ptr_attr {
            // SAFETY: attribute values are written into correctly sized locals.
            unsafe {
                self.check(
                    "PointerGetAttribute(DEVICE_ORDINAL)",
                    attr(
                        &mut ordinal as *mut c_int as *mut c_void,
                        POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                        dptr,
                    ),
                )?;
                if self.kind == Kind::Cuda {
                    self.check(
                        "PointerGetAttribute(CONTEXT)",
                        attr(
                            &mut ctx as *mut *mut c_void as *mut c_void,
                            POINTER_ATTRIBUTE_CONTEXT,
                            dptr,
                        ),
                    )?;
                }
            }
        }
        let mut bus = [0 as c_char; 32];
        // SAFETY: bus has the length passed.
        let pci = if unsafe { (self.bus_id)(bus.as_mut_ptr(), bus.len() as c_int, ordinal) } == 0 {
            // SAFETY: the driver wrote a NUL-terminated string.
            let s = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) };
            Some(s.to_string_lossy().to_lowercase())
        } else {
            None
        };
        Ok(DeviceMemory {
            base,
            size: size as u64,
            ordinal,
            ctx: ctx as usize,
            pci_address: pci,
        })
    }

    /// What is current on the calling thread now (CUDA: the context, HIP:
    /// the device), made current again when the returned guard drops.
    fn save_current(&self) -> Result<Current<'_>> {
        let prev = if let Some(get) = self.get_ctx {
            let mut ctx: *mut c_void = std::ptr::null_mut();
            // SAFETY: ctx is a valid out pointer.
            self.check("CtxGetCurrent", unsafe { get(&mut ctx) })?;
            Some(Saved::Context(ctx as usize))
        } else if let Some(get) = self.get_device {
            let mut dev: c_int = 0;
            // SAFETY: dev is a valid out pointer.
            self.check("GetDevice", unsafe { get(&mut dev) })?;
            Some(Saved::Device(dev))
        } else {
            None
        };
        Ok(Current {
            rt: self,
            prev,
            _thread: std::marker::PhantomData,
        })
    }

    /// Makes the memory's context (CUDA) or device (HIP) current on the
    /// calling thread until the returned guard drops, which makes the
    /// caller's own current again (`torch.cuda.current_device()` is as it
    /// was). Nothing is switched when it is current already.
    pub fn make_current(&self, mem: &DeviceMemory) -> Result<Current<'_>> {
        match self.kind {
            Kind::Cuda if mem.ctx == 0 => Ok(Current {
                rt: self,
                prev: None,
                _thread: std::marker::PhantomData,
            }),
            Kind::Cuda => self.enter_context(mem.ctx),
            Kind::Hip => {
                let mut cur = self.save_current()?;
                if cur.prev == Some(Saved::Device(mem.ordinal)) {
                    cur.prev = None;
                    return Ok(cur);
                }
                if let Some(f) = self.set_device {
                    // SAFETY: plain value argument.
                    if let Err(e) = self.check("SetDevice", unsafe { f(mem.ordinal) }) {
                        cur.prev = None; // nothing was switched
                        return Err(e);
                    }
                }
                Ok(cur)
            }
        }
    }

    /// Makes CUDA context `ctx` (from [`Runtime::current_context`] or
    /// [`DeviceMemory::ctx`]) current on the calling thread until the
    /// returned guard drops, as [`Runtime::make_current`].
    pub fn enter_context(&self, ctx: usize) -> Result<Current<'_>> {
        let Some(set) = self.set_ctx else {
            return Err(unavailable(self.kind, "no CtxSetCurrent"));
        };
        let mut cur = self.save_current()?;
        if cur.prev == Some(Saved::Context(ctx)) {
            cur.prev = None;
            return Ok(cur);
        }
        // SAFETY: ctx came from the driver.
        if let Err(e) = self.check("CtxSetCurrent", unsafe { set(ctx as *mut c_void) }) {
            cur.prev = None; // nothing was switched
            return Err(e);
        }
        Ok(cur)
    }

    /// Exports `[dptr, dptr+size)` as a dma-buf fd (owned by the caller).
    pub fn export_dmabuf(&self, dptr: u64, size: u64) -> Result<std::os::fd::OwnedFd> {
        let Some(f) = self.handle else {
            return Err(unavailable(
                self.kind,
                "driver has no MemGetHandleForAddressRange (too old)",
            ));
        };
        let mut fd: c_int = -1;
        // SAFETY: fd is a valid out location for an int handle.
        self.check("MemGetHandleForAddressRange", unsafe {
            f(
                &mut fd as *mut c_int as *mut c_void,
                dptr,
                size as usize,
                RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        if fd < 0 {
            return Err(Error::Runtime {
                call: "MemGetHandleForAddressRange",
                code: -1,
            });
        }
        // SAFETY: the driver returned a new fd owned by us.
        Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
    }

    /// Host to device copy.
    ///
    /// # Safety
    /// `src..src+len` must be readable and `dst..dst+len` device memory.
    pub unsafe fn htod(&self, dst: u64, src: *const u8, len: usize) -> Result<()> {
        if let (Some(f), Some(s)) = (&self.stream, self.copy_stream()) {
            self.check(
                "MemcpyHtoDAsync",
                (f.htod_async)(dst, src as *const c_void, len, s),
            )?;
            return self.check("StreamSynchronize", (f.synchronize)(s));
        }
        self.check("MemcpyHtoD", (self.htod)(dst, src as *const c_void, len))
    }

    /// Queues a host to device copy on this thread's copy stream of the
    /// current context and returns that stream, for
    /// [`Runtime::copy_stream_sync`]; without stream entry points (HIP) the
    /// copy is made at once and `None` returned.
    ///
    /// # Safety
    /// `src..src+len` must be pinned host memory that stays readable until
    /// the stream was waited for, and `dst..dst+len` device memory.
    pub unsafe fn htod_queue(&self, dst: u64, src: *const u8, len: usize) -> Result<Option<usize>> {
        if let (Some(f), Some(s)) = (&self.stream, self.copy_stream()) {
            self.check(
                "MemcpyHtoDAsync",
                (f.htod_async)(dst, src as *const c_void, len, s),
            )?;
            return Ok(Some(s as usize));
        }
        self.check("MemcpyHtoD", (self.htod)(dst, src as *const c_void, len))?;
        Ok(None)
    }

    /// Waits for a stream [`Runtime::htod_queue`] returned. With `sleep`,
    /// on a blocking-sync event recorded on it, so that the thread sleeps
    /// rather than spins (CUDA's default for a process with fewer contexts
    /// than CPUs) while long copies run; else, or without event entry
    /// points, `cuStreamSynchronize`.
    ///
    /// # Safety
    /// `stream` came from [`Runtime::htod_queue`] on this thread, whose
    /// current context is the stream's.
    pub unsafe fn copy_stream_sync(&self, stream: usize, sleep: bool) -> Result<()> {
        let f = self.stream_fns()?;
        if let (true, Some((create, record, wait))) = (sleep, f.events) {
            let mut ctx: *mut c_void = std::ptr::null_mut();
            if (f.ctx_get)(&mut ctx) == 0 && !ctx.is_null() {
                let ev = COPY_EVENTS.with(|c| {
                    let mut c = c.borrow_mut();
                    if let Some(&(_, e)) = c.iter().find(|(x, _)| *x == ctx as usize) {
                        return Some(e);
                    }
                    let mut e: *mut c_void = std::ptr::null_mut();
                    // SAFETY: e is a valid out pointer; a context is current.
                    if unsafe { create(&mut e, EVENT_BLOCKING_NO_TIMING) } != 0 {
                        return None;
                    }
                    c.push((ctx as usize, e as usize));
                    Some(e as usize)
                });
                if let Some(e) = ev {
                    self.check(
                        "EventRecord",
                        record(e as *mut c_void, stream as *mut c_void),
                    )?;
                    return self.check("EventSynchronize", wait(e as *mut c_void));
                }
            }
        }
        self.check("StreamSynchronize", (f.synchronize)(stream as *mut c_void))
    }

    /// The allocation's buffer id (`CU_POINTER_ATTRIBUTE_BUFFER_ID`,
    /// `HIP_POINTER_ATTRIBUTE_BUFFER_ID`): the same for every pointer of one
    /// allocation, another once the range was freed and allocated again.
    pub fn buffer_id(&self, dptr: u64) -> Result<u64> {
        let attr = self
            .ptr_attr
            .ok_or_else(|| unavailable(self.kind, "no PointerGetAttribute"))?;
        let mut id: c_ulonglong = 0;
        // SAFETY: the attribute is an unsigned long long, written into a local.
        self.check("PointerGetAttribute(BUFFER_ID)", unsafe {
            attr(
                &mut id as *mut c_ulonglong as *mut c_void,
                POINTER_ATTRIBUTE_BUFFER_ID,
                dptr,
            )
        })?;
        Ok(id)
    }

    /// Device to device copy of `len` bytes, done when this returns (CUDA:
    /// on this thread's non-blocking copy stream of the current context,
    /// then waited for; HIP: `hipMemcpyDtoD`, then `hipDeviceSynchronize`).
    ///
    /// # Safety
    /// `src..src+len` and `dst..dst+len` are device memory of the current
    /// context (CUDA) or device (HIP).
    pub unsafe fn dtod(&self, dst: u64, src: u64, len: usize) -> Result<()> {
        if let Some(f) = self.dtod {
            self.check("MemcpyDtoD", f(dst, src, len))?;
            if let Some(sync) = self.dev_sync {
                self.check("DeviceSynchronize", sync())?;
            }
            return Ok(());
        }
        let f = self.stream_fns()?;
        let (Some(copy), Some(s)) = (f.dtod_async, self.copy_stream()) else {
            return Err(unavailable(
                self.kind,
                "no MemcpyDtoDAsync or no copy stream",
            ));
        };
        self.check("MemcpyDtoDAsync", copy(dst, src, len, s))?;
        self.check("StreamSynchronize", (f.synchronize)(s))
    }

    /// Device to host copy.
    ///
    /// # Safety
    /// `dst..dst+len` must be writable and `src..src+len` device memory.
    pub unsafe fn dtoh(&self, dst: *mut u8, src: u64, len: usize) -> Result<()> {
        if let (Some(f), Some(s)) = (&self.stream, self.copy_stream()) {
            self.check(
                "MemcpyDtoHAsync",
                (f.dtoh_async)(dst as *mut c_void, src, len, s),
            )?;
            return self.check("StreamSynchronize", (f.synchronize)(s));
        }
        self.check("MemcpyDtoH", (self.dtoh)(dst as *mut c_void, src, len))
    }

    /// This thread's non-blocking stream for the current context, made on first use.
    ///
    /// The bounce path copies on it rather than with the synchronous copies, which run on the
    /// legacy default stream and so wait for every blocking stream of the context: a stream
    /// held by stream-ordered I/O ([`crate::stream`]) would then wait for its own copies.
    fn copy_stream(&self) -> Option<*mut c_void> {
        let f = self.stream.as_ref()?;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: ctx is a valid out pointer.
        if unsafe { (f.ctx_get)(&mut ctx) } != 0 || ctx.is_null() {
            return None;
        }
        COPY_STREAMS.with(|c| {
            let mut c = c.borrow_mut();
            if let Some(&(_, s)) = c.iter().find(|(x, _)| *x == ctx as usize) {
                return Some(s as *mut c_void);
            }
            let mut s: *mut c_void = std::ptr::null_mut();
            // SAFETY: s is a valid out pointer; a context is current.
            if unsafe { (f.create)(&mut s, STREAM_NON_BLOCKING) } != 0 {
                return None;
            }
            c.push((ctx as usize, s as usize));
            Some(s)
        })
    }

    fn stream_fns(&self) -> Result<&StreamFns> {
        self.stream
            .as_ref()
            .ok_or_else(|| unavailable(self.kind, "no stream entry points (CUDA 11.7 or later)"))
    }

    /// Enqueues `f(user)` on `stream`: it runs when the stream reaches it, and the stream goes on
    /// when it returns. `f` must not call the runtime.
    ///
    /// # Safety
    /// `stream` is a stream of the current context (null: the default stream); `user` stays
    /// valid for `f`.
    pub unsafe fn launch_host_func(
        &self,
        stream: *mut c_void,
        f: HostFn,
        user: *mut c_void,
    ) -> Result<()> {
        let s = self.stream_fns()?;
        self.check("LaunchHostFunc", (s.launch_host_func)(stream, f, user))
    }

    /// Enqueues on `stream` a wait until the 32-bit word at `dptr` equals `value`.
    ///
    /// # Safety
    /// `stream` as for [`Runtime::launch_host_func`]; `dptr` is device-visible memory that
    /// stays valid until the stream passed the wait.
    pub unsafe fn wait_value32(&self, stream: *mut c_void, dptr: u64, value: u32) -> Result<()> {
        let s = self.stream_fns()?;
        self.check(
            "StreamWaitValue32",
            (s.wait_value32)(stream, dptr, value, WAIT_VALUE_EQ),
        )
    }

    /// The context current on the calling thread.
    pub fn current_context(&self) -> Result<usize> {
        let s = self.stream_fns()?;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: ctx is a valid out pointer.
        self.check("CtxGetCurrent", unsafe { (s.ctx_get)(&mut ctx) })?;
        if ctx.is_null() {
            return Err(Error::Runtime {
                call: "CtxGetCurrent (no current context)",
                code: 201,
            });
        }
        Ok(ctx as usize)
    }

    /// Makes `ctx` (from [`Runtime::current_context`]) current on the calling thread, and
    /// leaves it so ([`Runtime::enter_context`] restores the caller's).
    pub fn set_context(&self, ctx: usize) -> Result<()> {
        let f = self
            .set_ctx
            .ok_or_else(|| unavailable(self.kind, "no CtxSetCurrent"))?;
        // SAFETY: ctx came from the driver.
        self.check("CtxSetCurrent", unsafe { f(ctx as *mut c_void) })
    }

    /// Sets the 32-bit word at `dptr` to `value` and waits for it, on this thread's
    /// non-blocking stream (never behind other streams' work).
    pub fn fill32_sync(&self, dptr: u64, value: u32) -> Result<()> {
        self.fill32_sync_n(dptr, value, 1)
    }

    /// Sets `n` 32-bit words from `dptr` to `value`, as [`Runtime::fill32_sync`].
    pub fn fill32_sync_n(&self, dptr: u64, value: u32, n: usize) -> Result<()> {
        let f = self.stream_fns()?;
        let s = self.copy_stream().ok_or(Error::Runtime {
            call: "StreamCreate",
            code: -1,
        })?;
        // SAFETY: the caller's device memory; s is this thread's stream of the current context.
        unsafe {
            self.check("MemsetD32Async", (f.memset32_async)(dptr, value, n, s))?;
            self.check("StreamSynchronize", (f.synchronize)(s))
        }
    }

    /// Creates a stream on the current context (`flags`: e.g. [`STREAM_NON_BLOCKING`]).
    pub fn stream_create(&self, flags: c_uint) -> Result<*mut c_void> {
        let s = self.stream_fns()?;
        let mut st: *mut c_void = std::ptr::null_mut();
        // SAFETY: st is a valid out pointer.
        self.check("StreamCreate", unsafe { (s.create)(&mut st, flags) })?;
        Ok(st)
    }

    /// Waits until `stream` ran everything queued on it.
    ///
    /// # Safety
    /// `stream` is a stream of the current context (null: the default stream).
    pub unsafe fn stream_synchronize(&self, stream: *mut c_void) -> Result<()> {
        let s = self.stream_fns()?;
        self.check("StreamSynchronize", (s.synchronize)(stream))
    }

    /// Destroys a stream from [`Runtime::stream_create`].
    ///
    /// # Safety
    /// `stream` came from [`Runtime::stream_create`] and is not used afterwards.
    pub unsafe fn stream_destroy(&self, stream: *mut c_void) -> Result<()> {
        let s = self.stream_fns()?;
        self.check("StreamDestroy", (s.destroy)(stream))
    }

    /// Enqueues on `stream` a fill of `len` bytes at `dst` with `value`.
    ///
    /// # Safety
    /// `dst..dst+len` is device memory; `stream` as for [`Runtime::stream_synchronize`].
    pub unsafe fn memset_async(
        &self,
        dst: u64,
        value: u8,
        len: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        let s = self.stream_fns()?;
        self.check("MemsetD8Async", (s.memset_async)(dst, value, len, stream))
    }

    /// Enqueues on `stream` a copy of `len` bytes of device memory at `src` to `dst`.
    ///
    /// # Safety
    /// `dst..dst+len` is pinned host memory, writable until the stream passed the copy;
    /// `src..src+len` device memory; `stream` as for [`Runtime::stream_synchronize`].
    pub unsafe fn dtoh_async(
        &self,
        dst: *mut u8,
        src: u64,
        len: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        let s = self.stream_fns()?;
        self.check(
            "MemcpyDtoHAsync",
            (s.dtoh_async)(dst as *mut c_void, src, len, stream),
        )
    }

    /// Allocates device memory (needs a current context: for CUDA the
    /// caller must have one; see [`Runtime::use_device`]).
    pub fn mem_alloc(&self, len: usize) -> Result<u64> {
        let f = self
            .mem_alloc
            .ok_or_else(|| unavailable(self.kind, "no MemAlloc"))?;
        let mut p = 0u64;
        // SAFETY: p is a valid out pointer.
        self.check("MemAlloc", unsafe { f(&mut p, len) })?;
        Ok(p)
    }

    /// Makes device `ordinal` current on this thread (CUDA: its primary context), and leaves it
    /// so: for a program that allocates, as `cudaSetDevice`.
    pub fn use_device(&self, ordinal: i32) -> Result<()> {
        if let Some(f) = self.set_device {
            // SAFETY: plain value argument.
            return self.check("SetDevice", unsafe { f(ordinal) });
        }
        let (Some(get), Some(primary), Some(set)) = (self.dev_get, self.primary, self.set_ctx)
        else {
            return Err(unavailable(self.kind, "no device/context entry points"));
        };
        let mut dev: c_int = 0;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: out pointers are valid locals.
        unsafe {
            self.check("DeviceGet", get(&mut dev, ordinal))?;
            self.check("DevicePrimaryCtxRetain", primary(&mut ctx, dev))?;
            self.check("CtxSetCurrent", set(ctx))
        }
    }

    /// Frees device memory from [`Runtime::mem_alloc`].
    pub fn mem_free(&self, p: u64) -> Result<()> {
        let f = self
            .mem_free
            .ok_or_else(|| unavailable(self.kind, "no MemFree"))?;
        // SAFETY: p came from mem_alloc.
        self.check("MemFree", unsafe { f(p) })
    }

    /// Allocates pinned host memory.
    pub fn host_alloc(&self, len: usize) -> Result<*mut u8> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: p is a valid out pointer.
        self.check("MemHostAlloc", unsafe { (self.host_alloc)(&mut p, len, 0) })?;
        Ok(p as *mut u8)
    }

    /// Frees pinned host memory.
    ///
    /// # Safety
    /// `p` must come from [`Runtime::host_alloc`].
    pub unsafe fn host_free(&self, p: *mut u8) {
        (self.host_free)(p as *mut c_void);
    }
}

/// What [`Current`] makes current again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Saved {
    /// A CUDA context (0: none).
    Context(usize),
    /// A HIP device.
    Device(c_int),
}

/// The calling thread's CUDA context or HIP device as it was before a
/// call of the library switched it ([`Runtime::make_current`],
/// [`Runtime::enter_context`]): made current again on drop, on error
/// paths too. Dropped on the thread it was made on.
#[must_use = "dropping it makes the caller's context current again at once"]
pub struct Current<'a> {
    rt: &'a Runtime,
    /// What to make current again; `None`: nothing was switched.
    prev: Option<Saved>,
    /// Not `Send`: a thread's current context is the thread's.
    _thread: std::marker::PhantomData<*const ()>,
}

impl std::fmt::Debug for Current<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Current").field("prev", &self.prev).finish()
    }
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        // A failure here cannot be reported; the driver fails these only
        // for a context that was destroyed meanwhile, which is no longer
        // the caller's to have current.
        match self.prev {
            Some(Saved::Context(ctx)) => {
                if let Some(set) = self.rt.set_ctx {
                    // SAFETY: ctx was current on this thread (null: none).
                    unsafe { set(ctx as *mut c_void) };
                }
            }
            Some(Saved::Device(dev)) => {
                if let Some(set) = self.rt.set_device {
                    // SAFETY: plain value argument.
                    unsafe { set(dev) };
                }
            }
            None => {}
        }
    }
}

/// What the runtime says about a device pointer.
#[derive(Debug, Clone)]
pub struct DeviceMemory {
    /// Base of the allocation.
    pub base: u64,
    /// Size of the allocation.
    pub size: u64,
    /// Device ordinal.
    pub ordinal: i32,
    /// CUDA context (as an integer), 0 for HIP.
    pub ctx: usize,
    /// PCI address of the device, lower case.
    pub pci_address: Option<String>,
}

/// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` (cuda.h, CUDA 11.7 and later).
const DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: c_int = 124;
type FnDevCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnDevAttr = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// Every CUDA device's PCI address (`0000:01:00.0`, lower case) and whether
/// it exports dma-bufs (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`, `None`
/// when the driver does not answer). [`Error::RuntimeUnavailable`] without
/// a usable `libcuda.so.1`.
pub fn cuda_dmabuf_support() -> Result<Vec<(String, Option<bool>)>> {
    let rt = Runtime::cuda()?;
    // SAFETY: the symbols have these C signatures (cuda.h).
    let (count, attr): (FnDevCount, FnDevAttr) = unsafe {
        (
            sym(&rt._lib, Kind::Cuda, "cuDeviceGetCount")?,
            sym(&rt._lib, Kind::Cuda, "cuDeviceGetAttribute")?,
        )
    };
    let mut n: c_int = 0;
    // SAFETY: n is writable; cuInit ran when the runtime was loaded.
    let r = unsafe { count(&mut n) };
    if r != 0 {
        return Err(Error::Runtime {
            call: "cuDeviceGetCount",
            code: r,
        });
    }
    let mut out = Vec::new();
    for ordinal in 0..n {
        let mut dev = ordinal;
        if let Some(get) = rt.dev_get {
            // SAFETY: dev is writable.
            if unsafe { get(&mut dev, ordinal) } != 0 {
                continue;
            }
        }
        let mut bus = [0 as c_char; 32];
        // SAFETY: bus has the length passed.
        if unsafe { (rt.bus_id)(bus.as_mut_ptr(), bus.len() as c_int, dev) } != 0 {
            continue;
        }
        // SAFETY: the driver wrote a NUL-terminated string.
        let pci = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }
            .to_string_lossy()
            .to_lowercase();
        // sysfs names a function 0000:01:00.0; some drivers give the
        // domain in 8 digits
        let pci = match pci.split_once(':') {
            Some((dom, rest)) if dom.len() > 4 => match u32::from_str_radix(dom, 16) {
                Ok(d) => format!("{d:04x}:{rest}"),
                Err(_) => pci,
            },
            _ => pci,
        };
        let mut v: c_int = 0;
        // SAFETY: v is writable.
        let ok = unsafe { attr(&mut v, DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) } == 0;
        out.push((pci, ok.then_some(v != 0)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    //! [`Current`] against a stand-in of the driver: entry points that keep
    //! the thread's current context and device in thread-locals, as the
    //! driver keeps them per thread.
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static CTX: Cell<usize> = const { Cell::new(0) };
        static DEV: Cell<c_int> = const { Cell::new(0) };
    }
    /// A context `cuCtxSetCurrent` refuses (as a destroyed one).
    const BAD_CTX: usize = 0xbad0;
    /// The context and device the stand-in's allocations belong to.
    const MEM_CTX: usize = 0x1000;
    const MEM_DEV: c_int = 1;

    unsafe extern "C" fn get_ctx(out: *mut *mut c_void) -> c_int {
        *out = CTX.with(Cell::get) as *mut c_void;
        0
    }
    unsafe extern "C" fn set_ctx(ctx: *mut c_void) -> c_int {
        if ctx as usize == BAD_CTX {
            return 201;
        }
        CTX.with(|c| c.set(ctx as usize));
        0
    }
    unsafe extern "C" fn get_dev(out: *mut c_int) -> c_int {
        *out = DEV.with(Cell::get);
        0
    }
    unsafe extern "C" fn set_dev(dev: c_int) -> c_int {
        if dev < 0 {
            return 101;
        }
        DEV.with(|d| d.set(dev));
        0
    }
    /// `cuMemGetAddressRange`: CUDA_ERROR_INVALID_CONTEXT without a current context.
    unsafe extern "C" fn addr_range(base: *mut u64, size: *mut usize, dptr: u64) -> c_int {
        if CTX.with(Cell::get) == 0 {
            return 201;
        }
        *base = dptr;
        *size = 1 << 20;
        0
    }
    unsafe extern "C" fn ptr_attr(out: *mut c_void, attr: c_int, _dptr: u64) -> c_int {
        match attr {
            POINTER_ATTRIBUTE_CONTEXT => *(out as *mut *mut c_void) = MEM_CTX as *mut c_void,
            POINTER_ATTRIBUTE_DEVICE_ORDINAL => *(out as *mut c_int) = MEM_DEV,
            _ => return 1,
        }
        0
    }
    unsafe extern "C" fn bus_id(_: *mut c_char, _: c_int, _: c_int) -> c_int {
        1
    }
    unsafe extern "C" fn htod(_: u64, _: *const c_void, _: usize) -> c_int {
        1
    }
    unsafe extern "C" fn dtoh(_: *mut c_void, _: u64, _: usize) -> c_int {
        1
    }
    unsafe extern "C" fn host_alloc(_: *mut *mut c_void, _: usize, _: c_uint) -> c_int {
        1
    }
    unsafe extern "C" fn host_free(_: *mut c_void) -> c_int {
        1
    }

    fn runtime(kind: Kind) -> Runtime {
        let cuda = kind == Kind::Cuda;
        Runtime {
            kind,
            _lib: libloading::os::unix::Library::this().into(),
            ptr_attr: Some(ptr_attr),
            addr_range,
            handle: None,
            htod,
            dtoh,
            host_alloc,
            host_free,
            dtod: None,
            dev_sync: None,
            set_ctx: cuda.then_some(set_ctx as FnSetCtx),
            get_ctx: cuda.then_some(get_ctx as FnCtxGet),
            set_device: (!cuda).then_some(set_dev as FnSetDevice),
            get_device: (!cuda).then_some(get_dev as FnGetDevice),
            bus_id,
            mem_alloc: None,
            mem_free: None,
            dev_get: None,
            primary: None,
            stream: None,
        }
    }

    fn mem(ctx: usize, ordinal: c_int) -> DeviceMemory {
        DeviceMemory {
            base: 0x7000_0000,
            size: 1 << 20,
            ordinal,
            ctx,
            pci_address: None,
        }
    }

    #[test]
    fn cuda_context_is_the_callers_again_after_a_switch() {
        let rt = runtime(Kind::Cuda);
        for before in [0x2000, 0] {
            CTX.with(|c| c.set(before));
            {
                let _cur = rt.make_current(&mem(MEM_CTX, MEM_DEV)).expect("switch");
                assert_eq!(CTX.with(Cell::get), MEM_CTX, "switched");
            }
            assert_eq!(CTX.with(Cell::get), before, "restored");
            {
                let _cur = rt.enter_context(MEM_CTX).expect("switch");
                assert_eq!(CTX.with(Cell::get), MEM_CTX);
            }
            assert_eq!(CTX.with(Cell::get), before);
        }
    }

    #[test]
    fn cuda_context_stays_when_the_switch_fails() {
        let rt = runtime(Kind::Cuda);
        CTX.with(|c| c.set(0x2000));
        assert!(rt.make_current(&mem(BAD_CTX, MEM_DEV)).is_err());
        assert_eq!(CTX.with(Cell::get), 0x2000);
        // an error inside the switched section: the caller's context again
        let inner = || -> Result<()> {
            let _cur = rt.make_current(&mem(MEM_CTX, MEM_DEV))?;
            assert_eq!(CTX.with(Cell::get), MEM_CTX);
            Err(Error::Timeout)
        };
        assert!(inner().is_err());
        assert_eq!(CTX.with(Cell::get), 0x2000);
    }

    #[test]
    fn describe_leaves_a_thread_without_a_context_without_one() {
        // A worker thread with no current context: describe makes the
        // pointer's own context current to ask, then none again.
        let rt = runtime(Kind::Cuda);
        CTX.with(|c| c.set(0));
        let m = rt.describe(0x7000_1000).expect("describe");
        assert_eq!((m.base, m.ctx, m.ordinal), (0x7000_1000, MEM_CTX, MEM_DEV));
        assert_eq!(CTX.with(Cell::get), 0, "no context current again");
    }

    #[test]
    fn hip_device_is_the_callers_again_after_a_switch() {
        let rt = runtime(Kind::Hip);
        DEV.with(|d| d.set(0));
        {
            let _cur = rt.make_current(&mem(0, MEM_DEV)).expect("switch");
            assert_eq!(DEV.with(Cell::get), MEM_DEV, "switched");
        }
        assert_eq!(DEV.with(Cell::get), 0, "restored");
        assert!(rt.make_current(&mem(0, -1)).is_err());
        assert_eq!(DEV.with(Cell::get), 0, "unchanged by a failed switch");
    }
}
