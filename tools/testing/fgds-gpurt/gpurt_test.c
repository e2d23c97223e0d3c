// SPDX-License-Identifier: GPL-2.0
/*
 * The stand-in's runtime over a file standing in for the BAR (no VM, no
 * vfio): the device list, contexts, the allocator and its alignments,
 * pointers that fault on the host, every byte of a copy found in the file
 * (read with pread, not through the runtime), stream order, the legacy
 * stream's waits for blocking streams and not for non-blocking ones,
 * events, HIP's calls, the errors CUDA documents, and the aborts for
 * what it does not implement. TAP on stdout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpurt.h"

#define BAR_SIZE (64UL << 20)

static int n, failed;
static char bar_path[64];

static void ok(int cond, const char *what)
{
	printf("%sok %d %s\n", cond ? "" : "not ", ++n, what);
	failed += !cond;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* What the file holds at @off: the check from outside the runtime. */
static int file_has(uint64_t off, const void *want, size_t len)
{
	char *buf = malloc(len);
	int fd = open(bar_path, O_RDONLY), same;

	same = buf && fd >= 0 && pread(fd, buf, len, off) == (ssize_t)len &&
	       !memcmp(buf, want, len);
	if (fd >= 0)
		close(fd);
	free(buf);
	return same;
}

/* Whether @fn, run in a child, dies of @sig. */
static int dies_of(void (*fn)(void *), void *arg, int sig)
{
	int status;
	pid_t pid = fork();

	if (!pid) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 2);
		alarm(10);
		fn(arg);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	return WIFSIGNALED(status) && WTERMSIG(status) == sig;
}

static void deref(void *p)
{
	(void)__atomic_load_n((char *)(uintptr_t)*(CUdeviceptr *)p, __ATOMIC_RELAXED);
}

static void bad_attribute(void *p)
{
	int v;

	cuDeviceGetAttribute(&v, 1, 0);
}

static void per_thread_stream(void *p)
{
	cuStreamSynchronize(CU_STREAM_PER_THREAD);
}

static void runtime_from_host_fn(void *p)
{
	CUcontext c;

	cuCtxGetCurrent(&c);
}

/* A stream made in the child: a forked child has none of its parent's threads. */
static void host_fn_calls(void *p)
{
	CUstream s;

	cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
	cuLaunchHostFunc(s, runtime_from_host_fn, NULL);
	cuStreamSynchronize(s);
}

static void mark(void *p)
{
	*(double *)p = now();
}

struct opener {
	CUcontext ctx;
	CUdeviceptr gate;
	double at;
};

/* Opens the gate after 0.3 s, through a non-blocking stream of its own. */
static void *open_gate(void *arg)
{
	struct opener *o = arg;
	CUstream s;

	cuCtxSetCurrent(o->ctx);
	cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
	usleep(300000);
	o->at = now();
	cuMemsetD32Async(o->gate, 1, 1, s);
	cuStreamSynchronize(s);
	cuStreamDestroy_v2(s);
	return NULL;
}

