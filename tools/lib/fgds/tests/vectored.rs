mod common;
use common::*;
use fgds::{engine::packed_requests, Buffer, Config, Error, Segment, FGDS_IOV_MAX};

/// `Segment { buffer, offset, size }`.
fn seg(buffer: &Buffer, offset: usize, size: usize) -> Segment<'_> {
    Segment {
        buffer,
        offset,
        size,
    }
}

fn cfg() -> Config {
    Config {
        chunk_size: 64 * 1024,
        queue_depth: 8,
        ..Config::default()
    }
}

#[test]
fn readv_scatters_exactly() {
    let d = tmpdir();
    let data = random_bytes(600_000, 21);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, cfg());
    let a = host(256 * 1024);
    let b = host(512 * 1024);
    let segs = [
        seg(&a, 4096, 8192),
        seg(&b, 0, 200 * 1024),
        seg(&a, 64 * 1024, 4096),
        seg(&a, 68 * 1024, 4096), // memory-contiguous with previous
        seg(&b, 300 * 1024, 100 * 1024),
    ];
    let total: usize = segs.iter().map(|s| s.size).sum();
    assert_eq!(f.readv(&segs, 4096).unwrap(), total);
    let mut off = 4096;
    for s in &segs {
        assert_same(
            &s.buffer.read_bytes(s.offset, s.size).unwrap(),
            &data[off..off + s.size],
        );
        off += s.size;
    }
    let st = f.stats();
    assert_eq!(st.direct_bytes, total as u64);
    assert_eq!(st.bounce_bytes, 0);
}

#[test]
fn writev_gathers_exactly_and_unaligned_segments_work() {
    let d = tmpdir();
    let p = d.path().join("w");
    let f = open_rw(&p, cfg());
    let a = host(100_000);
    let src = random_bytes(100_000, 22);
    a.write_bytes(0, &src).unwrap();
    // unaligned segments: go segment by segment with bounce edges
    let segs = [seg(&a, 3, 1000), seg(&a, 50_000, 30_001), seg(&a, 10, 7)];
    assert_eq!(f.writev(&segs, 5).unwrap(), 31_008);
    let disk = std::fs::read(&p).unwrap();
    let mut expect = vec![0u8; 5];
    expect.extend_from_slice(&src[3..1003]);
    expect.extend_from_slice(&src[50_000..80_001]);
    expect.extend_from_slice(&src[10..17]);
    assert_same(&disk, &expect);
}

#[test]
fn readv_short_at_eof() {
    let d = tmpdir();
    let data = random_bytes(12_288 + 100, 23);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, cfg());
    let a = host(64 * 1024);
    let segs = [seg(&a, 0, 8192), seg(&a, 16384, 8192), seg(&a, 32768, 8192)];
    assert_eq!(f.readv(&segs, 0).unwrap(), 12_288 + 100);
    assert_same(&a.read_bytes(0, 8192).unwrap(), &data[..8192]);
    assert_same(&a.read_bytes(16384, 4196).unwrap(), &data[8192..]);
}

#[test]
fn packing_merges_small_and_splits_large() {
    let a = host(8 << 20);
    // 1024 contiguous 4 KiB segments = 4 MiB of contiguous memory -> 64 KiB chunks
    let segs: Vec<Segment<'_>> = (0..1024).map(|i| seg(&a, i * 4096, 4096)).collect();
    assert_eq!(packed_requests(&segs, 64 * 1024), 64);
    assert_eq!(packed_requests(&segs, 8 << 20), 1);
    // non-contiguous small segments share requests up to UIO_MAXIOV
    let segs: Vec<Segment<'_>> = (0..1024).map(|i| seg(&a, i * 8192, 4096)).collect();
    assert_eq!(packed_requests(&segs, 8 << 20), 1);
    let big = [seg(&a, 0, 8 << 20)];
    assert_eq!(packed_requests(&big, 1 << 20), 8);
}

#[test]
fn vectored_limits_and_errors() {
    let d = tmpdir();
    let data = random_bytes(8 << 20, 24);
    let p = file_with(&d, "f", &data);
    let f = open_rw(&p, cfg());
    let a = host(8 << 20);
    let ok: Vec<Segment<'_>> = (0..FGDS_IOV_MAX).map(|i| seg(&a, i * 8192, 4096)).collect();
    assert_eq!(f.readv(&ok, 0).unwrap(), FGDS_IOV_MAX * 4096);
    for (i, s) in ok.iter().enumerate().step_by(97) {
        assert_same(
            &a.read_bytes(s.offset, 4096).unwrap(),
            &data[i * 4096..(i + 1) * 4096],
        );
    }
    let mut too_many = ok.clone();
    too_many.push(seg(&a, 0, 4096));
    match f.readv(&too_many, 0) {
        Err(
            e @ Error::TooManySegments {
                count: 1025,
                max: 1024,
            },
        ) => assert_eq!(e.errno(), libc::E2BIG),
        o => panic!("{o:?}"),
    }
    let oob = [seg(&a, 0, 4096), seg(&a, (8 << 20) - 4096, 8192)];
    match f.readv(&oob, 0) {
        Err(Error::Segment { index: 1, source }) => {
            assert!(matches!(*source, Error::OutOfBounds { .. }))
        }
        o => panic!("{o:?}"),
    }
    let zero = [seg(&a, 0, 0)];
    assert!(matches!(
        f.readv(&zero, 0),
        Err(Error::Segment { index: 0, .. })
    ));
    assert_eq!(f.readv(&[], 0).unwrap(), 0);
    let strict = open_rw(
        &p,
        Config {
            strict: true,
            ..cfg()
        },
    );
    let mis = [seg(&a, 0, 4096), seg(&a, 8192, 4096), seg(&a, 12_289, 4096)];
    match strict.readv(&mis, 0) {
        Err(Error::Segment { index: 2, source }) => {
            assert!(matches!(
                *source,
                Error::Misaligned {
                    what: "buffer address",
                    ..
                }
            ))
        }
        o => panic!("{o:?}"),
    }
    let mis_size = [seg(&a, 0, 4096), seg(&a, 8192, 100)];
    match strict.readv(&mis_size, 0) {
        Err(Error::Segment { index: 1, source }) => {
            assert!(matches!(*source, Error::Misaligned { what: "size", .. }))
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn vectored_fallback_without_o_direct() {
    let d = tmpdir();
    let data = random_bytes(40_000, 25);
    let p = file_with(&d, "f", &data);
    let f = open_rw(
        &p,
        Config {
            disable_direct: true,
            ..cfg()
        },
    );
    let a = host(65536);
    let segs = [seg(&a, 0, 4096), seg(&a, 8192, 30_000)];
    assert_eq!(f.readv(&segs, 100).unwrap(), 34_096);
    assert_same(&a.read_bytes(0, 4096).unwrap(), &data[100..4196]);
    assert_same(&a.read_bytes(8192, 30_000).unwrap(), &data[4196..34_196]);
    let s = f.stats();
    assert_eq!((s.direct_bytes, s.bounce_bytes), (0, 34_096));
    assert!(s.fallbacks >= 1);
    let strict = open_rw(
        &p,
        Config {
            disable_direct: true,
            strict: true,
            ..cfg()
        },
    );
    assert!(matches!(
        strict.readv(&segs[..1], 0),
        Err(Error::Segment { index: 0, .. })
    ));
}
