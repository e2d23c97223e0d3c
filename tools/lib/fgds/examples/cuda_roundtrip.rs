// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Moves a file into GPU memory and back with the library, and checks every byte.
//!
//! Run on a machine with an NVIDIA GPU (CUDA driver loaded at run time):
//!
//! ```text
//! cuda_roundtrip [DIR] [MIB]
//! ```
//!
//! 1. allocates device memory with the CUDA driver API and exports it as a dma-buf
//!    (`cuMemGetHandleForAddressRange`), printing what the kernel says of the dma-buf;
//! 2. registers it with fgds: peer to peer where `/dev/fgdsN` serves the GPU, else the
//!    bounce path, and says which (and why);
//! 3. reads a file of random bytes into it, copies it back to the host and compares;
//! 4. writes it from GPU memory to a second file and compares the files;
//! 5. prints the per-handle stats (direct vs bounce bytes).
use fgds::{gpu::Runtime, Buffer, Config, FileHandle};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::ExitCode;

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "/tmp".into());
    let mib: usize = match args.next() {
        Some(s) => s.parse().map_err(|e| format!("MIB: {e}"))?,
        None => 64,
    };
    let len = mib << 20;

    let cuda = Runtime::cuda().map_err(|e| format!("CUDA: {e}"))?;
    cuda.use_device(0)
        .map_err(|e| format!("CUDA device 0: {e}"))?;
    let dptr = cuda
        .mem_alloc(len)
        .map_err(|e| format!("cuMemAlloc: {e}"))?;
    let fd = cuda
        .export_dmabuf(dptr, len as u64)
        .map_err(|e| format!("dma-buf export: {e}"))?;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .unwrap_or_default();
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| "?".into())
    };
    println!(
        "cudaMalloc {mib} MiB at {dptr:#x}: dma-buf fd {} exp_name {} size {}",
        fd.as_raw_fd(),
        field("exp_name:"),
        field("size:")
    );
    drop(fd);

    let buf = Buffer::from_cuda(dptr, len as u64).map_err(|e| format!("register: {e}"))?;
    match buf.p2p_unavailable_reason() {
        None => println!("registered with fgds: peer to peer"),
        Some(why) => println!("registered for the bounce path: {why}"),
    }

    let src = format!("{dir}/fgds-cuda-src.bin");
    let dst = format!("{dir}/fgds-cuda-dst.bin");
    let mut data = vec![0u8; len];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    std::fs::File::create(&src)
        .and_then(|mut f| f.write_all(&data))
        .map_err(|e| format!("{src}: {e}"))?;

    let rd = FileHandle::open(&src, libc::O_RDONLY, 0, Config::default())
        .map_err(|e| format!("open {src}: {e}"))?;
    let t = std::time::Instant::now();
    let n = rd.read(&buf, 0, len, 0).map_err(|e| format!("read: {e}"))?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "read {n} bytes into GPU memory in {:.3} s ({:.0} MiB/s)",
        secs,
        n as f64 / secs / 1048576.0
    );
    let back = buf
        .read_bytes(0, len)
        .map_err(|e| format!("copy back: {e}"))?;
    if let Some(i) = back.iter().zip(&data).position(|(a, b)| a != b) {
        return Err(format!("GPU memory differs from the file at byte {i}"));
    }
    println!("GPU memory == file: all {len} bytes");

    let wr = FileHandle::open(
        &dst,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        0o644,
        Config::default(),
    )
    .map_err(|e| format!("open {dst}: {e}"))?;
    let n = wr
        .write(&buf, 0, len, 0)
        .map_err(|e| format!("write: {e}"))?;
    drop(wr);
    let out = std::fs::read(&dst).map_err(|e| format!("{dst}: {e}"))?;
    if n != len || out != data {
        return Err(format!("{dst} differs from {src} (wrote {n} bytes)"));
    }
    println!("file written from GPU memory == source: all {len} bytes");
    let s = rd.stats();
    println!(
        "read stats: direct {} bounce {} fallbacks {}",
        s.direct_bytes, s.bounce_bytes, s.fallbacks
    );
    drop(buf);
    cuda.mem_free(dptr).map_err(|e| format!("cuMemFree: {e}"))?;
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&dst);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cuda_roundtrip: {e}");
            ExitCode::FAILURE
        }
    }
}
