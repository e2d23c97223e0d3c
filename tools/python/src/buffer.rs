//! `fgds.Buffer`: memory registered for fgds I/O, made from a Python object
//! or a raw address, and its release (without the GIL where it unregisters).

use crate::error::{os_err, to_py};
use crate::gpu::cached_gpu;
use crate::memory::{
    cai_range, dlpack_range, get_view, View, DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_ROCM, DL_ROCM_HOST,
};
use fgds::Buffer as RBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Memory registered for fgds I/O.
///
/// `Buffer(obj)` takes anything exposing C-contiguous memory: the buffer
/// protocol (bytearray, numpy arrays, memoryview, mmap; bytes read-only),
/// `__cuda_array_interface__` (torch CUDA tensors, CuPy, Numba) or
/// `__dlpack__` (CPU, CUDA or ROCm). GPU memory is exported as a dma-buf and
/// registered with fgds when a node serves that GPU (peer to peer), else it
/// works through pinned bounce buffers (`p2p_unavailable_reason` says why).
/// The object is kept alive as long as the Buffer.
#[pyclass(module = "fgds._fgds", frozen)]
pub(crate) struct Buffer {
    inner: Mutex<Option<Arc<RBuffer>>>,
    pub(crate) readonly: bool,
    nbytes: usize,
    // Keep order: the fgds buffer (above) goes before the memory it refers to.
    view: Mutex<Option<View>>,
    owner: Mutex<Option<PyObject>>,
    /// The library's cached registration (`Buffer.for_device`): others
    /// hold it too, so `close()` only lets go of this reference.
    shared: bool,
}

impl Buffer {
    fn new(b: RBuffer, readonly: bool, view: Option<View>, owner: Option<PyObject>) -> Buffer {
        Buffer {
            nbytes: b.len(),
            inner: Mutex::new(Some(Arc::new(b))),
            readonly,
            view: Mutex::new(view),
            owner: Mutex::new(owner),
            shared: false,
        }
    }

    pub(crate) fn get(&self) -> PyResult<Arc<RBuffer>> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| os_err(libc::EBADF, "buffer is closed"))
    }

    pub(crate) fn from_object(obj: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        if obj.hasattr("__cuda_array_interface__")? {
            let cai = obj.getattr("__cuda_array_interface__")?;
            return Self::from_cai(obj, &cai);
        }
        if obj.hasattr("__dlpack__")? && obj.hasattr("__dlpack_device__")? {
            let dev: (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
            if dev.0 != DL_CPU {
                return Self::from_dlpack(obj);
            }
        }
        let view = get_view(obj)?;
        let (ptr, len, ro) = view.range();
        if len == 0 {
            return Err(PyValueError::new_err(
                "cannot register an empty buffer (0 bytes)",
            ));
        }
        // SAFETY: the view keeps the memory alive and in place until it is
        // released, which happens after the fgds buffer is dropped.
        let b = unsafe { RBuffer::from_host_ptr(ptr, len) }.map_err(to_py)?;
        Ok(Buffer::new(b, ro, Some(view), Some(obj.clone().unbind())))
    }

    fn from_cai(obj: &Bound<'_, PyAny>, cai: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let (ptr, size, ro) = cai_range(cai)?;
        let b = register_gpu(obj.py(), false, ptr, size as u64)?;
        Ok(Buffer::new(b, ro, None, Some(obj.clone().unbind())))
    }

    fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let (ptr, size, device_type, owner) = dlpack_range(obj)?;
        let py = obj.py();
        let b = match device_type {
            DL_CUDA | DL_ROCM => register_gpu(py, device_type == DL_ROCM, ptr, size as u64)?,
            DL_CPU | DL_CUDA_HOST | DL_ROCM_HOST => {
                // SAFETY: the capsule (owner) keeps the tensor alive.
                unsafe { RBuffer::from_host_ptr(ptr as *mut u8, size) }.map_err(to_py)?
            }
            d => {
                return Err(PyValueError::new_err(format!(
                    "unsupported DLPack device type {d}"
                )))
            }
        };
        Ok(Buffer::new(b, false, None, Some(owner)))
    }
}

/// Registers `size` bytes of GPU memory at `ptr` (export, REG_BUFFER,
/// mmap) without the GIL: HIP (AMD) memory where `hip`, else CUDA memory.
fn register_gpu(py: Python<'_>, hip: bool, ptr: u64, size: u64) -> PyResult<RBuffer> {
    py.allow_threads(|| {
        if hip {
            RBuffer::from_hip(ptr, size)
        } else {
            RBuffer::from_cuda(ptr, size)
        }
    })
    .map_err(to_py)
}

