//! [`Current`] against a stand-in of the driver: entry points that keep
//! the thread's current context and device in thread-locals, as the
//! driver keeps them per thread; and the copy streams' generations
//! ([`CopyStreams`]) against stream entry points that count.
use super::memory::{POINTER_ATTRIBUTE_CONTEXT, POINTER_ATTRIBUTE_DEVICE_ORDINAL};
use super::runtime::{FnCtxGet, FnGetDevice, FnSetCtx, FnSetDevice, StreamFns};
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

/// Streams and events the stand-in made and destroyed; a handle is
/// `STREAM_BASE` (or `EVENT_BASE`) plus its number.
mod counted {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;
    pub static STREAMS: AtomicUsize = AtomicUsize::new(0);
    pub static EVENTS: AtomicUsize = AtomicUsize::new(0);
    pub static DESTROYED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    pub const STREAM_BASE: usize = 0x5000_0000;
    pub const EVENT_BASE: usize = 0x6000_0000;
}
use counted::*;
use std::sync::atomic::Ordering;

fn destroyed(h: usize) -> bool {
    DESTROYED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&h)
}
fn destroyed_count(base: usize) -> usize {
    let d = DESTROYED.lock().unwrap_or_else(|p| p.into_inner());
    d.iter().filter(|&&h| h & !0xffff == base).count()
}
/// 400 (`CUDA_ERROR_INVALID_HANDLE`) for a destroyed stream or event.
fn live(h: *mut c_void) -> c_int {
    if destroyed(h as usize) {
        400
    } else {
        0
    }
}
unsafe extern "C" fn stream_create(out: *mut *mut c_void, _: c_uint) -> c_int {
    *out = (STREAM_BASE + STREAMS.fetch_add(1, Ordering::Relaxed) + 1) as *mut c_void;
    0
}
unsafe extern "C" fn event_create(out: *mut *mut c_void, _: c_uint) -> c_int {
    *out = (EVENT_BASE + EVENTS.fetch_add(1, Ordering::Relaxed) + 1) as *mut c_void;
    0
}
unsafe extern "C" fn destroy(h: *mut c_void) -> c_int {
    let r = live(h);
    DESTROYED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(h as usize);
    r
}
unsafe extern "C" fn on_stream(h: *mut c_void) -> c_int {
    live(h)
}
unsafe extern "C" fn record(e: *mut c_void, s: *mut c_void) -> c_int {
    live(e).max(live(s))
}
unsafe extern "C" fn htod_async(_: u64, _: *const c_void, _: usize, s: *mut c_void) -> c_int {
    live(s)
}
unsafe extern "C" fn dtoh_async(_: *mut c_void, _: u64, _: usize, s: *mut c_void) -> c_int {
    live(s)
}
unsafe extern "C" fn memset_async(_: u64, _: u8, _: usize, s: *mut c_void) -> c_int {
    live(s)
}
unsafe extern "C" fn memset32_async(_: u64, _: c_uint, _: usize, s: *mut c_void) -> c_int {
    live(s)
}
unsafe extern "C" fn launch_host_func(_: *mut c_void, _: HostFn, _: *mut c_void) -> c_int {
    1
}
unsafe extern "C" fn wait_value32(_: *mut c_void, _: u64, _: u32, _: c_uint) -> c_int {
    1
}

fn runtime_with_streams() -> Runtime {
    Runtime {
        stream: Some(StreamFns {
            launch_host_func,
            wait_value32,
            create: stream_create,
            synchronize: on_stream,
            destroy,
            htod_async,
            dtoh_async,
            dtod_async: None,
            memset_async,
            memset32_async,
            ctx_get: get_ctx,
            events: Some((event_create, record, on_stream)),
            event_destroy: Some(destroy),
        }),
        ..runtime(Kind::Cuda)
    }
}

#[test]
fn copy_streams_are_destroyed_with_their_generation_and_made_again_after() {
    let _one = TEST_GLOBALS.lock().unwrap_or_else(|p| p.into_inner());
    retire_copy_streams(); // none of another test's
    let rt = runtime_with_streams();
    CTX.with(|c| c.set(MEM_CTX));
    let (streams, events) = (
        STREAMS.load(Ordering::Relaxed),
        EVENTS.load(Ordering::Relaxed),
    );
    rt.fill32_sync(0x7000_0000, 1).expect("fill");
    rt.fill32_sync(0x7000_0000, 2).expect("fill");
    assert_eq!(
        STREAMS.load(Ordering::Relaxed),
        streams + 1,
        "one per thread and context"
    );
    // a queued copy and its sleeping wait: an event, made once
    let queued = unsafe { rt.htod_queue_held(0x7000_0000, [0u8; 4].as_ptr(), 4) }
        .expect("queue")
        .expect("a stream");
    unsafe { rt.copy_stream_sync(queued.0, true) }.expect("wait");
    assert_eq!(EVENTS.load(Ordering::Relaxed), events + 1);
    let first = queued.0;
    assert!(first > STREAM_BASE && !destroyed(first));
    // A shutdown while a copy holds the generation: nothing destroyed yet.
    let (s0, e0) = (destroyed_count(STREAM_BASE), destroyed_count(EVENT_BASE));
    retire_copy_streams();
    assert_eq!(destroyed_count(STREAM_BASE), s0, "destroyed under a copy");
    unsafe { rt.copy_stream_sync(queued.0, false) }.expect("the held stream still works");
    // The copy done: the stream and the event are destroyed.
    drop(queued);
    assert!(destroyed(first), "the copy stream is destroyed");
    assert_eq!(destroyed_count(STREAM_BASE), s0 + 1);
    assert_eq!(destroyed_count(EVENT_BASE), e0 + 1);
    // The same thread copies again: a new stream, never the destroyed one.
    rt.fill32_sync(0x7000_0000, 3)
        .expect("fill on a new stream");
    assert_eq!(STREAMS.load(Ordering::Relaxed), streams + 2);
    retire_copy_streams();
    assert_eq!(
        destroyed_count(STREAM_BASE),
        s0 + 2,
        "and destroyed in turn"
    );
    CTX.with(|c| c.set(0));
}
