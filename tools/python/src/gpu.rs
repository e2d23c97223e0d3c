//! I/O on GPU memory the caller never registered, through the library's
//! staging pool and registration cache (`fgds::gpucache`), without the GIL.

use crate::error::to_py;
use fgds::{Buffer as RBuffer, FileHandle};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;

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
pub(crate) fn cached_gpu(
    py: Python<'_>,
    hip: bool,
    ptr: u64,
    size: usize,
) -> PyResult<(Arc<RBuffer>, usize)> {
    py.allow_threads(|| fgds::gpucache::buffer_for(&runtime(hip)?, ptr, size))
        .map(|(b, off, _)| (b, off))
        .map_err(to_py)
}

/// A read (`read`) or write of GPU memory that is not registered, without the GIL
/// (`fgds::gpucache`: a staging buffer or the cached registration of its
/// allocation).
pub(crate) fn gpu_io(
    py: Python<'_>,
    f: &Arc<FileHandle>,
    read: bool,
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
        if read {
            fgds::gpucache::read(f, &rt, ptr, size, file_offset)
        } else {
            fgds::gpucache::write(f, &rt, ptr, size, file_offset)
        }
    })
    .map(|(n, _)| n)
    .map_err(to_py)
}
