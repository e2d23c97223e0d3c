/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * cufile.h - the C interface of fgds's libcufile.so.0 (tools/lib/cufile):
 * NVIDIA cuFile's API and ABI (versions 1.15 to 1.20: the same function
 * names, argument and return types, enum values and struct layouts),
 * written from cuFile's documented API for programs built against it.
 * Programs built with NVIDIA's cufile.h run on this library unchanged, and
 * the other way round. tests/nvidia_abi.rs compares this header with
 * NVIDIA's of each version (downloaded from PyPI by the test): every
 * function, enumerator, integer macro, struct size and member offset.
 *
 * The one layout that changed between versions is the statistics':
 * cuFile 1.19 added cuFileReadv/cuFileWritev counters to
 * CUfileStatsLevel1_t (512 bytes before, 624 since), which moves every
 * field after it in levels 2 and 3. This header gives the layout of
 * FGDS_CUFILE_VERSION (1000 * major + 10 * minor; 1200 unless defined
 * before the include), and the library writes the layout of the version it
 * presents (cuFileGetVersion): the environment's FGDS_CUFILE_VERSION
 * (1.15 to 1.20, or 1150 to 1200; 1.20 by default). A program built
 * against cuFile 1.18 or older and reading statistics runs with
 * FGDS_CUFILE_VERSION=1.18 (or its own version).
 *
 * Return conventions (as cuFile's): functions returning CUfileError_t
 * put a CUfileOpError in .err (CU_FILE_SUCCESS on success) and, for
 * CU_FILE_CUDA_DRIVER_ERROR, the CUDA driver's code in .cu_err.
 * cuFileRead/cuFileWrite return the bytes moved (fewer at the end of the
 * file), -1 with errno set for a system call error, or a negative
 * CUfileOpError. Buffers may be CUDA device memory or host memory,
 * registered or not.
 *
 * What fgds does: P2P (the NVMe DMAs into GPU memory through /dev/fgdsN)
 * where an fgds node serves the GPU; elsewhere the bounce path (pinned
 * host buffers), which cuFileDriverGetProperties and a line on stderr
 * report, or an error with FGDS_STRICT=1 (cufile.json:
 * "allow_compat_mode": false). See tools/lib/cufile/README.md.
 */
#ifndef FGDS_CUFILE_H
#define FGDS_CUFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef FGDS_CUFILE_VERSION
#define FGDS_CUFILE_VERSION 1200
#endif

/* The CUDA driver types the API uses; cuda.h's own when it came first. */
#ifndef __cuda_cuda_h__
typedef int CUresult;
typedef struct CUstream_st *CUstream;
#endif

/* Error codes: CU_FILE_SUCCESS, or CUFILEOP_BASE_ERR + n. */
#define CUFILEOP_BASE_ERR 5000

typedef enum CUfileOpError {
	CU_FILE_SUCCESS = 0,
	CU_FILE_DRIVER_NOT_INITIALIZED = CUFILEOP_BASE_ERR + 1,
	CU_FILE_DRIVER_INVALID_PROPS = CUFILEOP_BASE_ERR + 2,
	CU_FILE_DRIVER_UNSUPPORTED_LIMIT = CUFILEOP_BASE_ERR + 3,
	CU_FILE_DRIVER_VERSION_MISMATCH = CUFILEOP_BASE_ERR + 4,
	CU_FILE_DRIVER_VERSION_READ_ERROR = CUFILEOP_BASE_ERR + 5,
	CU_FILE_DRIVER_CLOSING = CUFILEOP_BASE_ERR + 6,
	CU_FILE_PLATFORM_NOT_SUPPORTED = CUFILEOP_BASE_ERR + 7,
	CU_FILE_IO_NOT_SUPPORTED = CUFILEOP_BASE_ERR + 8,
	CU_FILE_DEVICE_NOT_SUPPORTED = CUFILEOP_BASE_ERR + 9,
	CU_FILE_NVFS_DRIVER_ERROR = CUFILEOP_BASE_ERR + 10,
	CU_FILE_CUDA_DRIVER_ERROR = CUFILEOP_BASE_ERR + 11,
	CU_FILE_CUDA_POINTER_INVALID = CUFILEOP_BASE_ERR + 12,
	CU_FILE_CUDA_MEMORY_TYPE_INVALID = CUFILEOP_BASE_ERR + 13,
	CU_FILE_CUDA_POINTER_RANGE_ERROR = CUFILEOP_BASE_ERR + 14,
	CU_FILE_CUDA_CONTEXT_MISMATCH = CUFILEOP_BASE_ERR + 15,
	CU_FILE_INVALID_MAPPING_SIZE = CUFILEOP_BASE_ERR + 16,
	CU_FILE_INVALID_MAPPING_RANGE = CUFILEOP_BASE_ERR + 17,
	CU_FILE_INVALID_FILE_TYPE = CUFILEOP_BASE_ERR + 18,
	CU_FILE_INVALID_FILE_OPEN_FLAG = CUFILEOP_BASE_ERR + 19,
	CU_FILE_DIO_NOT_SET = CUFILEOP_BASE_ERR + 20,
	CU_FILE_INVALID_VALUE = CUFILEOP_BASE_ERR + 22,
	CU_FILE_MEMORY_ALREADY_REGISTERED = CUFILEOP_BASE_ERR + 23,
	CU_FILE_MEMORY_NOT_REGISTERED = CUFILEOP_BASE_ERR + 24,
	CU_FILE_PERMISSION_DENIED = CUFILEOP_BASE_ERR + 25,
	CU_FILE_DRIVER_ALREADY_OPEN = CUFILEOP_BASE_ERR + 26,
	CU_FILE_HANDLE_NOT_REGISTERED = CUFILEOP_BASE_ERR + 27,
	CU_FILE_HANDLE_ALREADY_REGISTERED = CUFILEOP_BASE_ERR + 28,
	CU_FILE_DEVICE_NOT_FOUND = CUFILEOP_BASE_ERR + 29,
	CU_FILE_INTERNAL_ERROR = CUFILEOP_BASE_ERR + 30,
	CU_FILE_GETNEWFD_FAILED = CUFILEOP_BASE_ERR + 31,
	CU_FILE_NVFS_SETUP_ERROR = CUFILEOP_BASE_ERR + 33,
	CU_FILE_IO_DISABLED = CUFILEOP_BASE_ERR + 34,
	CU_FILE_BATCH_SUBMIT_FAILED = CUFILEOP_BASE_ERR + 35,
	CU_FILE_GPU_MEMORY_PINNING_FAILED = CUFILEOP_BASE_ERR + 36,
	CU_FILE_BATCH_FULL = CUFILEOP_BASE_ERR + 37,
	CU_FILE_ASYNC_NOT_SUPPORTED = CUFILEOP_BASE_ERR + 38,
	CU_FILE_INTERNAL_BATCH_SETUP_ERROR = CUFILEOP_BASE_ERR + 39,
	CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR = CUFILEOP_BASE_ERR + 40,
	CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR = CUFILEOP_BASE_ERR + 41,
	CU_FILE_INTERNAL_BATCH_CANCEL_ERROR = CUFILEOP_BASE_ERR + 42,
	CU_FILE_NOMEM_ERROR = CUFILEOP_BASE_ERR + 43,
	CU_FILE_IO_ERROR = CUFILEOP_BASE_ERR + 44,
	CU_FILE_INTERNAL_BUF_REGISTER_ERROR = CUFILEOP_BASE_ERR + 45,
	CU_FILE_HASH_OPR_ERROR = CUFILEOP_BASE_ERR + 46,
	CU_FILE_INVALID_CONTEXT_ERROR = CUFILEOP_BASE_ERR + 47,
	CU_FILE_NVFS_INTERNAL_DRIVER_ERROR = CUFILEOP_BASE_ERR + 48,
	CU_FILE_BATCH_NOCOMPAT_ERROR = CUFILEOP_BASE_ERR + 49,
	CU_FILE_IO_MAX_ERROR = CUFILEOP_BASE_ERR + 50,
} CUfileOpError;

typedef struct CUfileError {
	CUfileOpError err;	/* cuFile's code */
	CUresult cu_err;	/* CUDA driver's, for CU_FILE_CUDA_DRIVER_ERROR */
} CUfileError_t;

/* Whether a return value (of cuFileRead too) is a cuFile code. */
#define IS_CUFILE_ERR(err) (abs((err)) > CUFILEOP_BASE_ERR)
#define IS_CUDA_ERR(status) ((status).err == CU_FILE_CUDA_DRIVER_ERROR)
#define CU_FILE_CUDA_ERR(status) ((status).cu_err)

/* fgds's description of a code (positive or negative; the library's one
 * table, as cuFile's CUFILE_ERRSTR text), static. */
const char *cuFileOpErrorStringFGDS(int code);
static inline const char *cufileop_status_error(CUfileOpError status)
{
	return cuFileOpErrorStringFGDS((int)status);
}
#define CUFILE_ERRSTR(err) cufileop_status_error((CUfileOpError)abs((err)))

/* Bit numbers of CUfileDrvProps_t.nvfs.dstatusflags. */
typedef enum CUfileDriverStatusFlags {
	CU_FILE_LUSTRE_SUPPORTED = 0,
	CU_FILE_WEKAFS_SUPPORTED = 1,
	CU_FILE_NFS_SUPPORTED = 2,
	CU_FILE_GPFS_SUPPORTED = 3,
	CU_FILE_NVME_SUPPORTED = 4,	/* fgds: an fgds node serves a GPU */
	CU_FILE_NVMEOF_SUPPORTED = 5,
	CU_FILE_SCSI_SUPPORTED = 6,
	CU_FILE_SCALEFLUX_CSD_SUPPORTED = 7,
	CU_FILE_NVMESH_SUPPORTED = 8,
	CU_FILE_BEEGFS_SUPPORTED = 9,
	CU_FILE_NVME_P2P_SUPPORTED = 11,
	CU_FILE_SCATEFS_SUPPORTED = 12,
	CU_FILE_VIRTIOFS_SUPPORTED = 13,
#if FGDS_CUFILE_VERSION >= 1190
	CU_FILE_PANFS_SUPPORTED = 14,
#endif
	CU_FILE_MAX_TARGET_TYPES,
} CUfileDriverStatusFlags_t;

/* Bit numbers of CUfileDrvProps_t.nvfs.dcontrolflags. */
typedef enum CUfileDriverControlFlags {
	CU_FILE_USE_POLL_MODE = 0,
	CU_FILE_ALLOW_COMPAT_MODE = 1,	/* fgds: the bounce path is allowed (not strict) */
	CU_FILE_VANILLA_POSIX_IO_MODE = 2,	/* fgds: no fgds node: GPU memory always bounces */
	CU_FILE_POSIX_IO_MODE = CU_FILE_VANILLA_POSIX_IO_MODE,	/* its name before 1.19 */
	CU_FILE_FALLBACK_IO_MODE = 4,	/* fgds: some I/O of this process bounced */
} CUfileDriverControlFlags_t;

/* Bit numbers of CUfileDrvProps_t.fflags. */
typedef enum CUfileFeatureFlags {
	CU_FILE_DYN_ROUTING_SUPPORTED = 0,
	CU_FILE_BATCH_IO_SUPPORTED = 1,
	CU_FILE_STREAMS_SUPPORTED = 2,
	CU_FILE_PARALLEL_IO_SUPPORTED = 3,
	CU_FILE_P2P_SUPPORTED = 4,	/* fgds: an fgds node serves a GPU */
} CUfileFeatureFlags_t;

/* How a file system's I/O reaches GPU memory (cuFileDriverGetP2PFlags,
 * cuFileDriverSetP2PFlags): bit numbers. fgds does CUFILE_P2PDMA: the
 * kernel's PCI P2PDMA, with the GPU memory a dma-buf registered on
 * /dev/fgdsN. */
typedef enum CUfileP2PFlags {
	CUFILE_P2PDMA = 0,
	CUFILE_NVFS = 1,
	CUFILE_DMABUF = 2,
	CUFILE_C2C = 3,
	CUFILE_NVIDIA_PEERMEM = 4,
} CUfileP2PFlags_t;

#define CU_FILE_P2P_FLAG_PCI_P2PDMA	((CUfileP2PFlags_t)(1 << CUFILE_P2PDMA))
#define CU_FILE_P2P_FLAG_NVFS		((CUfileP2PFlags_t)(1 << CUFILE_NVFS))
#define CU_FILE_P2P_FLAG_DMABUF		((CUfileP2PFlags_t)(1 << CUFILE_DMABUF))
#define CU_FILE_P2P_FLAG_C2C		((CUfileP2PFlags_t)(1 << CUFILE_C2C))

typedef enum CUfileOpcode {
	CUFILE_READ = 0,
	CUFILE_WRITE,
} CUfileOpcode_t;

typedef struct CUfileDrvProps {
	struct {
		unsigned int major_version;
		unsigned int minor_version;
		size_t poll_thresh_size;	/* KiB */
		size_t max_direct_io_size;	/* KiB: fgds's chunk size */
		unsigned int dstatusflags;
		unsigned int dcontrolflags;
	} nvfs;
	unsigned int fflags;
	unsigned int max_device_cache_size;	/* KiB */
	unsigned int per_buffer_cache_size;	/* KiB */
	unsigned int max_device_pinned_mem_size;	/* KiB */
	unsigned int max_batch_io_size;
	unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

/* RDMA and user-space file systems (declared for cuFile's ABI; fgds
 * supports neither: cuFileHandleRegister refuses CU_FILE_HANDLE_TYPE_USERSPACE_FS). */
typedef struct sockaddr sockaddr_t;

typedef struct cufileRDMAInfo {
	int version;
	int desc_len;
	const char *desc_str;
} cufileRDMAInfo_t;

#define CU_FILE_RDMA_REGISTER		1
#define CU_FILE_RDMA_RELAXED_ORDERING	(1 << 1)

#if FGDS_CUFILE_VERSION >= 1190
#define CU_FILE_RDMA_ERR_BASE		6000
#define CU_FILE_RDMA_SUCCESS		0
#define CU_FILE_RDMA_RESET_TOKEN	(CU_FILE_RDMA_ERR_BASE + 1)
#define CU_FILE_RDMA_RESET_TOKEN_FAILED	(CU_FILE_RDMA_ERR_BASE + 2)
#endif

typedef struct CUfileFSOps {
	const char *(*fs_type)(const void *handle);
	int (*getRDMADeviceList)(const void *handle, sockaddr_t **hostaddrs);
	int (*getRDMADevicePriority)(const void *handle, char *, size_t, __loff_t,
				     const sockaddr_t *hostaddr);
	ssize_t (*read)(const void *handle, char *, size_t, __loff_t, const cufileRDMAInfo_t *);
	ssize_t (*write)(const void *handle, const char *, size_t, __loff_t,
			 const cufileRDMAInfo_t *);
} CUfileFSOps_t;

enum CUfileFileHandleType {
	CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1,	/* a Linux file descriptor: the only one supported */
	CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 = 2,
	CU_FILE_HANDLE_TYPE_USERSPACE_FS = 3,
};

typedef struct CUfileDescr_t {
	enum CUfileFileHandleType type;
	union {
		int fd;
		void *handle;
	} handle;
	const CUfileFSOps_t *fs_ops;	/* user-space file systems: unsupported, ignored */
} CUfileDescr_t;

typedef void *CUfileHandle_t;

CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr);
void cuFileHandleDeregister(CUfileHandle_t fh);
CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags);
CUfileError_t cuFileBufDeregister(const void *bufPtr_base);
ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size,
		   off_t file_offset, off_t bufPtr_offset);
ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size,
		    off_t file_offset, off_t bufPtr_offset);

