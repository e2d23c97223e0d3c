//! cuFile's C types and constants, as `include/cufile.h` declares them
//! (cuFile 1.15 to 1.20: values and layouts from NVIDIA's documented API;
//! `tests/nvidia_abi.rs` holds the header to NVIDIA's of each version).
#![allow(non_camel_case_types)]

use std::ffi::{c_int, c_uint, c_void};

/// `CUfileOpError`.
pub type CUfileOpError = c_int;
/// `CUresult` of the CUDA driver.
pub type CUresult = c_int;

/// The base of the cuFile error codes.
pub const CUFILEOP_BASE_ERR: c_int = 5000;

macro_rules! op_errors {
    ($($name:ident = $off:expr, $text:expr;)*) => {
        $(
            #[doc = $text]
            pub const $name: CUfileOpError = CUFILEOP_BASE_ERR + $off;
        )*
        /// cuFile's description of a code (positive or negative).
        pub fn op_error_str(code: c_int) -> &'static str {
            match code.saturating_abs() {
                0 => "cufile success",
                $(c if c == $name => $text,)*
                _ => "unknown cufile error",
            }
        }
    };
}

/// Success.
pub const CU_FILE_SUCCESS: CUfileOpError = 0;

op_errors! {
    CU_FILE_DRIVER_NOT_INITIALIZED = 1, "driver not initialized (FGDS_STRICT=1 or allow_compat_mode false, and no fgds node serves a GPU)";
    CU_FILE_DRIVER_INVALID_PROPS = 2, "invalid property";
    CU_FILE_DRIVER_UNSUPPORTED_LIMIT = 3, "property range error";
    CU_FILE_DRIVER_VERSION_MISMATCH = 4, "driver version mismatch";
    CU_FILE_DRIVER_VERSION_READ_ERROR = 5, "driver version read error";
    CU_FILE_DRIVER_CLOSING = 6, "driver shutdown in progress";
    CU_FILE_PLATFORM_NOT_SUPPORTED = 7, "GPUDirect Storage not supported on current platform";
    CU_FILE_IO_NOT_SUPPORTED = 8, "GPUDirect Storage not supported on current file";
    CU_FILE_DEVICE_NOT_SUPPORTED = 9, "GPUDirect Storage not supported on current GPU";
    CU_FILE_NVFS_DRIVER_ERROR = 10, "driver ioctl error";
    CU_FILE_CUDA_DRIVER_ERROR = 11, "CUDA Driver API error";
    CU_FILE_CUDA_POINTER_INVALID = 12, "invalid device pointer";
    CU_FILE_CUDA_MEMORY_TYPE_INVALID = 13, "invalid pointer memory type";
    CU_FILE_CUDA_POINTER_RANGE_ERROR = 14, "pointer range exceeds allocated address range";
    CU_FILE_CUDA_CONTEXT_MISMATCH = 15, "cuda context mismatch";
    CU_FILE_INVALID_MAPPING_SIZE = 16, "access beyond maximum pinned size";
    CU_FILE_INVALID_MAPPING_RANGE = 17, "access beyond mapped size";
    CU_FILE_INVALID_FILE_TYPE = 18, "unsupported file type";
    CU_FILE_INVALID_FILE_OPEN_FLAG = 19, "unsupported file open flags";
    CU_FILE_DIO_NOT_SET = 20, "fd direct IO not set";
    CU_FILE_INVALID_VALUE = 22, "invalid arguments";
    CU_FILE_MEMORY_ALREADY_REGISTERED = 23, "device pointer already registered";
    CU_FILE_MEMORY_NOT_REGISTERED = 24, "device pointer lookup failure";
    CU_FILE_PERMISSION_DENIED = 25, "driver or file access error";
    CU_FILE_DRIVER_ALREADY_OPEN = 26, "driver is already open";
    CU_FILE_HANDLE_NOT_REGISTERED = 27, "file descriptor is not registered";
    CU_FILE_HANDLE_ALREADY_REGISTERED = 28, "file descriptor is already registered";
    CU_FILE_DEVICE_NOT_FOUND = 29, "GPU device not found";
    CU_FILE_INTERNAL_ERROR = 30, "internal error";
    CU_FILE_GETNEWFD_FAILED = 31, "failed to obtain new file descriptor";
    CU_FILE_NVFS_SETUP_ERROR = 33, "driver initialization error";
    CU_FILE_IO_DISABLED = 34, "GPUDirect Storage disabled by config on current file";
    CU_FILE_BATCH_SUBMIT_FAILED = 35, "failed to submit batch operation";
    CU_FILE_GPU_MEMORY_PINNING_FAILED = 36, "failed to allocate pinned GPU Memory";
    CU_FILE_BATCH_FULL = 37, "queue full for batch operation";
    CU_FILE_ASYNC_NOT_SUPPORTED = 38, "cuFile stream operation not supported";
    CU_FILE_INTERNAL_BATCH_SETUP_ERROR = 39, "batch setup internal error - retry later";
    CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR = 40, "batch submit internal error - retry later";
    CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR = 41, "batch get status internal error - retry later";
    CU_FILE_INTERNAL_BATCH_CANCEL_ERROR = 42, "batch cancel internal error - retry later";
    CU_FILE_NOMEM_ERROR = 43, "cufile no memory error - retry later";
    CU_FILE_IO_ERROR = 44, "cufile io error";
    CU_FILE_INTERNAL_BUF_REGISTER_ERROR = 45, "cufile buf registration error";
    CU_FILE_HASH_OPR_ERROR = 46, "cufile hash operation error";
    CU_FILE_INVALID_CONTEXT_ERROR = 47, "cufile invalid context error";
    CU_FILE_NVFS_INTERNAL_DRIVER_ERROR = 48, "internal driver error";
    CU_FILE_BATCH_NOCOMPAT_ERROR = 49, "compat mode off error";
    CU_FILE_IO_MAX_ERROR = 50, "GPUDirect Storage Max Error";
}

