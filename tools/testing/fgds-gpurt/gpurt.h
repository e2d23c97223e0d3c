/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The GPU runtime of the fgds VM's GPU stand-in: the part of CUDA's driver
 * API (cuda.h) and of HIP's runtime API (hip_runtime_api.h) that fgds's
 * library, libcufile.so.0 and the fgds CLI call, with the vendors' types,
 * values and signatures, over the stand-in's BAR. See README.md.
 */
#ifndef FGDS_GPURT_H
#define FGDS_GPURT_H

#include <stddef.h>
#include <stdint.h>

/* cuda.h */
typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef void (*CUhostFn)(void *user);

#define CUDA_SUCCESS			0
#define CUDA_ERROR_INVALID_VALUE	1
#define CUDA_ERROR_OUT_OF_MEMORY	2
#define CUDA_ERROR_NOT_INITIALIZED	3
#define CUDA_ERROR_NO_DEVICE		100
#define CUDA_ERROR_INVALID_DEVICE	101
#define CUDA_ERROR_INVALID_CONTEXT	201
#define CUDA_ERROR_INVALID_HANDLE	400
#define CUDA_ERROR_NOT_FOUND		500
#define CUDA_ERROR_NOT_SUPPORTED	801
#define CUDA_ERROR_UNKNOWN		999

#define CU_STREAM_LEGACY		((CUstream)0x1)
#define CU_STREAM_PER_THREAD		((CUstream)0x2)
#define CU_STREAM_DEFAULT		0x0
#define CU_STREAM_NON_BLOCKING		0x1
#define CU_EVENT_BLOCKING_SYNC		0x1
#define CU_EVENT_DISABLE_TIMING		0x2
#define CU_MEMHOSTALLOC_PORTABLE	0x1
#define CU_STREAM_WAIT_VALUE_GEQ	0x0
#define CU_STREAM_WAIT_VALUE_EQ		0x1
#define CU_STREAM_WAIT_VALUE_AND	0x2
#define CU_STREAM_WAIT_VALUE_NOR	0x3
#define CU_POINTER_ATTRIBUTE_CONTEXT	1
#define CU_POINTER_ATTRIBUTE_BUFFER_ID	7
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

CUresult cuInit(unsigned int flags);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev);
CUresult cuDeviceGetPCIBusId(char *pci_bus_id, int len, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags);
CUresult cuMemFreeHost(void *p);
CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr);
CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
				       int handle_type, unsigned long long flags);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream s);
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream s);
CUresult cuStreamCreate(CUstream *ps, unsigned int flags);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user);
CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, uint32_t value, unsigned int flags);
CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, uint32_t value,
				unsigned int flags);
CUresult cuEventCreate(CUevent *pe, unsigned int flags);
CUresult cuEventRecord(CUevent e, CUstream s);
CUresult cuEventSynchronize(CUevent e);

/* hip_runtime_api.h */
typedef int hipError_t;
typedef void *hipDeviceptr_t;

#define hipSuccess			0
#define hipErrorInvalidValue		1
#define hipErrorOutOfMemory		2
#define hipErrorInvalidDevice		101
#define hipErrorNotFound		500
#define hipErrorNotSupported		801
#define HIP_POINTER_ATTRIBUTE_BUFFER_ID 7
#define HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define hipMemRangeHandleTypeDmaBufFd	1

hipError_t hipInit(unsigned int flags);
hipError_t hipGetDevice(int *device);
hipError_t hipSetDevice(int device);
hipError_t hipDeviceGetPCIBusId(char *pci_bus_id, int len, int device);
hipError_t hipMalloc(void **ptr, size_t size);
hipError_t hipFree(void *ptr);
hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags);
hipError_t hipHostFree(void *ptr);
hipError_t hipPointerGetAttribute(void *data, int attribute, hipDeviceptr_t ptr);
hipError_t hipMemGetAddressRange(hipDeviceptr_t *pbase, size_t *psize, hipDeviceptr_t dptr);
hipError_t hipMemGetHandleForAddressRange(void *handle, hipDeviceptr_t dptr, size_t size,
					  int handle_type, unsigned long long flags);
hipError_t hipMemcpyHtoD(hipDeviceptr_t dst, const void *src, size_t n);
hipError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t n);
hipError_t hipMemcpyDtoD(hipDeviceptr_t dst, hipDeviceptr_t src, size_t n);
hipError_t hipDeviceSynchronize(void);

/*
 * Not a vendor call: where the live allocation holding @dptr (a CUDA or
 * HIP pointer) lies, so that a test can ask the host to check the bytes
 * in the BAR's backing file. 0, or -1 when @dptr is in no live allocation.
 */
int fgds_gpurt_bar_offset(uint64_t dptr, int *ordinal, uint64_t *bar_off);

#endif /* FGDS_GPURT_H */
