mod common;
use common::*;
use fgds::capi::*;
use std::ffi::{CStr, CString};

fn last() -> String {
    unsafe { CStr::from_ptr(fgds_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn c_abi_read_write_readv_stats() {
    let d = tmpdir();
    let data = random_bytes(200_000, 41);
    let p = file_with(&d, "f", &data);
    let cp = CString::new(p.to_str().unwrap()).unwrap();
    let cfg = fgds_config {
        size: std::mem::size_of::<fgds_config>() as u32,
        chunk_size: 65536,
        queue_depth: 4,
        flags: 0,
        reserved: 0,
    };
    let h = unsafe { fgds_open(cp.as_ptr(), libc::O_RDWR, 0, &cfg) };
    assert!(h > 0, "{h}");
    // page-aligned memory so that the aligned middle can go O_DIRECT
    let layout = std::alloc::Layout::from_size_align(300_000, 4096).unwrap();
    let raw = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!raw.is_null());
    let mem = unsafe { std::slice::from_raw_parts_mut(raw, 300_000) };
    let base = raw as *mut libc::c_void;
    // unregistered memory is refused
    assert_eq!(fgds_read(h, base, 10, 0, 0), -(libc::EFAULT as isize));
    assert_eq!(unsafe { fgds_buf_register_host(base, mem.len(), 0) }, 0);
    assert_eq!(
        unsafe { fgds_buf_register_host(base, 10, 0) },
        -libc::EEXIST
    );
    let n = fgds_read(h, base, 150_001, 3, 7);
    assert_eq!(n, 150_001);
    assert_same(&mem[7..150_008], &data[3..150_004]);
    // out of the registered range
    assert_eq!(fgds_read(h, base, 10, 0, 299_995), -(libc::ERANGE as isize));
    // readv with segments inside the registration
    let segs = [
        fgds_io_segment {
            base,
            offset: 4096,
            size: 8192,
        },
        fgds_io_segment {
            base,
            offset: 65536,
            size: 1000,
        },
    ];
    assert_eq!(unsafe { fgds_readv(h, segs.as_ptr(), 2, 8192) }, 9192);
    assert_same(&mem[4096..12288], &data[8192..16384]);
    assert_same(&mem[65536..66536], &data[16384..17384]);
    let mut other = [0u8; 64];
    let bad = [
        fgds_io_segment {
            base,
            offset: 0,
            size: 4096,
        },
        fgds_io_segment {
            base: other.as_mut_ptr() as _,
            offset: 0,
            size: 64,
        },
    ];
    assert_eq!(
        unsafe { fgds_readv(h, bad.as_ptr(), 2, 0) },
        -(libc::EFAULT as isize)
    );
    assert!(last().contains("segment 1"), "{}", last());
    let many = vec![
        fgds_io_segment {
            base,
            offset: 0,
            size: 1
        };
        1025
    ];
    assert_eq!(
        unsafe { fgds_readv(h, many.as_ptr(), 1025, 0) },
        -(libc::E2BIG as isize)
    );
    // write + read back
    mem[..5000].copy_from_slice(&random_bytes(5000, 42));
    assert_eq!(fgds_write(h, base, 5000, 190_000, 0), 5000);
    let wseg = [fgds_io_segment {
        base,
        offset: 0,
        size: 5000,
    }];
    assert_eq!(unsafe { fgds_writev(h, wseg.as_ptr(), 1, 10) }, 5000);
    let disk = std::fs::read(&p).unwrap();
    assert_same(&disk[190_000..195_000], &mem[..5000]);
    assert_same(&disk[10..5010], &mem[..5000]);
    let mut st = fgds_stats::default();
    assert_eq!(unsafe { fgds_get_stats(h, &mut st) }, 0);
    assert_eq!(st.read_bytes, 150_001 + 9192);
    assert_eq!(st.write_bytes, 10_000);
    assert!(st.direct_bytes > 0 && st.bounce_bytes > 0);
    let mut fb = fgds_fallbacks::default();
    assert_eq!(unsafe { fgds_get_fallbacks(h, &mut fb) }, 0);
    let sum = fb.busy
        + fb.not_supported
        + fb.no_device
        + fb.misaligned
        + fb.no_direct
        + fb.asked
        + fb.other;
    assert_eq!(sum, st.fallbacks, "the causes add up to the fallbacks");
    let (mut calls, mut regs) = (fgds_fallbacks::default(), fgds_fallbacks::default());
    assert_eq!(unsafe { fgds_process_fallbacks(&mut calls, &mut regs) }, 0);
    assert!(calls.no_direct >= fb.no_direct);
    assert_eq!(
        unsafe { fgds_process_fallbacks(std::ptr::null_mut(), std::ptr::null_mut()) },
        0
    );
    assert!(unsafe { fgds_get_fallbacks(h, std::ptr::null_mut()) } < 0);
    assert_eq!(fgds_close(h), 0);
    assert_eq!(fgds_close(h), -libc::EBADF);
    assert_eq!(fgds_read(h, base, 10, 0, 0), -(libc::EBADF as isize));
    assert_eq!(fgds_buf_deregister(base), 0);
    assert_eq!(fgds_buf_deregister(base), -libc::EFAULT);
    unsafe { std::alloc::dealloc(raw, layout) };
}

#[test]
fn c_abi_batch_and_errors() {
    let d = tmpdir();
    let data = random_bytes(65536, 43);
    let p = file_with(&d, "f", &data);
    let cp = CString::new(p.to_str().unwrap()).unwrap();
    let h = unsafe { fgds_open(cp.as_ptr(), libc::O_RDONLY, 0, std::ptr::null()) };
    assert!(h > 0);
    let mut mem = vec![0u8; 65536];
    let base = mem.as_mut_ptr() as *mut libc::c_void;
    assert_eq!(unsafe { fgds_buf_register_host(base, mem.len(), 0) }, 0);
    let b = fgds_batch_create(2);
    assert!(b > 0);
    let mk = |cookie: u64, off: i64| fgds_io_params {
        handle: h,
        opcode: FGDS_OP_READ,
        cookie,
        file_offset: off,
        base,
        buf_offset: off,
        size: 16384,
        segments: std::ptr::null(),
        nsegments: 0,
    };
    let three = [mk(1, 0), mk(2, 16384), mk(3, 32768)];
    assert_eq!(
        unsafe { fgds_batch_submit(b, three.as_ptr(), 3) },
        -libc::EAGAIN
    );
    assert_eq!(unsafe { fgds_batch_submit(b, three.as_ptr(), 2) }, 0);
    let mut ev = [fgds_io_event::default(); 4];
    let mut got = 0;
    while got < 2 {
        let n = unsafe { fgds_batch_wait(b, 1, 1, ev[got..].as_mut_ptr(), 10_000) };
        assert!(n >= 0);
        got += n as usize;
    }
    let mut cookies: Vec<u64> = ev[..2].iter().map(|e| e.cookie).collect();
    cookies.sort();
    assert_eq!(cookies, vec![1, 2]);
    assert!(ev[..2].iter().all(|e| e.status == 0 && e.result == 16384));
    assert_same(&mem[..32768], &data[..32768]);
    assert_eq!(fgds_batch_destroy(b), 0);
    assert_eq!(fgds_batch_destroy(b), -libc::EBADF);
    // errors
    assert_eq!(
        unsafe { fgds_open(std::ptr::null(), 0, 0, std::ptr::null()) },
        -libc::EINVAL
    );
    let missing = CString::new(d.path().join("nope").to_str().unwrap()).unwrap();
    assert_eq!(
        unsafe { fgds_open(missing.as_ptr(), libc::O_RDONLY, 0, std::ptr::null()) },
        -libc::ENOENT
    );
    assert_eq!(unsafe { fgds_open_fd(-1, std::ptr::null()) }, -libc::EBADF);
    assert_eq!(
        fgds_write(h, base, 4096, 0, 0),
        -(libc::EBADF as isize),
        "read-only handle"
    );
    let msg = unsafe { CStr::from_ptr(fgds_strerror(-libc::EREMOTEIO)) }
        .to_str()
        .unwrap();
    assert!(msg.contains("peer-to-peer"));
    // no fgds device: a clear error
    let r = unsafe {
        fgds_buf_register_dmabuf(std::ptr::null(), 0, 0, 4096, &mut std::ptr::null_mut())
    };
    if fgds::list_devices().unwrap().is_empty() {
        assert_eq!(r, -libc::ENODEV);
        assert!(
            last().contains("fgds module is not loaded")
                || last().contains("no /sys/class/misc/fgds"),
            "{}",
            last()
        );
    }
    let r = fgds_buf_register_cuda(0x1000, 4096, 0);
    assert!(r == -libc::ENOSYS || r < 0);
    assert_eq!(fgds_close(h), 0);
    assert_eq!(fgds_buf_deregister(base), 0);
}

#[test]
fn rust_api_device_absent_errors() {
    if !fgds::list_devices().unwrap().is_empty() {
        return; // a machine with the driver: nothing to check here
    }
    match fgds::Device::open_first() {
        Err(e @ fgds::Error::NoDevice(_)) => {
            assert_eq!(e.errno(), libc::ENODEV);
            assert!(e.to_string().contains("not loaded") || e.to_string().contains("no GPU"));
        }
        o => panic!("{o:?}"),
    }
    match fgds::Device::open("/dev/fgds0") {
        Err(fgds::Error::NoDevice(m)) => assert!(m.contains("/dev/fgds0")),
        o => panic!("{o:?}"),
    }
    assert!(matches!(
        fgds::Buffer::register_dmabuf(None, 0, 0, 4096),
        Err(fgds::Error::NoDevice(_))
    ));
    assert_eq!(
        fgds::Buffer::register_dmabuf(None, -1, 0, 4096)
            .unwrap_err()
            .errno(),
        libc::EBADF
    );
    // a fake sysfs tree is parsed the way the CLI reports it
    let d = tmpdir();
    let misc = d.path().join("misc");
    let pci = d.path().join("0000:41:00.0");
    std::fs::create_dir_all(misc.join("fgds3")).unwrap();
    std::fs::create_dir_all(misc.join("fgds10")).unwrap();
    std::fs::create_dir_all(misc.join("fuse")).unwrap();
    std::fs::create_dir_all(&pci).unwrap();
    std::fs::write(
        pci.join("resource"),
        "0x00000000fb000000 0x00000000fbffffff 0x0000000000040200\n0x0000000000000000 0x0000000000000000 0x0000000000000000\n0x000000f800000000 0x000000fbffffffff 0x000000000014220c\n",
    )
    .unwrap();
    std::fs::write(pci.join("vendor"), "0x10de\n").unwrap();
    // the node's device is the offer's auxiliary device, a child of the GPU
    let offer = pci.join("pci_p2pdma.bar.7");
    std::fs::create_dir_all(&offer).unwrap();
    std::os::unix::fs::symlink(&offer, misc.join("fgds3/device")).unwrap();
    let devs = fgds::device::list_devices_in(&misc).unwrap();
    assert_eq!(
        devs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["fgds3", "fgds10"]
    );
    assert_eq!(devs[0].pci_address.as_deref(), Some("0000:41:00.0"));
    assert_eq!(devs[0].vendor, Some(0x10de));
    assert_eq!(devs[0].bars.len(), 2);
    assert_eq!((devs[0].bars[0].index, devs[0].bars[0].size), (0, 16 << 20));
    assert_eq!((devs[0].bars[1].index, devs[0].bars[1].size), (2, 16 << 30));
    assert!(devs[1].pci_address.is_none());
}

#[test]
fn c_abi_stream_ordered_errors() {
    let d = tmpdir();
    let data = random_bytes(8192, 43);
    let p = file_with(&d, "s", &data);
    let cp = CString::new(p.to_str().unwrap()).unwrap();
    let h = unsafe { fgds_open(cp.as_ptr(), libc::O_RDWR, 0, std::ptr::null()) };
    assert!(h > 0, "{h}");
    let layout = std::alloc::Layout::from_size_align(8192, 4096).unwrap();
    let raw = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!raw.is_null());
    let base = raw as *mut libc::c_void;
    let (size, foff, boff) = (4096usize, 0 as libc::off_t, 0 as libc::off_t);
    let sentinel = -12345isize;
    let mut done = sentinel;
    let call = |h: i32, base, size: *const usize, done: *mut isize| unsafe {
        fgds_read_async(h, base, size, &foff, &boff, done, std::ptr::null_mut())
    };
    // unregistered base, closed handle, missing argument pointers: refused, nothing moves
    assert_eq!(call(h, base, &size, &mut done), -libc::EFAULT);
    assert_eq!(unsafe { fgds_buf_register_host(base, 8192, 0) }, 0);
    assert_eq!(call(h + 1000, base, &size, &mut done), -libc::EBADF);
    assert_eq!(call(h, base, std::ptr::null(), &mut done), -libc::EINVAL);
    assert!(last().contains("pointers"), "{}", last());
    assert_eq!(call(h, base, &size, std::ptr::null_mut()), -libc::EINVAL);
    // Without a CUDA driver there is no stream to enqueue on.
    if fgds::gpu::Runtime::cuda().is_err() {
        assert_eq!(call(h, base, &size, &mut done), -libc::ENOSYS);
        assert!(last().contains("CUDA"), "{}", last());
        let w = unsafe {
            fgds_write_async(
                h,
                base,
                &size,
                &foff,
                &boff,
                &mut done,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(w, -libc::ENOSYS);
    }
    assert_eq!(done, sentinel);
    assert!(unsafe { std::slice::from_raw_parts(raw, 8192) }
        .iter()
        .all(|&b| b == 0));
    assert_eq!(fgds_close(h), 0);
    assert_eq!(fgds_buf_deregister(base), 0);
    unsafe { std::alloc::dealloc(raw, layout) };
}

/// `struct fgds_config` carries its size: 0 is the first version's, a
/// smaller one is refused, a larger one is taken when the bytes the library
/// does not know are 0 and refused, naming the byte, when they are not.
#[test]
fn config_size_lets_the_struct_grow() {
    let d = tmpdir();
    let p = file_with(&d, "f", &random_bytes(8192, 3));
    let cp = CString::new(p.to_str().unwrap()).unwrap();
    #[repr(C)]
    struct Bigger {
        cfg: fgds_config,
        more: u64,
    }
    let open = |cfg: *const fgds_config| {
        // SAFETY: a NUL-terminated path and a config valid for its size.
        let h = unsafe { fgds_open(cp.as_ptr(), libc::O_RDONLY, 0, cfg) };
        let msg = unsafe { CStr::from_ptr(fgds_last_error()) }
            .to_string_lossy()
            .into_owned();
        if h > 0 {
            assert_eq!(fgds_close(h), 0);
        }
        (h, msg)
    };
    let base = fgds_config {
        flags: FGDS_CONFIG_NO_IO_URING,
        ..Default::default()
    };
    assert!(open(&base).0 > 0, "size 0: the first version");
    let sized = fgds_config {
        size: FGDS_CONFIG_SIZE_VER0,
        ..base
    };
    assert!(open(&sized).0 > 0);
    let (h, m) = open(&fgds_config { size: 8, ..base });
    assert_eq!(h, -libc::EINVAL);
    assert!(
        m.contains("size 8 is less than the first version's 24"),
        "{m}"
    );
    let mut big = Bigger {
        cfg: fgds_config {
            size: std::mem::size_of::<Bigger>() as u32,
            ..base
        },
        more: 0,
    };
    assert!(open(&big.cfg).0 > 0, "a later caller, nothing new asked");
    big.more = 1;
    let (h, m) = open(&big.cfg);
    assert_eq!(h, -libc::EINVAL);
    assert!(m.contains("byte 24 of 32 is set"), "{m}");
    let (h, m) = open(&fgds_config {
        reserved: 5,
        ..sized
    });
    assert_eq!(h, -libc::EINVAL);
    assert!(m.contains("reserved must be 0"), "{m}");
}

/// The version call, the header's macro, and the shared library's soname.
#[test]
fn version_and_soname() {
    let v = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|n| n.parse::<u32>().unwrap())
        .fold(0, |a, n| a * 100 + n);
    assert_eq!(fgds_version(), v);
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let lib = [deps.join("libfgds.so"), deps.join("../libfgds.so")]
        .into_iter()
        .find(|p| p.exists())
        .expect("libfgds.so built with the tests");
    let out = std::process::Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .expect("readelf (binutils)");
    let d = String::from_utf8_lossy(&out.stdout);
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    assert!(
        d.contains(&format!("Library soname: [libfgds.so.{major}]")),
        "{d}"
    );
}