/// `CUfileError_t`: returned by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUfileError_t {
    /// cuFile's code.
    pub err: CUfileOpError,
    /// The CUDA driver's, when `err` is `CU_FILE_CUDA_DRIVER_ERROR`.
    pub cu_err: CUresult,
}

impl CUfileError_t {
    /// Success.
    pub const OK: CUfileError_t = CUfileError_t { err: 0, cu_err: 0 };

    /// A cuFile error.
    pub const fn op(err: CUfileOpError) -> CUfileError_t {
        CUfileError_t { err, cu_err: 0 }
    }
}

/// `CUfileDriverStatusFlags_t`: bit numbers of `nvfs.dstatusflags`.
pub const CU_FILE_NVME_SUPPORTED: c_uint = 4;
/// `CUfileDriverControlFlags_t`: bit numbers of `nvfs.dcontrolflags`.
pub const CU_FILE_USE_POLL_MODE: c_uint = 0;
/// Compatibility (bounce) mode allowed.
pub const CU_FILE_ALLOW_COMPAT_MODE: c_uint = 1;
/// Every I/O is POSIX (here: no fgds node, so GPU memory always bounces).
pub const CU_FILE_POSIX_IO_MODE: c_uint = 2;
/// I/O fell back (here: set once any I/O of the process bounced).
pub const CU_FILE_FALLBACK_IO_MODE: c_uint = 4;
/// `CUfileFeatureFlags_t`: bit numbers of `fflags`.
pub const CU_FILE_DYN_ROUTING_SUPPORTED: c_uint = 0;
/// Batch API.
pub const CU_FILE_BATCH_IO_SUPPORTED: c_uint = 1;
/// Stream API.
pub const CU_FILE_STREAMS_SUPPORTED: c_uint = 2;
/// Parallel I/O.
pub const CU_FILE_PARALLEL_IO_SUPPORTED: c_uint = 3;
/// PCI P2PDMA (here: an fgds node serves a GPU).
pub const CU_FILE_P2P_SUPPORTED: c_uint = 4;

/// `CUfileOpcode_t`.
pub const CUFILE_READ: c_int = 0;
/// Write.
pub const CUFILE_WRITE: c_int = 1;

