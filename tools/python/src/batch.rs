//! `fgds.Batch`: a cuFile-style batch of requests, submitted as tuples or
//! dicts and reaped as `(cookie, status, result)` events.

use crate::error::{os_err, to_py};
use crate::file::File;
use crate::request::{check_range, hold, parse_segments, Held};
use fgds::{Batch as RBatch, IoParams, IoTarget};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::collections::HashMap;
use std::time::Duration;

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
pub(crate) struct Batch {
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
        let b = self.get_mut()?;
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
