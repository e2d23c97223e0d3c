//! The module's functions: the fgds nodes, the configuration in force, the
//! error table, the process's counters (`gpucache_counters`, `fallbacks`)
//! and the parsers of `FGDS_*` values.

use crate::error::to_py;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `gpucache_counters() -> dict`: the process's REG_BUFFER and UNREG_BUFFER
/// calls through the library and what its staging pool and registration
/// cache did (`fgds::gpucache::counters`).
#[pyfunction]
pub(crate) fn gpucache_counters(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
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

pub(crate) fn causes_dict<'py>(
    py: Python<'py>,
    f: &fgds::Fallbacks,
) -> PyResult<Bound<'py, PyDict>> {
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
pub(crate) fn fallbacks(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let f = fgds::stats::fallbacks();
    let d = PyDict::new(py);
    d.set_item("calls", causes_dict(py, &f.calls)?)?;
    d.set_item("registrations", causes_dict(py, &f.registrations)?)?;
    Ok(d)
}

/// `_write_run_report()`: under `fgds run`, appends this process's counters
/// to its report (the package calls it at exit).
#[pyfunction]
pub(crate) fn _write_run_report() {
    fgds::report::write_run_report("python");
}

/// `parse_size(value: str) -> int | None`: a size as every `FGDS_*`
/// setting takes it (`1048576`, `1M`, `1MiB`, `1MB`, `4k`; the library's
/// `fgds::env::parse_size`), or None.
#[pyfunction]
pub(crate) fn parse_size(value: &str) -> Option<u64> {
    fgds::env::parse_size(value)
}

/// `parse_bool(value: str) -> bool | None`: a boolean as every `FGDS_*`
/// setting takes it (`1/0/true/false/yes/no/on/off`, any case; the
/// library's `fgds::env::parse_bool`), or None.
#[pyfunction]
pub(crate) fn parse_bool(value: &str) -> Option<bool> {
    fgds::env::parse_bool(value)
}

/// `list_devices() -> list[dict]`: the fgds nodes (empty without the module).
#[pyfunction]
pub(crate) fn list_devices(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
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
pub(crate) fn module_loaded() -> bool {
    fgds::device::module_loaded()
}

/// `strerror(errno) -> str`.
#[pyfunction]
pub(crate) fn strerror(code: i32) -> &'static str {
    fgds::error::strerror(code)
}

/// A `bounce_read` setting's name, as `File(bounce_read=...)` takes it and
/// `config()` reports it.
pub(crate) fn bounce_read_name(b: fgds::BounceRead) -> &'static str {
    match b {
        fgds::BounceRead::Auto => "auto",
        fgds::BounceRead::Direct => "direct",
        fgds::BounceRead::Buffered => "buffered",
    }
}

/// `config() -> dict`: the defaults in force, from the `FGDS_*`
/// environment variables read once per process (`strict`, `chunk_size`,
/// `queue_depth`, `threads`, `use_io_uring`, `direct`, `log`, `parallel`,
/// `split_size`, `bounce_chunk_size`, `bounce_split_size`, `bounce_read`), with `set` (the variables
/// set and their values) and `errors` (one message per bad value; opening
/// a file then fails with it).
#[pyfunction]
pub(crate) fn config(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
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
    d.set_item("bounce_read", bounce_read_name(e.bounce_read))?;
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
pub(crate) fn strhint(code: i32) -> &'static str {
    fgds::error::hint(code)
}

/// `errno_table() -> list[dict]`: the library's table of error text, one
/// dict per errno (`errno`, `name`, `meaning`, `hint`).
#[pyfunction]
pub(crate) fn errno_table(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
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