/// The `nvfs` part of [`CUfileDrvProps_t`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUfileDrvPropsNvfs {
    /// Major version of the driver (fgds's UAPI).
    pub major_version: c_uint,
    /// Minor version.
    pub minor_version: c_uint,
    /// Poll threshold (unused here).
    pub poll_thresh_size: usize,
    /// Largest request sent to the device (the chunk size).
    pub max_direct_io_size: usize,
    /// `CU_FILE_*_SUPPORTED` bits.
    pub dstatusflags: c_uint,
    /// `CU_FILE_*_MODE` bits.
    pub dcontrolflags: c_uint,
}

/// `CUfileDrvProps_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUfileDrvProps_t {
    /// Driver part.
    pub nvfs: CUfileDrvPropsNvfs,
    /// Feature bits.
    pub fflags: c_uint,
    /// KiB.
    pub max_device_cache_size: c_uint,
    /// KiB.
    pub per_buffer_cache_size: c_uint,
    /// KiB.
    pub max_device_pinned_mem_size: c_uint,
    /// Most requests of a batch.
    pub max_batch_io_size: c_uint,
    /// Batch timeout.
    pub max_batch_io_timeout_msecs: c_uint,
}

/// `CU_FILE_HANDLE_TYPE_OPAQUE_FD`.
pub const CU_FILE_HANDLE_TYPE_OPAQUE_FD: c_int = 1;
/// `CU_FILE_HANDLE_TYPE_OPAQUE_WIN32`.
pub const CU_FILE_HANDLE_TYPE_OPAQUE_WIN32: c_int = 2;
/// `CU_FILE_HANDLE_TYPE_USERSPACE_FS`.
pub const CU_FILE_HANDLE_TYPE_USERSPACE_FS: c_int = 3;

/// The handle union of [`CUfileDescr_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union CUfileDescrHandle {
    /// Linux.
    pub fd: c_int,
    /// Windows.
    pub handle: *mut c_void,
}

/// `CUfileDescr_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUfileDescr_t {
    /// `CU_FILE_HANDLE_TYPE_*`.
    pub type_: c_int,
    /// The descriptor.
    pub handle: CUfileDescrHandle,
    /// File system operations (user-space file systems; unsupported).
    pub fs_ops: *const c_void,
}

/// `CUfileStatus_t`.
pub const CUFILE_WAITING: c_int = 0x01;
/// Enqueued.
pub const CUFILE_PENDING: c_int = 0x02;
/// Ill-formed.
pub const CUFILE_INVALID: c_int = 0x04;
/// Canceled.
pub const CUFILE_CANCELED: c_int = 0x08;
/// Done.
pub const CUFILE_COMPLETE: c_int = 0x10;
/// Timed out.
pub const CUFILE_TIMEOUT: c_int = 0x20;
/// Failed.
pub const CUFILE_FAILED: c_int = 0x40;

/// `CUFILE_BATCH`.
pub const CUFILE_BATCH: c_int = 1;

/// `u.batch` of [`CUfileIOParams_t`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUfileIOParamsBatch {
    /// Device or host memory.
    pub dev_ptr_base: *mut c_void,
    /// Offset in the file.
    pub file_offset: libc::off_t,
    /// Offset from `dev_ptr_base`.
    pub dev_ptr_offset: libc::off_t,
    /// Bytes.
    pub size: usize,
}

/// `CUfileIOParams_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUfileIOParams_t {
    /// `CUFILE_BATCH`.
    pub mode: c_int,
    /// The request.
    pub batch: CUfileIOParamsBatch,
    /// The file.
    pub fh: *mut c_void,
    /// `CUFILE_READ` or `CUFILE_WRITE`.
    pub opcode: c_int,
    /// Returned in the event.
    pub cookie: *mut c_void,
}

/// `CUfileIOEvents_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUfileIOEvents_t {
    /// The request's cookie.
    pub cookie: *mut c_void,
    /// `CUFILE_*` status.
    pub status: c_int,
    /// Bytes, or a negative error.
    pub ret: usize,
}

