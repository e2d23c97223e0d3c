//! The exception of the module, `fgds.FgdsError` (a subclass of `OSError`
//! carrying `errno`), and the conversion of the library's errors to it.

use pyo3::create_exception;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

create_exception!(
    fgds,
    FgdsError,
    PyOSError,
    "An fgds operation failed; `errno` says why (subclass of OSError)."
);

/// An `FgdsError`: the message, then what to do, from the library's one
/// table of error text (`fgds::error::ERRNOS`).
pub(crate) fn os_err(errno: i32, msg: impl std::fmt::Display) -> PyErr {
    FgdsError::new_err((errno, format!("{msg}; {}", fgds::error::hint(errno))))
}

pub(crate) fn to_py(e: fgds::Error) -> PyErr {
    os_err(e.errno(), e)
}