/* cuFile 1.19's vectored I/O, on fgds's vectored engine (one call, the
 * segments in order from file_offset on; each base device or host memory,
 * registered or not, any alignment). flags must be 0. Returns as cuFileRead:
 * bytes (fewer at the end of the file), -1 with errno, or -CU_FILE_*. At
 * most 1024 segments (FGDS_IOV_MAX). */
typedef struct CUfileIOVec {
	void *base;
	size_t len;
} CUfileIOVec_t;

ssize_t cuFileReadv(CUfileHandle_t fh, const CUfileIOVec_t *iov, size_t iovcnt,
		    off_t file_offset, unsigned flags);
ssize_t cuFileWritev(CUfileHandle_t fh, const CUfileIOVec_t *iov, size_t iovcnt,
		     off_t file_offset, unsigned flags);

CUfileError_t cuFileDriverOpen(void);
/* Programs built with this header call cuFileDriverClose_v2, as with cuFile's. */
CUfileError_t cuFileDriverClose_v2(void);
#define cuFileDriverClose cuFileDriverClose_v2
CUfileError_t cuFileDriverClose(void);
long cuFileUseCount(void);
CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props);
CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size);
CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size);
CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size);
CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size);

/* How a file system type's I/O reaches GPU memory: for
 * CU_FILE_NVME_SUPPORTED, CU_FILE_P2P_FLAG_PCI_P2PDMA (what fgds does)
 * where an fgds node serves a GPU, else 0; for other types 0. Set accepts
 * exactly that value for NVMe (anything else: CU_FILE_INVALID_VALUE; other
 * types: CU_FILE_PLATFORM_NOT_SUPPORTED). */
