//! `fgds.File`: a file opened for fgds I/O, its configuration and its
//! requests: plain, on unregistered device memory, vectored, asynchronous
//! (`Future`) and ordered on a CUDA stream (`StreamFuture`).

use crate::error::{os_err, to_py};
use crate::future::{Future, StreamFuture};
use crate::gpu::gpu_io;
use crate::info::{bounce_read_name, causes_dict};
use crate::request::{check_range, hold, parse_segments, unregistered_gpu, GpuRange, Held};
use fgds::{Buffer as RBuffer, Config, FileHandle};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

fn parse_mode(mode: &str) -> PyResult<i32> {
    let m = mode.replace('b', "");
    Ok(match m.as_str() {
        "r" => libc::O_RDONLY,
        "r+" => libc::O_RDWR,
        "w" => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        "w+" => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        "a" | "a+" => libc::O_RDWR | libc::O_CREAT,
        "x" => libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        "x+" => libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
        _ => {
            return Err(PyValueError::new_err(format!(
                "invalid mode {mode:?}: use 'r', 'r+', 'w', 'w+', 'a', 'x' or 'x+'"
            )))
        }
    })
}

/// `File(path, mode="r", *, flags=None, perm=0o644, strict=None,
/// chunk_size=None, queue_depth=None, use_io_uring=None, direct=True,
/// parallel=None, split_size=None, bounce_read=None, bounce_chunk_size=None,
/// bounce_split_size=None)`.
///
/// `None` means the default: the library's, or what the `FGDS_*`
/// environment variables set (`FGDS_STRICT`, `FGDS_CHUNK_SIZE`,
/// `FGDS_QUEUE_DEPTH`, `FGDS_IO_URING`, `FGDS_PARALLEL`,
/// `FGDS_SPLIT_SIZE`, `FGDS_BOUNCE_READ`, `FGDS_BOUNCE_CHUNK_SIZE`,
/// `FGDS_BOUNCE_SPLIT_SIZE`).
/// `chunk_size`: bytes per request on the direct path and into host
/// memory. `bounce_read`: how reads into GPU memory without P2P reach the
/// bounce buffers: "auto" (O_DIRECT unless cachestat(2) finds most of the
/// range in the page cache), "direct", "buffered". `bounce_chunk_size`:
/// bytes per piece of that bounce path (a read into a pinned buffer and
/// its copy to the GPU, or the reverse); `bounce_split_size`: `split_size`
/// for a call mostly through that path.
///
/// A file opened for fgds I/O: an O_DIRECT descriptor (when the file system
/// accepts it) plus a buffered one. `flags` (os.O_* bits) overrides `mode`.
/// Methods may be called from many threads at once.
#[pyclass(module = "fgds._fgds", frozen)]
pub(crate) struct File {
    inner: Mutex<Option<Arc<FileHandle>>>,
    path: Option<String>,
}

impl File {
    pub(crate) fn get(&self) -> PyResult<Arc<FileHandle>> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| os_err(libc::EBADF, "file is closed"))
    }
}

#[allow(clippy::too_many_arguments)]
/// The file's configuration: the arguments given, the rest from
/// `Config::default()` (built-in defaults or the `FGDS_*` environment).
fn make_config(
    strict: Option<bool>,
    chunk_size: Option<usize>,
    queue_depth: Option<u32>,
    use_io_uring: Option<bool>,
    direct: bool,
    parallel: Option<u32>,
    split_size: Option<usize>,
    bounce_read: Option<&str>,
    bounce_chunk_size: Option<usize>,
    bounce_split_size: Option<usize>,
) -> PyResult<Config> {
    let d = Config::default();
    let bounce_read = match bounce_read {
        None => d.bounce_read,
        Some(o) => [
            fgds::BounceRead::Auto,
            fgds::BounceRead::Direct,
            fgds::BounceRead::Buffered,
        ]
        .into_iter()
        .find(|b| bounce_read_name(*b) == o)
        .ok_or_else(|| {
            to_py(fgds::Error::InvalidArgument(format!(
                "bounce_read={o:?}: not \"auto\", \"direct\" or \"buffered\""
            )))
        })?,
    };
    Ok(Config {
        chunk_size: chunk_size.unwrap_or(d.chunk_size),
        bounce_chunk_size: bounce_chunk_size.unwrap_or(d.bounce_chunk_size),
        queue_depth: queue_depth.unwrap_or(d.queue_depth),
        strict: strict.unwrap_or(d.strict),
        use_io_uring: use_io_uring.unwrap_or(d.use_io_uring),
        disable_direct: !direct,
        parallel: parallel.unwrap_or(d.parallel),
        split_size: split_size.unwrap_or(d.split_size),
        bounce_split_size: bounce_split_size.unwrap_or(d.bounce_split_size),
        bounce_read,
    })
}

