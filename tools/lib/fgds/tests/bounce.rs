//! The bounce path's reads (memory the kernel may not be handed: GPU memory
//! without an fgds mapping, here host memory from `alloc_host_bounced`,
//! which takes exactly the same path with a memcpy as the last copy): with
//! O_DIRECT into the bounce buffers when the page cache does not hold the
//! range, through the page cache when it does, on real files of the root
//! ext4 (/var/tmp), tmpfs (/dev/shm) and sysfs (which refuses O_DIRECT).
//! Every byte is checked against a position-dependent pattern.
mod common;
use common::*;
use fgds::{BounceRead, Buffer, Config, FileHandle, Segment};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Byte `i` of the test files: differs at every shift of a block or page.
fn pattern(i: u64) -> u8 {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i >> 9) ^ (i >> 17);
    (x >> 56) as u8 ^ (i as u8)
}

fn pattern_file(dir: &tempfile::TempDir, name: &str, len: usize) -> std::path::PathBuf {
    let data: Vec<u8> = (0..len as u64).map(pattern).collect();
    file_with(dir, name, &data)
}

fn cfg(bounce_read: BounceRead) -> Config {
    Config {
        chunk_size: 64 * 1024,
        bounce_chunk_size: 64 * 1024,
        queue_depth: 8,
        parallel: 1,
        bounce_read,
        ..Config::default()
    }
}

fn open_ro(p: &Path, c: Config) -> FileHandle {
    FileHandle::open(p, libc::O_RDONLY, 0, c).expect("open")
}

