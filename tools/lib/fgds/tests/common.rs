#![allow(dead_code)]
use fgds::{Buffer, Config, FileHandle};
use std::path::PathBuf;

pub fn tmpdir() -> tempfile::TempDir {
    // /var/tmp is on the root ext4 here (O_DIRECT works); checked by a test.
    tempfile::Builder::new()
        .prefix("fgds-test")
        .tempdir_in("/var/tmp")
        .expect("tempdir")
}

/// Deterministic pseudo-random bytes (xorshift), different per seed.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

pub fn file_with(dir: &tempfile::TempDir, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, data).expect("write file");
    p
}

pub fn open_rw(p: &std::path::Path, cfg: Config) -> FileHandle {
    FileHandle::open(p, libc::O_RDWR | libc::O_CREAT, 0o644, cfg).expect("open")
}

pub fn host(len: usize) -> Buffer {
    Buffer::alloc_host(len).expect("alloc")
}

pub fn assert_same(a: &[u8], b: &[u8]) {
    assert_eq!(a.len(), b.len(), "length differs");
    if let Some(i) = a.iter().zip(b).position(|(x, y)| x != y) {
        panic!("first difference at byte {i}: {} != {}", a[i], b[i]);
    }
}