fn stats_dict<'py>(py: Python<'py>, s: &fgds::Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("direct_bytes", s.direct_bytes)?;
    d.set_item("bounce_bytes", s.bounce_bytes)?;
    d.set_item("bounce_direct_bytes", s.bounce_direct_bytes)?;
    d.set_item("fallbacks", s.fallbacks)?;
    d.set_item("direct_ops", s.direct_ops)?;
    d.set_item("bounce_ops", s.bounce_ops)?;
    d.set_item("read_bytes", s.read_bytes)?;
    d.set_item("write_bytes", s.write_bytes)?;
    d.set_item("errors", s.errors)?;
    d.set_item("fallback_causes", causes_dict(py, &s.fallback_causes)?)?;
    d.set_item("last_fallback_reason", s.last_fallback_reason.clone())?;
    Ok(d)
}

#[pymethods]
impl File {
    #[new]
    #[pyo3(signature = (path, mode="r", *, flags=None, perm=0o644, strict=None, chunk_size=None, queue_depth=None, use_io_uring=None, direct=true, parallel=None, split_size=None, bounce_read=None, bounce_chunk_size=None, bounce_split_size=None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        path: std::path::PathBuf,
        mode: &str,
        flags: Option<i32>,
        perm: u32,
        strict: Option<bool>,
        chunk_size: Option<usize>,
        queue_depth: Option<u32>,
        use_io_uring: Option<bool>,
        direct: bool,
        parallel: Option<u32>,
        split_size: Option<usize>,
        bounce_read: Option<&str>,
        bounce_chunk_size: Option<usize>,
        bounce_split_size: Option<usize>,
    ) -> PyResult<File> {
        let fl = match flags {
            Some(f) => f,
            None => parse_mode(mode)?,
        };
        let cfg = make_config(
            strict,
            chunk_size,
            queue_depth,
            use_io_uring,
            direct,
            parallel,
            split_size,
            bounce_read,
            bounce_chunk_size,
            bounce_split_size,
        )?;
        let p = path.clone();
        let h = py
            .allow_threads(move || FileHandle::open(&p, fl, perm, cfg))
            .map_err(to_py)?;
        Ok(File {
            inner: Mutex::new(Some(Arc::new(h))),
            path: Some(path.to_string_lossy().into_owned()),
        })
    }

    /// `File.from_fd(fd, **config)`: wraps an open descriptor (duplicated).
    #[staticmethod]
    #[pyo3(signature = (fd, *, strict=None, chunk_size=None, queue_depth=None, use_io_uring=None, direct=true, parallel=None, split_size=None, bounce_read=None, bounce_chunk_size=None, bounce_split_size=None))]
    #[allow(clippy::too_many_arguments)]
    fn from_fd(
        fd: i32,
        strict: Option<bool>,
        chunk_size: Option<usize>,
        queue_depth: Option<u32>,
        use_io_uring: Option<bool>,
        direct: bool,
        parallel: Option<u32>,
        split_size: Option<usize>,
        bounce_read: Option<&str>,
        bounce_chunk_size: Option<usize>,
        bounce_split_size: Option<usize>,
    ) -> PyResult<File> {
        let cfg = make_config(
            strict,
            chunk_size,
            queue_depth,
            use_io_uring,
            direct,
            parallel,
            split_size,
            bounce_read,
            bounce_chunk_size,
            bounce_split_size,
        )?;
        let h = FileHandle::from_fd(fd, cfg).map_err(to_py)?;
        Ok(File {
            inner: Mutex::new(Some(Arc::new(h))),
            path: None,
        })
    }

    /// `pread(buf, size=None, file_offset=0, buf_offset=0) -> int`: reads
    /// `size` bytes (default: the rest of the buffer) at `file_offset` into
    /// `buf[buf_offset:]`; returns the bytes read (fewer at end of file).
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0))]
    fn pread(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
    ) -> PyResult<usize> {
        self.plain(py, buf, size, file_offset, buf_offset, true)
    }

    /// `pwrite(buf, size=None, file_offset=0, buf_offset=0) -> int`.
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0))]
    fn pwrite(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
    ) -> PyResult<usize> {
        self.plain(py, buf, size, file_offset, buf_offset, false)
    }

    /// `pread_device(ptr, size, file_offset=0, hip=False) -> int`: reads
    /// `size` bytes at `file_offset` into CUDA (or HIP) memory at `ptr` that
    /// is not registered, through the library's staging buffers or its
    /// cached registration of the allocation (no registration per call;
    /// `fgds.gpucache_counters()` shows them).
    #[pyo3(signature = (ptr, size, file_offset=0, hip=false))]
    fn pread_device(
        &self,
        py: Python<'_>,
        ptr: u64,
        size: usize,
        file_offset: u64,
        hip: bool,
    ) -> PyResult<usize> {
        let f = self.get()?;
        gpu_io(py, &f, true, hip, ptr, size, file_offset)
    }

    /// `pwrite_device(ptr, size, file_offset=0, hip=False) -> int`: as
    /// `pread_device`, from the device memory to the file.
    #[pyo3(signature = (ptr, size, file_offset=0, hip=false))]
    fn pwrite_device(
        &self,
        py: Python<'_>,
        ptr: u64,
        size: usize,
        file_offset: u64,
        hip: bool,
    ) -> PyResult<usize> {
        let f = self.get()?;
        gpu_io(py, &f, false, hip, ptr, size, file_offset)
    }

    /// `readv(segments, file_offset=0) -> int`: reads into the segments in
    /// order (at most 1024), from `file_offset` on.
    #[pyo3(signature = (segments, file_offset=0))]
    fn readv(
        &self,
        py: Python<'_>,
        segments: &Bound<'_, PyAny>,
        file_offset: u64,
    ) -> PyResult<usize> {
        self.vectored(py, segments, file_offset, true)
    }

    /// `writev(segments, file_offset=0) -> int`.
    #[pyo3(signature = (segments, file_offset=0))]
    fn writev(
        &self,
        py: Python<'_>,
        segments: &Bound<'_, PyAny>,
        file_offset: u64,
    ) -> PyResult<usize> {
        self.vectored(py, segments, file_offset, false)
    }

    /// `read_async(buf, size=None, file_offset=0, buf_offset=0) -> Future`.
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0))]
    fn read_async(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
    ) -> PyResult<Future> {
        Self::submit_async(slf, buf, size, file_offset, buf_offset, true)
    }

    /// `write_async(buf, size=None, file_offset=0, buf_offset=0) -> Future`.
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0))]
    fn write_async(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
    ) -> PyResult<Future> {
        Self::submit_async(slf, buf, size, file_offset, buf_offset, false)
    }

    /// `read_on_stream(buf, size=None, file_offset=0, buf_offset=0, stream=0) -> StreamFuture`:
    /// a read ordered on a CUDA stream (`cuFileReadAsync`'s model). It runs when the stream
    /// reaches it (e.g. `torch.cuda.current_stream().cuda_stream`; 0: the default stream), and
    /// work queued on the stream afterwards sees its data. Returns at once, without waiting
    /// for the I/O, unless 16 requests of fgds are on the stream and not passed yet: then it
    /// first waits (without the GIL) for the oldest to pass.
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0, stream=0))]
    fn read_on_stream(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
        stream: usize,
    ) -> PyResult<StreamFuture> {
        Self::on_stream(slf, buf, size, file_offset, buf_offset, stream, true)
    }

    /// `write_on_stream(buf, size=None, file_offset=0, buf_offset=0, stream=0) -> StreamFuture`:
    /// a write ordered on a CUDA stream, as `read_on_stream`.
    #[pyo3(signature = (buf, size=None, file_offset=0, buf_offset=0, stream=0))]
    fn write_on_stream(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
        stream: usize,
    ) -> PyResult<StreamFuture> {
        Self::on_stream(slf, buf, size, file_offset, buf_offset, stream, false)
    }

    /// Counters of the paths the bytes took: direct_bytes, bounce_bytes,
    /// bounce_direct_bytes (of those, read with O_DIRECT), fallbacks, direct_ops, bounce_ops, read_bytes, write_bytes, errors,
    /// fallback_causes (`fallbacks` by cause, as `fgds.fallbacks()` keys them),
    /// last_fallback_reason.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.get()?.stats())
    }

    fn reset_stats(&self) -> PyResult<()> {
        self.get()?.reset_stats();
        Ok(())
    }

    /// Size of the file in bytes.
    fn size(&self) -> PyResult<u64> {
        self.get()?.size().map_err(to_py)
    }

    /// The (buffered) descriptor.
    fn fileno(&self) -> PyResult<i32> {
        Ok(self.get()?.raw_fd())
    }

    /// Whether an O_DIRECT descriptor is open.
    #[getter]
    fn is_direct(&self) -> PyResult<bool> {
        Ok(self.get()?.is_direct())
    }

    /// Why there is no O_DIRECT descriptor (else None).
    #[getter]
    fn no_direct_reason(&self) -> PyResult<Option<String>> {
        Ok(self.get()?.no_direct_reason().map(str::to_owned))
    }

    /// `(memory alignment, offset alignment)` O_DIRECT needs.
    #[getter]
    fn dio_alignment(&self) -> PyResult<(u64, u64)> {
        Ok(self.get()?.dio_alignment())
    }

    #[getter]
    fn path(&self) -> Option<String> {
        self.path.clone()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    /// Closes the file (requests in flight keep it open until they end).
    fn close(&self) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        let path = self
            .path
            .as_ref()
            .map_or("None".into(), |p| format!("{p:?}"));
        format!("<fgds.File path={path} closed={}>", self.closed())
    }
}