CUfileError_t cuFileDriverGetP2PFlags(CUfileDriverStatusFlags_t status_flag,
				      CUfileP2PFlags_t *p2p_flags);
CUfileError_t cuFileDriverSetP2PFlags(CUfileDriverStatusFlags_t status_flag,
				      CUfileP2PFlags_t p2p_flags);
/* The BAR size (KiB) of the gpuIndex-th GPU an fgds node serves (in
 * /dev/fgdsN order): the largest BAR its node lists.
 * CU_FILE_DEVICE_NOT_FOUND for an index without one. */
CUfileError_t cuFileGetBARSizeInKB(int gpuIndex, size_t *barSize);
/* Writes the GPUs fgds nodes serve (node, PCI address, vendor, device,
 * BARs) to filename as JSON. */
CUfileError_t cuFileExportPCIeTopology(const char *filename);

typedef enum CUFILEStatus_enum {
	CUFILE_WAITING = 0x000001,
	CUFILE_PENDING = 0x000002,
	CUFILE_INVALID = 0x000004,
	CUFILE_CANCELED = 0x000008,
	CUFILE_COMPLETE = 0x000010,
	CUFILE_TIMEOUT = 0x000020,
	CUFILE_FAILED = 0x000040,
} CUfileStatus_t;

typedef enum cufileBatchMode {
	CUFILE_BATCH = 1,
} CUfileBatchMode_t;