/// Lets go of a reference to a library buffer; when it holds a registration
/// (`is_p2p`: an fgds mapping, which the last reference unmaps and
/// unregisters, milliseconds), without the GIL.
fn release(py: Python<'_>, b: Arc<RBuffer>) {
    if b.is_p2p() {
        py.allow_threads(move || drop(b));
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // The fgds buffer goes first, without the GIL where it unregisters; the memory it
        // refers to (view, owner) after, with the GIL (the fields' own drops).
        let inner = self
            .inner
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(b) = inner {
            Python::with_gil(|py| release(py, b));
        }
    }
}

#[pymethods]
impl Buffer {
    #[new]
    fn py_new(obj: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        Buffer::from_object(obj)
    }

    /// `Buffer.alloc(size)`: `size` bytes of zeroed, page-aligned host memory
    /// owned by the Buffer (read with `read_bytes`, fill with `write_bytes`).
    #[staticmethod]
    fn alloc(size: usize) -> PyResult<Buffer> {
        Ok(Buffer::new(
            RBuffer::alloc_host(size).map_err(to_py)?,
            false,
            None,
            None,
        ))
    }

    /// `Buffer.from_cuda(ptr, size, owner=None)`: CUDA device memory
    /// `[ptr, ptr+size)`; `owner` is kept alive with the Buffer.
    #[staticmethod]
    #[pyo3(signature = (ptr, size, owner=None))]
    fn from_cuda(py: Python<'_>, ptr: u64, size: u64, owner: Option<PyObject>) -> PyResult<Buffer> {
        let b = register_gpu(py, false, ptr, size)?;
        Ok(Buffer::new(b, false, None, owner))
    }

    /// `Buffer.for_device(ptr, size, hip=False) -> (Buffer, offset)`: for
    /// `size` bytes of CUDA (or HIP) memory at `ptr` that the caller does not
    /// register, the library's cached registration of its allocation (whole
    /// up to `FGDS_REG_CACHE_WINDOW`, else the window holding the range)
    /// and `ptr`'s offset in it (`fgds::gpucache::buffer_for`: kept by the
    /// library, none per call); where that cannot be, a Buffer of the range
    /// alone (offset 0).
    /// `close()` lets go of this reference only.
    #[staticmethod]
    #[pyo3(signature = (ptr, size, hip=false))]
    fn for_device(py: Python<'_>, ptr: u64, size: usize, hip: bool) -> PyResult<(Buffer, usize)> {
        let (b, off) = cached_gpu(py, hip, ptr, size)?;
        Ok((
            Buffer {
                nbytes: b.len(),
                inner: Mutex::new(Some(b)),
                readonly: false,
                view: Mutex::new(None),
                owner: Mutex::new(None),
                shared: true,
            },
            off,
        ))
    }

    /// `Buffer.from_hip(ptr, size, owner=None)`: same for HIP (AMD) memory.
    #[staticmethod]
    #[pyo3(signature = (ptr, size, owner=None))]
    fn from_hip(py: Python<'_>, ptr: u64, size: u64, owner: Option<PyObject>) -> PyResult<Buffer> {
        let b = register_gpu(py, true, ptr, size)?;
        Ok(Buffer::new(b, false, None, owner))
    }

    /// `Buffer.from_host(ptr, size, owner=None)`: host memory at a raw
    /// address (e.g. `tensor.data_ptr()` of a CPU tensor). Unsafe in the C
    /// sense: `owner` (or the caller) must keep the memory alive.
    #[staticmethod]
    #[pyo3(signature = (ptr, size, owner=None, readonly=false))]
    fn from_host(
        ptr: usize,
        size: usize,
        owner: Option<PyObject>,
        readonly: bool,
    ) -> PyResult<Buffer> {
        // SAFETY: documented contract of this function.
        let b = unsafe { RBuffer::from_host_ptr(ptr as *mut u8, size) }.map_err(to_py)?;
        Ok(Buffer::new(b, readonly, None, owner))
    }

