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

mod batch;
mod buffer;
mod error;
mod file;
mod future;
mod gpu;
mod info;
mod memory;
mod request;

use error::FgdsError;
use pyo3::prelude::*;

#[pymodule]
fn _fgds(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("FgdsError", m.py().get_type::<FgdsError>())?;
    m.add_class::<buffer::Buffer>()?;
    m.add_class::<file::File>()?;
    m.add_class::<future::Future>()?;
    m.add_class::<future::StreamFuture>()?;
    m.add_class::<batch::Batch>()?;
    m.add_function(wrap_pyfunction!(info::list_devices, m)?)?;
    m.add_function(wrap_pyfunction!(info::module_loaded, m)?)?;
    m.add_function(wrap_pyfunction!(info::strerror, m)?)?;
    m.add_function(wrap_pyfunction!(info::strhint, m)?)?;
    m.add_function(wrap_pyfunction!(info::config, m)?)?;
    m.add_function(wrap_pyfunction!(info::errno_table, m)?)?;
    m.add_function(wrap_pyfunction!(info::gpucache_counters, m)?)?;
    m.add_function(wrap_pyfunction!(info::fallbacks, m)?)?;
    m.add_function(wrap_pyfunction!(info::_write_run_report, m)?)?;
    m.add_function(wrap_pyfunction!(info::parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(info::parse_bool, m)?)?;
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
