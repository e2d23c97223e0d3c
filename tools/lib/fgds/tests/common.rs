#![allow(dead_code)]
use fgds::{Buffer, Config, FileHandle, IoParams, IoTarget, Op};
use std::path::PathBuf;
use std::sync::Arc;

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

/// A file of `len` random bytes (`seed`) in a new temporary folder, opened
/// with [`batch_config`]: the folder (to keep), the bytes and the handle.
pub fn batch_file(len: usize, seed: u64) -> (tempfile::TempDir, Vec<u8>, Arc<FileHandle>) {
    let d = tmpdir();
    let data = random_bytes(len, seed);
    let p = file_with(&d, "f", &data);
    (d, data, Arc::new(open_rw(&p, batch_config())))
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

/// The configuration of the batch tests: 64 KiB chunks, 8 in flight.
pub fn batch_config() -> Config {
    Config {
        chunk_size: 64 * 1024,
        queue_depth: 8,
        ..Config::default()
    }
}

/// A plain batch request of `size` bytes at `buf_off` of `b`.
pub fn plain_request(
    f: &Arc<FileHandle>,
    b: &Arc<Buffer>,
    cookie: u64,
    op: Op,
    file_off: u64,
    buf_off: usize,
    size: usize,
) -> IoParams {
    IoParams {
        cookie,
        file: f.clone(),
        op,
        file_off,
        target: IoTarget::Plain {
            buffer: b.clone(),
            buf_off,
            size,
        },
    }
}

/// Block `i` of 4 KiB of the file to or from block `i` of `b` (cookie `i`).
pub fn block_request(f: &Arc<FileHandle>, b: &Arc<Buffer>, op: Op, i: usize) -> IoParams {
    plain_request(f, b, i as u64, op, (i * 4096) as u64, i * 4096, 4096)
}
