// SPDX-License-Identifier: GPL-2.0
/*
 * The GPU runtime of the fgds VM's GPU stand-in (an ivshmem BAR bound to
 * vfio-pci): the CUDA driver API and HIP runtime calls fgds's library,
 * libcufile.so.0 and the fgds CLI make, and nothing else. Installed as
 * libcuda.so.1 and libamdhip64.so (one object: one process has one view of
 * the devices, whose vfio groups have one opener at a time).
 *
 * - Device memory is ranges of the BAR; device pointers lie in an address
 *   range reserved PROT_NONE per device (not the BAR's mapping), so a host
 *   dereference of one faults. Addresses and BAR ranges are allocated apart,
 *   first fit, as CUDA 13 (driver 580) was seen to (cuda_facts.py): a freed
 *   address is handed out again at once, with a new buffer id, and a later
 *   allocation may lie below an earlier one; the BAR range of a freed
 *   allocation that was exported is never used again (NVIDIA keeps the
 *   memory behind an open dma-buf until it is closed, and an importer may
 *   still hold it).
 * - cuMemGetHandleForAddressRange exports exactly the range asked for as a
 *   vfio-pci dma-buf (VFIO_DEVICE_FEATURE_DMA_BUF): page aligned and in one
 *   allocation. Stricter than CUDA, which exports past an allocation's end
 *   (what lies there): an importer that asks for that here is told.
 * - Copies and fills go through vfio's mapping of the BAR.
 * - A stream is a host thread running its work in order; the legacy
 *   default stream waits for the blocking streams' earlier work and they
 *   for its; copies from or to pageable memory return when done, those
 *   from or to cuMemHostAlloc'd memory are queued.
 * - Whatever is not implemented (an attribute, a flag, the per-thread
 *   default stream, a runtime call from a host function, a handle that is
 *   not this runtime's) aborts, naming the call.
 *
 * FGDS_GPURT_DEVICES=a,b: the devices, each a PCI address bound to
 * vfio-pci or file:PATH (a file standing in for the BAR, for tests on a
 * machine without the VM: no dma-buf export there); by default every
 * ivshmem (1af4:1110) bound to vfio-pci. FGDS_GPURT_VERBOSE=1 says why
 * each failing call failed. FGDS_GPURT_LOG=FILE appends a line per
 * allocation and free ("alloc ORDINAL BAR_OFFSET SIZE", "free ORDINAL
 * BAR_OFFSET"), so that a test can check the bytes of a program's memory
 * in the BAR after it exited.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <linux/vfio.h>

#include "gpurt.h"
/* Headers older than Linux 7.0 (a host's): file-backed devices only. */
#ifdef VFIO_DEVICE_FEATURE_DMA_BUF
#include "fgds_vfio.h"
#else
struct fgds_vfio { int unused; };
#endif

#define GPURT_MAX_DEVS		8
#define GPURT_VA_ALIGN		(2UL << 20)
#define STREAM_MAGIC		0x5354524dU
#define EVENT_MAGIC		0x45564e54U

#define __export __attribute__((visibility("default")))

struct alloc {
	struct alloc *next;	/* by BAR offset */
	struct alloc *vnext;	/* the live ones, by address */
	uint64_t off;		/* in the BAR */
	uint64_t addr;		/* the device address, less the device's va */
	uint64_t size;
	uint64_t id;		/* CU_POINTER_ATTRIBUTE_BUFFER_ID: never the same twice */
	bool live;
	bool exported;
};

struct CUstream_st;

struct CUctx_st {
	struct gpurt_dev *dev;
	int refs;
	struct CUstream_st *legacy;
	struct CUstream_st *streams;	/* every stream of the context */
};

struct gpurt_dev {
	int ordinal;
	char name[256];		/* PCI address, or the BAR file's path */
	bool file;
	unsigned int domain, bus, slot, func;
	bool open;
	struct fgds_vfio vfio;
	uint8_t *bar;		/* CPU mapping of the BAR */
	uint64_t bar_size;
	uint64_t va;		/* device pointers: va + alloc.addr + offset in it */
	struct alloc *allocs;	/* by BAR offset, freed exported ones too */
	struct alloc *vas;	/* the live ones, by address */
	struct CUctx_st ctx;	/* the primary context */
};

enum op_kind { OP_MARK, OP_HTOD, OP_DTOH, OP_DTOD, OP_SET8, OP_SET32, OP_HOSTFN, OP_WAIT32 };

struct dep {
	struct CUstream_st *s;
	uint64_t until;
};

struct op {
	struct op *next;
	enum op_kind kind;
	uint64_t ticket;
	uint8_t *dev;
	uint8_t *host;
	size_t n;
	uint32_t value;
	unsigned int flags;
	CUhostFn fn;
	void *user;
	int ndeps;
	struct dep deps[];
};

