//! Python bindings of libfgds (`fgds._fgds`).
//!
//! Everything that moves bytes, registers or unregisters memory releases
//! the GIL (`py.allow_threads`), touching no Python object meanwhile: the
//! released sections hold only Rust values (pointers as integers, `Arc`s of
//! the library's buffers and files), so that other Python threads (the
//! worker threads of `fgds.lmcache`, say) run while a thread waits for the
//! kernel or the GPU.
//! Errors of the library are raised as `fgds.FgdsError`, a subclass of
//! `OSError` carrying `errno` and a message that says what to do.

use fgds::{Batch as RBatch, Buffer as RBuffer, Config, FileHandle, IoHandle, IoParams, IoTarget};
use pyo3::create_exception;
use pyo3::exceptions::{PyBufferError, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};
use std::time::Duration;

create_exception!(
    fgds,
    FgdsError,
    PyOSError,
    "An fgds operation failed; `errno` says why (subclass of OSError)."
);

/// An `FgdsError`: the message, then what to do, from the library's one
/// table of error text (`fgds::error::ERRNOS`).
fn os_err(errno: i32, msg: impl std::fmt::Display) -> PyErr {
    FgdsError::new_err((errno, format!("{msg}; {}", fgds::error::hint(errno))))
}

fn to_py(e: fgds::Error) -> PyErr {
    os_err(e.errno(), e)
}

// ------------------------------------------------------------ buffer protocol
//
// PyObject_GetBuffer is only in the limited API from 3.11 on, so PyO3 hides
// it under abi3-py39. The function and the Py_buffer layout have been the
// same since Python 3.3 and are exported by every CPython 3.x, so they are
// declared here.

#[repr(C)]
struct RawPyBuffer {
    buf: *mut c_void,
    obj: *mut pyo3::ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(
        obj: *mut pyo3::ffi::PyObject,
        view: *mut RawPyBuffer,
        flags: c_int,
    ) -> c_int;
    fn PyBuffer_Release(view: *mut RawPyBuffer);
}

const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;
const PYBUF_C_CONTIGUOUS: c_int = 0x0020 | PYBUF_STRIDES;

struct View(Box<RawPyBuffer>);

// SAFETY: the view is only released with the GIL held (Drop below).
unsafe impl Send for View {}
// SAFETY: see above; the struct is never mutated after creation.
unsafe impl Sync for View {}

impl Drop for View {
    fn drop(&mut self) {
        Python::with_gil(|_| {
            // SAFETY: the view was filled by a successful PyObject_GetBuffer.
            unsafe { PyBuffer_Release(&mut *self.0) };
        });
    }
}

fn get_view(obj: &Bound<'_, PyAny>) -> PyResult<View> {
    let py = obj.py();
    for flags in [PYBUF_C_CONTIGUOUS | PYBUF_WRITABLE, PYBUF_C_CONTIGUOUS] {
        // SAFETY: zeroed Py_buffer is a valid out parameter.
        let mut v: Box<RawPyBuffer> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: obj is a live object, v a valid out pointer, GIL held.
        let r = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *v, flags) };
        if r == 0 {
            return Ok(View(v));
        }
        let err = PyErr::take(py);
        if flags & PYBUF_WRITABLE == 0 {
            return Err(err.unwrap_or_else(|| {
                PyBufferError::new_err("object does not support the buffer protocol")
            }));
        }
    }
    unreachable!()
}

// ------------------------------------------------------------------- Buffer

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
struct Buffer {
    inner: Mutex<Option<Arc<RBuffer>>>,
    readonly: bool,
    nbytes: usize,
    // Keep order: the fgds buffer (above) goes before the memory it refers to.
    view: Mutex<Option<View>>,
    owner: Mutex<Option<PyObject>>,
    /// The library's cached registration (`Buffer.for_device`): others
    /// hold it too, so `close()` only lets go of this reference.
    shared: bool,
}

/// `(pointer, bytes, read-only)` of a `__cuda_array_interface__` (C-contiguous, not empty).
fn cai_range(cai: &Bound<'_, PyAny>) -> PyResult<(u64, usize, bool)> {
    let (ptr, ro): (u64, bool) = cai.get_item("data")?.extract()?;
    let shape: Vec<usize> = cai.get_item("shape")?.extract()?;
    let typestr: String = cai.get_item("typestr")?.extract()?;
    let itemsize: usize = typestr
        .get(2..)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| PyValueError::new_err(format!("bad typestr {typestr:?}")))?;
    let strides: Option<Vec<isize>> = match cai.get_item("strides") {
        Ok(s) if !s.is_none() => Some(s.extract()?),
        _ => None,
    };
    check_contiguous(&shape, strides.as_deref(), itemsize as isize)?;
    let size = shape.iter().product::<usize>() * itemsize;
    if size == 0 || ptr == 0 {
        return Err(PyValueError::new_err(
            "cannot register an empty device array",
        ));
    }
    Ok((ptr, size, ro))
}

