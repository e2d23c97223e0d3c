mod common;
use common::*;
use fgds::{Buffer, Config, Error, FileHandle, Segment};

fn small_cfg() -> Config {
    Config {
        chunk_size: 64 * 1024,
        queue_depth: 8,
        ..Config::default()
    }
}

#[test]
fn var_tmp_supports_o_direct() {
    let d = tmpdir();
    let p = file_with(&d, "f", &[0u8; 4096]);
    let f = open_rw(&p, Config::default());
    assert!(f.is_direct(), "{:?}", f.no_direct_reason());
}

#[test]
fn aligned_read_is_direct_and_exact() {
    let d = tmpdir();
    let data = random_bytes(1 << 20, 1);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, small_cfg());
    let b = host(1 << 20);
    assert_eq!(f.read(&b, 0, 1 << 20, 0).unwrap(), 1 << 20);
    assert_same(&b.read_bytes(0, 1 << 20).unwrap(), &data);
    let s = f.stats();
    assert_eq!(s.direct_bytes, 1 << 20);
    assert_eq!(s.bounce_bytes, 0);
    assert_eq!(s.fallbacks, 0);
    assert_eq!(s.direct_ops, 16, "1 MiB in 64 KiB chunks");
}

#[test]
fn unaligned_offsets_and_sizes_read() {
    let d = tmpdir();
    let data = random_bytes(300_000, 2);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, small_cfg());
    let b = host(300_000 + 8192);
    let chunk = 64 * 1024;
    let cases: &[(usize, usize)] = &[
        (1, 1),
        (0, 4095),
        (1, 4096),
        (4095, 2),
        (4097, chunk - 1),
        (4096, chunk),
        (4096, chunk + 1),
        (100, 2 * chunk + 4096 + 7),
        (12345, 200_000),
        (0, 300_000),
    ];
    for &(off, len) in cases {
        // Same file offset and buffer offset parity (direct middle possible).
        let boff = off % 4096;
        let n = f.read(&b, boff, len, off as u64).unwrap();
        assert_eq!(n, len, "off {off} len {len}");
        assert_same(&b.read_bytes(boff, len).unwrap(), &data[off..off + len]);
    }
    assert!(f.stats().direct_bytes > 0);
    assert!(f.stats().bounce_bytes > 0);
}

#[test]
fn unaligned_writes_round_trip() {
    let d = tmpdir();
    let orig = random_bytes(256 * 1024, 3);
    let p = file_with(&d, "f", &orig);
    let f = open_rw(&p, small_cfg());
    let mut expect = orig.clone();
    let b = host(256 * 1024);
    for (i, &(off, len)) in [
        (1usize, 10usize),
        (4000, 9000),
        (65535, 65538),
        (131072, 4096),
        (200_001, 56_000),
    ]
    .iter()
    .enumerate()
    {
        let src = random_bytes(len, 100 + i as u64);
        let boff = off % 4096;
        b.write_bytes(boff, &src).unwrap();
        assert_eq!(f.write(&b, boff, len, off as u64).unwrap(), len);
        expect[off..off + len].copy_from_slice(&src);
    }
    let on_disk = std::fs::read(&p).unwrap();
    assert_same(&on_disk, &expect);
    // and read back through the library
    let rb = host(256 * 1024);
    assert_eq!(f.read(&rb, 0, 256 * 1024, 0).unwrap(), 256 * 1024);
    assert_same(&rb.read_bytes(0, 256 * 1024).unwrap(), &expect);
}

#[test]
fn write_extends_file_and_reads_back() {
    let d = tmpdir();
    let p = d.path().join("new");
    let f = FileHandle::open(
        &p,
        libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        0o600,
        small_cfg(),
    )
    .unwrap();
    let data = random_bytes(1_000_003, 4);
    let b = host(data.len());
    b.write_bytes(0, &data).unwrap();
    assert_eq!(f.write(&b, 0, data.len(), 0).unwrap(), data.len());
    assert_eq!(f.size().unwrap(), data.len() as u64);
    assert_same(&std::fs::read(&p).unwrap(), &data);
}

#[test]
fn short_read_at_eof() {
    let d = tmpdir();
    let data = random_bytes(10_000, 5);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, small_cfg());
    let b = host(1 << 20);
    assert_eq!(f.read(&b, 0, 1 << 20, 0).unwrap(), 10_000);
    assert_same(&b.read_bytes(0, 10_000).unwrap(), &data);
    assert_eq!(f.read(&b, 0, 4096, 8192).unwrap(), 10_000 - 8192);
    assert_same(&b.read_bytes(0, 10_000 - 8192).unwrap(), &data[8192..]);
    assert_eq!(f.read(&b, 0, 4096, 10_000).unwrap(), 0);
    assert_eq!(f.read(&b, 0, 4096, 1 << 30).unwrap(), 0);
    assert_eq!(f.read(&b, 3, 5000, 9999).unwrap(), 1);
    assert_eq!(b.read_bytes(3, 1).unwrap()[0], data[9999]);
}