/// Drops the file's pages from the page cache (it is clean after fsync);
/// checked with cachestat(2).
fn evict(p: &Path) {
    let f = std::fs::File::open(p).expect("open");
    // SAFETY: valid descriptor.
    assert_eq!(unsafe { libc::fsync(f.as_raw_fd()) }, 0);
    for _ in 0..10 {
        // SAFETY: valid descriptor; advice on the whole file.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0);
        let c = fgds::sys::cachestat(f.as_raw_fd(), 0, 0).expect("cachestat");
        if c.nr_cache == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("the page cache kept pages of {}", p.display());
}

/// Reads the file's first `len` bytes through the page cache, without
/// readahead.
fn warm_up(p: &Path, len: usize) {
    use std::io::Read;
    let mut v = vec![0u8; len];
    let mut f = std::fs::File::open(p).expect("open");
    // SAFETY: valid descriptor.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    assert_eq!(r, 0);
    f.read_exact(&mut v).expect("read");
}

fn cached_pages(p: &Path) -> u64 {
    let f = std::fs::File::open(p).expect("open");
    fgds::sys::cachestat(f.as_raw_fd(), 0, 0)
        .expect("cachestat")
        .nr_cache
}

/// Reads `size` at `off` into `b` at `boff` and checks every byte of the
/// buffer: the pattern where the file has data, 0xa5 elsewhere.
fn read_check(f: &FileHandle, b: &Buffer, boff: usize, size: usize, off: u64, flen: u64) -> usize {
    b.write_bytes(0, &vec![0xa5u8; b.len()]).expect("fill");
    let n = f.read(b, boff, size, off).expect("read");
    let want = flen.saturating_sub(off).min(size as u64) as usize;
    assert_eq!(n, want, "read {size} at {off} of a {flen}-byte file");
    let got = b.read_bytes(0, b.len()).expect("read back");
    for (i, &g) in got.iter().enumerate() {
        let w = if i >= boff && i < boff + n {
            pattern(off + (i - boff) as u64)
        } else {
            0xa5
        };
        assert_eq!(
            g, w,
            "byte {i} of the buffer (read {size} at {off} into {boff})"
        );
    }
    n
}

#[test]
fn cachestat_counts_the_page_cache() {
    let d = tmpdir();
    let p = pattern_file(&d, "f", 1 << 20);
    assert!(cached_pages(&p) > 0, "a file just written is cached");
    evict(&p);
    assert_eq!(cached_pages(&p), 0);
    let _ = std::fs::read(&p).expect("read");
    assert_eq!(cached_pages(&p), 256);
}

#[test]
fn cold_reads_go_o_direct_warm_ones_through_the_page_cache() {
    let d = tmpdir();
    let len = 3 << 20;
    let p = pattern_file(&d, "f", len);
    let b = Buffer::alloc_host_bounced(len).expect("alloc");
    evict(&p);
    let f = open_ro(&p, cfg(BounceRead::Auto));
    assert!(f.is_direct());
    read_check(&f, &b, 0, len, 0, len as u64);
    let s = f.stats();
    assert_eq!(
        (s.bounce_bytes, s.bounce_direct_bytes, s.direct_bytes),
        (len as u64, len as u64, 0),
        "cold: every byte O_DIRECT into the bounce buffers"
    );
    assert_eq!(cached_pages(&p), 0, "the page cache stayed out of it");
    // warm: through the page cache
    let _ = std::fs::read(&p).expect("read");
    f.reset_stats();
    read_check(&f, &b, 0, len, 0, len as u64);
    let s = f.stats();
    assert_eq!((s.bounce_bytes, s.bounce_direct_bytes), (len as u64, 0));
    // the knob wins either way
    let fd = open_ro(&p, cfg(BounceRead::Direct));
    read_check(&fd, &b, 0, len, 0, len as u64);
    assert_eq!(fd.stats().bounce_direct_bytes, len as u64);
    evict(&p);
    let fb = open_ro(&p, cfg(BounceRead::Buffered));
    read_check(&fb, &b, 0, len, 0, len as u64);
    assert_eq!(fb.stats().bounce_direct_bytes, 0);
}

#[test]
fn partly_cached_ranges_are_decided_by_how_much_is_cached() {
    let d = tmpdir();
    let len = 1 << 20;
    let p = pattern_file(&d, "f", len);
    let b = Buffer::alloc_host_bounced(len).expect("alloc");
    let f = open_ro(&p, cfg(BounceRead::Auto));
    // a quarter cached: O_DIRECT
    evict(&p);
    warm_up(&p, len / 4);
    assert!(
        (64..128).contains(&cached_pages(&p)),
        "{}",
        cached_pages(&p)
    );
    read_check(&f, &b, 0, len, 0, len as u64);
    assert_eq!(f.stats().bounce_direct_bytes, len as u64);
    // three quarters cached: the page cache
    evict(&p);
    warm_up(&p, len * 3 / 4);
    assert!((192..=256).contains(&cached_pages(&p)));
    f.reset_stats();
    read_check(&f, &b, 0, len, 0, len as u64);
    assert_eq!(f.stats().bounce_direct_bytes, 0);
}

#[test]
fn odd_offsets_and_lengths_are_exact() {
    let d = tmpdir();
    let flen = (1 << 20) + 12_345;
    let p = pattern_file(&d, "f", flen);
    let f = open_ro(&p, cfg(BounceRead::Direct));
    let b = Buffer::alloc_host_bounced(300_000).expect("alloc");
    let cases: &[(u64, usize, usize)] = &[
        (0, 4096, 0),
        (0, 1, 0),
        (1, 1, 3),
        (511, 2, 1),
        (4095, 4098, 7),
        (7, 65_536, 0),
        (65_535, 65_538, 11),
        (100_000, 131_071, 4096),
        (12_345, 200_001, 99),
        (65_536 * 3 - 1, 3, 0),
        (4096, 4096 * 50, 1),
    ];
    for &(off, size, boff) in cases {
        read_check(&f, &b, boff, size, off, flen as u64);
    }
    let s = f.stats();
    assert_eq!(s.bounce_direct_bytes, s.bounce_bytes);
    assert!(s.bounce_direct_bytes > 0);
}

#[test]
fn the_end_of_the_file_is_exact() {
    let d = tmpdir();
    let flen = 300_001u64;
    let p = pattern_file(&d, "f", flen as usize);
    let b = Buffer::alloc_host_bounced(70_000).expect("alloc");
    for mode in [BounceRead::Direct, BounceRead::Buffered, BounceRead::Auto] {
        evict(&p);
        let f = open_ro(&p, cfg(mode));
        // across the end, unaligned start and end
        assert_eq!(read_check(&f, &b, 5, 65_000, flen - 1001, flen), 1001);
        // the last byte, then at and beyond the end
        assert_eq!(read_check(&f, &b, 0, 4096, flen - 1, flen), 1);
        assert_eq!(read_check(&f, &b, 0, 4096, flen, flen), 0);
        assert_eq!(read_check(&f, &b, 0, 100, flen + 5000, flen), 0);
        // a whole chunk ending exactly at the end
        assert_eq!(read_check(&f, &b, 0, 65_536, flen - 65_536, flen), 65_536);
    }
}

#[test]
fn a_split_call_is_exact_on_every_thread() {
    let d = tmpdir();
    let flen = (8 << 20) + 777;
    let p = pattern_file(&d, "f", flen);
    let b = Buffer::alloc_host_bounced(flen + 10).expect("alloc");
    for mode in [BounceRead::Direct, BounceRead::Auto] {
        evict(&p);
        let c = Config {
            parallel: 4,
            split_size: 256 * 1024,
            bounce_split_size: 256 * 1024,
            ..cfg(mode)
        };
        let f = open_ro(&p, c);
        read_check(&f, &b, 3, flen + 7, 0, flen as u64);
        read_check(&f, &b, 0, flen - 4097, 4097, flen as u64);
        let s = f.stats();
        assert_eq!(s.bounce_direct_bytes, s.bounce_bytes, "{mode:?}");
    }
}

#[test]
fn readv_of_small_segments_is_one_read() {
    let d = tmpdir();
    let flen = 1 << 20;
    let p = pattern_file(&d, "f", flen);
    let bufs: Vec<Buffer> = (0..4)
        .map(|_| Buffer::alloc_host_bounced(20_000).expect("alloc"))
        .collect();
    for mode in [BounceRead::Direct, BounceRead::Buffered] {
        for (off, sizes) in [
            (0u64, [16_384usize, 16_384, 16_384, 16_384]),
            (1_000_001, [1, 4095, 10_000, 3]),
            (flen as u64 - 20_000, [5000, 6000, 7000, 9000]),
        ] {
            let f = open_ro(&p, cfg(mode));
            for b in &bufs {
                b.write_bytes(0, &[0x5a; 20_000]).expect("fill");
            }
            let segs: Vec<Segment<'_>> = bufs
                .iter()
                .zip(sizes)
                .enumerate()
                .map(|(i, (b, size))| Segment {
                    buffer: b,
                    offset: i * 7,
                    size,
                })
                .collect();
            let n = f.readv(&segs, off).expect("readv");
            let total: usize = sizes.iter().sum();
            let want = (flen as u64 - off).min(total as u64) as usize;
            assert_eq!(n, want);
            let mut at = off;
            let mut left = n;
            for (i, s) in segs.iter().enumerate() {
                let got = s.buffer.read_bytes(0, 20_000).expect("read back");
                let k = s.size.min(left);
                for (j, &g) in got.iter().enumerate() {
                    let w = if j >= s.offset && j < s.offset + k {
                        pattern(at + (j - s.offset) as u64)
                    } else {
                        0x5a
                    };
                    assert_eq!(g, w, "segment {i} byte {j} ({mode:?}, at {off})");
                }
                at += s.size as u64;
                left -= k;
            }
            let st = f.stats();
            assert_eq!(st.bounce_ops, 1, "the segments share one read ({mode:?})");
            let direct = if mode == BounceRead::Direct { n } else { 0 };
            assert_eq!(st.bounce_direct_bytes, direct as u64);
        }
    }
}

#[test]
fn writes_from_bounced_memory_stay_buffered_and_exact() {
    let d = tmpdir();
    let p = d.path().join("w");
    let f = FileHandle::open(
        &p,
        libc::O_RDWR | libc::O_CREAT,
        0o644,
        cfg(BounceRead::Direct),
    )
    .expect("open");
    let len = 200_003;
    let b = Buffer::alloc_host_bounced(len).expect("alloc");
    let data: Vec<u8> = (0..len as u64).map(|i| pattern(i + 5)).collect();
    b.write_bytes(0, &data).expect("fill");
    assert_eq!(f.write(&b, 0, len, 5).expect("write"), len);
    let back = std::fs::read(&p).expect("read");
    assert_same(&back[5..], &data);
    assert_eq!(f.stats().bounce_direct_bytes, 0);
    // and read back cold through the O_DIRECT bounce
    evict(&p);
    let c = Buffer::alloc_host_bounced(len).expect("alloc");
    assert_eq!(f.read(&c, 0, len, 5).expect("read"), len);
    assert_same(&c.read_bytes(0, len).expect("read back"), &data);
    assert_eq!(f.stats().bounce_direct_bytes, len as u64);
}

#[test]
fn tmpfs_is_read_exactly_whichever_way_it_takes() {
    let d = tempfile::Builder::new()
        .prefix("fgds-test")
        .tempdir_in("/dev/shm")
        .expect("tempdir");
    let flen = 200_000 + 3;
    let p = pattern_file(&d, "f", flen);
    let b = Buffer::alloc_host_bounced(flen).expect("alloc");
    for mode in [BounceRead::Direct, BounceRead::Auto, BounceRead::Buffered] {
        let f = open_ro(&p, cfg(mode));
        read_check(&f, &b, 0, flen, 0, flen as u64);
        read_check(&f, &b, 1, flen - 9, 7, flen as u64);
        let s = f.stats();
        if mode != BounceRead::Direct || !f.is_direct() {
            assert_eq!(s.bounce_direct_bytes, 0, "{mode:?}");
        }
    }
}

#[test]
fn a_file_system_that_refuses_o_direct_falls_back_silently() {
    // sysfs refuses O_DIRECT at open (EINVAL)
    let p = Path::new("/sys/devices/system/cpu/online");
    let want = std::fs::read(p).expect("read sysfs");
    let f = open_ro(p, cfg(BounceRead::Direct));
    assert!(!f.is_direct());
    assert!(
        f.no_direct_reason().is_some_and(|r| r.contains("O_DIRECT")),
        "{:?}",
        f.no_direct_reason()
    );
    let b = Buffer::alloc_host_bounced(4096).expect("alloc");
    let n = f.read(&b, 0, 4096, 0).expect("read");
    assert_eq!(n, want.len());
    assert_same(&b.read_bytes(0, n).expect("read back"), &want);
    assert_eq!(f.stats().bounce_direct_bytes, 0);
    // and no O_DIRECT descriptor at all (Config::disable_direct)
    let d = tmpdir();
    let q = pattern_file(&d, "f", 70_001);
    evict(&q);
    let f = open_ro(
        &q,
        Config {
            disable_direct: true,
            ..cfg(BounceRead::Direct)
        },
    );
    let b = Buffer::alloc_host_bounced(70_001).expect("alloc");
    read_check(&f, &b, 0, 70_001, 0, 70_001);
    assert_eq!(f.stats().bounce_direct_bytes, 0);
}
