/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the parts of the GPU stand-in's runtime share (gpurt.c says what it
 * is): its state (devices, allocations, streams, events, the lock), the
 * errors and aborts every call uses, and the functions one part gives the
 * others. gpurt.c owns the state, the devices and the errors, gpurt_mem.c
 * device and pinned host memory and dma-buf export, gpurt_stream.c streams
 * and the work queued on them, gpurt_cuda.c the CUDA calls, gpurt_hip.c the
 * HIP ones. Nothing here is exported: only __export functions are.
 */
#ifndef FGDS_GPURT_INTERNAL_H
#define FGDS_GPURT_INTERNAL_H

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

/* The runtime's one lock: every call holds it, a stream thread too but while it runs work. */
extern pthread_mutex_t lock;
/* Broadcast on every change a waiter may wait for: work queued or done, device memory written. */
extern pthread_cond_t progress;
extern bool initialized;
extern bool verbose;
extern int ndevs;
extern struct gpurt_dev devs[GPURT_MAX_DEVS];
extern long page_size;

extern __thread struct CUctx_st *cur_ctx;
extern __thread bool in_host_fn;

#define __printf(a, b)	__attribute__((format(printf, a, b)))
#define __noreturn	__attribute__((noreturn))

/* gpurt.c: errors, aborts, devices */
void __noreturn __printf(2, 3) die(const char *fn, const char *fmt, ...);
int __printf(3, 4) fail(const char *fn, int code, const char *fmt, ...);
void entry(const char *fn);
CUresult unlock_ret(CUresult r);
void init_locked(void);
int dev_open(const char *fn, struct gpurt_dev *d);
int bus_id(char *buf, int len, int dev);

/* gpurt_mem.c: device and pinned host memory; the lock is held */
uint8_t *bar_of(const struct gpurt_dev *d, const struct alloc *a, uint64_t p);
struct alloc *find(uint64_t p, size_t n, struct gpurt_dev **pd);
struct pinned *find_pinned(const void *p, size_t n);
CUresult mem_alloc(const char *fn, struct gpurt_dev *d, uint64_t *out, size_t n);
CUresult mem_free(const char *fn, uint64_t p);
CUresult host_alloc(const char *fn, void **pp, size_t n);
CUresult host_free(const char *fn, void *p);
CUresult addr_range(const char *fn, uint64_t *pbase, size_t *psize, uint64_t p, int nf);
CUresult export(const char *fn, void *handle, uint64_t p, size_t size, int type,
		unsigned long long flags, int unsupported);

/* gpurt_stream.c: streams and their work; the lock is held */
struct CUstream_st *stream_new(struct CUctx_st *ctx, unsigned int flags, bool legacy);
struct CUstream_st *stream_of(const char *fn, CUstream h, CUresult *err);
uint64_t enqueue(struct CUstream_st *s, struct op *o);
struct op *op_new(const char *fn, struct CUstream_st *s, enum op_kind kind);
void wait_ticket(struct CUstream_st *s, uint64_t ticket);
CUresult device_op(const char *fn, struct CUstream_st *s, enum op_kind kind, uint64_t p,
		   void *host, size_t n, size_t bytes, uint32_t value, bool wait);
CUresult dtod(const char *fn, struct CUstream_st *s, uint64_t dst, uint64_t src, size_t n,
	      bool wait);
uint64_t sync_ticket(const char *fn, struct CUstream_st *s);

#endif /* FGDS_GPURT_INTERNAL_H */