struct CUstream_st {
	uint32_t magic;
	struct CUctx_st *ctx;
	struct CUstream_st *next;	/* in ctx->streams */
	unsigned int flags;
	bool legacy;
	bool dead;
	uint64_t enqueued, done;
	struct op *head, *tail;
	pthread_t thread;
};

struct CUevent_st {
	uint32_t magic;
	struct CUctx_st *ctx;
	struct CUstream_st *s;	/* NULL until recorded */
	uint64_t ticket;
};

struct pinned {
	struct pinned *next;
	uint8_t *p;
	size_t n;
	struct CUctx_st *ctx;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Broadcast on every change a waiter may wait for: work queued or done, device memory written. */
static pthread_cond_t progress;
static bool initialized;
static bool verbose;
static int ndevs;
static struct gpurt_dev devs[GPURT_MAX_DEVS];
static struct pinned *pinned;
static long page_size;
static uint64_t next_buffer_id = 1;

static __thread struct CUctx_st *cur_ctx;
static __thread int hip_dev;
static __thread bool in_host_fn;

#define __printf(a, b)	__attribute__((format(printf, a, b)))
#define __noreturn	__attribute__((noreturn))

static void __noreturn __printf(2, 3) die(const char *fn, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fgds-gpurt: %s: ", fn);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (not implemented by the stand-in's runtime)\n");
	abort();
}

static int __printf(3, 4) fail(const char *fn, int code, const char *fmt, ...)
{
	va_list ap;

	if (!verbose)
		return code;
	fprintf(stderr, "fgds-gpurt: %s returns %d: ", fn, code);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

/* Every entry point: no runtime call from a host function (CUDA forbids it). */
static void entry(const char *fn)
{
	if (in_host_fn) {
		fprintf(stderr, "fgds-gpurt: %s called from a host function: %s\n", fn,
			"CUDA forbids runtime calls there (cuLaunchHostFunc)");
		abort();
	}
}

/* Devices */

static int bdf_parse(struct gpurt_dev *d)
{
	int n = sscanf(d->name, "%x:%x:%x.%x", &d->domain, &d->bus, &d->slot, &d->func);

	return n == 4 ? 0 : -1;
}

static int ivshmem_vfio(const struct dirent *e)
{
	char path[512], buf[32], link[512];
	ssize_t n;
	FILE *f;
	int ok = 0;

	if (e->d_name[0] == '.')
		return 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", e->d_name);
	f = fopen(path, "r");
	if (f) {
		ok = fgets(buf, sizeof(buf), f) && !strncmp(buf, "0x1af4", 6);
		fclose(f);
	}
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/device", e->d_name);
	f = ok ? fopen(path, "r") : NULL;
	ok = 0;
	if (f) {
		ok = fgets(buf, sizeof(buf), f) && !strncmp(buf, "0x1110", 6);
		fclose(f);
	}
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver", e->d_name);
	n = ok ? readlink(path, link, sizeof(link) - 1) : -1;
	if (n < 0)
		return 0;
	link[n] = 0;
	return !strcmp(basename(link), "vfio-pci");
}

static void add_dev(const char *name)
{
	struct gpurt_dev *d;

	if (ndevs == GPURT_MAX_DEVS)
		die("cuInit", "more than %d devices", GPURT_MAX_DEVS);
	d = &devs[ndevs];
	d->ordinal = ndevs++;
	d->ctx.dev = d;
	if (!strncmp(name, "file:", 5)) {
		d->file = true;
		snprintf(d->name, sizeof(d->name), "%s", name + 5);
		d->bus = 0xff;
		d->slot = d->ordinal;
		return;
	}
	snprintf(d->name, sizeof(d->name), "%s", name);
	if (bdf_parse(d))
		die("cuInit", "FGDS_GPURT_DEVICES: %s is neither a PCI address nor file:PATH",
		    name);
}

static void discover(void)
{
	const char *env = getenv("FGDS_GPURT_DEVICES");
	struct dirent **list;
	int n;

	verbose = getenv("FGDS_GPURT_VERBOSE") && !strcmp(getenv("FGDS_GPURT_VERBOSE"), "1");
	page_size = sysconf(_SC_PAGESIZE);
	if (env) {
		char *copy = strdup(env), *save = NULL;

		for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
			add_dev(t);
		free(copy);
		return;
	}
	n = scandir("/sys/bus/pci/devices", &list, ivshmem_vfio, alphasort);
	for (int i = 0; i < n; i++) {
		add_dev(list[i]->d_name);
		free(list[i]);
	}
	if (n >= 0)
		free(list);
}

/* Called with the lock held. */
static void init_locked(void)
{
	pthread_condattr_t a;

	if (initialized)
		return;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&progress, &a);
	discover();
	initialized = true;
}