impl File {
    /// `pread` (`read`) or `pwrite`: GPU memory the caller never registered
    /// through `fgds::gpucache`, else the buffer held for the call.
    fn plain(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
        read: bool,
    ) -> PyResult<usize> {
        let f = self.get()?;
        if let Some(GpuRange {
            ptr,
            len,
            readonly: ro,
            hip,
            ..
        }) = unregistered_gpu(buf)?
        {
            if read && ro {
                return Err(PyValueError::new_err(
                    "cannot read into a read-only device array",
                ));
            }
            let size = check_range(len, buf_offset, size)?;
            return gpu_io(
                py,
                &f,
                read,
                hip,
                ptr + buf_offset as u64,
                size,
                file_offset,
            );
        }
        let h = hold(buf, read)?;
        let size = check_range(h.len, buf_offset, size)?;
        let (b, off) = (h.buf.clone(), h.base + buf_offset);
        py.allow_threads(|| {
            if read {
                f.read(&b, off, size, file_offset)
            } else {
                f.write(&b, off, size, file_offset)
            }
        })
        .map_err(to_py)
    }

    fn vectored(
        &self,
        py: Python<'_>,
        segments: &Bound<'_, PyAny>,
        file_offset: u64,
        read: bool,
    ) -> PyResult<usize> {
        let f = self.get()?;
        let (held, ranges) = parse_segments(segments, read)?;
        let bufs: Vec<Arc<RBuffer>> = held.iter().map(|h| h.buf.clone()).collect();
        py.allow_threads(|| {
            let segs: Vec<fgds::Segment<'_>> = bufs
                .iter()
                .zip(&ranges)
                .map(|(b, (o, s))| fgds::Segment {
                    buffer: b,
                    offset: *o,
                    size: *s,
                })
                .collect();
            if read {
                f.readv(&segs, file_offset)
            } else {
                f.writev(&segs, file_offset)
            }
        })
        .map_err(to_py)
    }