/// `CUFileSizeTConfigParameter_t`.
pub mod size_param {
    /// `profile.cufile_stats`: the statistics level.
    pub const PROFILE_STATS: i32 = 0;
    /// `execution.max_io_queue_depth`.
    pub const EXECUTION_MAX_IO_QUEUE_DEPTH: i32 = 1;
    /// `execution.max_io_threads`.
    pub const EXECUTION_MAX_IO_THREADS: i32 = 2;
    /// `execution.min_io_threshold_size_kb`.
    pub const EXECUTION_MIN_IO_THRESHOLD_SIZE_KB: i32 = 3;
    /// `execution.max_request_parallelism`.
    pub const EXECUTION_MAX_REQUEST_PARALLELISM: i32 = 4;
    /// `properties.max_direct_io_size_kb`.
    pub const PROPERTIES_MAX_DIRECT_IO_SIZE_KB: i32 = 5;
    /// `properties.max_device_cache_size_kb`.
    pub const PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB: i32 = 6;
    /// `properties.per_buffer_cache_size_kb`.
    pub const PROPERTIES_PER_BUFFER_CACHE_SIZE_KB: i32 = 7;
    /// `properties.max_device_pinned_mem_size_kb`.
    pub const PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB: i32 = 8;
    /// `properties.io_batchsize`.
    pub const PROPERTIES_IO_BATCHSIZE: i32 = 9;
    /// `properties.poll_thresh_size_kb`.
    pub const POLLTHRESHOLD_SIZE_KB: i32 = 10;
    /// `properties.batch_io_timeout_ms`.
    pub const PROPERTIES_BATCH_IO_TIMEOUT_MS: i32 = 11;
    /// Number of values.
    pub const COUNT: usize = 12;
}

/// `CUFileBoolConfigParameter_t`.
pub mod bool_param {
    /// `properties.use_poll_mode`.
    pub const PROPERTIES_USE_POLL_MODE: i32 = 0;
    /// `properties.allow_compat_mode`.
    pub const PROPERTIES_ALLOW_COMPAT_MODE: i32 = 1;
    /// `properties.force_compat_mode`.
    pub const FORCE_COMPAT_MODE: i32 = 2;
    /// `fs.misc.api_check_aggressive`.
    pub const FS_MISC_API_CHECK_AGGRESSIVE: i32 = 3;
    /// `execution.parallel_io`.
    pub const EXECUTION_PARALLEL_IO: i32 = 4;
    /// `profile.nvtx` (deprecated by cuFile).
    pub const PROFILE_NVTX: i32 = 5;
    /// `properties.allow_system_memory`.
    pub const PROPERTIES_ALLOW_SYSTEM_MEMORY: i32 = 6;
    /// `properties.use_pci_p2pdma`.
    pub const USE_PCIP2PDMA: i32 = 7;
    /// `properties.prefer_io_uring`.
    pub const PREFER_IO_URING: i32 = 8;
    /// `properties.force_odirect_mode`.
    pub const FORCE_ODIRECT_MODE: i32 = 9;
    /// `properties.skip_topology_detection`.
    pub const SKIP_TOPOLOGY_DETECTION: i32 = 10;
    /// `properties.stream_memops_bypass`.
    pub const STREAM_MEMOPS_BYPASS: i32 = 11;
    /// `properties.posix_io_mode` (cuFile 1.19).
    pub const PROPERTIES_POSIX_IO_MODE: i32 = 12;
    /// `properties.gds_fallback_io` (cuFile 1.19).
    pub const GDS_FALLBACK_IO: i32 = 13;
    /// Number of values.
    pub const COUNT: usize = 14;
}

/// `CUFileStringConfigParameter_t`.
pub mod string_param {
    /// `logging.level`.
    pub const LOGGING_LEVEL: i32 = 0;
    /// `CUFILE_LOGFILE_PATH`.
    pub const ENV_LOGFILE_PATH: i32 = 1;
    /// `logging.dir`.
    pub const LOG_DIR: i32 = 2;
    /// `rdma_transport` (cuFile 1.19).
    pub const RDMA_TRANSPORT: i32 = 3;
}

/// `CUfileIOVec_t` (cuFile 1.19).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUfileIOVec_t {
    /// Device or host memory.
    pub base: *mut c_void,
    /// Bytes.
    pub len: usize,
}

