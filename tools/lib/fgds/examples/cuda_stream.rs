// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Stream-ordered reads and writes on a CUDA stream, every byte checked.
//!
//! Run on a machine with an NVIDIA GPU (CUDA driver loaded at run time):
//!
//! ```text
//! cuda_stream [DIR] [MIB]
//! ```
//!
//! On a stream held at a gate of the test's own, it enqueues: a fill of the GPU buffer with
//! 0xa5, a read of a file into part of it whose size and offsets are still unset, a copy of the
//! whole buffer to host memory, and a write of that part to a second file. Then it sets the
//! arguments (late binding), opens the gate, synchronises and checks that the read landed after
//! the fill and before the copy, the byte counts, and the second file. It does the same on the
//! legacy default stream (whose synchronous work would deadlock against a held stream), checks
//! a bad argument fails on the stream without stopping it, and times a stream-ordered read of
//! the whole file against the synchronous read.
use fgds::{gpu::Runtime, Buffer, FileHandle, LateArgs};
use std::cell::Cell;
use std::ffi::c_void;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// The arguments of one request, in cells: the library reads and writes them through
/// pointers while the test sets and checks them.
struct Args {
    size: Cell<usize>,
    file_off: Cell<i64>,
    buf_off: Cell<i64>,
    done: Cell<isize>,
}

impl Args {
    fn new() -> Box<Args> {
        // Sentinels: a request that read them at enqueue time would fail or move nothing.
        Box::new(Args {
            size: Cell::new(0),
            file_off: Cell::new(-1),
            buf_off: Cell::new(-1),
            done: Cell::new(isize::MIN),
        })
    }

    fn set(&self, size: usize, file_off: i64, buf_off: i64) {
        self.size.set(size);
        self.file_off.set(file_off);
        self.buf_off.set(buf_off);
    }

    fn late(&self) -> LateArgs {
        LateArgs {
            size: self.size.as_ptr(),
            file_off: self.file_off.as_ptr(),
            buf_off: self.buf_off.as_ptr(),
            bytes_done: self.done.as_ptr(),
        }
    }
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// What the rounds share.
struct Rig<'a> {
    rt: &'a Runtime,
    src: Arc<FileHandle>,
    dst: Arc<FileHandle>,
    dst_path: std::path::PathBuf,
    data: Vec<u8>,
    buf: Arc<Buffer>,
    dptr: u64,
}

