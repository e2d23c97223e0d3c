//! `fgds_shutdown()`: the library's runtime dropped, and made again by the
//! next call, which works as before; the counters go on counting. (The
//! reaper joined, the staging buffers freed and the copy streams
//! destroyed: the unit tests of `src/gpucache/runtime.rs`,
//! `src/gpucache/pool.rs` and `src/gpu/tests.rs`.)

mod common;
use common::*;
use fgds::capi::*;
use std::ffi::CString;

fn counters() -> fgds_gpucache_counters {
    let mut c: fgds_gpucache_counters = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { fgds_gpucache_counters(&mut c) }, 0);
    c
}

#[test]
fn the_library_works_after_a_shutdown() {
    let d = tmpdir();
    let data = random_bytes(64 << 10, 7);
    let p = file_with(&d, "f", &data);
    let cp = CString::new(p.to_str().unwrap()).unwrap();
    let read_all = || {
        let h = unsafe { fgds_open(cp.as_ptr(), libc::O_RDONLY, 0, std::ptr::null()) };
        assert!(h > 0, "{h}");
        let layout = std::alloc::Layout::from_size_align(64 << 10, 4096).unwrap();
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!raw.is_null());
        let base = raw as *mut libc::c_void;
        assert_eq!(unsafe { fgds_buf_register_host(base, 64 << 10, 0) }, 0);
        assert_eq!(fgds_read(h, base, 64 << 10, 0, 0), 64 << 10);
        let got = unsafe { std::slice::from_raw_parts(raw, 64 << 10) }.to_vec();
        assert_eq!(fgds_buf_deregister(base), 0);
        assert_eq!(fgds_close(h), 0);
        unsafe { std::alloc::dealloc(raw, layout) };
        got
    };
    assert_eq!(read_all(), data);
    let before = counters();
    fgds_shutdown();
    fgds_shutdown(); // twice, and with nothing made: nothing to drop
    let after = counters();
    assert_eq!((after.cache_entries, after.cache_bytes), (0, 0));
    assert_eq!(after.staged, before.staged, "counters outlive a shutdown");
    assert_eq!(after.registrations, before.registrations);
    // a handle opened before a shutdown, and new ones after, work
    let h = unsafe { fgds_open(cp.as_ptr(), libc::O_RDONLY, 0, std::ptr::null()) };
    assert!(h > 0, "{h}");
    fgds_shutdown();
    assert_eq!(read_all(), data);
    assert_eq!(fgds_close(h), 0);
}
