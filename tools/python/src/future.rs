//! The handles of requests in flight: `fgds.Future` (an asynchronous read
//! or write) and `fgds.StreamFuture` (one ordered on a CUDA stream).

use crate::error::{os_err, to_py};
use fgds::IoHandle;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Mutex;
use std::time::Duration;

/// An asynchronous read or write: `wait(timeout=None) -> int`, `done()`,
/// `result()`, `cancel()`. The buffer and file stay alive until it ends.
#[pyclass(module = "fgds._fgds", frozen)]
pub(crate) struct Future {
    // Dropped first: IoHandle's Drop waits for the request.
    pub(crate) handle: Mutex<Option<IoHandle>>,
    pub(crate) result: Mutex<Option<Result<usize, (i32, String)>>>,
    pub(crate) _refs: Vec<PyObject>,
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

/// A read or write ordered on a CUDA stream: `done()`, `result()`. Synchronise the stream
/// (or wait for an event recorded after it) before asking for the result. The buffer and
/// file stay alive while this object does; keep it until the stream passed the request.
#[pyclass(module = "fgds._fgds", frozen)]
pub(crate) struct StreamFuture {
    pub(crate) req: fgds::StreamRequest,
    pub(crate) _refs: Vec<PyObject>,
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