typedef struct CUfileIOParams {
	CUfileBatchMode_t mode;	/* CUFILE_BATCH */
	union {
		struct {
			void *devPtr_base;	/* device or host memory */
			off_t file_offset;
			off_t devPtr_offset;
			size_t size;
		} batch;
	} u;
	CUfileHandle_t fh;
	CUfileOpcode_t opcode;
	void *cookie;
} CUfileIOParams_t;

typedef struct CUfileIOEvents {
	void *cookie;
	CUfileStatus_t status;
	size_t ret;	/* bytes, or a negative error (as ssize_t) */
} CUfileIOEvents_t;

typedef void *CUfileBatchHandle_t;

CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr);
CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr,
				  CUfileIOParams_t *iocbp, unsigned int flags);
CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr,
				     unsigned *nr, CUfileIOEvents_t *iocbp,
				     struct timespec *timeout);
CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp);
void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp);

/* cuFileStreamRegister flags (accepted; fgds needs no per-stream set-up). */
#define CU_FILE_STREAM_FIXED_BUF_OFFSET		1
#define CU_FILE_STREAM_FIXED_FILE_OFFSET	2
#define CU_FILE_STREAM_FIXED_FILE_SIZE		4
#define CU_FILE_STREAM_PAGE_ALIGNED_INPUTS	8

CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
			      off_t *file_offset_p, off_t *bufPtr_offset_p,
			      ssize_t *bytes_read_p, CUstream stream);
CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
			       off_t *file_offset_p, off_t *bufPtr_offset_p,
			       ssize_t *bytes_written_p, CUstream stream);
CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags);
CUfileError_t cuFileStreamDeregister(CUstream stream);

/* 1000 * major + 10 * minor: 1200, or what FGDS_CUFILE_VERSION (the
 * environment) sets. */
CUfileError_t cuFileGetVersion(int *version);


/*
 * Parameters (cuFile's parameter API, 1.15 to 1.20). Set* stage a value until the
 * driver opens (CU_FILE_DRIVER_ALREADY_OPEN afterwards: this library's
 * driver opens at cuFileDriverOpen or the first call of any function
 * outside the parameter API); a staged value wins over FGDS_* and
 * cufile.json. Get* read the value in force, or the one the driver would
 * open with. What fgds does with each:
 *   PROFILE_STATS                    the statistics level (0-3)
 *   EXECUTION_MAX_IO_QUEUE_DEPTH     fgds's queue depth (a cap, 1-4096)
 *   PROPERTIES_MAX_DIRECT_IO_SIZE_KB the chunk size in KiB (a cap)
 *   PROPERTIES_IO_BATCHSIZE          largest cuFileBatchIOSetUp (1-4096)
 *   PROPERTIES_ALLOW_COMPAT_MODE     false: strict (FGDS_STRICT=1)
 *   FORCE_COMPAT_MODE                true: never O_DIRECT (FGDS_DIRECT=0)
 *   PREFER_IO_URING                  false: pread/pwrite (FGDS_IO_URING=0)
 *   PROPERTIES_ALLOW_SYSTEM_MEMORY,
 *   USE_PCIP2PDMA                    always true (false: not supported)
 *   LOGGING_LEVEL                    NONE/OFF, ERROR/WARN/NOTICE/INFO, DEBUG/TRACE
 * Every other parameter, and the slab arrays, return
 * CU_FILE_PLATFORM_NOT_SUPPORTED (fgds has no such quantity); an unknown
 * parameter, a NULL pointer or a value out of range CU_FILE_INVALID_VALUE.
 */