/// GPU memory of an object that is not an `fgds.Buffer`: a CUDA array
/// (`__cuda_array_interface__`) or a DLPack tensor on a CUDA or ROCm device.
struct GpuRange {
    ptr: u64,
    len: usize,
    readonly: bool,
    hip: bool,
    /// What keeps the memory alive and in place: the object (and the DLPack
    /// capsule).
    owner: PyObject,
}

/// The GPU memory of `obj` when it is not an `fgds.Buffer`, for I/O through
/// the library's staging pool and registration cache (`fgds::gpucache`)
/// instead of a registration per call.
fn unregistered_gpu(obj: &Bound<'_, PyAny>) -> PyResult<Option<GpuRange>> {
    if obj.downcast::<Buffer>().is_ok() {
        return Ok(None);
    }
    if obj.hasattr("__cuda_array_interface__")? {
        let (ptr, len, readonly) = cai_range(&obj.getattr("__cuda_array_interface__")?)?;
        return Ok(Some(GpuRange {
            ptr,
            len,
            readonly,
            hip: false,
            owner: obj.clone().unbind(),
        }));
    }
    if obj.hasattr("__dlpack__")? && obj.hasattr("__dlpack_device__")? {
        let dev: (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
        if dev.0 == DL_CUDA || dev.0 == DL_ROCM {
            let (ptr, len, _, owner) = dlpack_range(obj)?;
            return Ok(Some(GpuRange {
                ptr,
                len,
                readonly: false,
                hip: dev.0 == DL_ROCM,
                owner,
            }));
        }
    }
    Ok(None)
}

/// A DLPack tensor's memory: `(pointer, bytes, device type, owner)`, the
/// owner holding the object and its capsule.
fn dlpack_range(obj: &Bound<'_, PyAny>) -> PyResult<(u64, usize, i32, PyObject)> {
    let cap = obj.call_method0("__dlpack__")?;
    // SAFETY: GIL held; the capsule name is checked by GetPointer.
    let p = unsafe { pyo3::ffi::PyCapsule_GetPointer(cap.as_ptr(), c"dltensor".as_ptr()) };
    if p.is_null() {
        return Err(PyErr::take(obj.py()).unwrap_or_else(|| {
            PyTypeError::new_err("__dlpack__ did not return a dltensor capsule")
        }));
    }
    // SAFETY: a "dltensor" capsule points to a DLManagedTensor whose
    // first member is the DLTensor; it stays valid while the capsule
    // (kept in the owner) lives.
    let t = unsafe { &*(p as *const DLTensor) };
    let ndim = t.ndim.max(0) as usize;
    // SAFETY: shape/strides have ndim entries (strides may be NULL).
    let shape: Vec<usize> = (0..ndim)
        .map(|i| unsafe { *t.shape.add(i) } as usize)
        .collect();
    let strides: Option<Vec<isize>> = if t.strides.is_null() {
        None
    } else {
        // SAFETY: see above.
        Some(
            (0..ndim)
                .map(|i| unsafe { *t.strides.add(i) } as isize)
                .collect(),
        )
    };
    let bits = usize::from(t.dtype.bits) * usize::from(t.dtype.lanes.max(1));
    if bits % 8 != 0 {
        return Err(PyValueError::new_err(
            "sub-byte DLPack dtypes are not supported",
        ));
    }
    let itemsize = bits / 8;
    // DLPack strides are in elements.
    check_contiguous(
        &shape,
        strides
            .as_ref()
            .map(|s| s.iter().map(|x| x * itemsize as isize).collect::<Vec<_>>())
            .as_deref(),
        itemsize as isize,
    )?;
    let size = shape.iter().product::<usize>() * itemsize;
    let ptr = t.data as u64 + t.byte_offset;
    if size == 0 || ptr == 0 {
        return Err(PyValueError::new_err(
            "cannot register an empty DLPack tensor",
        ));
    }
    let owner = PyTuple::new(obj.py(), [obj.clone(), cap.clone()])?
        .into_any()
        .unbind();
    Ok((ptr, size, t.device.device_type, owner))
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

    fn get(&self) -> PyResult<Arc<RBuffer>> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| os_err(libc::EBADF, "buffer is closed"))
    }

    fn from_object(obj: &Bound<'_, PyAny>) -> PyResult<Buffer> {
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
        let (ptr, len, ro) = (
            view.0.buf as *mut u8,
            view.0.len as usize,
            view.0.readonly != 0,
        );
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
        // Registration (export, REG_BUFFER, mmap) without the GIL.
        let b = obj
            .py()
            .allow_threads(|| RBuffer::from_cuda(ptr, size as u64))
            .map_err(to_py)?;
        Ok(Buffer::new(b, ro, None, Some(obj.clone().unbind())))
    }

    fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let (ptr, size, device_type, owner) = dlpack_range(obj)?;
        // GPU memory is registered (export, REG_BUFFER, mmap) without the GIL.
        let py = obj.py();
        let b = match device_type {
            DL_CUDA => py.allow_threads(|| RBuffer::from_cuda(ptr, size as u64)),
            DL_ROCM => py.allow_threads(|| RBuffer::from_hip(ptr, size as u64)),
            DL_CPU | DL_CUDA_HOST | DL_ROCM_HOST => {
                // SAFETY: the capsule (owner) keeps the tensor alive.
                unsafe { RBuffer::from_host_ptr(ptr as *mut u8, size) }
            }
            d => {
                return Err(PyValueError::new_err(format!(
                    "unsupported DLPack device type {d}"
                )))
            }
        }
        .map_err(to_py)?;
        Ok(Buffer::new(b, false, None, Some(owner)))
    }
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