/* Opens the device's BAR: the vfio device (or the file) and its mapping; the lock is held. */
static int dev_open(const char *fn, struct gpurt_dev *d)
{
	const char *why = NULL;
	void *va;

	if (d->open)
		return 0;
	if (d->file) {
		struct stat st;
		int fd = open(d->name, O_RDWR | O_CLOEXEC);

		if (fd < 0 || fstat(fd, &st)) {
			fprintf(stderr, "fgds-gpurt: %s: %s: %s\n", fn, d->name, strerror(errno));
			return -1;
		}
		d->bar_size = st.st_size;
		d->bar = mmap(NULL, d->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (d->bar == MAP_FAILED) {
			fprintf(stderr, "fgds-gpurt: %s: mmap %s: %s\n", fn, d->name,
				strerror(errno));
			return -1;
		}
	} else {
#ifdef VFIO_DEVICE_FEATURE_DMA_BUF
		int ret = fgds_vfio_open_bdf(&d->vfio, d->name, &why);

		if (ret) {
			fprintf(stderr, "fgds-gpurt: %s: vfio-pci %s: %s: %s\n", fn, d->name, why,
				strerror(-ret));
			fgds_vfio_close(&d->vfio);
			return -1;
		}
		d->bar_size = d->vfio.bar_size;
		d->bar = fgds_vfio_map_bar(&d->vfio);
		if (!d->bar) {
			fprintf(stderr, "fgds-gpurt: %s: mmap of %s's BAR2: %s\n", fn, d->name,
				strerror(errno));
			fgds_vfio_close(&d->vfio);
			return -1;
		}
#else
		why = "built without VFIO_DEVICE_FEATURE_DMA_BUF (linux/vfio.h of Linux 7.0 on)";
		fprintf(stderr, "fgds-gpurt: %s: %s: %s\n", fn, d->name, why);
		return -1;
#endif
	}
	/* Device addresses: reserved, never mapped, aligned as the BAR offsets they stand for. */
	va = mmap(NULL, d->bar_size + GPURT_VA_ALIGN, PROT_NONE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED) {
		fprintf(stderr, "fgds-gpurt: %s: reserving device addresses: %s\n", fn,
			strerror(errno));
		return -1;
	}
	d->va = ((uint64_t)va + GPURT_VA_ALIGN - 1) & ~(GPURT_VA_ALIGN - 1);
	d->open = true;
	return 0;
}

/* Memory */

/*
 * cuMemAlloc's alignment, as CUDA 13 on an H200 gave it (cuda_facts.py):
 * 2 MiB from 2 MiB on, a power of two from 4 KiB on its own size, other
 * sizes from 4 KiB on 4 KiB, smaller ones 512 bytes.
 */
static uint64_t alloc_align(size_t n)
{
	if (n >= (2UL << 20))
		return 2UL << 20;
	if (n >= 4096 && !(n & (n - 1)))
		return n;
	if (n >= 4096)
		return 4096;
	return 512;
}

/*
 * The first gap of @n bytes aligned to @align in a list sorted by start
 * (BAR offsets through ->next, or addresses through ->vnext): its start, and
 * in *@pos the link to insert at. ~0 when none is left below @limit.
 */
static uint64_t first_fit(struct alloc **head, bool by_addr, uint64_t n, uint64_t align,
			  uint64_t limit, struct alloc ***pos)
{
	struct alloc **pp = head;
	uint64_t at = 0;

	for (;;) {
		uint64_t start = (at + align - 1) & ~(align - 1);
		uint64_t end = *pp ? (by_addr ? (*pp)->addr : (*pp)->off) : limit;

		if (start + n <= end && start + n >= start) {
			*pos = pp;
			return start;
		}
		if (!*pp)
			return ~0ULL;
		at = (by_addr ? (*pp)->addr : (*pp)->off) + (*pp)->size;
		pp = by_addr ? &(*pp)->vnext : &(*pp)->next;
	}
}

static struct alloc *alloc_new(struct gpurt_dev *d, size_t n)
{
	uint64_t align = alloc_align(n), off, addr;
	struct alloc **pos, **vpos, *a;

	off = first_fit(&d->allocs, false, n, align, d->bar_size, &pos);
	addr = first_fit(&d->vas, true, n, align, d->bar_size, &vpos);
	if (off == ~0ULL || addr == ~0ULL)
		return NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->off = off;
	a->addr = addr;
	a->size = n;
	a->id = next_buffer_id++;
	a->live = true;
	a->next = *pos;
	*pos = a;
	a->vnext = *vpos;
	*vpos = a;
	return a;
}

/* Where device address @p of allocation @a lies in the device's BAR mapping. */
static uint8_t *bar_of(const struct gpurt_dev *d, const struct alloc *a, uint64_t p)
{
	return d->bar + a->off + (p - d->va - a->addr);
}

/* The live allocation holding [p, p + n), with its device. */
static struct alloc *find(uint64_t p, size_t n, struct gpurt_dev **pd)
{
	for (int i = 0; i < ndevs; i++) {
		struct gpurt_dev *d = &devs[i];

		if (!d->open || p < d->va || p >= d->va + d->bar_size)
			continue;
		for (struct alloc *a = d->vas; a; a = a->vnext) {
			uint64_t addr = p - d->va;

			if (addr >= a->addr && addr < a->addr + a->size) {
				if (n > a->addr + a->size - addr)
					return NULL;
				*pd = d;
				return a;
			}
		}
	}
	return NULL;
}

static struct pinned *find_pinned(const void *p, size_t n)
{
	for (struct pinned *h = pinned; h; h = h->next)
		if ((const uint8_t *)p >= h->p && (const uint8_t *)p < h->p + h->n)
			return n <= (size_t)(h->p + h->n - (const uint8_t *)p) ? h : NULL;
	return NULL;
}

/* Streams */

static void *stream_thread(void *arg);

static struct CUstream_st *stream_new(struct CUctx_st *ctx, unsigned int flags, bool legacy)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->magic = STREAM_MAGIC;
	s->ctx = ctx;
	s->flags = flags;
	s->legacy = legacy;
	if (pthread_create(&s->thread, NULL, stream_thread, s)) {
		free(s);
		return NULL;
	}
	pthread_detach(s->thread);
	s->next = ctx->streams;
	ctx->streams = s;
	return s;
}