typedef enum CUFileSizeTConfigParameter_t {
	CUFILE_PARAM_PROFILE_STATS,
	CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH,
	CUFILE_PARAM_EXECUTION_MAX_IO_THREADS,
	CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB,
	CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM,
	CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB,
	CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB,
	CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB,
	CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB,
	CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE,
	CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB,
	CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS,
} CUFileSizeTConfigParameter_t;

typedef enum CUFileBoolConfigParameter_t {
	CUFILE_PARAM_PROPERTIES_USE_POLL_MODE,
	CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE,
	CUFILE_PARAM_FORCE_COMPAT_MODE,
	CUFILE_PARAM_FS_MISC_API_CHECK_AGGRESSIVE,
	CUFILE_PARAM_EXECUTION_PARALLEL_IO,
	CUFILE_PARAM_PROFILE_NVTX,
	CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY,
	CUFILE_PARAM_USE_PCIP2PDMA,
	CUFILE_PARAM_PREFER_IO_URING,
	CUFILE_PARAM_FORCE_ODIRECT_MODE,
	CUFILE_PARAM_SKIP_TOPOLOGY_DETECTION,
	CUFILE_PARAM_STREAM_MEMOPS_BYPASS,
#if FGDS_CUFILE_VERSION >= 1190
	CUFILE_PARAM_PROPERTIES_POSIX_IO_MODE,
	CUFILE_PARAM_GDS_FALLBACK_IO,
#endif
} CUFileBoolConfigParameter_t;

typedef enum CUFileStringConfigParameter_t {
	CUFILE_PARAM_LOGGING_LEVEL,
	CUFILE_PARAM_ENV_LOGFILE_PATH,
	CUFILE_PARAM_LOG_DIR,
#if FGDS_CUFILE_VERSION >= 1190
	CUFILE_PARAM_RDMA_TRANSPORT,
#endif
} CUFileStringConfigParameter_t;

typedef enum CUFileArrayConfigParameter_t {
	CUFILE_PARAM_POSIX_POOL_SLAB_SIZE_KB,
	CUFILE_PARAM_POSIX_POOL_SLAB_COUNT,
	CUFILE_PARAM_GPU_BOUNCE_BUFFER_SLAB_SIZE_KB,
	CUFILE_PARAM_GPU_BOUNCE_BUFFER_SLAB_COUNT,
} CUFileArrayConfigParameter_t;

CUfileError_t cuFileGetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t *value);
CUfileError_t cuFileGetParameterBool(CUFileBoolConfigParameter_t param, bool *value);
CUfileError_t cuFileGetParameterString(CUFileStringConfigParameter_t param, char *desc_str,
				       int len);
CUfileError_t cuFileGetParameterMinMaxValue(CUFileSizeTConfigParameter_t param,
					    size_t *min_value, size_t *max_value);