#[test]
fn sizes_around_chunk_boundaries() {
    let d = tmpdir();
    let chunk = 64 * 1024;
    let data = random_bytes(4 * chunk + 8192, 6);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, small_cfg());
    let b = host(data.len());
    for len in [
        chunk - 4096,
        chunk - 1,
        chunk,
        chunk + 1,
        chunk + 4096,
        2 * chunk,
        3 * chunk + 511,
        4 * chunk + 8192,
    ] {
        b.write_bytes(0, &vec![0xAA; len]).unwrap();
        assert_eq!(f.read(&b, 0, len, 0).unwrap(), len);
        assert_same(&b.read_bytes(0, len).unwrap(), &data[..len]);
    }
}

#[test]
fn io_uring_and_sync_backends_agree() {
    let d = tmpdir();
    let data = random_bytes(500_000, 7);
    let p = file_with(&d, "f", &data);
    for use_io_uring in [true, false] {
        let f = open_rw(
            &p,
            Config {
                use_io_uring,
                ..small_cfg()
            },
        );
        let b = host(500_000);
        assert_eq!(f.read(&b, 17, 400_000, 17).unwrap(), 400_000);
        assert_same(&b.read_bytes(17, 400_000).unwrap(), &data[17..400_017]);
    }
}

#[test]
fn user_pointer_buffer_misaligned_falls_back() {
    let d = tmpdir();
    let data = random_bytes(200_000, 8);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, small_cfg());
    let mut mem = vec![0u8; 200_000 + 64];
    // An odd address: no O_DIRECT possible for any file offset.
    let base = mem.as_mut_ptr();
    let len = 150_000;
    let skew = (base as usize + 1) % 2;
    let b = unsafe { Buffer::from_host_ptr(base.add(skew), len) }.unwrap();
    assert_eq!(f.read(&b, 0, len, 0).unwrap(), len);
    assert_same(&b.read_bytes(0, len).unwrap(), &data[..len]);
    let s = f.stats();
    assert_eq!(s.direct_bytes, 0);
    assert_eq!(s.bounce_bytes, len as u64);
    assert_eq!(s.fallbacks, 1);
    assert!(s.last_fallback_reason.unwrap().contains("aligned"));
    // strict: refused with a precise error
    let fs = open_rw(
        &p,
        Config {
            strict: true,
            ..small_cfg()
        },
    );
    match fs.read(&b, 0, 4096, 0) {
        Err(Error::Misaligned {
            what: "buffer address",
            ..
        }) => {}
        other => panic!("expected Misaligned, got {other:?}"),
    }
    drop(b);
    drop(mem);
}

#[test]
fn no_o_direct_falls_back_or_fails_in_strict() {
    let d = tmpdir();
    let data = random_bytes(100_000, 9);
    let p = file_with(&d, "f", &data);
    let f = open_rw(
        &p,
        Config {
            disable_direct: true,
            ..small_cfg()
        },
    );
    assert!(!f.is_direct());
    let b = host(100_000);
    assert_eq!(f.read(&b, 0, 100_000, 0).unwrap(), 100_000);
    assert_same(&b.read_bytes(0, 100_000).unwrap(), &data);
    let s = f.stats();
    assert_eq!(
        (s.direct_bytes, s.bounce_bytes, s.fallbacks),
        (0, 100_000, 1)
    );
    let fs = open_rw(
        &p,
        Config {
            disable_direct: true,
            strict: true,
            ..small_cfg()
        },
    );
    assert!(matches!(
        fs.read(&b, 0, 4096, 0),
        Err(Error::P2pUnavailable { .. })
    ));
    assert_eq!(fs.stats().errors, 1);
}

#[test]
fn dev_shm_tmpfs_reports_its_path() {
    // tmpfs accepts O_DIRECT since Linux 6.6; whichever path runs, data
    // must be exact and the stats must account for every byte.
    let d = tempfile::Builder::new().tempdir_in("/dev/shm").unwrap();
    let data = random_bytes(70_000, 10);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, small_cfg());
    let b = host(70_000);
    assert_eq!(f.read(&b, 0, 70_000, 0).unwrap(), 70_000);
    assert_same(&b.read_bytes(0, 70_000).unwrap(), &data);
    let s = f.stats();
    assert_eq!(s.direct_bytes + s.bounce_bytes, 70_000);
    if !f.is_direct() {
        assert_eq!(s.fallbacks, 1);
    }
}