static bool blocking(const struct CUstream_st *s)
{
	return !s->legacy && !(s->flags & CU_STREAM_NON_BLOCKING);
}

/*
 * The stream a call names: NULL and CU_STREAM_LEGACY the current context's
 * legacy default stream, else a live stream of this runtime. The lock is held.
 */
static struct CUstream_st *stream_of(const char *fn, CUstream h, CUresult *err)
{
	struct CUstream_st *s;

	if (h == CU_STREAM_PER_THREAD)
		die(fn, "the per-thread default stream");
	if (!cur_ctx) {
		*err = fail(fn, CUDA_ERROR_INVALID_CONTEXT, "no current context");
		return NULL;
	}
	if (!h || h == CU_STREAM_LEGACY) {
		if (!cur_ctx->legacy)
			cur_ctx->legacy = stream_new(cur_ctx, 0, true);
		if (!cur_ctx->legacy)
			die(fn, "cannot start the legacy stream's thread");
		return cur_ctx->legacy;
	}
	s = h;
	if (s->magic != STREAM_MAGIC || s->dead)
		die(fn, "stream %p is not a live stream of this runtime", (void *)h);
	if (s->ctx != cur_ctx) {
		*err = fail(fn, CUDA_ERROR_INVALID_HANDLE,
			    "stream %p is not of the current context", (void *)h);
		return NULL;
	}
	return s;
}

/* Queues @o on @s, after what it must wait for; returns its ticket. The lock is held. */
static uint64_t enqueue(struct CUstream_st *s, struct op *o)
{
	o->ticket = ++s->enqueued;
	o->next = NULL;
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	pthread_cond_broadcast(&progress);
	return o->ticket;
}

static struct op *op_new(const char *fn, struct CUstream_st *s, enum op_kind kind)
{
	int n = 0;
	struct op *o;

	for (struct CUstream_st *t = s->ctx->streams; t; t = t->next)
		n++;
	o = calloc(1, sizeof(*o) + n * sizeof(o->deps[0]));
	if (!o)
		die(fn, "out of host memory");
	o->kind = kind;
	/* The legacy stream waits for the blocking streams' earlier work, they for its. */
	for (struct CUstream_st *t = s->ctx->streams; t; t = t->next) {
		if (t == s || t->done == t->enqueued)
			continue;
		if ((s->legacy && blocking(t)) || (blocking(s) && t->legacy))
			o->deps[o->ndeps++] = (struct dep){ t, t->enqueued };
	}
	return o;
}

static void wait_ticket(struct CUstream_st *s, uint64_t ticket)
{
	while (s->done < ticket)
		pthread_cond_wait(&progress, &lock);
}