CUfileError_t cuFileSetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t value);
CUfileError_t cuFileSetParameterBool(CUFileBoolConfigParameter_t param, bool value);
CUfileError_t cuFileSetParameterString(CUFileStringConfigParameter_t param,
				       const char *desc_str);
CUfileError_t cuFileSetParameterPosixPoolSlabArray(const size_t *size_values,
						   const size_t *count_values, int len);
CUfileError_t cuFileGetParameterPosixPoolSlabArray(size_t *size_values, size_t *count_values,
						   int len);
CUfileError_t cuFileSetParameterGpuBounceBufferSlabArray(const size_t *size_values,
							 const size_t *count_values, int len);
CUfileError_t cuFileGetParameterGpuBounceBufferSlabArray(size_t *size_values,
							 size_t *count_values, int len);

/*
 * Statistics (the layout of FGDS_CUFILE_VERSION, above). The level comes from cufile.json's
 * "profile": { "cufile_stats": N }, CUFILE_PARAM_PROFILE_STATS or
 * cuFileSetStatsLevel (0: off); counting runs while the level is above 0,
 * cuFileStatsStop pauses it and cuFileStatsStart (CU_FILE_INVALID_VALUE at
 * level 0) resumes it. cuFileGetStatsLN needs level N or more
 * (CU_FILE_INVALID_VALUE otherwise). Counted: synchronous cuFileRead and
 * cuFileWrite (ops, bytes, latency sums and averages, per-call bandwidth
 * = bytes over the latency sum, ops per second over the span since the
 * reset), registrations, batches (set-up, submit, requests enqueued and
 * completed as cuFileBatchIOGetStatus hands them out, with bytes and
 * latency since submit); not stream-ordered I/O. Histogram bucket i: sizes
 * up to 2^i KiB. Per GPU (level 3): uuid holds the GPU's PCI address as
 * text; n_p2p_* are requests that went peer to peer into an fgds mapping,
 * n_posix_* those that bounced through host memory; nvfs and dynamic
 * routing counters stay 0.
 */
CUfileError_t cuFileSetStatsLevel(int level);
CUfileError_t cuFileGetStatsLevel(int *level);

#define CUFILE_GPU_UUID_LEN 16

typedef struct CUfileOpCounter {
	uint64_t ok;
	uint64_t err;
} CUfileOpCounter_t;

typedef struct CUfileStatsLevel1 {
	CUfileOpCounter_t read_ops;
	CUfileOpCounter_t write_ops;
	CUfileOpCounter_t hdl_register_ops;
	CUfileOpCounter_t hdl_deregister_ops;
	CUfileOpCounter_t buf_register_ops;
	CUfileOpCounter_t buf_deregister_ops;
	uint64_t read_bytes;
	uint64_t write_bytes;
	uint64_t read_bw_bytes_per_sec;
	uint64_t write_bw_bytes_per_sec;
	uint64_t read_lat_avg_us;
	uint64_t write_lat_avg_us;
	uint64_t read_ops_per_sec;
	uint64_t write_ops_per_sec;
	uint64_t read_lat_sum_us;
	uint64_t write_lat_sum_us;
	CUfileOpCounter_t batch_submit_ops;
	CUfileOpCounter_t batch_complete_ops;
	CUfileOpCounter_t batch_setup_ops;
	CUfileOpCounter_t batch_cancel_ops;
	CUfileOpCounter_t batch_destroy_ops;
	CUfileOpCounter_t batch_enqueued_ops;
	CUfileOpCounter_t batch_posix_enqueued_ops;
	CUfileOpCounter_t batch_processed_ops;
	CUfileOpCounter_t batch_posix_processed_ops;
	CUfileOpCounter_t batch_nvfs_submit_ops;
	CUfileOpCounter_t batch_p2p_submit_ops;
	CUfileOpCounter_t batch_aio_submit_ops;
	CUfileOpCounter_t batch_iouring_submit_ops;
	CUfileOpCounter_t batch_mixed_io_submit_ops;
	CUfileOpCounter_t batch_total_submit_ops;
	uint64_t batch_read_bytes;
	uint64_t batch_write_bytes;
	uint64_t batch_read_bw_bytes;
	uint64_t batch_write_bw_bytes;
	uint64_t batch_submit_lat_avg_us;
	uint64_t batch_completion_lat_avg_us;
	uint64_t batch_submit_ops_per_sec;
	uint64_t batch_complete_ops_per_sec;
	uint64_t batch_submit_lat_sum_us;
	uint64_t batch_completion_lat_sum_us;
	uint64_t last_batch_read_bytes;
	uint64_t last_batch_write_bytes;
#if FGDS_CUFILE_VERSION >= 1190
	/* cuFileReadv, cuFileWritev (cuFile 1.19) */
	CUfileOpCounter_t readv_ops;
	CUfileOpCounter_t writev_ops;
	uint64_t readv_bytes;
	uint64_t writev_bytes;
	uint64_t readv_bw_bytes_per_sec;
	uint64_t writev_bw_bytes_per_sec;
	uint64_t readv_lat_avg_us;
	uint64_t writev_lat_avg_us;
	uint64_t readv_ops_per_sec;
	uint64_t writev_ops_per_sec;
	uint64_t readv_lat_sum_us;
	uint64_t writev_lat_sum_us;
#endif
} CUfileStatsLevel1_t;

