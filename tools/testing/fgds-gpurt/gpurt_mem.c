// SPDX-License-Identifier: GPL-2.0
/*
 * The GPU stand-in's runtime (gpurt.c): device memory and pinned host
 * memory. Device memory is ranges of a device's BAR at addresses apart from
 * them, both allocated first fit (cuMemAlloc's alignment); a freed address
 * is handed out again at once, a freed BAR range that was exported never.
 * Also the FGDS_GPURT_LOG lines, the dma-buf export of a range, and
 * fgds_gpurt_bar_offset().
 */
#include "gpurt_internal.h"

static struct pinned *pinned;
static uint64_t next_buffer_id = 1;

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
uint8_t *bar_of(const struct gpurt_dev *d, const struct alloc *a, uint64_t p)
{
	return d->bar + a->off + (p - d->va - a->addr);
}

/* The live allocation holding [p, p + n), with its device. */
struct alloc *find(uint64_t p, size_t n, struct gpurt_dev **pd)
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

struct pinned *find_pinned(const void *p, size_t n)
{
	for (struct pinned *h = pinned; h; h = h->next)
		if ((const uint8_t *)p >= h->p && (const uint8_t *)p < h->p + h->n)
			return n <= (size_t)(h->p + h->n - (const uint8_t *)p) ? h : NULL;
	return NULL;
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

CUresult mem_alloc(const char *fn, struct gpurt_dev *d, uint64_t *out, size_t n)
{
	struct alloc *a = alloc_new(d, n);

	if (!a)
		return fail(fn, CUDA_ERROR_OUT_OF_MEMORY, "%zu bytes on %s", n, d->name);
	log_mem("alloc", d, a);
	*out = d->va + a->addr;
	return CUDA_SUCCESS;
}

CUresult mem_free(const char *fn, uint64_t p)
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

CUresult host_alloc(const char *fn, void **pp, size_t n)
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

CUresult host_free(const char *fn, void *p)
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

CUresult addr_range(const char *fn, uint64_t *pbase, size_t *psize, uint64_t p, int nf)
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

/*
 * A dma-buf of exactly [p, p + size): page aligned, in one allocation
 * (cuMemGetHandleForAddressRange's rules; hipMemGetHandleForAddressRange's
 * are taken to be the same). The lock is held.
 */
CUresult export(const char *fn, void *handle, uint64_t p, size_t size, int type,
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
