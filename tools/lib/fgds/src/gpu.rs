//! CUDA and HIP driver entry points, loaded at run time with `libloading`.
//!
//! Nothing here is needed to build the library or to use it without a GPU:
//! [`Runtime::cuda`]/[`Runtime::hip`] fail with
//! [`Error::RuntimeUnavailable`] when the library cannot be loaded.

mod context;
mod copy;
mod memory;
mod runtime;
mod stream;

pub use context::Current;
pub(crate) use copy::{copy_streams, retire_copy_streams, CopyStreams};
pub use memory::RANGE_HANDLE_TYPE_DMA_BUF_FD;
pub use runtime::{DeviceMemory, HostFn, Kind, Runtime};
pub use stream::STREAM_NON_BLOCKING;

use crate::error::{Error, Result};
use runtime::sym;
use std::ffi::{c_char, c_int};

/// The alignment of a range `cuMemGetHandleForAddressRange` (and HIP's)
/// exports: the host's page size, as CUDA's documentation says. Driver 580
/// on an H200 exported 4 KiB ranges at 4 KiB offsets of a 2 MiB allocation
/// and refused one at 512 bytes
/// (`tools/testing/fgds-gpurt/cuda-facts-580-h200.json`).
pub fn export_align() -> u64 {
    crate::sys::page_size() as u64
}

/// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` (cuda.h, CUDA 11.7 and later).
const DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: c_int = 124;
type FnDevCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnDevAttr = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// Every CUDA device's PCI address (`0000:01:00.0`, lower case) and whether
/// it exports dma-bufs (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`, `None`
/// when the driver does not answer). [`Error::RuntimeUnavailable`] without
/// a usable `libcuda.so.1`.
pub fn cuda_dmabuf_support() -> Result<Vec<(String, Option<bool>)>> {
    let rt = Runtime::cuda()?;
    // SAFETY: the symbols have these C signatures (cuda.h).
    let (count, attr): (FnDevCount, FnDevAttr) = unsafe {
        (
            sym(&rt._lib, Kind::Cuda, "cuDeviceGetCount")?,
            sym(&rt._lib, Kind::Cuda, "cuDeviceGetAttribute")?,
        )
    };
    let mut n: c_int = 0;
    // SAFETY: n is writable; cuInit ran when the runtime was loaded.
    let r = unsafe { count(&mut n) };
    if r != 0 {
        return Err(Error::Runtime {
            call: "cuDeviceGetCount",
            code: r,
        });
    }
    let mut out = Vec::new();
    for ordinal in 0..n {
        let mut dev = ordinal;
        if let Some(get) = rt.dev_get {
            // SAFETY: dev is writable.
            if unsafe { get(&mut dev, ordinal) } != 0 {
                continue;
            }
        }
        let mut bus = [0 as c_char; 32];
        // SAFETY: bus has the length passed.
        if unsafe { (rt.bus_id)(bus.as_mut_ptr(), bus.len() as c_int, dev) } != 0 {
            continue;
        }
        // SAFETY: the driver wrote a NUL-terminated string.
        let pci = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }
            .to_string_lossy()
            .to_lowercase();
        // sysfs names a function 0000:01:00.0; some drivers give the
        // domain in 8 digits
        let pci = match pci.split_once(':') {
            Some((dom, rest)) if dom.len() > 4 => match u32::from_str_radix(dom, 16) {
                Ok(d) => format!("{d:04x}:{rest}"),
                Err(_) => pci,
            },
            _ => pci,
        };
        let mut v: c_int = 0;
        // SAFETY: v is writable.
        let ok = unsafe { attr(&mut v, DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) } == 0;
        out.push((pci, ok.then_some(v != 0)));
    }
    Ok(out)
}

/// Held by the unit tests that make, retire or count the process's copy
/// streams or its [`crate::gpucache::runtime`], so that they do not see
/// each other's.
#[cfg(test)]
pub(crate) static TEST_GLOBALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests;
