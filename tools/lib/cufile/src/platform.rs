//! What the platform offers, as cuFile 1.16-1.20 asks: the P2P flags of a
//! file system type (`cuFileDriverGetP2PFlags`/`SetP2PFlags`), a GPU's BAR
//! size (`cuFileGetBARSizeInKB`) and the fgds nodes' GPUs as JSON
//! (`cuFileExportPCIeTopology`).

use crate::abi::*;
use crate::config::LogLevel;
use crate::driver::{driver, log, version, Driver};
use std::ffi::{c_int, c_uint};
use std::os::unix::ffi::OsStrExt;

/// `CU_FILE_MAX_TARGET_TYPES` of the version presented (1.19 added PanFS).
fn max_target_types() -> c_uint {
    if version() >= 1190 {
        CU_FILE_MAX_TARGET_TYPES
    } else {
        CU_FILE_MAX_TARGET_TYPES - 1
    }
}

/// The P2P flags of a file system type: PCI P2PDMA for NVMe where an fgds
/// node serves a GPU, else none.
fn p2p_flags_of(d: &Driver, fs: c_uint) -> c_uint {
    if fs == CU_FILE_NVME_SUPPORTED && d.no_p2p.is_none() {
        CU_FILE_P2P_FLAG_PCI_P2PDMA
    } else {
        0
    }
}

/// `cuFileDriverGetP2PFlags`: `CU_FILE_P2P_FLAG_PCI_P2PDMA` for
/// `CU_FILE_NVME_SUPPORTED` where an fgds node serves a GPU (what fgds
/// does), 0 otherwise; `CU_FILE_INVALID_VALUE` for a type out of range or
/// NULL.
///
/// # Safety
/// `p2p_flags` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverGetP2PFlags(
    status_flag: c_uint,
    p2p_flags: *mut c_uint,
) -> CUfileError_t {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return e,
    };
    if p2p_flags.is_null() || status_flag >= max_target_types() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: checked non-NULL.
    unsafe { p2p_flags.write(p2p_flags_of(d, status_flag)) };
    CUfileError_t::OK
}

/// `cuFileDriverSetP2PFlags`: fgds has one way for NVMe, PCI P2PDMA, so
/// asking for it (or for none, or for what `cuFileDriverGetP2PFlags` says)
/// succeeds, also where no fgds node serves a GPU yet, as NVIDIA's cuFile
/// accepts it on x86; any other flag is `CU_FILE_INVALID_VALUE`
/// (`CU_FILE_PLATFORM_NOT_SUPPORTED` for other file system types).
#[no_mangle]
pub extern "C" fn cuFileDriverSetP2PFlags(status_flag: c_uint, flags: c_uint) -> CUfileError_t {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return e,
    };
    if status_flag >= max_target_types() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    if status_flag != CU_FILE_NVME_SUPPORTED {
        return CUfileError_t::op(CU_FILE_PLATFORM_NOT_SUPPORTED);
    }
    if flags & !CU_FILE_P2P_FLAG_PCI_P2PDMA == 0 || flags == p2p_flags_of(d, status_flag) {
        CUfileError_t::OK
    } else {
        CUfileError_t::op(CU_FILE_INVALID_VALUE)
    }
}

/// `cuFileGetBARSizeInKB`: the BAR (KiB) of CUDA device `gpu_index`
/// (NVIDIA's argument: a CUDA device index): the largest BAR an fgds node
/// offers of that GPU, else the GPU's largest memory BAR as its PCI
/// function lists it (`resource` in sysfs; NVIDIA's cuFile reports the BAR
/// with no nvidia-fs too). Without a CUDA runtime, the `gpu_index`-th GPU
/// an fgds node serves. `CU_FILE_DEVICE_NOT_FOUND` when there is no such
/// GPU.
///
/// # Safety
/// `bar_size` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetBARSizeInKB(
    gpu_index: c_int,
    bar_size: *mut usize,
) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if bar_size.is_null() || gpu_index < 0 {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    let devs = fgds::list_devices().unwrap_or_default();
    let largest = |d: &fgds::DeviceInfo| d.bars.iter().map(|b| b.size / 1024).max();
    let pci = fgds::gpu::cuda_dmabuf_support()
        .map(|gpus| gpus.get(gpu_index as usize).map(|(pci, _)| pci.clone()));
    let kb = match pci {
        Ok(Some(pci)) => devs
            .iter()
            .find(|d| {
                d.pci_address
                    .as_deref()
                    .is_some_and(|a| a.eq_ignore_ascii_case(&pci))
            })
            .and_then(largest)
            .or_else(|| fgds::device::largest_bar_of(&pci).map(|b| b / 1024)),
        Ok(None) => None,
        Err(_) => devs.get(gpu_index as usize).and_then(largest),
    };
    let Some(kb) = kb else {
        return CUfileError_t::op(CU_FILE_DEVICE_NOT_FOUND);
    };
    // SAFETY: checked non-NULL.
    unsafe { bar_size.write(kb as usize) };
    CUfileError_t::OK
}

/// `cuFileExportPCIeTopology`: writes the GPUs fgds nodes serve to
/// `filename` as JSON (`{"fgds_nodes": [{"node", "dev_path",
/// "pci_address", "vendor", "device", "bars": [{"index", "size"}]}]}`);
/// `CU_FILE_INVALID_VALUE` for NULL, `CU_FILE_PERMISSION_DENIED` when the
/// file cannot be written.
///
/// # Safety
/// `filename` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cuFileExportPCIeTopology(
    filename: *const std::ffi::c_char,
) -> CUfileError_t {
    if let Err(e) = driver() {
        return e;
    }
    if filename.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: the caller's string.
    let name = unsafe { std::ffi::CStr::from_ptr(filename) };
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
    let nodes: Vec<serde_json::Value> = fgds::list_devices()
        .unwrap_or_default()
        .iter()
        .map(|d| {
            serde_json::json!({
                "node": d.name,
                "dev_path": d.dev_path,
                "pci_address": d.pci_address,
                "vendor": d.vendor.map(|v| format!("{v:#06x}")),
                "device": d.device.map(|v| format!("{v:#06x}")),
                "bars": d.bars.iter().map(|b| serde_json::json!({"index": b.index, "size": b.size})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let text = serde_json::json!({ "fgds_nodes": nodes }).to_string();
    match std::fs::write(path, text + "\n") {
        Ok(()) => CUfileError_t::OK,
        Err(e) => {
            log(
                LogLevel::Debug,
                format_args!("cuFileExportPCIeTopology: {}: {e}", path.display()),
            );
            CUfileError_t::op(CU_FILE_PERMISSION_DENIED)
        }
    }
}