const DL_CPU: i32 = 1;
const DL_CUDA: i32 = 2;
const DL_CUDA_HOST: i32 = 3;
const DL_ROCM: i32 = 10;
const DL_ROCM_HOST: i32 = 11;

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}
#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}
#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

/// Checks row-major contiguity; `strides` in bytes.
fn check_contiguous(shape: &[usize], strides: Option<&[isize]>, itemsize: isize) -> PyResult<()> {
    let Some(st) = strides else { return Ok(()) };
    let mut expect = itemsize;
    for (d, s) in shape.iter().zip(st).rev() {
        if *d != 1 && *s != expect {
            return Err(PyValueError::new_err(
                "array is not C-contiguous: pass a contiguous copy (e.g. .contiguous() / numpy.ascontiguousarray)",
            ));
        }
        expect *= *d as isize;
    }
    Ok(())
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
        let b = py
            .allow_threads(|| RBuffer::from_cuda(ptr, size))
            .map_err(to_py)?;
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
        let b = py
            .allow_threads(|| RBuffer::from_hip(ptr, size))
            .map_err(to_py)?;
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

/// The memory of a request's buffer argument: the fgds buffer it lies in,
/// where it starts there and its bytes, and what keeps it alive.
struct Held {
    // Dropped before `py_buf`: a Buffer made for the call then holds the last reference to
    // the fgds buffer and lets it go without the GIL (Buffer's Drop).
    buf: Arc<RBuffer>,
    /// The object's first byte in `buf` (not 0 in a cached registration of its allocation).
    base: usize,
    /// The object's bytes.
    len: usize,
    /// The `fgds.Buffer`, or the object (and DLPack capsule) whose memory a
    /// cached registration covers.
    py_buf: PyObject,
}

const READ_ONLY: &str = "cannot read into a read-only buffer (e.g. bytes): pass a bytearray, a writable numpy array or fgds.Buffer.alloc()";

/// The one resolver of a request's buffer argument: an `fgds.Buffer` as it
/// is (a registration the caller made); GPU memory of another object (a CUDA
/// array, a DLPack tensor) through the library's cached registration of its
/// allocation (`fgds::gpucache::buffer_for`: no registration per call once
/// the allocation's window is cached); host memory wrapped for the call.
fn hold(obj: &Bound<'_, PyAny>, for_read: bool) -> PyResult<Held> {
    if let Some(g) = unregistered_gpu(obj)? {
        if for_read && g.readonly {
            return Err(PyValueError::new_err(READ_ONLY));
        }
        let (buf, base) = cached_gpu(obj.py(), g.hip, g.ptr, g.len)?;
        return Ok(Held {
            buf,
            base,
            len: g.len,
            py_buf: g.owner,
        });
    }
    let py_buf: Py<Buffer> = match obj.downcast::<Buffer>() {
        Ok(b) => b.clone().unbind(),
        Err(_) => Py::new(obj.py(), Buffer::from_object(obj)?)?,
    };
    let b = py_buf.get();
    if for_read && b.readonly {
        return Err(PyValueError::new_err(READ_ONLY));
    }
    let buf = b.get()?;
    Ok(Held {
        len: buf.len(),
        buf,
        base: 0,
        py_buf: py_buf.into_any(),
    })
}

/// The GPU runtime: HIP's, else CUDA's.
fn runtime(hip: bool) -> fgds::Result<Arc<fgds::gpu::Runtime>> {
    if hip {
        fgds::gpu::Runtime::hip()
    } else {
        fgds::gpu::Runtime::cuda()
    }
}

/// The library's cached registration holding `size` bytes of GPU memory at
/// `ptr` that the caller did not register, and `ptr`'s offset in it
/// (`fgds::gpucache::buffer_for`), made without the GIL.
fn cached_gpu(py: Python<'_>, hip: bool, ptr: u64, size: usize) -> PyResult<(Arc<RBuffer>, usize)> {
    py.allow_threads(|| fgds::gpucache::buffer_for(&runtime(hip)?, ptr, size))
        .map(|(b, off, _)| (b, off))
        .map_err(to_py)
}

/// I/O on GPU memory that is not registered, without the GIL
/// (`fgds::gpucache`: a staging buffer or the cached registration of its
/// allocation).
fn gpu_io(
    py: Python<'_>,
    f: &Arc<FileHandle>,
    write: bool,
    hip: bool,
    ptr: u64,
    size: usize,
    file_offset: u64,
) -> PyResult<usize> {
    if size == 0 {
        return Err(PyValueError::new_err("size must be > 0"));
    }
    py.allow_threads(|| {
        let rt = runtime(hip)?;
        if write {
            fgds::gpucache::write(f, &rt, ptr, size, file_offset)
        } else {
            fgds::gpucache::read(f, &rt, ptr, size, file_offset)
        }
    })
    .map(|(n, _)| n)
    .map_err(to_py)
}

/// `gpucache_counters() -> dict`: the process's REG_BUFFER and UNREG_BUFFER
/// calls through the library and what its staging pool and registration
/// cache did (`fgds::gpucache::counters`).
#[pyfunction]
fn gpucache_counters(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let (reg, unreg) = fgds::device::registration_counts();
    let c = fgds::gpucache::counters();
    let d = PyDict::new(py);
    d.set_item("registrations", reg)?;
    d.set_item("unregistrations", unreg)?;
    d.set_item("staged", c.staged)?;
    d.set_item("cached", c.cached)?;
    d.set_item("uncached", c.uncached)?;
    d.set_item("pool_buffers", c.pool_buffers)?;
    d.set_item("pool_failures", c.pool_failures)?;
    d.set_item("bounced", c.bounced)?;
    d.set_item("cache_hits", c.cache_hits)?;
    d.set_item("cache_registrations", c.cache_registrations)?;
    d.set_item("cache_stale", c.cache_stale)?;
    d.set_item("cache_evicted", c.cache_evicted)?;
    d.set_item("cache_full", c.cache_full)?;
    d.set_item("cache_entries", c.cache_entries)?;
    d.set_item("cache_bytes", c.cache_bytes)?;
    Ok(d)
}

fn causes_dict<'py>(py: Python<'py>, f: &fgds::Fallbacks) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for c in fgds::FallbackCause::ALL {
        d.set_item(c.name(), f.get(c))?;
    }
    Ok(d)
}

