//! GPU memory through its CPU path (vendor runtime, vfio BAR mapping, or
//! the fgds mapping): fill, read back and compare; registration on an fgds
//! node; and UNREG with reads in flight (the teardown step).

use super::data::{first_mismatch, pattern, pattern_fast, TempFile};
use super::paths::errno_str;
use crate::gpumem::GpuMem;
use fgds::Buffer;
use std::os::fd::AsRawFd;
use std::time::Instant;

/// Copies `len` bytes of the GPU memory at `off` to the host through the
/// CPU path (or the fgds mapping `via` when there is none).
fn gpu_read(
    mem: &GpuMem,
    via: Option<(&Buffer, u64)>,
    off: u64,
    len: usize,
) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; len];
    match mem.read(off, &mut v) {
        Some(r) => r.map_err(|e| format!("read back through {}: {e}", mem.cpu_path))?,
        None => {
            let (b, base) = via.ok_or("no CPU path to the GPU memory")?;
            b.read_bytes_into((off - base) as usize, &mut v)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(v)
}

fn gpu_write(
    mem: &GpuMem,
    via: Option<(&Buffer, u64)>,
    off: u64,
    data: &[u8],
) -> Result<(), String> {
    match mem.write(off, data) {
        Some(r) => r.map_err(|e| format!("write through {}: {e}", mem.cpu_path)),
        None => {
            let (b, base) = via.ok_or("no CPU path to the GPU memory")?;
            b.write_bytes((off - base) as usize, data)
                .map_err(|e| e.to_string())
        }
    }
}

pub(super) fn gpu_fill(
    mem: &GpuMem,
    via: Option<(&Buffer, u64)>,
    off: u64,
    len: u64,
    seed: Option<u64>,
) -> Result<(), String> {
    let mut chunk = vec![0u8; (1usize << 20).min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let n = chunk.len().min((len - done) as usize);
        if let Some(s) = seed {
            pattern_fast(&mut chunk[..n], s, done);
        }
        gpu_write(mem, via, off + done, &chunk[..n])?;
        done += n as u64;
    }
    Ok(())
}

pub(super) fn verify(
    mem: &GpuMem,
    via: Option<(&Buffer, u64)>,
    off: u64,
    len: u64,
    seed: u64,
) -> Result<(), String> {
    let got = gpu_read(mem, via, off, len as usize)?;
    match first_mismatch(&got, seed, 0) {
        None => Ok(()),
        Some(i) => {
            let mut w = [0u8; 1];
            pattern(&mut w, seed, i as u64);
            Err(format!(
                "byte {i} of {len} differs: {:#04x} in GPU memory, {:#04x} in the file",
                got[i], w[0]
            ))
        }
    }
}

/// Registers a dma-buf of `[off, off + len)` of `mem` and maps it.
pub(super) fn register(mem: &GpuMem, off: u64, len: u64) -> Result<Buffer, fgds::Error> {
    let db = mem
        .dmabuf(off, len)
        .map_err(|e| fgds::Error::InvalidArgument(format!("export a dma-buf: {e}")))?;
    Buffer::register_dmabuf(None, db.fd(), db.offset, len)
}

/// UNREG with reads in flight: returns (detail) or the failure.
pub(super) fn teardown(
    mem: &GpuMem,
    off: u64,
    len: u64,
    file: &TempFile,
    refill: u64,
) -> Result<String, String> {
    use io_uring::{opcode, types, IoUring};
    let db = mem.dmabuf(off, len).map_err(|e| e.to_string())?;
    let devs = fgds::list_devices().map_err(|e| e.to_string())?;
    let mut reg = None;
    for d in &devs {
        let dev = fgds::Device::open(&d.dev_path).map_err(|e| e.to_string())?;
        match dev.register(db.fd(), db.offset, len) {
            Ok(c) => {
                reg = Some((dev, c));
                break;
            }
            Err(e) if e.errno() == libc::EXDEV => continue,
            Err(e) => return Err(format!("register: {e}")),
        }
    }
    let (dev, cookie) = reg.ok_or("no fgds node took the dma-buf (EXDEV from all)")?;
    // SAFETY: mapping the registration at its cookie.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            dev.as_raw_fd(),
            cookie as i64,
        )
    };
    if map == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        let _ = dev.unregister(cookie);
        return Err(format!("mmap: {e}"));
    }
    let req = 64u64 << 10;
    // At most 256 requests (16 MiB), one ring's worth.
    let n = (len / req).min(256) as u32;
    let mut ring =
        IoUring::new(n.next_power_of_two()).map_err(|e| format!("io_uring_setup: {e}"))?;
    for i in 0..n {
        let sqe = opcode::Read::new(
            types::Fd(file.fd()),
            (map as u64 + u64::from(i) * req) as *mut u8,
            req as u32,
        )
        .offset(u64::from(i) * req)
        .build()
        .user_data(u64::from(i));
        // SAFETY: the mapping stays until every request is reaped.
        let _ = unsafe { ring.submission().push(&sqe) };
    }
    let _ = ring.submit();
    let done_before = ring.completion().len();
    let t = Instant::now();
    let unreg = dev.unregister(cookie);
    let unreg_ms = t.elapsed().as_secs_f64() * 1e3;
    let (mut ok, mut efault, mut other) = (0u32, 0u32, Vec::new());
    let mut reaped = 0;
    while reaped < n {
        if ring.submit_and_wait(1).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        for c in ring.completion() {
            reaped += 1;
            match c.result() {
                r if r as u64 == req => ok += 1,
                r if r == -libc::EFAULT => efault += 1,
                r if r < 0 => other.push(errno_str(-r)),
                r => other.push(format!("short read of {r}")),
            }
        }
    }
    // SAFETY: the mapping made above; no request uses it any more.
    unsafe { libc::munmap(map, len as usize) };
    drop(db);
    unreg.map_err(|e| format!("UNREG with reads in flight: {e}"))?;
    // No DMA lands after UNREG returned: refill, wait, compare.
    gpu_fill(mem, None, off, len, Some(refill)).map_err(|e| format!("refill: {e}"))?;
    std::thread::sleep(std::time::Duration::from_millis(200));
    verify(mem, None, off, len, refill)
        .map_err(|e| format!("memory changed after UNREG returned: {e}"))?;
    if !other.is_empty() {
        return Err(format!(
            "requests failed with other than EFAULT: {}",
            other.join(", ")
        ));
    }
    Ok(format!(
        "{n} reads of 64 KiB submitted, {} in flight at UNREG (returned in {unreg_ms:.1} ms); {ok} completed, {efault} failed with EFAULT; the memory refilled after UNREG stayed intact",
        n as usize - done_before
    ))
}
