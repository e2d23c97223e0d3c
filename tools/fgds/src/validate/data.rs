//! The test data and the files that hold it: the seeded stream (the same
//! as the selftests' fgds_pattern.h) and the run's O_DIRECT scratch files,
//! made with O_EXCL and unlinked at once.

use fgds::Buffer;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The test data: byte p of stream `seed` is byte p % 8 (little endian) of
/// splitmix64(seed, p / 8), as tools/testing/selftests/fgds/fgds_pattern.h
/// (so the VM's host checker verifies it independently).
fn word(seed: u64, idx: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0xd1b5_4a32_d192_ed03)
        .wrapping_add(idx.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn pattern(buf: &mut [u8], seed: u64, pos: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        let p = pos + i as u64;
        *b = (word(seed, p >> 3) >> (8 * (p & 7))) as u8;
    }
}

pub(super) fn pattern_fast(buf: &mut [u8], seed: u64, pos: u64) {
    if pos % 8 != 0 {
        return pattern(buf, seed, pos);
    }
    let mut chunks = buf.chunks_exact_mut(8);
    let mut idx = pos / 8;
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, idx).to_le_bytes());
        idx += 1;
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    if n > 0 {
        rest.copy_from_slice(&word(seed, idx).to_le_bytes()[..n]);
    }
}

/// Offset of the first byte that differs from the stream.
pub(super) fn first_mismatch(buf: &[u8], seed: u64, pos: u64) -> Option<usize> {
    let mut want = vec![0u8; 1 << 20];
    for (k, chunk) in buf.chunks(1 << 20).enumerate() {
        let w = &mut want[..chunk.len()];
        pattern_fast(w, seed, pos + (k << 20) as u64);
        if w != chunk {
            let i = chunk.iter().zip(w.iter()).position(|(a, b)| a != b)?;
            return Some((k << 20) + i);
        }
    }
    None
}

// ---------------------------------------------------------------- files

/// A file this run made: O_EXCL, O_DIRECT, unlinked at once; reached by
/// others (KvikIO, gdsio) through /proc/PID/fd/N.
pub(super) struct TempFile {
    f: std::fs::File,
}

impl TempFile {
    pub(super) fn create(dir: &Path, tag: &str) -> Result<TempFile, String> {
        let path = dir.join(format!("fgds-validate-{}-{tag}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .map_err(|e| format!("create {} (O_EXCL, O_DIRECT): {e}", path.display()))?;
        std::fs::remove_file(&path).map_err(|e| format!("unlink {}: {e}", path.display()))?;
        Ok(TempFile { f })
    }

    pub(super) fn fd(&self) -> RawFd {
        self.f.as_raw_fd()
    }

    pub(super) fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), self.fd()))
    }

    /// Writes `len` bytes of stream `seed` with O_DIRECT from host memory.
    pub(super) fn fill(&self, len: u64, seed: u64) -> Result<(), String> {
        let chunk = 1usize << 20;
        let b = Buffer::alloc_host(chunk).map_err(|e| e.to_string())?;
        let mut data = vec![0u8; chunk];
        let mut off = 0u64;
        while off < len {
            let n = chunk.min((len - off) as usize);
            pattern_fast(&mut data[..n], seed, off);
            b.write_bytes(0, &data[..n]).map_err(|e| e.to_string())?;
            // SAFETY: b has chunk >= n bytes.
            let w = unsafe { libc::pwrite(self.fd(), b.base_addr() as *const _, n, off as i64) };
            if w != n as isize {
                return Err(format!(
                    "O_DIRECT write at {off}: {}",
                    std::io::Error::last_os_error()
                ));
            }
            off += n as u64;
        }
        // SAFETY: plain fd.
        if unsafe { libc::fsync(self.fd()) } != 0 {
            return Err(format!("fsync: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Reads `len` bytes at `off` with O_DIRECT into host memory.
    pub(super) fn read_host(&self, off: u64, len: usize) -> Result<Vec<u8>, String> {
        let b = Buffer::alloc_host(len).map_err(|e| e.to_string())?;
        let mut done = 0usize;
        while done < len {
            // SAFETY: b has len bytes.
            let r = unsafe {
                libc::pread(
                    self.fd(),
                    (b.base_addr() as *mut u8).add(done) as *mut _,
                    len - done,
                    (off + done as u64) as i64,
                )
            };
            if r <= 0 {
                return Err(format!(
                    "O_DIRECT read at {}: {}",
                    off + done as u64,
                    std::io::Error::last_os_error()
                ));
            }
            done += r as usize;
        }
        b.read_bytes(0, len).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same stream as fgds_pattern.h: the first 16 bytes of seed 0x1234
    /// as fgds_pattern_fill() writes them (printed by a C program).
    #[test]
    fn pattern_matches_the_selftests() {
        let mut b = [0u8; 16];
        pattern(&mut b, 0x1234, 0);
        assert_eq!(
            b,
            [132, 125, 178, 241, 249, 246, 124, 18, 56, 35, 3, 23, 25, 146, 231, 155]
        );
        let mut f = [0u8; 16];
        pattern_fast(&mut f, 0x1234, 0);
        assert_eq!(b, f);
        assert_eq!(
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            word(0x1234, 0)
        );
        let mut c = [0u8; 5];
        pattern(&mut c, 0x1234, 3);
        assert_eq!(c, b[3..8]);
        assert_eq!(first_mismatch(&b, 0x1234, 0), None);
        b[9] ^= 1;
        assert_eq!(first_mismatch(&b, 0x1234, 0), Some(9));
    }
}