/// `fallbacks() -> dict`: the process's fallbacks from peer to peer to the
/// bounce path since it started, by cause (`fgds::stats::fallbacks`):
/// `{"calls": {...}, "registrations": {...}}`, each keyed `busy` (EBUSY),
/// `not_supported` (EOPNOTSUPP), `no_device`, `misaligned`, `no_direct`,
/// `asked`, `other`. `calls`: every file's calls that fell back;
/// `registrations`: registrations of GPU memory that bounce (a
/// `Buffer.from_cuda`/`from_hip` of its own, or a request on memory never
/// registered that the library served through the bounce path).
#[pyfunction]
fn fallbacks(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let f = fgds::stats::fallbacks();
    let d = PyDict::new(py);
    d.set_item("calls", causes_dict(py, &f.calls)?)?;
    d.set_item("registrations", causes_dict(py, &f.registrations)?)?;
    Ok(d)
}

/// `_write_run_report()`: under `fgds run`, appends this process's counters
/// to its report (the package calls it at exit).
#[pyfunction]
fn _write_run_report() {
    fgds::report::write_run_report("python");
}

/// `parse_size(value: str) -> int | None`: a size as every `FGDS_*`
/// setting takes it (`1048576`, `1M`, `1MiB`, `1MB`, `4k`; the library's
/// `fgds::env::parse_size`), or None.
#[pyfunction]
fn parse_size(value: &str) -> Option<u64> {
    fgds::env::parse_size(value)
}

/// `parse_bool(value: str) -> bool | None`: a boolean as every `FGDS_*`
/// setting takes it (`1/0/true/false/yes/no/on/off`, any case; the
/// library's `fgds::env::parse_bool`), or None.
#[pyfunction]
fn parse_bool(value: &str) -> Option<bool> {
    fgds::env::parse_bool(value)
}

fn check_range(len: usize, buf_offset: usize, size: Option<usize>) -> PyResult<usize> {
    if buf_offset > len {
        return Err(os_err(
            libc::ERANGE,
            format!("out of bounds: buf_offset {buf_offset} > buffer length {len}"),
        ));
    }
    let size = size.unwrap_or(len - buf_offset);
    if size == 0 {
        return Err(PyValueError::new_err("size must be > 0"));
    }
    Ok(size)
}

// ---------------------------------------------------------------------- File

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
struct File {
    inner: Mutex<Option<Arc<FileHandle>>>,
    path: Option<String>,
}