int main(void)
{
	CUdeviceptr a, b, c, small, base, gate;
	uint64_t off, off2;
	CUcontext ctx, cur;
	CUdevice dev;
	CUstream s, nb;
	CUevent ev;
	char bus[96], *host, *pin;
	size_t size;
	int fd, v, ord;
	double t0, hostfn_at;
	struct opener o;
	pthread_t th;
	void *hp;

	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(bar_path, sizeof(bar_path), "/tmp/fgds-gpurt-bar-%d", getpid());
	fd = open(bar_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, BAR_SIZE)) {
		printf("1..0 # SKIP no BAR file: %s\n", strerror(errno));
		return 0;
	}
	close(fd);
	snprintf(bus, sizeof(bus), "file:%s", bar_path);
	setenv("FGDS_GPURT_DEVICES", bus, 1);
	printf("1..47\n");

	ok(cuMemAlloc_v2(&a, 4096) == CUDA_ERROR_NOT_INITIALIZED, "before cuInit: not initialized");
	ok(cuInit(1) == CUDA_ERROR_INVALID_VALUE && cuInit(0) == CUDA_SUCCESS, "cuInit(0) only");
	ok(cuDeviceGetCount(&v) == 0 && v == 1, "one device");
	ok(cuDeviceGet(&dev, 1) == CUDA_ERROR_INVALID_DEVICE && cuDeviceGet(&dev, 0) == 0,
	   "cuDeviceGet: ordinal 0 only");
	ok(cuDeviceGetPCIBusId(bus, sizeof(bus), dev) == 0 && !strcmp(bus, "0000:FF:00.0") &&
	   cuDeviceGetPCIBusId(bus, 8, dev) == CUDA_ERROR_INVALID_VALUE,
	   "PCI bus id in CUDA's format, refused for a short buffer");
	ok(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) == 0 && v == 0,
	   "a file-backed device exports no dma-buf");
	ok(cuMemAlloc_v2(&a, 4096) == CUDA_ERROR_INVALID_CONTEXT, "no context: no allocation");
	ok(cuDevicePrimaryCtxRetain(&ctx, dev) == 0 && cuCtxSetCurrent(ctx) == 0 &&
	   cuCtxGetCurrent(&cur) == 0 && cur == ctx, "primary context current");
	ok(cuCtxSetCurrent((CUcontext)&v) == CUDA_ERROR_INVALID_CONTEXT,
	   "a context not retained is refused");

	ok(cuMemAlloc_v2(&a, 3 << 20) == 0 && cuMemAlloc_v2(&b, 100 << 10) == 0 &&
	   cuMemAlloc_v2(&small, 100) == 0 && cuMemAlloc_v2(&c, 4096) == 0,
	   "allocations");
	ok(a % (2 << 20) == 0 && b % 4096 == 0 && small % 512 == 0 && c % 4096 == 0 &&
	   c >= small + 100 && b >= a + (3 << 20), "CUDA's alignments, no overlap");
	ok(cuMemAlloc_v2(&base, BAR_SIZE) == CUDA_ERROR_OUT_OF_MEMORY, "more than the BAR: OOM");
	ok(dies_of(deref, &a, SIGSEGV), "a device pointer faults on the host");
	ok(cuMemGetAddressRange_v2(&base, &size, b + 5000) == 0 && base == b &&
	   size == 100 << 10, "address range of an interior pointer");
	ok(cuMemGetAddressRange_v2(&base, &size, c + 4096) == CUDA_ERROR_NOT_FOUND,
	   "one past the last allocation's end is in no allocation");
	cur = NULL;
	ok(cuPointerGetAttribute(&cur, CU_POINTER_ATTRIBUTE_CONTEXT, a + 1) == 0 && cur == ctx &&
	   cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a) == 0 && ord == 0,
	   "pointer attributes");
	ok(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				 (uintptr_t)&ord) == CUDA_ERROR_INVALID_VALUE,
	   "a host pointer is not device memory");
	ok(cuMemGetHandleForAddressRange(&v, a + 512, 4096, 1, 0) == CUDA_ERROR_INVALID_VALUE &&
	   cuMemGetHandleForAddressRange(&v, b, 200 << 10, 1, 0) == CUDA_ERROR_INVALID_VALUE &&
	   cuMemGetHandleForAddressRange(&v, a, 4096, 1, 0) == CUDA_ERROR_NOT_SUPPORTED,
	   "export: misaligned, beyond the allocation, a file (no dma-buf)");

	host = malloc(3 << 20);
	for (int i = 0; i < 3 << 20; i++)
		host[i] = (char)(i * 7 + 3);
	ok(fgds_gpurt_bar_offset(a, &ord, &off) == 0 && cuMemcpyHtoD_v2(a, host, 3 << 20) == 0 &&
	   file_has(off, host, 3 << 20), "HtoD: every byte in the BAR file");
	memset(host, 0, 3 << 20);
	ok(cuMemcpyDtoH_v2(host, a + 1, (3 << 20) - 1) == 0 && host[0] == (char)10 &&
	   host[(3 << 20) - 2] == (char)(((3 << 20) - 1) * 7 + 3), "DtoH from an offset");
	ok(cuMemcpyHtoD_v2(a + 1, host, 3 << 20) == CUDA_ERROR_INVALID_VALUE,
	   "a copy past the allocation's end is refused");

	/* Streams: a blocked stream holds its later work; the host sees it only after. */
	ok(cuMemAlloc_v2(&gate, 4) == 0 && cuStreamCreate(&s, 0) == 0 &&
	   cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING) == 0 &&
	   cuMemsetD32Async(gate, 0, 1, nb) == 0 && cuStreamSynchronize(nb) == 0,
	   "streams and a gate");
	ok(cuMemHostAlloc((void **)&pin, 1 << 20, 0) == 0 &&
	   cuMemsetD8Async(b, 0x11, 4096, s) == 0 &&
	   cuStreamWaitValue32_v2(s, gate, 1, CU_STREAM_WAIT_VALUE_EQ) == 0 &&
	   cuMemsetD8Async(b, 0x5a, 4096, s) == 0 &&
	   cuMemcpyDtoHAsync_v2(pin, b, 4096, s) == 0 &&
	   cuLaunchHostFunc(s, mark, &hostfn_at) == 0, "work queued behind a closed gate");
	usleep(100000);
	fgds_gpurt_bar_offset(b, &ord, &off2);
	memset(host, 0x11, 4096);
	ok(file_has(off2, host, 4096) && pin[0] == 0, "nothing behind the gate ran");
	o.ctx = ctx;
	o.gate = gate;
	t0 = now();
	pthread_create(&th, NULL, open_gate, &o);
	ok(cuMemsetD8Async(c, 0x77, 64, nb) == 0 && cuStreamSynchronize(nb) == 0 &&
	   now() - t0 < 0.25, "a non-blocking stream does not wait for the blocked one");
	ok(cuMemcpyDtoH_v2(host, c, 64) == 0 && now() - o.at >= 0 && o.at > 0,
	   "a synchronous copy (legacy stream) waits for the blocking stream's work");
	memset(host + 8192, 0x5a, 4096);
	ok(file_has(off2, host + 8192, 4096) && pin[0] == 0x5a && pin[4095] == 0x5a &&
	   hostfn_at >= o.at, "after the gate: the fill, the copy, the host function, in order");
	pthread_join(th, NULL);

	ok(cuEventCreate(&ev, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING) == 0 &&
	   cuEventSynchronize(ev) == 0, "an event never recorded is complete");
	ok(cuMemsetD32Async(gate, 0, 1, nb) == 0 && cuStreamSynchronize(nb) == 0 &&
	   cuStreamWaitValue32(s, gate, 2, CU_STREAM_WAIT_VALUE_EQ) == 0 &&
	   cuEventRecord(ev, s) == 0, "an event behind a closed gate");
	o.at = 0;
	pthread_create(&th, NULL, open_gate, &o);
	pthread_join(th, NULL);
	ok(cuMemsetD32Async(gate, 2, 1, nb) == 0 && cuEventSynchronize(ev) == 0,
	   "the event completes once its stream passed the gate");
	ok(cuStreamDestroy_v2(s) == 0 && cuStreamDestroy_v2(NULL) == CUDA_ERROR_INVALID_HANDLE,
	   "streams are destroyed, the legacy one is not");
	ok(cuMemFreeHost(pin) == 0 && cuMemFreeHost(pin) == CUDA_ERROR_INVALID_VALUE,
	   "pinned memory freed once");

	memset(host, 0x77, 64);
	ok(cuMemcpyDtoD_v2(a + 4096, c, 64) == 0 && cuStreamSynchronize(NULL) == 0 &&
	   cuMemcpyDtoH_v2(host + 65536, a + 65536, 4096) == 0 &&
	   cuMemcpyDtoDAsync_v2(a + 16384, a + 65536, 4096, nb) == 0 &&
	   cuStreamSynchronize(nb) == 0 && fgds_gpurt_bar_offset(a, &ord, &off) == 0 &&
	   file_has(off + 4096, host, 64) && file_has(off + 16384, host + 65536, 4096) &&
	   cuMemcpyDtoD_v2(a + (3 << 20) - 10, c, 64) == CUDA_ERROR_INVALID_VALUE,
	   "DtoD, sync and async: the bytes in the BAR file; past the end refused");
	{
		unsigned long long id1 = 0, id2 = 0, id3 = 0;

		ok(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, b + 100) == 0 &&
		   cuPointerGetAttribute(&id3, CU_POINTER_ATTRIBUTE_BUFFER_ID, c) == 0 &&
		   id1 && id3 && id1 != id3, "buffer ids: one per allocation");
		ok(cuMemFree_v2(b + 4096) == CUDA_ERROR_INVALID_VALUE && cuMemFree_v2(b) == 0 &&
		   cuMemGetAddressRange_v2(&base, &size, b) == CUDA_ERROR_NOT_FOUND,
		   "free: the base only; freed memory is in no allocation");
		ok(cuMemAlloc_v2(&base, 100 << 10) == 0 && base == b &&
		   cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, b) == 0 &&
		   id2 != id1 && id2 != id3,
		   "a freed range is handed out again, with a new buffer id");
		ok(cuMemFree_v2(a) == 0 && cuMemAlloc_v2(&a, 2 << 20) == 0 && a < b,
		   "first fit: a later allocation below an earlier one");
	}

	ok(dies_of(bad_attribute, NULL, SIGABRT), "an attribute not implemented aborts");
	ok(dies_of(per_thread_stream, NULL, SIGABRT), "the per-thread stream aborts");
	ok(dies_of(host_fn_calls, NULL, SIGABRT), "a runtime call from a host function aborts");

	ok(cuCtxSetCurrent(NULL) == 0 && cuMemGetAddressRange_v2(&base, &size, a) ==
	   CUDA_ERROR_INVALID_CONTEXT, "no context: no address range");

	/* HIP: the same device, no contexts. */
	ok(hipInit(0) == 0 && hipGetDevice(&v) == 0 && v == 0 &&
	   hipSetDevice(1) == hipErrorInvalidDevice, "HIP: device 0 only");
	ok(hipMalloc(&hp, 1 << 20) == 0 && (uintptr_t)hp % (64 << 10) == 0 &&
	   hipPointerGetAttribute(&ord, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, hp) == 0 && ord == 0,
	   "hipMalloc");
	for (int i = 0; i < 1 << 20; i++)
		host[i] = (char)(i * 13 + 1);
	ok(hipMemcpyHtoD(hp, host, 1 << 20) == 0 &&
	   fgds_gpurt_bar_offset((uintptr_t)hp, &ord, &off) == 0 &&
	   file_has(off, host, 1 << 20), "hipMemcpyHtoD: every byte in the BAR file");
	{
		hipDeviceptr_t hb;

		ok(hipMemGetAddressRange(&hb, &size, (char *)hp + 10) == 0 && hb == hp &&
		   size == 1 << 20 && hipMemGetHandleForAddressRange(&v, hp, 4096, 1, 0) ==
		   hipErrorNotSupported, "HIP address range and export");
	}
	{
		unsigned long long id = 0;
		char back[256];

		ok(hipMemcpyDtoD((char *)hp + 4096, hp, 256) == 0 && hipDeviceSynchronize() == 0 &&
		   hipMemcpyDtoH(back, (char *)hp + 4096, 256) == 0 && !memcmp(back, host, 256) &&
		   hipPointerGetAttribute(&id, HIP_POINTER_ATTRIBUTE_BUFFER_ID, hp) == 0 && id,
		   "hipMemcpyDtoD, hipDeviceSynchronize, HIP's buffer id");
	}
	ok(hipFree(hp) == 0 && hipFree(NULL) == 0, "hipFree");

	free(host);
	unlink(bar_path);
	return failed ? 1 : 0;
}
