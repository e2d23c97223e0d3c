//! What memory a Python object exposes: the buffer protocol (declared here,
//! as abi3-py39 hides it), `__cuda_array_interface__` and DLPack tensors,
//! each checked C-contiguous and not empty.

use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::ffi::{c_char, c_int, c_void};

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

pub(crate) struct View(Box<RawPyBuffer>);

impl View {
    /// `(pointer, bytes, read-only)` of the viewed memory.
    pub(crate) fn range(&self) -> (*mut u8, usize, bool) {
        (
            self.0.buf as *mut u8,
            self.0.len as usize,
            self.0.readonly != 0,
        )
    }
}

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

pub(crate) fn get_view(obj: &Bound<'_, PyAny>) -> PyResult<View> {
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

/// `(pointer, bytes, read-only)` of a `__cuda_array_interface__` (C-contiguous, not empty).
pub(crate) fn cai_range(cai: &Bound<'_, PyAny>) -> PyResult<(u64, usize, bool)> {
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

/// A DLPack tensor's memory: `(pointer, bytes, device type, owner)`, the
/// owner holding the object and its capsule.
pub(crate) fn dlpack_range(obj: &Bound<'_, PyAny>) -> PyResult<(u64, usize, i32, PyObject)> {
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

pub(crate) const DL_CPU: i32 = 1;
pub(crate) const DL_CUDA: i32 = 2;
pub(crate) const DL_CUDA_HOST: i32 = 3;
pub(crate) const DL_ROCM: i32 = 10;
pub(crate) const DL_ROCM_HOST: i32 = 11;

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
