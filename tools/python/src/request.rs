//! A request's buffer arguments: one object (`hold`) or a list of segments
//! (`parse_segments`) resolved to the fgds buffers they lie in, the ranges
//! checked, and what keeps the memory alive while the request runs.

use crate::buffer::Buffer;
use crate::error::{os_err, FgdsError};
use crate::gpu::cached_gpu;
use crate::memory::{cai_range, dlpack_range, DL_CUDA, DL_ROCM};
use fgds::Buffer as RBuffer;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::Arc;

/// The memory of a request's buffer argument: the fgds buffer it lies in,
/// where it starts there and its bytes, and what keeps it alive.
pub(crate) struct Held {
    // Dropped before `py_buf`: a Buffer made for the call then holds the last reference to
    // the fgds buffer and lets it go without the GIL (Buffer's Drop).
    pub(crate) buf: Arc<RBuffer>,
    /// The object's first byte in `buf` (not 0 in a cached registration of its allocation).
    pub(crate) base: usize,
    /// The object's bytes.
    pub(crate) len: usize,
    /// The `fgds.Buffer`, or the object (and DLPack capsule) whose memory a
    /// cached registration covers.
    pub(crate) py_buf: PyObject,
}

const READ_ONLY: &str = "cannot read into a read-only buffer (e.g. bytes): pass a bytearray, a writable numpy array or fgds.Buffer.alloc()";

/// The one resolver of a request's buffer argument: an `fgds.Buffer` as it
/// is (a registration the caller made); GPU memory of another object (a CUDA
/// array, a DLPack tensor) through the library's cached registration of its
/// allocation (`fgds::gpucache::buffer_for`: no registration per call once
/// the allocation's window is cached); host memory wrapped for the call.
pub(crate) fn hold(obj: &Bound<'_, PyAny>, for_read: bool) -> PyResult<Held> {
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

/// GPU memory of an object that is not an `fgds.Buffer`: a CUDA array
/// (`__cuda_array_interface__`) or a DLPack tensor on a CUDA or ROCm device.
pub(crate) struct GpuRange {
    pub(crate) ptr: u64,
    pub(crate) len: usize,
    pub(crate) readonly: bool,
    pub(crate) hip: bool,
    /// What keeps the memory alive and in place: the object (and the DLPack
    /// capsule).
    pub(crate) owner: PyObject,
}

/// The GPU memory of `obj` when it is not an `fgds.Buffer`, for I/O through
/// the library's staging pool and registration cache (`fgds::gpucache`)
/// instead of a registration per call.
pub(crate) fn unregistered_gpu(obj: &Bound<'_, PyAny>) -> PyResult<Option<GpuRange>> {
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

pub(crate) fn check_range(len: usize, buf_offset: usize, size: Option<usize>) -> PyResult<usize> {
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

/// Segments: a list of Buffers/buffer-like objects (whole) or of
/// `(buf, offset, size)` / `(buf, offset)` tuples.
pub(crate) type Segs = (Vec<Held>, Vec<(usize, usize)>);

pub(crate) fn parse_segments(list: &Bound<'_, PyAny>, for_read: bool) -> PyResult<Segs> {
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