/// `CUfileP2PFlags_t`: `CUFILE_P2PDMA`, the kernel's PCI P2PDMA (fgds's).
pub const CUFILE_P2PDMA: c_uint = 0;
/// `CU_FILE_P2P_FLAG_PCI_P2PDMA`.
pub const CU_FILE_P2P_FLAG_PCI_P2PDMA: c_uint = 1 << CUFILE_P2PDMA;
/// `CU_FILE_MAX_TARGET_TYPES` of cuFile 1.19 and later.
pub const CU_FILE_MAX_TARGET_TYPES: c_uint = 15;

/// `CUFILE_GPU_UUID_LEN`.
pub const CUFILE_GPU_UUID_LEN: usize = 16;
/// GPUs in [`CUfileStatsLevel3_t`].
pub const CUFILE_STATS_MAX_GPUS: usize = 16;

/// `CUfileOpCounter_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUfileOpCounter_t {
    /// Succeeded.
    pub ok: u64,
    /// Failed.
    pub err: u64,
}

/// `CUfileStatsLevel1_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUfileStatsLevel1_t {
    pub read_ops: CUfileOpCounter_t,
    pub write_ops: CUfileOpCounter_t,
    pub hdl_register_ops: CUfileOpCounter_t,
    pub hdl_deregister_ops: CUfileOpCounter_t,
    pub buf_register_ops: CUfileOpCounter_t,
    pub buf_deregister_ops: CUfileOpCounter_t,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_bw_bytes_per_sec: u64,
    pub write_bw_bytes_per_sec: u64,
    pub read_lat_avg_us: u64,
    pub write_lat_avg_us: u64,
    pub read_ops_per_sec: u64,
    pub write_ops_per_sec: u64,
    pub read_lat_sum_us: u64,
    pub write_lat_sum_us: u64,
    pub batch_submit_ops: CUfileOpCounter_t,
    pub batch_complete_ops: CUfileOpCounter_t,
    pub batch_setup_ops: CUfileOpCounter_t,
    pub batch_cancel_ops: CUfileOpCounter_t,
    pub batch_destroy_ops: CUfileOpCounter_t,
    pub batch_enqueued_ops: CUfileOpCounter_t,
    pub batch_posix_enqueued_ops: CUfileOpCounter_t,
    pub batch_processed_ops: CUfileOpCounter_t,
    pub batch_posix_processed_ops: CUfileOpCounter_t,
    pub batch_nvfs_submit_ops: CUfileOpCounter_t,
    pub batch_p2p_submit_ops: CUfileOpCounter_t,
    pub batch_aio_submit_ops: CUfileOpCounter_t,
    pub batch_iouring_submit_ops: CUfileOpCounter_t,
    pub batch_mixed_io_submit_ops: CUfileOpCounter_t,
    pub batch_total_submit_ops: CUfileOpCounter_t,
    pub batch_read_bytes: u64,
    pub batch_write_bytes: u64,
    pub batch_read_bw_bytes: u64,
    pub batch_write_bw_bytes: u64,
    pub batch_submit_lat_avg_us: u64,
    pub batch_completion_lat_avg_us: u64,
    pub batch_submit_ops_per_sec: u64,
    pub batch_complete_ops_per_sec: u64,
    pub batch_submit_lat_sum_us: u64,
    pub batch_completion_lat_sum_us: u64,
    pub last_batch_read_bytes: u64,
    pub last_batch_write_bytes: u64,
    // cuFile 1.19 and later: cuFileReadv, cuFileWritev.
    pub readv_ops: CUfileOpCounter_t,
    pub writev_ops: CUfileOpCounter_t,
    pub readv_bytes: u64,
    pub writev_bytes: u64,
    pub readv_bw_bytes_per_sec: u64,
    pub writev_bw_bytes_per_sec: u64,
    pub readv_lat_avg_us: u64,
    pub writev_lat_avg_us: u64,
    pub readv_ops_per_sec: u64,
    pub writev_ops_per_sec: u64,
    pub readv_lat_sum_us: u64,
    pub writev_lat_sum_us: u64,
}

/// Bytes of `CUfileStatsLevel1_t` before cuFile 1.19 (without the vectored
/// counters, which it appended).
pub const STATS_L1_SIZE_BEFORE_1190: usize = 512;