    /// The file, the buffer held for the request, the request's size and
    /// its offset in the held buffer.
    fn prepare(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        buf_offset: usize,
        read: bool,
    ) -> PyResult<(Arc<FileHandle>, Held, usize, usize)> {
        let f = slf.get().get()?;
        let h = hold(buf, read)?;
        let size = check_range(h.len, buf_offset, size)?;
        let off = h.base + buf_offset;
        Ok((f, h, size, off))
    }

    fn on_stream(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
        stream: usize,
        read: bool,
    ) -> PyResult<StreamFuture> {
        let (f, h, size, buf_offset) = Self::prepare(slf, buf, size, buf_offset, read)?;
        let b = h.buf.clone();
        // Without the GIL: the enqueue may wait for earlier requests to pass the stream (a full
        // stream), and other Python threads may go on meanwhile.
        let req = slf
            .py()
            .allow_threads(|| {
                let s = stream as *mut c_void;
                // SAFETY: `stream` is the caller's CUstream (or 0), as documented; a bad one
                // makes the CUDA driver fail the call.
                unsafe {
                    if read {
                        f.read_on_stream_with(b, buf_offset, size, file_offset, s)
                    } else {
                        f.write_on_stream_with(b, buf_offset, size, file_offset, s)
                    }
                }
            })
            .map_err(to_py)?;
        Ok(StreamFuture {
            req,
            _refs: vec![h.py_buf, slf.clone().into_any().unbind()],
        })
    }

    fn submit_async(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
        read: bool,
    ) -> PyResult<Future> {
        let (f, h, size, buf_offset) = Self::prepare(slf, buf, size, buf_offset, read)?;
        let io = if read {
            f.read_async(h.buf.clone(), buf_offset, size, file_offset)
        } else {
            f.write_async(h.buf.clone(), buf_offset, size, file_offset)
        }
        .map_err(to_py)?;
        Ok(Future {
            handle: Mutex::new(Some(io)),
            result: Mutex::new(None),
            _refs: vec![h.py_buf, slf.clone().into_any().unbind()],
        })
    }
}