typedef struct CUfileStatsLevel2 {
	CUfileStatsLevel1_t basic;
	uint64_t read_size_kb_hist[32];
	uint64_t write_size_kb_hist[32];
} CUfileStatsLevel2_t;

typedef struct CUfilePerGpuStats {
	char uuid[CUFILE_GPU_UUID_LEN];
	uint64_t read_bytes;
	uint64_t read_bw_bytes_per_sec;
	uint64_t read_utilization;
	uint64_t read_duration_us;
	uint64_t n_total_reads;
	uint64_t n_p2p_reads;
	uint64_t n_nvfs_reads;
	uint64_t n_posix_reads;
	uint64_t n_unaligned_reads;
	uint64_t n_dr_reads;
	uint64_t n_sparse_regions;
	uint64_t n_inline_regions;
	uint64_t n_reads_err;
	uint64_t writes_bytes;
	uint64_t write_bw_bytes_per_sec;
	uint64_t write_utilization;
	uint64_t write_duration_us;
	uint64_t n_total_writes;
	uint64_t n_p2p_writes;
	uint64_t n_nvfs_writes;
	uint64_t n_posix_writes;
	uint64_t n_unaligned_writes;
	uint64_t n_dr_writes;
	uint64_t n_writes_err;
	uint64_t n_mmap;
	uint64_t n_mmap_ok;
	uint64_t n_mmap_err;
	uint64_t n_mmap_free;
	uint64_t reg_bytes;
} CUfilePerGpuStats_t;

typedef struct CUfileStatsLevel3 {
	CUfileStatsLevel2_t detailed;
	uint32_t num_gpus;
	CUfilePerGpuStats_t per_gpu_stats[16];
} CUfileStatsLevel3_t;

CUfileError_t cuFileStatsStart(void);
CUfileError_t cuFileStatsStop(void);
CUfileError_t cuFileStatsReset(void);
CUfileError_t cuFileGetStatsL1(CUfileStatsLevel1_t *stats);
CUfileError_t cuFileGetStatsL2(CUfileStatsLevel2_t *stats);
CUfileError_t cuFileGetStatsL3(CUfileStatsLevel3_t *stats);

/*
 * fgds's extension (not in NVIDIA's cuFile): registers [offset, offset +
 * length) of a dma-buf (another vendor's GPU memory, or any exporter an
 * fgds node serves) on the fgds node whose GPU exports it, maps it and
 * returns the mapping's address in *bufPtr_base: a registered buffer for
 * cuFileRead/cuFileWrite/batches, whose I/O goes peer to peer, until
 * cuFileBufDeregister(*bufPtr_base). CU_FILE_INVALID_VALUE for a bad
 * argument, CU_FILE_DEVICE_NOT_FOUND when no fgds node takes the dma-buf.
 */
CUfileError_t cuFileBufRegisterDmabufFGDS(int dmabuf_fd, uint64_t offset, size_t length,
					  void **bufPtr_base);

#ifdef __cplusplus
}
#endif

#endif /* FGDS_CUFILE_H */
