//! [`Current`] against a stand-in of the driver: entry points that keep
//! the thread's current context and device in thread-locals, as the
//! driver keeps them per thread.
use super::memory::{POINTER_ATTRIBUTE_CONTEXT, POINTER_ATTRIBUTE_DEVICE_ORDINAL};
use super::runtime::{FnCtxGet, FnGetDevice, FnSetCtx, FnSetDevice};
use super::*;
use std::cell::Cell;
use std::ffi::{c_uint, c_void};

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
