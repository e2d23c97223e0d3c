// SPDX-License-Identifier: GPL-2.0
/*
 * The GPU stand-in's runtime (gpurt.c): the CUDA driver API calls (cuda.h's
 * cu*, libcuda.so.1), each checking its arguments and the current context
 * and calling on gpurt_mem.c and gpurt_stream.c under the lock.
 */
#include "gpurt_internal.h"

/* Takes the lock; false (and the lock not held) before cuInit. */
static bool cu_enter(const char *fn)
{
	entry(fn);
	pthread_mutex_lock(&lock);
	if (!initialized)
		pthread_mutex_unlock(&lock);
	return initialized;
}

/*
 * cu_enter() and a device call's checks of where its answer goes (@out) and
 * of device @dev: CUDA_SUCCESS with the lock held, else what the call
 * returns (the lock not held).
 */
static CUresult cu_enter_dev(const char *fn, const void *out, CUdevice dev)
{
	if (!cu_enter(fn))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!out)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	if (dev < 0 || dev >= ndevs)
		return unlock_ret(CUDA_ERROR_INVALID_DEVICE);
	return CUDA_SUCCESS;
}

/* What a call that needs a current context returns without one; releases the lock. */
static CUresult no_context(const char *fn)
{
	return unlock_ret(fail(fn, CUDA_ERROR_INVALID_CONTEXT, "no current context"));
}

/*
 * cu_enter() and the stream @h a call names (stream_of()): NULL, with what
 * the call returns in *@err and the lock not held, before cuInit or when
 * there is no such stream.
 */
static struct CUstream_st *cu_enter_stream(const char *fn, CUstream h, CUresult *err)
{
	struct CUstream_st *s;

	if (!cu_enter(fn)) {
		*err = CUDA_ERROR_NOT_INITIALIZED;
		return NULL;
	}
	s = stream_of(fn, h, err);
	if (!s)
		pthread_mutex_unlock(&lock);
	return s;
}

/* A copy between host and device memory, or a fill of device memory, on @h: device_op(). */
static CUresult cu_copy(const char *fn, CUstream h, enum op_kind kind, uint64_t p, void *host,
			size_t n, uint32_t value, bool wait)
{
	CUresult err = 0;
	struct CUstream_st *s = cu_enter_stream(fn, h, &err);

	if (!s)
		return err;
	return unlock_ret(device_op(fn, s, kind, p, host, n, n, value, wait));
}

/* A copy of device memory on @h: dtod(), returning before it ran. */
static CUresult cu_dtod(const char *fn, CUstream h, uint64_t dst, uint64_t src, size_t n)
{
	CUresult err = 0;
	struct CUstream_st *s = cu_enter_stream(fn, h, &err);

	if (!s)
		return err;
	return unlock_ret(dtod(fn, s, dst, src, n, false));
}

__export CUresult cuInit(unsigned int flags)
{
	entry("cuInit");
	if (flags)
		return fail("cuInit", CUDA_ERROR_INVALID_VALUE, "flags %#x", flags);
	pthread_mutex_lock(&lock);
	init_locked();
	return unlock_ret(ndevs ? CUDA_SUCCESS :
			  fail("cuInit", CUDA_ERROR_NO_DEVICE, "no ivshmem bound to vfio-pci"));
}