impl File {
    fn get(&self) -> PyResult<Arc<FileHandle>> {
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
        Some("auto") => fgds::BounceRead::Auto,
        Some("direct") => fgds::BounceRead::Direct,
        Some("buffered") => fgds::BounceRead::Buffered,
        Some(o) => {
            return Err(to_py(fgds::Error::InvalidArgument(format!(
                "bounce_read={o:?}: not \"auto\", \"direct\" or \"buffered\""
            ))))
        }
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

/// Segments: a list of Buffers/buffer-like objects (whole) or of
/// `(buf, offset, size)` / `(buf, offset)` tuples.
type Segs = (Vec<Held>, Vec<(usize, usize)>);

fn parse_segments(list: &Bound<'_, PyAny>, for_read: bool) -> PyResult<Segs> {
    let mut held = Vec::new();
    let mut ranges = Vec::new();
    for (i, item) in list.try_iter()?.enumerate() {
        let item = item?;
        let (obj, off, size) = if let Ok(t) = item.downcast::<PyTuple>() {
            match t.len() {
                2 => (t.get_item(0)?, t.get_item(1)?.extract::<usize>()?, None),
                3 => (
                    t.get_item(0)?,
                    t.get_item(1)?.extract::<usize>()?,
                    Some(t.get_item(2)?.extract::<usize>()?),
                ),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "segment {i}: expected (buf, offset, size), got a tuple of {}",
                        t.len()
                    )))
                }
            }
        } else {
            (item, 0, None)
        };
        let h = hold(&obj, for_read).map_err(|e| {
            let py = obj.py();
            let msg = format!("segment {i}: {}", e.value(py));
            if e.is_instance_of::<FgdsError>(py) {
                let errno = e
                    .value(py)
                    .getattr("errno")
                    .and_then(|x| x.extract::<i32>())
                    .unwrap_or(libc::EINVAL);
                FgdsError::new_err((errno, msg))
            } else if e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<PyBufferError>(py) {
                PyTypeError::new_err(msg)
            } else {
                PyValueError::new_err(msg)
            }
        })?;
        let size = size.unwrap_or(h.len.saturating_sub(off));
        if off.checked_add(size).is_none_or(|end| end > h.len) {
            return Err(os_err(
                libc::ERANGE,
                format!(
                    "segment {i}: offset {off} + size {size} is past its {} bytes",
                    h.len
                ),
            ));
        }
        ranges.push((h.base + off, size));
        held.push(h);
    }
    Ok((held, ranges))
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
        let f = self.get()?;
        if let Some(GpuRange {
            ptr,
            len,
            readonly: ro,
            hip,
            ..
        }) = unregistered_gpu(buf)?
        {
            if ro {
                return Err(PyValueError::new_err(
                    "cannot read into a read-only device array",
                ));
            }
            let size = check_range(len, buf_offset, size)?;
            return gpu_io(
                py,
                &f,
                false,
                hip,
                ptr + buf_offset as u64,
                size,
                file_offset,
            );
        }
        let h = hold(buf, true)?;
        let size = check_range(h.len, buf_offset, size)?;
        let (b, off) = (h.buf.clone(), h.base + buf_offset);
        py.allow_threads(|| f.read(&b, off, size, file_offset))
            .map_err(to_py)
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
        let f = self.get()?;
        if let Some(GpuRange { ptr, len, hip, .. }) = unregistered_gpu(buf)? {
            let size = check_range(len, buf_offset, size)?;
            return gpu_io(
                py,
                &f,
                true,
                hip,
                ptr + buf_offset as u64,
                size,
                file_offset,
            );
        }
        let h = hold(buf, false)?;
        let size = check_range(h.len, buf_offset, size)?;
        let (b, off) = (h.buf.clone(), h.base + buf_offset);
        py.allow_threads(|| f.write(&b, off, size, file_offset))
            .map_err(to_py)
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
        gpu_io(py, &f, false, hip, ptr, size, file_offset)
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
        gpu_io(py, &f, true, hip, ptr, size, file_offset)
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

// -------------------------------------------------------------------- Future

/// An asynchronous read or write: `wait(timeout=None) -> int`, `done()`,
/// `result()`, `cancel()`. The buffer and file stay alive until it ends.
#[pyclass(module = "fgds._fgds", frozen)]
struct Future {
    // Dropped first: IoHandle's Drop waits for the request.
    handle: Mutex<Option<IoHandle>>,
    result: Mutex<Option<Result<usize, (i32, String)>>>,
    _refs: Vec<PyObject>,
}

impl Future {
    fn finish(&self, r: fgds::Result<usize>) {
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(r.map_err(|e| (e.errno(), e.to_string())));
    }

    fn take_result(&self) -> Option<PyResult<usize>> {
        self.result
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .map(|r| r.map_err(|(e, m)| os_err(e, m)))
    }
}

#[pymethods]
impl Future {
    /// Waits (GIL released) and returns the byte count; raises FgdsError on
    /// failure, with ETIMEDOUT if `timeout` (seconds) passes first.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        if let Some(r) = self.take_result() {
            return r;
        }
        let mut g = self.handle.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = self.take_result() {
            return r;
        }
        let Some(h) = g.as_mut() else {
            return Err(os_err(libc::EBADF, "future has no request"));
        };
        let r = match timeout {
            None => py.allow_threads(|| loop {
                match h.wait_timeout(Duration::from_secs(3600)) {
                    Err(fgds::Error::Timeout) => continue,
                    r => break r,
                }
            }),
            Some(t) => {
                if !(t >= 0.0 && t.is_finite()) {
                    return Err(PyValueError::new_err("timeout must be >= 0 seconds"));
                }
                let r = py.allow_threads(|| h.wait_timeout(Duration::from_secs_f64(t)));
                if matches!(r, Err(fgds::Error::Timeout)) {
                    return Err(os_err(libc::ETIMEDOUT, "request still in flight"));
                }
                r
            }
        };
        self.finish(r);
        g.take();
        self.take_result().expect("result set")
    }

    /// `result(timeout=None)`: same as `wait`.
    #[pyo3(signature = (timeout=None))]
    fn result(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        self.wait(py, timeout)
    }

    /// Whether the request has finished (does not block).
    fn done(&self) -> bool {
        if self
            .result
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            return true;
        }
        let Ok(mut g) = self.handle.try_lock() else {
            return false;
        };
        match g.as_mut().and_then(|h| h.poll()) {
            Some(r) => {
                self.finish(r);
                true
            }
            None => g.is_none(),
        }
    }

    /// Asks the request to stop (it ends with ECANCELED if it had not finished).
    fn cancel(&self) {
        if let Ok(g) = self.handle.try_lock() {
            if let Some(h) = g.as_ref() {
                h.cancel();
            }
        }
    }

    fn __repr__(&self) -> String {
        format!("<fgds.Future done={}>", self.done())
    }
}

