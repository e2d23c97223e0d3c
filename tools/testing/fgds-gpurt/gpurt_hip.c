// SPDX-License-Identifier: GPL-2.0
/*
 * The GPU stand-in's runtime (gpurt.c): the HIP runtime calls
 * (hip_runtime_api.h's hip*, libamdhip64.so), on the same devices, memory
 * and streams as the CUDA calls.
 */
#include "gpurt_internal.h"

static __thread int hip_dev;

/* HIP: no contexts; a thread's device (0 at first) is used through its primary context. */

static void hip_enter(const char *fn)
{
	entry(fn);
	pthread_mutex_lock(&lock);
	init_locked();
}

/* The thread's device, opened; NULL when there is none. The lock is held. */
static struct gpurt_dev *hip_device(const char *fn)
{
	if (hip_dev >= ndevs || dev_open(fn, &devs[hip_dev]))
		return NULL;
	return &devs[hip_dev];
}

/*
 * The legacy stream of @d's primary context, where HIP's synchronous calls
 * run (stream_of() as if it were current). The lock is held.
 */
static struct CUstream_st *hip_legacy(const char *fn, struct gpurt_dev *d, CUresult *err)
{
	struct CUctx_st *saved = cur_ctx;
	struct CUstream_st *s;

	cur_ctx = &d->ctx;
	s = stream_of(fn, NULL, err);
	cur_ctx = saved;
	return s;
}

__export hipError_t hipInit(unsigned int flags)
{
	hip_enter("hipInit");
	if (flags)
		return unlock_ret(hipErrorInvalidValue);
	return unlock_ret(ndevs ? hipSuccess : hipErrorInvalidDevice);
}

__export hipError_t hipGetDevice(int *device)
{
	hip_enter("hipGetDevice");
	if (!device)
		return unlock_ret(hipErrorInvalidValue);
	*device = hip_dev;
	return unlock_ret(hipSuccess);
}

__export hipError_t hipSetDevice(int device)
{
	hip_enter("hipSetDevice");
	if (device < 0 || device >= ndevs)
		return unlock_ret(fail("hipSetDevice", hipErrorInvalidDevice, "device %d",
				       device));
	hip_dev = device;
	return unlock_ret(hipSuccess);
}

__export hipError_t hipDeviceGetPCIBusId(char *pci_bus_id, int len, int device)
{
	hip_enter("hipDeviceGetPCIBusId");
	if (device < 0 || device >= ndevs)
		return unlock_ret(hipErrorInvalidDevice);
	if (len <= 0 || bus_id(pci_bus_id, len, device))
		return unlock_ret(hipErrorInvalidValue);
	return unlock_ret(hipSuccess);
}

__export hipError_t hipMalloc(void **ptr, size_t size)
{
	struct gpurt_dev *d;
	uint64_t p = 0;
	hipError_t r;

	hip_enter("hipMalloc");
	if (!ptr)
		return unlock_ret(hipErrorInvalidValue);
	if (!size) {
		*ptr = NULL;
		return unlock_ret(hipSuccess);
	}
	d = hip_device("hipMalloc");
	if (!d)
		return unlock_ret(hipErrorInvalidDevice);
	r = mem_alloc("hipMalloc", d, &p, size);
	if (!r)
		*ptr = (void *)(uintptr_t)p;
	return unlock_ret(r);
}

__export hipError_t hipFree(void *ptr)
{
	hip_enter("hipFree");
	if (!ptr)
		return unlock_ret(hipSuccess);
	return unlock_ret(mem_free("hipFree", (uintptr_t)ptr));
}

__export hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
	hip_enter("hipHostMalloc");
	if (flags)
		die("hipHostMalloc", "flags %#x", flags);
	if (!ptr)
		return unlock_ret(hipErrorInvalidValue);
	if (!size) {
		*ptr = NULL;
		return unlock_ret(hipSuccess);
	}
	return unlock_ret(host_alloc("hipHostMalloc", ptr, size));
}

__export hipError_t hipHostFree(void *ptr)
{
	hip_enter("hipHostFree");
	if (!ptr)
		return unlock_ret(hipSuccess);
	return unlock_ret(host_free("hipHostFree", ptr));
}

