//! The loaded driver: `libcuda.so.1` or `libamdhip64.so` opened, its entry
//! points resolved ([`Runtime`], [`Kind`]), how a driver error becomes an
//! [`Error`](crate::Error), and what it says of a device pointer
//! ([`DeviceMemory`]).

use crate::error::{Error, Result};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::{Arc, OnceLock};

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
pub(super) type FnSetCtx = unsafe extern "C" fn(*mut c_void) -> c_int;
pub(super) type FnSetDevice = unsafe extern "C" fn(c_int) -> c_int;
pub(super) type FnGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnMemAlloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
type FnMemFree = unsafe extern "C" fn(u64) -> c_int;
type FnDevGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type FnPrimary = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type FnBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
/// A host function run by a stream (`CUhostFn`).
pub type HostFn = unsafe extern "C" fn(*mut c_void);
type FnLaunchHostFunc = unsafe extern "C" fn(*mut c_void, HostFn, *mut c_void) -> c_int;
type FnWaitValue32 = unsafe extern "C" fn(*mut c_void, u64, u32, c_uint) -> c_int;
pub(super) type FnStreamCreate = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int;
pub(super) type FnStream = unsafe extern "C" fn(*mut c_void) -> c_int;
type FnHtoDAsync = unsafe extern "C" fn(u64, *const c_void, usize, *mut c_void) -> c_int;
type FnDtoHAsync = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> c_int;
type FnMemsetAsync = unsafe extern "C" fn(u64, u8, usize, *mut c_void) -> c_int;
type FnMemset32Async = unsafe extern "C" fn(u64, c_uint, usize, *mut c_void) -> c_int;
pub(super) type FnCtxGet = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
pub(super) type FnEventCreate = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int;
pub(super) type FnEventRecord = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
pub(super) type FnEvent = unsafe extern "C" fn(*mut c_void) -> c_int;

/// CUDA's stream entry points (stream-ordered I/O, and the bounce path's own stream).
pub(super) struct StreamFns {
    pub(super) launch_host_func: FnLaunchHostFunc,
    pub(super) wait_value32: FnWaitValue32,
    pub(super) create: FnStreamCreate,
    pub(super) synchronize: FnStream,
    pub(super) destroy: FnStream,
    pub(super) htod_async: FnHtoDAsync,
    pub(super) dtoh_async: FnDtoHAsync,
    /// `cuMemcpyDtoDAsync_v2`: the staging pool's copies ([`crate::gpucache`]).
    pub(super) dtod_async: Option<FnDtoDAsync>,
    pub(super) memset_async: FnMemsetAsync,
    pub(super) memset32_async: FnMemset32Async,
    pub(super) ctx_get: FnCtxGet,
    /// `cuEventCreate`, `cuEventRecord`, `cuEventSynchronize`: the bounce
    /// path's sleeping waits (spinning waits without them).
    pub(super) events: Option<(FnEventCreate, FnEventRecord, FnEvent)>,
    /// `cuEventDestroy_v2`: the copy events destroyed with their
    /// generation ([`super::copy::CopyStreams`]); without it they stay to
    /// the end of the process.
    pub(super) event_destroy: Option<FnEvent>,
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
            event_destroy: sym(lib, kind, "cuEventDestroy_v2").ok(),
        })
    }
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
    pub(super) kind: Kind,
    pub(super) _lib: libloading::Library,
    pub(super) ptr_attr: Option<FnPtrAttr>,
    pub(super) addr_range: FnAddrRange,
    pub(super) handle: Option<FnHandle>,
    pub(super) htod: FnHtoD,
    pub(super) dtoh: FnDtoH,
    pub(super) host_alloc: FnHostAlloc,
    pub(super) host_free: FnHostFree,
    /// `hipMemcpyDtoD` (HIP; CUDA copies on a stream).
    pub(super) dtod: Option<FnDtoD>,
    /// `hipDeviceSynchronize` (HIP).
    pub(super) dev_sync: Option<FnVoid>,
    pub(super) set_ctx: Option<FnSetCtx>,
    /// `cuCtxGetCurrent` (CUDA): what [`Current`](super::Current) restores.
    pub(super) get_ctx: Option<FnCtxGet>,
    pub(super) set_device: Option<FnSetDevice>,
    /// `hipGetDevice` (HIP): what [`Current`](super::Current) restores.
    pub(super) get_device: Option<FnGetDevice>,
    pub(super) bus_id: FnBusId,
    pub(super) mem_alloc: Option<FnMemAlloc>,
    pub(super) mem_free: Option<FnMemFree>,
    pub(super) dev_get: Option<FnDevGet>,
    pub(super) primary: Option<FnPrimary>,
    pub(super) stream: Option<StreamFns>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("kind", &self.kind).finish()
    }
}

pub(super) fn unavailable(kind: Kind, reason: impl Into<String>) -> Error {
    Error::RuntimeUnavailable {
        runtime: match kind {
            Kind::Cuda => "CUDA",
            Kind::Hip => "HIP",
        },
        reason: reason.into(),
    }
}

pub(super) unsafe fn sym<T: Copy>(lib: &libloading::Library, kind: Kind, name: &str) -> Result<T> {
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
        Runtime::shared(Kind::Cuda)
    }

    /// The process-wide HIP runtime (loaded once).
    pub fn hip() -> Result<Arc<Runtime>> {
        Runtime::shared(Kind::Hip)
    }

    /// The process-wide runtime of `kind`: loaded on the first call, and
    /// that outcome (the runtime, or why it could not be loaded) kept.
    fn shared(kind: Kind) -> Result<Arc<Runtime>> {
        type Slot = OnceLock<std::result::Result<Arc<Runtime>, String>>;
        static RT: [Slot; 2] = [OnceLock::new(), OnceLock::new()];
        let slot = match kind {
            Kind::Cuda => &RT[0],
            Kind::Hip => &RT[1],
        };
        slot.get_or_init(|| Runtime::load(kind).map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .map_err(|r| unavailable(kind, r))
    }

    /// Which runtime.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub(super) fn check(&self, call: &'static str, code: c_int) -> Result<()> {
        if code == 0 {
            Ok(())
        } else {
            Err(Error::Runtime { call, code })
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