/// One held-stream round on `stream`: see the file's documentation.
fn round(rig: &Rig<'_>, stream: *mut c_void, name: &str) -> Result<(), String> {
    let Rig {
        rt,
        src,
        dst,
        dst_path,
        data,
        buf,
        dptr,
    } = rig;
    let (rt, dptr) = (*rt, *dptr);
    let len = buf.len();
    let host = rt.host_alloc(len).map_err(|e| format!("pinned: {e}"))?;
    // The test's own gate: a device word the stream waits on until it is 1.
    let gate = rt.mem_alloc(4).map_err(|e| format!("gate: {e}"))?;
    rt.fill32_sync(gate, 0).map_err(|e| format!("gate: {e}"))?;
    eprintln!("{name}: holding the stream");
    let (rd, wr) = (Args::new(), Args::new());
    // SAFETY: stream of the current context; the pointers live until the synchronisation.
    unsafe {
        rt.wait_value32(stream, gate, 1)
            .map_err(|e| format!("hold: {e}"))?;
        rt.memset_async(dptr, 0xa5, len, stream)
            .map_err(|e| format!("memset: {e}"))?;
        src.read_on_stream(buf.clone(), 0, rd.late(), stream)
            .map_err(|e| format!("read_on_stream: {e}"))?;
        rt.dtoh_async(host, dptr, len, stream)
            .map_err(|e| format!("copy: {e}"))?;
        dst.write_on_stream(buf.clone(), 0, wr.late(), stream)
            .map_err(|e| format!("write_on_stream: {e}"))?;
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    if rd.done.get() != isize::MIN || wr.done.get() != isize::MIN {
        return Err(format!(
            "{name}: a request ran before the stream reached it"
        ));
    }
    // Late binding: the arguments are set only now, odd sizes and offsets on purpose.
    let (n, foff, boff) = (len / 2 + 4097, 12345i64, 777i64);
    rd.set(n, foff, boff);
    wr.set(n, 0, boff);
    eprintln!("{name}: enqueued, nothing ran; opening the gate");
    let t = Instant::now();
    rt.fill32_sync(gate, 1).map_err(|e| format!("gate: {e}"))?;
    // SAFETY: as above.
    unsafe { rt.stream_synchronize(stream) }.map_err(|e| format!("sync: {e}"))?;
    eprintln!("{name}: synchronised");
    let secs = t.elapsed().as_secs_f64();
    if rd.done.get() != n as isize || wr.done.get() != n as isize {
        return Err(format!(
            "{name}: read returned {}, write {}, expected {n}",
            rd.done.get(),
            wr.done.get()
        ));
    }
    // SAFETY: the copy is done; `host` holds `len` bytes.
    let got = unsafe { std::slice::from_raw_parts(host, len) };
    let (b, e) = (boff as usize, boff as usize + n);
    let want = &data[foff as usize..foff as usize + n];
    if let Some(i) = got[..b].iter().chain(&got[e..]).position(|&x| x != 0xa5) {
        return Err(format!("{name}: byte {i} outside the read is not the fill"));
    }
    if let Some(i) = first_diff(&got[b..e], want) {
        return Err(format!("{name}: byte {} of the read differs", b + i));
    }
    let written = std::fs::read(dst_path).map_err(|e| format!("{e}"))?;
    if written.len() < n || first_diff(&written[..n], want).is_some() {
        return Err(format!("{name}: the stream-ordered write differs"));
    }
    println!(
        "{name}: fill, read ({n} bytes at {foff} into +{boff}), copy, write ran in stream \
         order with late arguments; every byte checked ({:.1} ms after the gate opened)",
        secs * 1e3
    );
    // SAFETY: allocated above, no stream uses it any more.
    unsafe { rt.host_free(host) };
    rt.mem_free(gate).map_err(|e| format!("{e}"))?;
    Ok(())
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp".into()));
    let mib: usize = match args.next() {
        Some(s) => s.parse().map_err(|e| format!("MIB: {e}"))?,
        None => 64,
    };
    let len = mib << 20;

    let rt = Runtime::cuda().map_err(|e| format!("CUDA: {e}"))?;
    rt.use_device(0)
        .map_err(|e| format!("CUDA device 0: {e}"))?;
    let dptr = rt.mem_alloc(len).map_err(|e| format!("cuMemAlloc: {e}"))?;
    let buf = Arc::new(Buffer::from_cuda(dptr, len as u64).map_err(|e| format!("register: {e}"))?);
    match buf.p2p_unavailable_reason() {
        None => println!("registered with fgds: peer to peer"),
        Some(why) => println!("registered for the bounce path: {why}"),
    }

    let data = random(len, 0x5eed);
    let src_path = dir.join("fgds-stream-src.bin");
    let dst_path = dir.join("fgds-stream-dst.bin");
    std::fs::write(&src_path, &data).map_err(|e| format!("{}: {e}", src_path.display()))?;
    let open = |p: &std::path::Path| {
        FileHandle::open(p, libc::O_RDWR | libc::O_CREAT, 0o644, Default::default())
            .map(Arc::new)
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    let (src, dst) = (open(&src_path)?, open(&dst_path)?);
    let rig = Rig {
        rt: &rt,
        src: src.clone(),
        dst,
        dst_path: dst_path.clone(),
        data,
        buf: buf.clone(),
        dptr,
    };

    let s = rt
        .stream_create(fgds::gpu::STREAM_NON_BLOCKING)
        .map_err(|e| format!("stream: {e}"))?;
    round(&rig, s, "own stream")?;
    round(&rig, std::ptr::null_mut(), "legacy default stream")?;
    let data = &rig.data;

    // A bad argument fails the request, on the stream, and the stream goes on.
    let bad = Args::new();
    bad.set(4096, 0, len as i64);
    // SAFETY: stream of the current context; `bad` lives until the synchronisation.
    unsafe {
        src.read_on_stream(buf.clone(), 0, bad.late(), s)
            .map_err(|e| format!("{e}"))?;
        rt.stream_synchronize(s).map_err(|e| format!("{e}"))?;
    }
    if bad.done.get() != -(libc::ERANGE as isize) {
        return Err(format!("a read past the buffer gave {}", bad.done.get()));
    }
    println!("a read past the buffer: -ERANGE on the stream, which went on");

    // The whole file: stream-ordered against synchronous.
    let t = Instant::now();
    let n = src
        .read(&buf, 0, len, 0)
        .map_err(|e| format!("read: {e}"))?;
    let sync_s = t.elapsed().as_secs_f64();
    let whole = Args::new();
    whole.set(len, 0, 0);
    let t = Instant::now();
    // SAFETY: as above.
    unsafe {
        src.read_on_stream(buf.clone(), 0, whole.late(), s)
            .map_err(|e| format!("{e}"))?;
        rt.stream_synchronize(s).map_err(|e| format!("{e}"))?;
    }
    let stream_s = t.elapsed().as_secs_f64();
    let back = buf.read_bytes(0, len).map_err(|e| format!("{e}"))?;
    if n != len || whole.done.get() != len as isize || first_diff(&back, data).is_some() {
        return Err(format!("whole file: sync {n}, stream {}", whole.done.get()));
    }
    let mibs = |s: f64| len as f64 / s / (1 << 20) as f64;
    println!(
        "{mib} MiB file into GPU memory: synchronous read {:.0} MiB/s, stream-ordered {:.0} MiB/s; \
         identical",
        mibs(sync_s),
        mibs(stream_s)
    );
    let st = src.stats();
    println!(
        "read stats: direct {} bounce {} fallbacks {}",
        st.direct_bytes, st.bounce_bytes, st.fallbacks
    );
    // SAFETY: created above; idle.
    unsafe { rt.stream_destroy(s) }.map_err(|e| format!("{e}"))?;
    drop(rig);
    drop(buf);
    rt.mem_free(dptr).map_err(|e| format!("{e}"))?;
    let _ = std::fs::remove_file(&src_path);
    let _ = std::fs::remove_file(&dst_path);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("cuda_stream: OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cuda_stream: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