// -------------------------------------------------------------- StreamFuture

/// A read or write ordered on a CUDA stream: `done()`, `result()`. Synchronise the stream
/// (or wait for an event recorded after it) before asking for the result. The buffer and
/// file stay alive while this object does; keep it until the stream passed the request.
#[pyclass(module = "fgds._fgds", frozen)]
struct StreamFuture {
    req: fgds::StreamRequest,
    _refs: Vec<PyObject>,
}

#[pymethods]
impl StreamFuture {
    /// Whether the stream has run the request.
    fn done(&self) -> bool {
        self.req.result().is_some()
    }

    /// The byte count (short at the end of the file); raises FgdsError on failure, and with
    /// EINPROGRESS when the stream has not run the request yet.
    fn result(&self) -> PyResult<usize> {
        match self.req.result() {
            Some(r) => r.map_err(to_py),
            None => Err(os_err(
                libc::EINPROGRESS,
                "the stream has not run the request yet: synchronise the stream first",
            )),
        }
    }

    fn __repr__(&self) -> String {
        format!("<fgds.StreamFuture done={}>", self.done())
    }
}

// --------------------------------------------------------------------- Batch

/// `Batch(capacity=128)`: a cuFile-style batch. `submit(requests)` takes a
/// list of `(op, file, buf, size, file_offset, buf_offset, cookie)` tuples
/// (op "read"/"write"; trailing items optional: size defaults to the rest of
/// the buffer, offsets to 0, cookie to the request's index in the list) or
/// of dicts with those keys; `buf` may be a list of segments for a vectored
/// request (then `size`/`buf_offset` are ignored). `wait(min_nr=1,
/// timeout=None)` and `poll()` return `(cookie, status, result)` tuples,
/// status "complete", "failed", "canceled", "pending" or "timeout" and
/// result the byte count or a negative errno.
#[pyclass(module = "fgds._fgds")]
struct Batch {
    inner: Option<RBatch>,
    next: u64,
    pending: HashMap<u64, (PyObject, Vec<Held>, Py<File>)>,
}

#[pymethods]
impl Batch {
    #[new]
    #[pyo3(signature = (capacity=128))]
    fn py_new(capacity: usize) -> PyResult<Batch> {
        Ok(Batch {
            inner: Some(RBatch::new(capacity).map_err(to_py)?),
            next: 0,
            pending: HashMap::new(),
        })
    }

    #[getter]
    fn capacity(&self) -> PyResult<usize> {
        Ok(self.get()?.capacity())
    }

    #[getter]
    fn in_flight(&self) -> PyResult<usize> {
        Ok(self.get()?.in_flight())
    }

