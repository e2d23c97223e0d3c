//! `libcufile.so.0` on fgds: NVIDIA cuFile's C ABI (`include/cufile.h`),
//! so that programs written for cuFile (directly, through
//! `torch.cuda.gds`, KvikIO, ...) run unmodified on fgds: peer to peer
//! where an fgds node serves the GPU, through the visible bounce path
//! elsewhere (or an error, in strict mode). See `README.md` beside this file.
//!
//! The modules, by what they own (the C entry points of each are re-exported
//! here, so that the crate's Rust API is the ABI's list):
//!
//! | module | owns |
//! |---|---|
//! | `abi` | cuFile's types, codes and struct layouts |
//! | `config` | the settings: `cufile.json` and the environment |
//! | `driver` | opening the driver, its properties and limits, the log |
//! | `errors` | fgds's errors as cuFile's codes |
//! | `handle` | registered files |
//! | `memory` | registered buffers and the memory of a request |
//! | `io` | `cuFileRead`/`Write`, `cuFileReadv`/`Writev` |
//! | `batch` | the batch API |
//! | `stream` | stream-ordered I/O |
//! | `params`, `params_api` | the parameter API: staging, and its entry points |
//! | `stats`, `stats_api` | the statistics: counting, and their entry points |
//! | `platform` | P2P flags, BAR sizes, the PCIe topology |

pub mod abi;
mod batch;
pub mod config;
mod driver;
mod errors;
mod handle;
mod io;
mod memory;
pub mod params;
mod params_api;
mod platform;
pub mod stats;
mod stats_api;
mod stream;

use std::ffi::c_int;

pub use batch::{
    cuFileBatchIOCancel, cuFileBatchIODestroy, cuFileBatchIOGetStatus, cuFileBatchIOSetUp,
    cuFileBatchIOSubmit,
};
pub use driver::{
    cuFileDriverClose, cuFileDriverClose_v2, cuFileDriverGetProperties, cuFileDriverOpen,
    cuFileDriverSetMaxCacheSize, cuFileDriverSetMaxDirectIOSize, cuFileDriverSetMaxPinnedMemSize,
    cuFileDriverSetPollMode, cuFileGetVersion, cuFileUseCount,
};
pub use errors::cuFileOpErrorStringFGDS;
pub use handle::{cuFileHandleDeregister, cuFileHandleRegister};
pub use io::{cuFileRead, cuFileReadv, cuFileWrite, cuFileWritev};
pub use memory::{cuFileBufDeregister, cuFileBufRegister, cuFileBufRegisterDmabufFGDS};
pub use params_api::{
    cuFileGetParameterBool, cuFileGetParameterGpuBounceBufferSlabArray,
    cuFileGetParameterMinMaxValue, cuFileGetParameterPosixPoolSlabArray, cuFileGetParameterSizeT,
    cuFileGetParameterString, cuFileSetParameterBool, cuFileSetParameterGpuBounceBufferSlabArray,
    cuFileSetParameterPosixPoolSlabArray, cuFileSetParameterSizeT, cuFileSetParameterString,
};
pub use platform::{
    cuFileDriverGetP2PFlags, cuFileDriverSetP2PFlags, cuFileExportPCIeTopology,
    cuFileGetBARSizeInKB,
};
pub use stats_api::{
    cuFileGetStatsL1, cuFileGetStatsL2, cuFileGetStatsL3, cuFileGetStatsLevel, cuFileSetStatsLevel,
    cuFileStatsReset, cuFileStatsStart, cuFileStatsStop,
};
pub use stream::{cuFileReadAsync, cuFileStreamDeregister, cuFileStreamRegister, cuFileWriteAsync};

/// The newest cuFile version this library implements (`1000 * major + 10 *
/// minor`); `FGDS_CUFILE_VERSION` may present an older one.
pub const CUFILE_VERSION: c_int = 1200;