#[test]
fn strict_alignment_errors() {
    let d = tmpdir();
    let p = file_with(&d, "f", &random_bytes(65536, 11));
    let f = open_rw(
        &p,
        Config {
            strict: true,
            ..small_cfg()
        },
    );
    let b = host(65536);
    assert!(matches!(
        f.read(&b, 0, 4096, 1),
        Err(Error::Misaligned {
            what: "file offset",
            ..
        })
    ));
    assert!(matches!(
        f.read(&b, 0, 100, 0),
        Err(Error::Misaligned { what: "size", .. })
    ));
    assert_eq!(f.read(&b, 0, 8192, 4096).unwrap(), 8192);
}

#[test]
fn bad_arguments() {
    let d = tmpdir();
    let p = file_with(&d, "f", &random_bytes(8192, 12));
    let f = open_rw(&p, small_cfg());
    let b = host(8192);
    match f.read(&b, 4096, 8192, 0) {
        Err(e @ Error::OutOfBounds { .. }) => assert_eq!(e.errno(), libc::ERANGE),
        o => panic!("{o:?}"),
    }
    assert!(matches!(
        f.read(&b, usize::MAX, 1, 0),
        Err(Error::OutOfBounds { .. })
    ));
    assert_eq!(f.read(&b, 0, 0, 0).unwrap(), 0);
    assert!(matches!(
        Buffer::alloc_host(0),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        unsafe { Buffer::from_host_ptr(std::ptr::null_mut(), 10) },
        Err(Error::InvalidArgument(_))
    ));
    for bad in [
        Config {
            chunk_size: 1000,
            ..Config::default()
        },
        Config {
            queue_depth: 0,
            ..Config::default()
        },
    ] {
        assert!(matches!(
            FileHandle::open(&p, libc::O_RDONLY, 0, bad),
            Err(Error::InvalidArgument(_))
        ));
    }
    let e = FileHandle::open(
        d.path().join("missing"),
        libc::O_RDONLY,
        0,
        Config::default(),
    )
    .unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT);
    assert!(matches!(
        FileHandle::open(d.path(), libc::O_RDONLY, 0, Config::default()),
        Err(Error::InvalidArgument(_))
    ));
    // read-only handle refuses writes with EBADF
    let ro = FileHandle::open(&p, libc::O_RDONLY, 0, small_cfg()).unwrap();
    assert_eq!(ro.write(&b, 0, 4096, 0).unwrap_err().errno(), libc::EBADF);
}

#[test]
fn bad_and_closed_fds() {
    assert_eq!(
        FileHandle::from_fd(-1, Config::default())
            .unwrap_err()
            .errno(),
        libc::EBADF
    );
    let d = tmpdir();
    let p = file_with(&d, "f", &random_bytes(8192, 13));
    let file = std::fs::File::open(&p).unwrap();
    let raw = std::os::fd::IntoRawFd::into_raw_fd(file);
    let h = FileHandle::from_fd(raw, small_cfg()).unwrap();
    unsafe { libc::close(raw) };
    // the handle holds its own descriptors: still works after the caller closes
    let b = host(8192);
    assert_eq!(h.read(&b, 0, 8192, 0).unwrap(), 8192);
    assert_same(&b.read_bytes(0, 8192).unwrap(), &std::fs::read(&p).unwrap());
    // an fd number far above any open one is certainly closed
    assert_eq!(
        FileHandle::from_fd(999_999, Config::default())
            .unwrap_err()
            .errno(),
        libc::EBADF
    );
}

#[test]
fn concurrent_reads_from_threads() {
    let d = tmpdir();
    let data = random_bytes(1 << 20, 14);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, small_cfg());
    std::thread::scope(|s| {
        for t in 0..4usize {
            let f = &f;
            let data = &data;
            s.spawn(move || {
                let b = host(256 * 1024);
                let off = t * 256 * 1024 + t;
                let len = (256 * 1024 - 2 * t).min(data.len() - off);
                assert_eq!(f.read(&b, 0, len, off as u64).unwrap(), len);
                assert_same(&b.read_bytes(0, len).unwrap(), &data[off..off + len]);
            });
        }
    });
    let _ = Segment {
        buffer: &host(1),
        offset: 0,
        size: 1,
    };
}

/// A descriptor the caller opened with O_DIRECT (as torch.cuda.gds's GdsFile does): unaligned
/// edges still go through the page cache, not through the O_DIRECT descriptor.
#[test]
fn from_o_direct_fd_handles_unaligned_io() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let d = tmpdir();
    let orig = random_bytes(64 * 1024, 7);
    let p = file_with(&d, "f", &orig);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    let f = FileHandle::from_fd(file.as_raw_fd(), small_cfg()).unwrap();
    let src = random_bytes(4000, 8);
    let b = host(8192);
    b.write_bytes(3, &src).unwrap();
    assert_eq!(f.write(&b, 3, 4000, 4096).unwrap(), 4000);
    let mut expect = orig.clone();
    expect[4096..8096].copy_from_slice(&src);
    assert_same(&std::fs::read(&p).unwrap(), &expect);
    let rb = host(8192);
    assert_eq!(f.read(&rb, 5, 4000, 4096).unwrap(), 4000);
    assert_same(&rb.read_bytes(5, 4000).unwrap(), &src);
}