    fn submit(&mut self, py: Python<'_>, requests: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut params = Vec::new();
        let mut entries = Vec::new();
        for (i, r) in requests.try_iter()?.enumerate() {
            let r = r?;
            let get = |name: &str, idx: usize| -> PyResult<Option<Bound<'_, PyAny>>> {
                if let Ok(d) = r.downcast::<PyDict>() {
                    return Ok(d.get_item(name)?.filter(|v| !v.is_none()));
                }
                let t = r.downcast::<PyTuple>().map_err(|_| {
                    PyTypeError::new_err(format!("request {i}: expected a tuple or a dict"))
                })?;
                Ok(if idx < t.len() {
                    Some(t.get_item(idx)?).filter(|v| !v.is_none())
                } else {
                    None
                })
            };
            let req = |name: &str, idx: usize| -> PyResult<Bound<'_, PyAny>> {
                get(name, idx)?
                    .ok_or_else(|| PyValueError::new_err(format!("request {i}: missing {name}")))
            };
            let op: String = req("op", 0)?.extract()?;
            let read = match op.as_str() {
                "read" | "r" => true,
                "write" | "w" => false,
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "request {i}: op must be 'read' or 'write', not {op:?}"
                    )))
                }
            };
            let file: Py<File> = req("file", 1)?
                .downcast::<File>()
                .map_err(|_| {
                    PyTypeError::new_err(format!("request {i}: file must be an fgds.File"))
                })?
                .clone()
                .unbind();
            let fh = file.get().get()?;
            let bufobj = req("buf", 2)?;
            let size: Option<usize> = get("size", 3)?.map(|v| v.extract()).transpose()?;
            let file_off: u64 = get("file_offset", 4)?
                .map(|v| v.extract())
                .transpose()?
                .unwrap_or(0);
            let buf_off: usize = get("buf_offset", 5)?
                .map(|v| v.extract())
                .transpose()?
                .unwrap_or(0);
            let cookie: PyObject = match get("cookie", 6)? {
                Some(c) => c.unbind(),
                None => i.into_pyobject(py)?.into_any().unbind(),
            };
            let (held, target) = if bufobj.downcast::<PyList>().is_ok() {
                let (held, ranges) = parse_segments(&bufobj, read)?;
                let segs = held
                    .iter()
                    .zip(&ranges)
                    .map(|(h, (o, s))| fgds::OwnedSegment {
                        buffer: h.buf.clone(),
                        offset: *o,
                        size: *s,
                    })
                    .collect();
                (held, IoTarget::Vectored(segs))
            } else {
                let h = hold(&bufobj, read)?;
                let size = check_range(h.len, buf_off, size)?;
                let t = IoTarget::Plain {
                    buffer: h.buf.clone(),
                    buf_off: h.base + buf_off,
                    size,
                };
                (vec![h], t)
            };
            let id = self.next + i as u64;
            params.push(IoParams {
                cookie: id,
                file: fh,
                op: if read {
                    fgds::Op::Read
                } else {
                    fgds::Op::Write
                },
                file_off,
                target,
            });
            entries.push((id, (cookie, held, file)));
        }
        let b = self.get_mut()?;
        // Without the GIL: the ring's submission is I/O.
        py.allow_threads(|| b.submit(&params)).map_err(to_py)?;
        self.next += params.len() as u64;
        self.pending.extend(entries);
        Ok(())
    }

    /// Reaps finished requests without blocking.
    fn poll(&mut self, py: Python<'_>) -> PyResult<Vec<(PyObject, &'static str, i64)>> {
        let b = self.get_mut()?;
        let ev = py.allow_threads(|| b.poll());
        Ok(self.events(py, ev))
    }

    /// Waits (GIL released) until `min_nr` requests have finished or
    /// `timeout` seconds pass, and reaps the finished ones.
    #[pyo3(signature = (min_nr=1, timeout=None))]
    fn wait(
        &mut self,
        py: Python<'_>,
        min_nr: usize,
        timeout: Option<f64>,
    ) -> PyResult<Vec<(PyObject, &'static str, i64)>> {
        let to = match timeout {
            None => None,
            Some(t) if t >= 0.0 && t.is_finite() => Some(Duration::from_secs_f64(t)),
            Some(_) => return Err(PyValueError::new_err("timeout must be >= 0 seconds")),
        };
        let b = self
            .inner
            .as_mut()
            .ok_or_else(|| os_err(libc::EBADF, "batch is closed"))?;
        let ev = py.allow_threads(|| b.wait(min_nr, to));
        Ok(self.events(py, ev))
    }

    /// Cancels what has not started; returns how many were canceled.
    fn cancel(&mut self) -> PyResult<usize> {
        Ok(self.get_mut()?.cancel())
    }

    /// Cancels what has not started and waits for the rest.
    fn close(&mut self, py: Python<'_>) {
        if let Some(b) = self.inner.take() {
            py.allow_threads(|| drop(b));
        }
        self.pending.clear();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }
}

impl Batch {
    fn get(&self) -> PyResult<&RBatch> {
        self.inner
            .as_ref()
            .ok_or_else(|| os_err(libc::EBADF, "batch is closed"))
    }

    fn get_mut(&mut self) -> PyResult<&mut RBatch> {
        self.inner
            .as_mut()
            .ok_or_else(|| os_err(libc::EBADF, "batch is closed"))
    }

    fn events(
        &mut self,
        py: Python<'_>,
        ev: Vec<fgds::Event>,
    ) -> Vec<(PyObject, &'static str, i64)> {
        ev.into_iter()
            .map(|e| {
                let status = match e.status {
                    fgds::Status::Complete => "complete",
                    fgds::Status::Failed => "failed",
                    fgds::Status::Canceled => "canceled",
                    fgds::Status::Pending => "pending",
                    fgds::Status::Timeout => "timeout",
                };
                let fin = matches!(
                    e.status,
                    fgds::Status::Complete | fgds::Status::Failed | fgds::Status::Canceled
                );
                let cookie = if fin {
                    self.pending.remove(&e.cookie).map(|p| p.0)
                } else {
                    self.pending.get(&e.cookie).map(|p| p.0.clone_ref(py))
                };
                let cookie = cookie.unwrap_or_else(|| py.None());
                (cookie, status, e.result)
            })
            .collect()
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // Wait for requests before their buffers are released.
        if let Some(b) = self.inner.take() {
            Python::with_gil(|py| py.allow_threads(|| drop(b)));
        }
    }
}

// ------------------------------------------------------------------ module

/// `list_devices() -> list[dict]`: the fgds nodes (empty without the module).
#[pyfunction]
fn list_devices(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let devs = fgds::list_devices().map_err(to_py)?;
    devs.iter()
        .map(|d| {
            let x = PyDict::new(py);
            x.set_item("name", &d.name)?;
            x.set_item("dev_path", d.dev_path.to_string_lossy())?;
            x.set_item("pci_address", &d.pci_address)?;
            x.set_item("vendor", d.vendor)?;
            x.set_item("device", d.device)?;
            let bars: Vec<(u32, u64, u64)> =
                d.bars.iter().map(|b| (b.index, b.start, b.size)).collect();
            x.set_item("bars", bars)?;
            Ok(x)
        })
        .collect()
}