__export hipError_t hipPointerGetAttribute(void *data, int attribute, hipDeviceptr_t ptr)
{
	struct gpurt_dev *d;
	struct alloc *a;

	hip_enter("hipPointerGetAttribute");
	if (attribute != HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL &&
	    attribute != HIP_POINTER_ATTRIBUTE_BUFFER_ID)
		die("hipPointerGetAttribute", "attribute %d", attribute);
	if (!data)
		return unlock_ret(hipErrorInvalidValue);
	a = find((uintptr_t)ptr, 1, &d);
	if (!a)
		return unlock_ret(fail("hipPointerGetAttribute", hipErrorInvalidValue,
				       "%p is not device memory", ptr));
	if (attribute == HIP_POINTER_ATTRIBUTE_BUFFER_ID)
		*(unsigned long long *)data = a->id;
	else
		*(int *)data = d->ordinal;
	return unlock_ret(hipSuccess);
}

__export hipError_t hipMemGetAddressRange(hipDeviceptr_t *pbase, size_t *psize,
					  hipDeviceptr_t dptr)
{
	uint64_t base = 0;
	hipError_t r;

	hip_enter("hipMemGetAddressRange");
	r = addr_range("hipMemGetAddressRange", &base, psize, (uintptr_t)dptr, hipErrorNotFound);
	if (!r && pbase)
		*pbase = (void *)(uintptr_t)base;
	return unlock_ret(r);
}

__export hipError_t hipMemGetHandleForAddressRange(void *handle, hipDeviceptr_t dptr, size_t size,
						   int handle_type, unsigned long long flags)
{
	hip_enter("hipMemGetHandleForAddressRange");
	return unlock_ret(export("hipMemGetHandleForAddressRange", handle, (uintptr_t)dptr, size,
				 handle_type, flags, hipErrorNotSupported));
}

/* A synchronous HIP copy: on the legacy stream of the memory's device. */
static hipError_t hip_copy(const char *fn, enum op_kind kind, uint64_t p, void *host, size_t n)
{
	struct CUstream_st *s;
	struct gpurt_dev *d;
	CUresult err = 0;

	if (!n)
		return hipSuccess;
	if (!find(p, n, &d))
		return fail(fn, hipErrorInvalidValue, "%#llx+%#zx is not in one allocation",
			    (unsigned long long)p, n);
	s = hip_legacy(fn, d, &err);
	if (s)
		err = device_op(fn, s, kind, p, host, n, n, 0, true);
	return err;
}

__export hipError_t hipMemcpyHtoD(hipDeviceptr_t dst, const void *src, size_t n)
{
	hip_enter("hipMemcpyHtoD");
	return unlock_ret(hip_copy("hipMemcpyHtoD", OP_HTOD, (uintptr_t)dst, (void *)src, n));
}

__export hipError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t n)
{
	hip_enter("hipMemcpyDtoH");
	return unlock_ret(hip_copy("hipMemcpyDtoH", OP_DTOH, (uintptr_t)src, dst, n));
}

/* On the legacy stream of the memory's device; returns once it ran (the stand-in waits). */
__export hipError_t hipMemcpyDtoD(hipDeviceptr_t dst, hipDeviceptr_t src, size_t n)
{
	struct CUstream_st *s;
	struct gpurt_dev *d;
	CUresult err = 0;

	hip_enter("hipMemcpyDtoD");
	if (!n)
		return unlock_ret(hipSuccess);
	if (!find((uintptr_t)dst, n, &d))
		return unlock_ret(fail("hipMemcpyDtoD", hipErrorInvalidValue,
				       "%p+%#zx is not in one allocation", dst, n));
	s = hip_legacy("hipMemcpyDtoD", d, &err);
	if (s)
		err = dtod("hipMemcpyDtoD", s, (uintptr_t)dst, (uintptr_t)src, n, true);
	return unlock_ret(err);
}

/* Waits for the current device's work: its legacy stream waits for the blocking streams. */
__export hipError_t hipDeviceSynchronize(void)
{
	struct CUstream_st *s;
	struct gpurt_dev *d;
	CUresult err = 0;

	hip_enter("hipDeviceSynchronize");
	d = hip_device("hipDeviceSynchronize");
	if (!d)
		return unlock_ret(hipErrorInvalidDevice);
	s = hip_legacy("hipDeviceSynchronize", d, &err);
	if (s)
		wait_ticket(s, sync_ticket("hipDeviceSynchronize", s));
	return unlock_ret(err);
}