/// `CUfileStatsLevel2_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUfileStatsLevel2_t {
    pub basic: CUfileStatsLevel1_t,
    pub read_size_kb_hist: [u64; 32],
    pub write_size_kb_hist: [u64; 32],
}

/// `CUfilePerGpuStats_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUfilePerGpuStats_t {
    pub uuid: [u8; CUFILE_GPU_UUID_LEN],
    pub read_bytes: u64,
    pub read_bw_bytes_per_sec: u64,
    pub read_utilization: u64,
    pub read_duration_us: u64,
    pub n_total_reads: u64,
    pub n_p2p_reads: u64,
    pub n_nvfs_reads: u64,
    pub n_posix_reads: u64,
    pub n_unaligned_reads: u64,
    pub n_dr_reads: u64,
    pub n_sparse_regions: u64,
    pub n_inline_regions: u64,
    pub n_reads_err: u64,
    pub writes_bytes: u64,
    pub write_bw_bytes_per_sec: u64,
    pub write_utilization: u64,
    pub write_duration_us: u64,
    pub n_total_writes: u64,
    pub n_p2p_writes: u64,
    pub n_nvfs_writes: u64,
    pub n_posix_writes: u64,
    pub n_unaligned_writes: u64,
    pub n_dr_writes: u64,
    pub n_writes_err: u64,
    pub n_mmap: u64,
    pub n_mmap_ok: u64,
    pub n_mmap_err: u64,
    pub n_mmap_free: u64,
    pub reg_bytes: u64,
}

/// `CUfileStatsLevel3_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUfileStatsLevel3_t {
    pub detailed: CUfileStatsLevel2_t,
    pub num_gpus: u32,
    pub per_gpu_stats: [CUfilePerGpuStats_t; CUFILE_STATS_MAX_GPUS],
}

impl Default for CUfileStatsLevel3_t {
    fn default() -> Self {
        CUfileStatsLevel3_t {
            detailed: CUfileStatsLevel2_t::default(),
            num_gpus: 0,
            per_gpu_stats: [CUfilePerGpuStats_t::default(); CUFILE_STATS_MAX_GPUS],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // The layouts of cuFile's x86_64 ABI.
    #[test]
    fn layouts() {
        assert_eq!(size_of::<CUfileError_t>(), 8);
        assert_eq!(size_of::<CUfileDrvProps_t>(), 56);
        assert_eq!(offset_of!(CUfileDrvProps_t, fflags), 32);
        assert_eq!(size_of::<CUfileDescr_t>(), 24);
        assert_eq!(offset_of!(CUfileDescr_t, handle), 8);
        assert_eq!(size_of::<CUfileIOParams_t>(), 64);
        assert_eq!(offset_of!(CUfileIOParams_t, fh), 40);
        assert_eq!(offset_of!(CUfileIOParams_t, cookie), 56);
        assert_eq!(size_of::<CUfileIOEvents_t>(), 24);
        // cuFile 1.19's statistics structs (tests/nvidia_abi.rs checks the
        // header against NVIDIA's; these, the Rust against those numbers).
        assert_eq!(size_of::<CUfileStatsLevel1_t>(), 624);
        assert_eq!(offset_of!(CUfileStatsLevel1_t, batch_submit_ops), 176);
        assert_eq!(offset_of!(CUfileStatsLevel1_t, batch_read_bytes), 416);
        assert_eq!(
            offset_of!(CUfileStatsLevel1_t, readv_ops),
            STATS_L1_SIZE_BEFORE_1190
        );
        assert_eq!(size_of::<CUfileStatsLevel2_t>(), 1136);
        assert_eq!(size_of::<CUfilePerGpuStats_t>(), 248);
        assert_eq!(offset_of!(CUfileStatsLevel3_t, num_gpus), 1136);
        assert_eq!(offset_of!(CUfileStatsLevel3_t, per_gpu_stats), 1144);
        assert_eq!(size_of::<CUfileStatsLevel3_t>(), 5112);
        assert_eq!(size_of::<CUfileIOVec_t>(), 16);
        assert_eq!(
            op_error_str(-CU_FILE_HANDLE_NOT_REGISTERED),
            "file descriptor is not registered"
        );
    }
}