static void run(struct op *o)
{
	switch (o->kind) {
	case OP_MARK:
		break;
	case OP_HTOD:
		memcpy(o->dev, o->host, o->n);
		break;
	case OP_DTOH:
	case OP_DTOD:
		memcpy(o->host, o->dev, o->n);
		break;
	case OP_SET8:
		memset(o->dev, o->value, o->n);
		break;
	case OP_SET32:
		for (size_t i = 0; i < o->n; i++)
			__atomic_store_n((uint32_t *)o->dev + i, o->value, __ATOMIC_RELAXED);
		break;
	case OP_HOSTFN:
		in_host_fn = true;
		o->fn(o->user);
		in_host_fn = false;
		break;
	case OP_WAIT32:
		for (;;) {
			uint32_t v = __atomic_load_n((uint32_t *)o->dev, __ATOMIC_RELAXED);
			bool ok;
			struct timespec t;

			switch (o->flags) {
			case CU_STREAM_WAIT_VALUE_GEQ:
				ok = (int32_t)(v - o->value) >= 0;
				break;
			case CU_STREAM_WAIT_VALUE_EQ:
				ok = v == o->value;
				break;
			case CU_STREAM_WAIT_VALUE_AND:
				ok = (v & o->value) != 0;
				break;
			default:
				ok = ~(v | o->value) != 0;
				break;
			}
			if (ok)
				break;
			/* Woken by fills of device memory; polled for the NVMe's writes. */
			clock_gettime(CLOCK_MONOTONIC, &t);
			t.tv_nsec += 2000000;
			if (t.tv_nsec >= 1000000000) {
				t.tv_sec++;
				t.tv_nsec -= 1000000000;
			}
			pthread_mutex_lock(&lock);
			pthread_cond_timedwait(&progress, &lock, &t);
			pthread_mutex_unlock(&lock);
		}
		break;
	}
}