__export CUresult cuDeviceGetCount(int *count)
{
	if (!cu_enter("cuDeviceGetCount"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!count)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	*count = ndevs;
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (!cu_enter("cuDeviceGet"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!device)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	if (ordinal < 0 || ordinal >= ndevs)
		return unlock_ret(fail("cuDeviceGet", CUDA_ERROR_INVALID_DEVICE, "ordinal %d",
				       ordinal));
	*device = ordinal;
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev)
{
	CUresult r = cu_enter_dev("cuDeviceGetAttribute", pi, dev);

	if (r)
		return r;
	if (attrib != CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
		die("cuDeviceGetAttribute", "attribute %d", attrib);
	*pi = !devs[dev].file;
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuDeviceGetPCIBusId(char *pci_bus_id, int len, CUdevice dev)
{
	if (!cu_enter("cuDeviceGetPCIBusId"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= ndevs)
		return unlock_ret(CUDA_ERROR_INVALID_DEVICE);
	if (len <= 0 || bus_id(pci_bus_id, len, dev))
		return unlock_ret(fail("cuDeviceGetPCIBusId", CUDA_ERROR_INVALID_VALUE,
				       "buffer of %d bytes", len));
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult r = cu_enter_dev("cuDevicePrimaryCtxRetain", pctx, dev);

	if (r)
		return r;
	if (dev_open("cuDevicePrimaryCtxRetain", &devs[dev]))
		return unlock_ret(CUDA_ERROR_UNKNOWN);
	devs[dev].ctx.refs++;
	*pctx = &devs[dev].ctx;
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	if (!cu_enter("cuCtxGetCurrent"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	*pctx = cur_ctx;
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuCtxSetCurrent(CUcontext ctx)
{
	bool ours = false;

	if (!cu_enter("cuCtxSetCurrent"))
		return CUDA_ERROR_NOT_INITIALIZED;
	for (int i = 0; i < ndevs; i++)
		ours |= ctx == &devs[i].ctx && ctx->refs > 0;
	if (ctx && !ours)
		return unlock_ret(fail("cuCtxSetCurrent", CUDA_ERROR_INVALID_CONTEXT,
				       "%p is no retained context", (void *)ctx));
	cur_ctx = ctx;
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	if (!cu_enter("cuMemAlloc_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !bytesize)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	if (!cur_ctx)
		return no_context("cuMemAlloc_v2");
	return unlock_ret(mem_alloc("cuMemAlloc_v2", cur_ctx->dev, dptr, bytesize));
}

__export CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	if (!cu_enter("cuMemFree_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!cur_ctx)
		return no_context("cuMemFree_v2");
	return unlock_ret(mem_free("cuMemFree_v2", dptr));
}

__export CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
	if (!cu_enter("cuMemHostAlloc"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (flags & ~CU_MEMHOSTALLOC_PORTABLE)
		die("cuMemHostAlloc", "flags %#x", flags);
	if (!pp || !bytesize)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	if (!cur_ctx)
		return no_context("cuMemHostAlloc");
	return unlock_ret(host_alloc("cuMemHostAlloc", pp, bytesize));
}

__export CUresult cuMemFreeHost(void *p)
{
	if (!cu_enter("cuMemFreeHost"))
		return CUDA_ERROR_NOT_INITIALIZED;
	return unlock_ret(host_free("cuMemFreeHost", p));
}

__export CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr)
{
	struct CUctx_st *ctx = NULL;
	struct alloc *a = NULL;
	struct gpurt_dev *d;
	struct pinned *h;

	if (!cu_enter("cuPointerGetAttribute"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (attribute != CU_POINTER_ATTRIBUTE_CONTEXT &&
	    attribute != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL &&
	    attribute != CU_POINTER_ATTRIBUTE_BUFFER_ID)
		die("cuPointerGetAttribute", "attribute %d", attribute);
	if (!data)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	a = find(ptr, 1, &d);
	if (a) {
		ctx = &d->ctx;
	} else {
		h = find_pinned((void *)(uintptr_t)ptr, 1);
		if (h)
			ctx = h->ctx;
	}
	if (!ctx)
		return unlock_ret(fail("cuPointerGetAttribute", CUDA_ERROR_INVALID_VALUE,
				       "%#llx is not memory of this runtime",
				       (unsigned long long)ptr));
	if (attribute == CU_POINTER_ATTRIBUTE_BUFFER_ID && !a)
		die("cuPointerGetAttribute", "BUFFER_ID of host memory");
	if (attribute == CU_POINTER_ATTRIBUTE_BUFFER_ID)
		*(unsigned long long *)data = a->id;
	else if (attribute == CU_POINTER_ATTRIBUTE_CONTEXT)
		*(CUcontext *)data = ctx;
	else
		*(int *)data = ctx->dev->ordinal;
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	if (!cu_enter("cuMemGetAddressRange_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!cur_ctx)
		return no_context("cuMemGetAddressRange_v2");
	return unlock_ret(addr_range("cuMemGetAddressRange_v2", pbase, psize, dptr,
				     CUDA_ERROR_NOT_FOUND));
}

__export CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
						int handle_type, unsigned long long flags)
{
	if (!cu_enter("cuMemGetHandleForAddressRange"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!cur_ctx)
		return no_context("cuMemGetHandleForAddressRange");
	return unlock_ret(export("cuMemGetHandleForAddressRange", handle, dptr, size,
				 handle_type, flags, CUDA_ERROR_NOT_SUPPORTED));
}

__export CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	return cu_copy("cuMemcpyHtoD_v2", NULL, OP_HTOD, dst, (void *)src, n, 0, true);
}

__export CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	return cu_copy("cuMemcpyDtoH_v2", NULL, OP_DTOH, src, dst, n, 0, true);
}

__export CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream h)
{
	return cu_copy("cuMemcpyHtoDAsync_v2", h, OP_HTOD, dst, (void *)src, n, 0, false);
}

__export CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream h)
{
	return cu_copy("cuMemcpyDtoHAsync_v2", h, OP_DTOH, src, dst, n, 0, false);
}

/* CUDA: "for transfers from device memory to device memory, no host-side synchronization". */
__export CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return cu_dtod("cuMemcpyDtoD_v2", NULL, dst, src, n);
}

__export CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
	return cu_dtod("cuMemcpyDtoDAsync_v2", h, dst, src, n);
}

__export CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream h)
{
	return cu_copy("cuMemsetD8Async", h, OP_SET8, dst, NULL, n, uc, false);
}

__export CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream h)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuMemsetD32Async"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dst % 4)
		return unlock_ret(fail("cuMemsetD32Async", CUDA_ERROR_INVALID_VALUE,
				       "%#llx is not 4-byte aligned", (unsigned long long)dst));
	s = stream_of("cuMemsetD32Async", h, &err);
	if (!s)
		return unlock_ret(err);
	if (n > SIZE_MAX / 4)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	return unlock_ret(device_op("cuMemsetD32Async", s, OP_SET32, dst, NULL, n, n * 4, ui,
				    false));
}

__export CUresult cuStreamCreate(CUstream *ps, unsigned int flags)
{
	if (!cu_enter("cuStreamCreate"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (flags & ~CU_STREAM_NON_BLOCKING)
		die("cuStreamCreate", "flags %#x", flags);
	if (!ps)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	if (!cur_ctx)
		return no_context("cuStreamCreate");
	*ps = stream_new(cur_ctx, flags, false);
	return unlock_ret(*ps ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

__export CUresult cuStreamSynchronize(CUstream h)
{
	CUresult err = 0;
	struct CUstream_st *s = cu_enter_stream("cuStreamSynchronize", h, &err);

	if (!s)
		return err;
	wait_ticket(s, sync_ticket("cuStreamSynchronize", s));
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuStreamDestroy_v2(CUstream h)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuStreamDestroy_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!h || h == CU_STREAM_LEGACY)
		return unlock_ret(fail("cuStreamDestroy_v2", CUDA_ERROR_INVALID_HANDLE,
				       "the legacy stream"));
	s = stream_of("cuStreamDestroy_v2", h, &err);
	if (!s)
		return unlock_ret(err);
	/* Its work still runs; its thread ends after it. */
	s->dead = true;
	pthread_cond_broadcast(&progress);
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *user)
{
	CUresult err = 0;
	struct CUstream_st *s;
	struct op *o;

	if (!cu_enter("cuLaunchHostFunc"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!fn)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	s = stream_of("cuLaunchHostFunc", h, &err);
	if (!s)
		return unlock_ret(err);
	o = op_new("cuLaunchHostFunc", s, OP_HOSTFN);
	o->fn = fn;
	o->user = user;
	enqueue(s, o);
	return unlock_ret(CUDA_SUCCESS);
}

static CUresult wait_value32(const char *fn, CUstream h, CUdeviceptr addr, uint32_t value,
			     unsigned int flags)
{
	CUresult err = 0;
	struct CUstream_st *s;
	struct gpurt_dev *d;
	struct alloc *a;
	struct op *o;

	if (!cu_enter(fn))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (flags & ~3U)
		die(fn, "flags %#x", flags);
	s = stream_of(fn, h, &err);
	if (!s)
		return unlock_ret(err);
	a = addr % 4 ? NULL : find(addr, 4, &d);
	if (!a)
		return unlock_ret(fail(fn, CUDA_ERROR_INVALID_VALUE,
				       "%#llx is no aligned word of device memory",
				       (unsigned long long)addr));
	o = op_new(fn, s, OP_WAIT32);
	o->dev = bar_of(d, a, addr);
	o->value = value;
	o->flags = flags;
	enqueue(s, o);
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, uint32_t value,
				      unsigned int flags)
{
	return wait_value32("cuStreamWaitValue32", s, addr, value, flags);
}

__export CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, uint32_t value,
					 unsigned int flags)
{
	return wait_value32("cuStreamWaitValue32_v2", s, addr, value, flags);
}

__export CUresult cuEventCreate(CUevent *pe, unsigned int flags)
{
	struct CUevent_st *e;

	if (!cu_enter("cuEventCreate"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (flags & ~(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING))
		die("cuEventCreate", "flags %#x", flags);
	if (!pe)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	if (!cur_ctx)
		return no_context("cuEventCreate");
	e = calloc(1, sizeof(*e));
	if (!e)
		return unlock_ret(CUDA_ERROR_OUT_OF_MEMORY);
	e->magic = EVENT_MAGIC;
	e->ctx = cur_ctx;
	*pe = e;
	return unlock_ret(CUDA_SUCCESS);
}

static struct CUevent_st *event_of(const char *fn, CUevent e)
{
	if (!e || e->magic != EVENT_MAGIC)
		die(fn, "%p is not an event of this runtime", (void *)e);
	return e;
}

__export CUresult cuEventRecord(CUevent h, CUstream hs)
{
	struct CUevent_st *e;
	struct CUstream_st *s;
	CUresult err = 0;

	if (!cu_enter("cuEventRecord"))
		return CUDA_ERROR_NOT_INITIALIZED;
	e = event_of("cuEventRecord", h);
	s = stream_of("cuEventRecord", hs, &err);
	if (!s)
		return unlock_ret(err);
	if (s->ctx != e->ctx)
		return unlock_ret(fail("cuEventRecord", CUDA_ERROR_INVALID_HANDLE,
				       "event and stream of different contexts"));
	e->s = s;
	e->ticket = sync_ticket("cuEventRecord", s);
	return unlock_ret(CUDA_SUCCESS);
}

__export CUresult cuEventSynchronize(CUevent h)
{
	struct CUevent_st *e;

	if (!cu_enter("cuEventSynchronize"))
		return CUDA_ERROR_NOT_INITIALIZED;
	e = event_of("cuEventSynchronize", h);
	if (e->s)
		wait_ticket(e->s, e->ticket);
	return unlock_ret(CUDA_SUCCESS);
}