/// Small parts and four threads: one call runs on several threads.
fn split_cfg() -> Config {
    Config {
        chunk_size: 64 * 1024,
        queue_depth: 4,
        parallel: 4,
        split_size: 128 * 1024,
        ..Config::default()
    }
}

#[test]
fn split_call_reads_and_writes_every_byte() {
    let d = tmpdir();
    let len = 3_000_000 + 4096 * 3 + 123; // parts, an unaligned tail
    let data = random_bytes(len, 21);
    let p = file_with(&d, "f", &data);
    for direct in [true, false] {
        let f = open_rw(
            &p,
            Config {
                disable_direct: !direct,
                ..split_cfg()
            },
        );
        let b = host(len + 8192);
        // unaligned file offset and buffer offset: bounce edges, direct middle
        assert_eq!(f.read(&b, 7, len - 7, 7).unwrap(), len - 7);
        assert_same(&b.read_bytes(7, len - 7).unwrap(), &data[7..]);
        let s = f.stats();
        assert_eq!(s.read_bytes, (len - 7) as u64);
        assert_eq!(s.direct_bytes + s.bounce_bytes, (len - 7) as u64);
        assert_eq!(s.fallbacks, u64::from(!direct), "{s:?}");
        assert!(!direct || s.direct_bytes > 2_900_000, "{s:?}");
    }
    // a split write, read back
    let q = d.path().join("w");
    let f = open_rw(&q, split_cfg());
    let src = host(len);
    src.write_bytes(0, &data).unwrap();
    assert_eq!(f.write(&src, 0, len, 0).unwrap(), len);
    assert_same(&std::fs::read(&q).unwrap(), &data);
    assert_eq!(f.stats().write_bytes, len as u64);
}

#[test]
fn split_call_stops_at_end_of_file() {
    let d = tmpdir();
    let len = 1_000_000;
    let data = random_bytes(len, 22);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, split_cfg());
    // asks for 2 MiB from 4096: the parts past the end read nothing
    let b = host(2 << 20);
    assert_eq!(f.read(&b, 0, 2 << 20, 4096).unwrap(), len - 4096);
    assert_same(&b.read_bytes(0, len - 4096).unwrap(), &data[4096..]);
    // entirely past the end
    assert_eq!(f.read(&b, 0, 1 << 20, 4 << 20).unwrap(), 0);
}

#[test]
fn split_call_reports_a_failed_part() {
    let d = tmpdir();
    let data = random_bytes(1 << 20, 23);
    let p = file_with(&d, "f", &data);
    // read-only file: a split write fails with EBADF, named, and counted once
    let f = FileHandle::open(&p, libc::O_RDONLY, 0, split_cfg()).unwrap();
    let b = host(1 << 20);
    let e = f.write(&b, 0, 1 << 20, 0).unwrap_err();
    assert_eq!(e.errno(), libc::EBADF, "{e}");
    assert_eq!(f.stats().errors, 1);
    assert_same(&std::fs::read(&p).unwrap(), &data);
}

#[test]
fn split_vectored_fallback_reads_every_segment() {
    let d = tmpdir();
    let len = 1_500_000;
    let data = random_bytes(len, 24);
    let p = file_with(&d, "f", &data);
    let f = open_rw(
        &p,
        Config {
            disable_direct: true,
            ..split_cfg()
        },
    );
    let bufs: Vec<Buffer> = (0..5).map(|_| host(400_000)).collect();
    let sizes = [300_000usize, 1, 400_000, 299_999, 400_000];
    let segs: Vec<Segment<'_>> = bufs
        .iter()
        .zip(sizes)
        .map(|(b, size)| Segment {
            buffer: b,
            offset: 0,
            size,
        })
        .collect();
    let total: usize = sizes.iter().sum();
    assert_eq!(f.readv(&segs, 11).unwrap(), total);
    let mut off = 11;
    for (b, size) in bufs.iter().zip(sizes) {
        assert_same(&b.read_bytes(0, size).unwrap(), &data[off..off + size]);
        off += size;
    }
    let s = f.stats();
    assert_eq!((s.read_bytes, s.fallbacks), (total as u64, 1));
    // short at the end of the file, in the middle of a segment
    assert_eq!(f.readv(&segs, (len - 500_000) as u64).unwrap(), 500_000);
}