static void *stream_thread(void *arg)
{
	struct CUstream_st *s = arg;

	pthread_mutex_lock(&lock);
	for (;;) {
		struct op *o;

		while (!s->head && !s->dead)
			pthread_cond_wait(&progress, &lock);
		o = s->head;
		if (!o)
			break;
		for (int i = 0; i < o->ndeps; i++)
			wait_ticket(o->deps[i].s, o->deps[i].until);
		pthread_mutex_unlock(&lock);
		run(o);
		pthread_mutex_lock(&lock);
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->done = o->ticket;
		free(o);
		pthread_cond_broadcast(&progress);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* CUDA */

/* Takes the lock; false (and the lock not held) before cuInit. */
static bool cu_enter(const char *fn)
{
	entry(fn);
	pthread_mutex_lock(&lock);
	if (!initialized)
		pthread_mutex_unlock(&lock);
	return initialized;
}

static CUresult unlock_ret(CUresult r)
{
	pthread_mutex_unlock(&lock);
	return r;
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
	if (!cu_enter("cuDeviceGetAttribute"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pi)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	if (dev < 0 || dev >= ndevs)
		return unlock_ret(CUDA_ERROR_INVALID_DEVICE);
	if (attrib != CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
		die("cuDeviceGetAttribute", "attribute %d", attrib);
	*pi = !devs[dev].file;
	return unlock_ret(CUDA_SUCCESS);
}

static int bus_id(char *buf, int len, int dev)
{
	const struct gpurt_dev *d;

	if (!buf || dev < 0 || dev >= ndevs)
		return -1;
	d = &devs[dev];
	/* "[domain]:[bus]:[device].[function]", in hexadecimal */
	if (snprintf(buf, len, "%04X:%02X:%02X.%X", d->domain, d->bus, d->slot, d->func) >= len)
		return -1;
	return 0;
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
	if (!cu_enter("cuDevicePrimaryCtxRetain"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	if (dev < 0 || dev >= ndevs)
		return unlock_ret(CUDA_ERROR_INVALID_DEVICE);
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

/* FGDS_GPURT_LOG: where the allocations lie in the BAR. The lock is held. */
static void log_mem(const char *what, const struct gpurt_dev *d, const struct alloc *a)
{
	const char *path = getenv("FGDS_GPURT_LOG");
	FILE *f = path ? fopen(path, "a") : NULL;

	if (!f)
		return;
	if (*what == 'a')
		fprintf(f, "alloc %d %llu %llu\n", d->ordinal, (unsigned long long)a->off,
			(unsigned long long)a->size);
	else
		fprintf(f, "free %d %llu\n", d->ordinal, (unsigned long long)a->off);
	fclose(f);
}

static CUresult mem_alloc(const char *fn, struct gpurt_dev *d, uint64_t *out, size_t n)
{
	struct alloc *a = alloc_new(d, n);

	if (!a)
		return fail(fn, CUDA_ERROR_OUT_OF_MEMORY, "%zu bytes on %s", n, d->name);
	log_mem("alloc", d, a);
	*out = d->va + a->addr;
	return CUDA_SUCCESS;
}

__export CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	if (!cu_enter("cuMemAlloc_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !bytesize)
		return unlock_ret(CUDA_ERROR_INVALID_VALUE);
	if (!cur_ctx)
		return unlock_ret(fail("cuMemAlloc_v2", CUDA_ERROR_INVALID_CONTEXT,
				       "no current context"));
	return unlock_ret(mem_alloc("cuMemAlloc_v2", cur_ctx->dev, dptr, bytesize));
}

static CUresult mem_free(const char *fn, uint64_t p)
{
	struct gpurt_dev *d;
	struct alloc *a = find(p, 1, &d), **pp;

	if (!a || d->va + a->addr != p)
		return fail(fn, CUDA_ERROR_INVALID_VALUE, "%#llx is no allocation's base",
			    (unsigned long long)p);
	a->live = false;
	log_mem("free", d, a);
	for (pp = &d->vas; *pp != a; pp = &(*pp)->vnext)
		;
	*pp = a->vnext;		/* its address is free at once */
	if (a->exported)
		return CUDA_SUCCESS;	/* an importer may hold its memory: never reused */
	for (pp = &d->allocs; *pp != a; pp = &(*pp)->next)
		;
	*pp = a->next;
	free(a);
	return CUDA_SUCCESS;
}

__export CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	if (!cu_enter("cuMemFree_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!cur_ctx)
		return unlock_ret(fail("cuMemFree_v2", CUDA_ERROR_INVALID_CONTEXT,
				       "no current context"));
	return unlock_ret(mem_free("cuMemFree_v2", dptr));
}

static CUresult host_alloc(const char *fn, void **pp, size_t n)
{
	struct pinned *h = calloc(1, sizeof(*h));
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (!h || p == MAP_FAILED) {
		free(h);
		if (p != MAP_FAILED)
			munmap(p, n);
		return fail(fn, CUDA_ERROR_OUT_OF_MEMORY, "%zu bytes", n);
	}
	h->p = p;
	h->n = n;
	h->ctx = cur_ctx;
	h->next = pinned;
	pinned = h;
	*pp = p;
	return CUDA_SUCCESS;
}

static CUresult host_free(const char *fn, void *p)
{
	for (struct pinned **pp = &pinned; *pp; pp = &(*pp)->next) {
		struct pinned *h = *pp;

		if (h->p == p) {
			*pp = h->next;
			munmap(h->p, h->n);
			free(h);
			return CUDA_SUCCESS;
		}
	}
	return fail(fn, CUDA_ERROR_INVALID_VALUE, "%p is not from cuMemHostAlloc", p);
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
		return unlock_ret(fail("cuMemHostAlloc", CUDA_ERROR_INVALID_CONTEXT,
				       "no current context"));
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
	if ((a = find(ptr, 1, &d))) {
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

static CUresult addr_range(const char *fn, uint64_t *pbase, size_t *psize, uint64_t p, int nf)
{
	struct gpurt_dev *d;
	struct alloc *a = find(p, 1, &d);

	if (!a)
		return fail(fn, nf, "%#llx is in no allocation", (unsigned long long)p);
	if (pbase)
		*pbase = d->va + a->addr;
	if (psize)
		*psize = a->size;
	return CUDA_SUCCESS;
}

__export CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	if (!cu_enter("cuMemGetAddressRange_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!cur_ctx)
		return unlock_ret(fail("cuMemGetAddressRange_v2", CUDA_ERROR_INVALID_CONTEXT,
				       "no current context"));
	return unlock_ret(addr_range("cuMemGetAddressRange_v2", pbase, psize, dptr,
				     CUDA_ERROR_NOT_FOUND));
}

/*
 * A dma-buf of exactly [p, p + size): page aligned, in one allocation
 * (cuMemGetHandleForAddressRange's rules; hipMemGetHandleForAddressRange's
 * are taken to be the same). The lock is held.
 */
static CUresult export(const char *fn, void *handle, uint64_t p, size_t size, int type,
		       unsigned long long flags, int unsupported)
{
	struct gpurt_dev *d;
	struct alloc *a;
	int fd;

	if (type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)
		die(fn, "handle type %d", type);
	if (flags)
		die(fn, "flags %#llx", flags);
	if (!handle || !size)
		return fail(fn, CUDA_ERROR_INVALID_VALUE, "no handle, or size 0");
	if (p % page_size || size % page_size)
		return fail(fn, CUDA_ERROR_INVALID_VALUE,
			    "%#llx+%#zx is not aligned to the host's page size",
			    (unsigned long long)p, size);
	a = find(p, size, &d);
	if (!a)
		return fail(fn, CUDA_ERROR_INVALID_VALUE, "%#llx+%#zx is not in one allocation",
			    (unsigned long long)p, size);
	if (d->file)
		return fail(fn, unsupported, "%s is a file, not a BAR: no dma-buf", d->name);
#ifdef VFIO_DEVICE_FEATURE_DMA_BUF
	fd = fgds_vfio_dmabuf(&d->vfio, bar_of(d, a, p) - d->bar, size);
#else
	fd = -EOPNOTSUPP;
#endif
	if (fd < 0) {
		fprintf(stderr, "fgds-gpurt: %s: %s of %s [%#llx, +%#zx): %s\n", fn,
			"VFIO_DEVICE_FEATURE_DMA_BUF", d->name,
			(unsigned long long)(bar_of(d, a, p) - d->bar), size, strerror(-fd));
		return CUDA_ERROR_UNKNOWN;
	}
	a->exported = true;
	*(int *)handle = fd;
	return CUDA_SUCCESS;
}

__export CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
						int handle_type, unsigned long long flags)
{
	if (!cu_enter("cuMemGetHandleForAddressRange"))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!cur_ctx)
		return unlock_ret(fail("cuMemGetHandleForAddressRange",
				       CUDA_ERROR_INVALID_CONTEXT, "no current context"));
	return unlock_ret(export("cuMemGetHandleForAddressRange", handle, dptr, size,
				 handle_type, flags, CUDA_ERROR_NOT_SUPPORTED));
}

/*
 * Queues a copy or fill of device memory [p, p + n) on @s; with @wait, or
 * for a copy from or to pageable memory, returns once it ran. The lock is held.
 */
static CUresult device_op(const char *fn, struct CUstream_st *s, enum op_kind kind, uint64_t p,
			  void *host, size_t n, size_t bytes, uint32_t value, bool wait)
{
	struct gpurt_dev *d;
	struct alloc *a;
	struct op *o;
	uint64_t t;

	if (!n)
		return CUDA_SUCCESS;
	a = find(p, bytes, &d);
	if (!a || bytes < n)
		return fail(fn, CUDA_ERROR_INVALID_VALUE,
			    "%#llx+%#zx is not in one allocation", (unsigned long long)p, bytes);
	if ((kind == OP_HTOD || kind == OP_DTOH) && !host)
		return fail(fn, CUDA_ERROR_INVALID_VALUE, "no host pointer");
	if ((kind == OP_HTOD || kind == OP_DTOH) && !find_pinned(host, n))
		wait = true;
	o = op_new(fn, s, kind);
	o->dev = bar_of(d, a, p);
	o->host = host;
	o->n = n;
	o->value = value;
	t = enqueue(s, o);
	if (wait)
		wait_ticket(s, t);
	return CUDA_SUCCESS;
}

__export CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuMemcpyHtoD_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	s = stream_of("cuMemcpyHtoD_v2", NULL, &err);
	if (!s)
		return unlock_ret(err);
	return unlock_ret(device_op("cuMemcpyHtoD_v2", s, OP_HTOD, dst, (void *)src, n, n, 0,
				    true));
}

__export CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuMemcpyDtoH_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	s = stream_of("cuMemcpyDtoH_v2", NULL, &err);
	if (!s)
		return unlock_ret(err);
	return unlock_ret(device_op("cuMemcpyDtoH_v2", s, OP_DTOH, src, dst, n, n, 0, true));
}

__export CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream h)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuMemcpyHtoDAsync_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	s = stream_of("cuMemcpyHtoDAsync_v2", h, &err);
	if (!s)
		return unlock_ret(err);
	return unlock_ret(device_op("cuMemcpyHtoDAsync_v2", s, OP_HTOD, dst, (void *)src, n, n,
				    0, false));
}

__export CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream h)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuMemcpyDtoHAsync_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	s = stream_of("cuMemcpyDtoHAsync_v2", h, &err);
	if (!s)
		return unlock_ret(err);
	return unlock_ret(device_op("cuMemcpyDtoHAsync_v2", s, OP_DTOH, src, dst, n, n, 0,
				    false));
}

/*
 * A copy of device memory [src, src + n) to [dst, dst + n) on @s (devices of
 * this runtime, either of them); with @wait, returns once it ran. The lock is held.
 */
static CUresult dtod(const char *fn, struct CUstream_st *s, uint64_t dst, uint64_t src, size_t n,
		     bool wait)
{
	struct gpurt_dev *ds, *dd;
	struct alloc *as, *ad;
	struct op *o;
	uint64_t t;

	if (!n)
		return CUDA_SUCCESS;
	as = find(src, n, &ds);
	ad = find(dst, n, &dd);
	if (!as || !ad)
		return fail(fn, CUDA_ERROR_INVALID_VALUE, "%#llx or %#llx +%#zx is not in one allocation",
			    (unsigned long long)src, (unsigned long long)dst, n);
	o = op_new(fn, s, OP_DTOD);
	o->dev = bar_of(ds, as, src);
	o->host = bar_of(dd, ad, dst);
	o->n = n;
	t = enqueue(s, o);
	if (wait)
		wait_ticket(s, t);
	return CUDA_SUCCESS;
}

/* CUDA: "for transfers from device memory to device memory, no host-side synchronization". */
__export CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuMemcpyDtoD_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	s = stream_of("cuMemcpyDtoD_v2", NULL, &err);
	if (!s)
		return unlock_ret(err);
	return unlock_ret(dtod("cuMemcpyDtoD_v2", s, dst, src, n, false));
}

__export CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuMemcpyDtoDAsync_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	s = stream_of("cuMemcpyDtoDAsync_v2", h, &err);
	if (!s)
		return unlock_ret(err);
	return unlock_ret(dtod("cuMemcpyDtoDAsync_v2", s, dst, src, n, false));
}

__export CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream h)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuMemsetD8Async"))
		return CUDA_ERROR_NOT_INITIALIZED;
	s = stream_of("cuMemsetD8Async", h, &err);
	if (!s)
		return unlock_ret(err);
	return unlock_ret(device_op("cuMemsetD8Async", s, OP_SET8, dst, NULL, n, n, uc, false));
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
		return unlock_ret(fail("cuStreamCreate", CUDA_ERROR_INVALID_CONTEXT,
				       "no current context"));
	*ps = stream_new(cur_ctx, flags, false);
	return unlock_ret(*ps ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

/* What a wait for @s waits for: on the legacy stream, the blocking streams' work too. */
static uint64_t sync_ticket(const char *fn, struct CUstream_st *s)
{
	if (s->legacy)
		return enqueue(s, op_new(fn, s, OP_MARK));
	return s->enqueued;
}

__export CUresult cuStreamSynchronize(CUstream h)
{
	CUresult err = 0;
	struct CUstream_st *s;

	if (!cu_enter("cuStreamSynchronize"))
		return CUDA_ERROR_NOT_INITIALIZED;
	s = stream_of("cuStreamSynchronize", h, &err);
	if (!s)
		return unlock_ret(err);
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
		return unlock_ret(fail("cuEventCreate", CUDA_ERROR_INVALID_CONTEXT,
				       "no current context"));
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

/* HIP: no contexts; a thread's device (0 at first) is used through its primary context. */

static void hip_enter(const char *fn)
{
	entry(fn);
	pthread_mutex_lock(&lock);
	init_locked();
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
	uint64_t p = 0;
	hipError_t r;

	hip_enter("hipMalloc");
	if (!ptr)
		return unlock_ret(hipErrorInvalidValue);
	if (!size) {
		*ptr = NULL;
		return unlock_ret(hipSuccess);
	}
	if (hip_dev >= ndevs || dev_open("hipMalloc", &devs[hip_dev]))
		return unlock_ret(hipErrorInvalidDevice);
	r = mem_alloc("hipMalloc", &devs[hip_dev], &p, size);
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
	struct CUctx_st *saved = cur_ctx;
	struct CUstream_st *s;
	struct gpurt_dev *d;
	CUresult err = 0;

	if (!n)
		return hipSuccess;
	if (!find(p, n, &d))
		return fail(fn, hipErrorInvalidValue, "%#llx+%#zx is not in one allocation",
			    (unsigned long long)p, n);
	cur_ctx = &d->ctx;
	s = stream_of(fn, NULL, &err);
	if (s)
		err = device_op(fn, s, kind, p, host, n, n, 0, true);
	cur_ctx = saved;
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
	struct CUctx_st *saved = cur_ctx;
	struct CUstream_st *s;
	struct gpurt_dev *d;
	CUresult err = 0;

	hip_enter("hipMemcpyDtoD");
	if (!n)
		return unlock_ret(hipSuccess);
	if (!find((uintptr_t)dst, n, &d))
		return unlock_ret(fail("hipMemcpyDtoD", hipErrorInvalidValue,
				       "%p+%#zx is not in one allocation", dst, n));
	cur_ctx = &d->ctx;
	s = stream_of("hipMemcpyDtoD", NULL, &err);
	if (s)
		err = dtod("hipMemcpyDtoD", s, (uintptr_t)dst, (uintptr_t)src, n, true);
	cur_ctx = saved;
	return unlock_ret(err);
}

/* Waits for the current device's work: its legacy stream waits for the blocking streams. */
__export hipError_t hipDeviceSynchronize(void)
{
	struct CUctx_st *saved = cur_ctx;
	struct CUstream_st *s;
	CUresult err = 0;

	hip_enter("hipDeviceSynchronize");
	if (hip_dev >= ndevs || dev_open("hipDeviceSynchronize", &devs[hip_dev]))
		return unlock_ret(hipErrorInvalidDevice);
	cur_ctx = &devs[hip_dev].ctx;
	s = stream_of("hipDeviceSynchronize", NULL, &err);
	if (s)
		wait_ticket(s, sync_ticket("hipDeviceSynchronize", s));
	cur_ctx = saved;
	return unlock_ret(err);
}

__export int fgds_gpurt_bar_offset(uint64_t dptr, int *ordinal, uint64_t *bar_off)
{
	struct gpurt_dev *d;
	struct alloc *a;
	int ret = -1;

	pthread_mutex_lock(&lock);
	a = initialized ? find(dptr, 1, &d) : NULL;
	if (a) {
		*ordinal = d->ordinal;
		*bar_off = bar_of(d, a, dptr) - d->bar;
		ret = 0;
	}
	pthread_mutex_unlock(&lock);
	return ret;
}