/// Whether the fgds kernel module is loaded.
#[pyfunction]
fn module_loaded() -> bool {
    fgds::device::module_loaded()
}

/// `strerror(errno) -> str`.
#[pyfunction]
fn strerror(code: i32) -> &'static str {
    fgds::error::strerror(code)
}

/// `config() -> dict`: the defaults in force, from the `FGDS_*`
/// environment variables read once per process (`strict`, `chunk_size`,
/// `queue_depth`, `threads`, `use_io_uring`, `direct`, `log`, `parallel`,
/// `split_size`, `bounce_chunk_size`, `bounce_split_size`, `bounce_read`), with `set` (the variables
/// set and their values) and `errors` (one message per bad value; opening
/// a file then fails with it).
#[pyfunction]
fn config(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let e = fgds::env::env();
    let d = PyDict::new(py);
    d.set_item("strict", e.strict)?;
    d.set_item("chunk_size", e.chunk_size)?;
    d.set_item("queue_depth", e.queue_depth)?;
    d.set_item("threads", e.threads)?;
    d.set_item("use_io_uring", e.use_io_uring)?;
    d.set_item("direct", e.direct)?;
    d.set_item(
        "log",
        match e.log {
            fgds::env::LogLevel::Off => "off",
            fgds::env::LogLevel::Info => "info",
            fgds::env::LogLevel::Debug => "debug",
        },
    )?;
    d.set_item("parallel", e.parallel)?;
    d.set_item("split_size", e.split_size)?;
    d.set_item("bounce_chunk_size", e.bounce_chunk_size)?;
    d.set_item("bounce_split_size", e.bounce_split_size)?;
    d.set_item(
        "bounce_read",
        match e.bounce_read {
            fgds::BounceRead::Auto => "auto",
            fgds::BounceRead::Direct => "direct",
            fgds::BounceRead::Buffered => "buffered",
        },
    )?;
    let set = PyDict::new(py);
    for (k, v) in &e.set {
        set.set_item(*k, v)?;
    }
    d.set_item("set", set)?;
    d.set_item("errors", e.errors.clone())?;
    Ok(d)
}

/// `strhint(errno) -> str`: what to do about an errno (the hint that
/// `FgdsError` messages end with).
#[pyfunction]
fn strhint(code: i32) -> &'static str {
    fgds::error::hint(code)
}

/// `errno_table() -> list[dict]`: the library's table of error text, one
/// dict per errno (`errno`, `name`, `meaning`, `hint`).
#[pyfunction]
fn errno_table(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    fgds::error::ERRNOS
        .iter()
        .map(|e| {
            let d = PyDict::new(py);
            d.set_item("errno", e.errno)?;
            d.set_item("name", e.name)?;
            d.set_item("meaning", e.meaning)?;
            d.set_item("hint", e.hint)?;
            Ok(d)
        })
        .collect()
}

#[pymodule]
fn _fgds(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("FgdsError", m.py().get_type::<FgdsError>())?;
    m.add_class::<Buffer>()?;
    m.add_class::<File>()?;
    m.add_class::<Future>()?;
    m.add_class::<StreamFuture>()?;
    m.add_class::<Batch>()?;
    m.add_function(wrap_pyfunction!(list_devices, m)?)?;
    m.add_function(wrap_pyfunction!(module_loaded, m)?)?;
    m.add_function(wrap_pyfunction!(strerror, m)?)?;
    m.add_function(wrap_pyfunction!(strhint, m)?)?;
    m.add_function(wrap_pyfunction!(config, m)?)?;
    m.add_function(wrap_pyfunction!(errno_table, m)?)?;
    m.add_function(wrap_pyfunction!(gpucache_counters, m)?)?;
    m.add_function(wrap_pyfunction!(fallbacks, m)?)?;
    m.add_function(wrap_pyfunction!(_write_run_report, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(parse_bool, m)?)?;
    m.add("IOV_MAX", fgds::FGDS_IOV_MAX)?;
    m.add("BATCH_IOV_MAX", fgds::FGDS_BATCH_IOV_MAX)?;
    m.add("DEFAULT_CHUNK_SIZE", fgds::engine::DEFAULT_CHUNK_SIZE)?;
    m.add("DEFAULT_QUEUE_DEPTH", fgds::engine::DEFAULT_QUEUE_DEPTH)?;
    m.add("DEFAULT_SPLIT_SIZE", fgds::engine::DEFAULT_SPLIT_SIZE)?;
    m.add(
        "DEFAULT_BOUNCE_CHUNK_SIZE",
        fgds::engine::DEFAULT_BOUNCE_CHUNK_SIZE,
    )?;
    m.add(
        "DEFAULT_BOUNCE_SPLIT_SIZE",
        fgds::engine::DEFAULT_BOUNCE_SPLIT_SIZE,
    )?;
    Ok(())
}