    /// `Buffer.from_dmabuf(fd, offset, size, device=None)`: registers a
    /// dma-buf on `/dev/fgdsN` (`device`; default: the node whose GPU owns the memory) and maps it.
    #[staticmethod]
    #[pyo3(signature = (fd, offset, size, device=None))]
    fn from_dmabuf(
        py: Python<'_>,
        fd: i32,
        offset: u64,
        size: u64,
        device: Option<std::path::PathBuf>,
    ) -> PyResult<Buffer> {
        let b = py
            .allow_threads(|| RBuffer::register_dmabuf(device.as_deref(), fd, offset, size))
            .map_err(to_py)?;
        Ok(Buffer::new(b, false, None, None))
    }

    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    fn __len__(&self) -> usize {
        self.nbytes
    }

    /// Whether reads into the buffer are refused (e.g. `bytes`).
    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    /// "host", "host_user", "fgds", "cuda" or "hip".
    #[getter]
    fn kind(&self) -> PyResult<&'static str> {
        Ok(match self.get()?.kind() {
            fgds::BufferKind::Host => "host",
            fgds::BufferKind::HostUser => "host_user",
            fgds::BufferKind::Fgds => "fgds",
            fgds::BufferKind::Cuda => "cuda",
            fgds::BufferKind::Hip => "hip",
        })
    }

    /// Whether I/O can go peer to peer (an fgds mapping).
    #[getter]
    fn is_p2p(&self) -> PyResult<bool> {
        Ok(self.get()?.is_p2p())
    }

    /// For GPU memory without an fgds mapping: why (else None).
    #[getter]
    fn p2p_unavailable_reason(&self) -> PyResult<Option<String>> {
        Ok(self.get()?.p2p_unavailable_reason().map(str::to_owned))
    }

    /// Host pointer, mapping address or device pointer.
    #[getter]
    fn address(&self) -> PyResult<u64> {
        Ok(self.get()?.base_addr())
    }

    /// The object whose memory this is (None for `alloc`).
    #[getter]
    fn obj(&self, py: Python<'_>) -> Option<PyObject> {
        self.owner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|o| o.clone_ref(py))
    }

    /// `read_bytes(offset=0, size=None) -> bytes` (copies; works for GPU memory).
    #[pyo3(signature = (offset=0, size=None))]
    fn read_bytes<'py>(
        &self,
        py: Python<'py>,
        offset: usize,
        size: Option<usize>,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let b = self.get()?;
        let size = size.unwrap_or(self.nbytes.saturating_sub(offset));
        let v = py
            .allow_threads(|| b.read_bytes(offset, size))
            .map_err(to_py)?;
        Ok(pyo3::types::PyBytes::new(py, &v))
    }

    /// `write_bytes(data, offset=0)`: copies `data` (bytes-like) in.
    #[pyo3(signature = (data, offset=0))]
    fn write_bytes(&self, py: Python<'_>, data: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        if self.readonly {
            return Err(PyValueError::new_err("buffer is read-only"));
        }
        let b = self.get()?;
        let v: Vec<u8> = if let Ok(bytes) = data.downcast::<pyo3::types::PyBytes>() {
            bytes.as_bytes().to_vec()
        } else {
            data.call_method0("__bytes__")
                .or_else(|_| py.import("builtins")?.getattr("bytes")?.call1((data,)))?
                .extract()?
        };
        py.allow_threads(|| b.write_bytes(offset, &v))
            .map_err(to_py)
    }

    /// Deregisters the buffer (also done when it is garbage collected).
    /// EBUSY while I/O on it is in flight.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(b), false) = (g.as_ref(), self.shared) {
            // I/O threads drop their reference just after reporting
            // completion: give them a moment before calling it busy.
            let busy = py.allow_threads(|| {
                let until = std::time::Instant::now() + Duration::from_millis(200);
                while Arc::strong_count(b) > 1 {
                    if std::time::Instant::now() > until {
                        return true;
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
                false
            });
            if busy {
                return Err(os_err(libc::EBUSY, "buffer has I/O in flight"));
            }
        }
        let taken = g.take();
        drop(g);
        if let Some(b) = taken {
            release(py, b);
        }
        self.view.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.owner.lock().unwrap_or_else(|p| p.into_inner()).take();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match self.get() {
            Ok(b) => format!(
                "<fgds.Buffer kind={:?} nbytes={} p2p={} readonly={}>",
                b.kind(),
                self.nbytes,
                b.is_p2p(),
                self.readonly
            ),
            Err(_) => "<fgds.Buffer closed>".into(),
        }
    }
}
