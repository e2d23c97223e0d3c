/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * fgds.h - C interface of libfgds (tools/lib/fgds), the user-space library
 * of fgds (fast GPU direct storage).
 *
 * Link with -lfgds (libfgds.so, soname libfgds.so.0, or libfgds.a; the
 * static library also needs -lpthread -ldl -lm). Every function is
 * thread-safe.
 *
 * Written by hand, not by cbindgen (which this tree does not build with,
 * and which would drop these comments): tools/lib/fgds/tests/header.rs
 * holds it to src/capi.rs (the same functions; struct sizes, offsets and
 * constants as the C compiler sees them).
 *
 * Errors: functions return a negative errno-style code (-EINVAL, ...);
 * fgds_strerror() says what a code means, fgds_strhint() what to do about
 * it, and fgds_last_error() gives the detailed message of the calling
 * thread's last failure. The codes and their text are one table,
 * ERRNOS in tools/lib/fgds/src/error.rs, printed in tools/lib/fgds/README.md
 * ("Errno meanings"); the Python bindings and the fgds tool use it too.
 */
#ifndef FGDS_H
#define FGDS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header: 10000 * major + 100 * minor + patch;
 * fgds_version() gives the library's. */
#define FGDS_VERSION_MAJOR	0
#define FGDS_VERSION_MINOR	1
#define FGDS_VERSION_PATCH	0
#define FGDS_VERSION \
	(10000 * FGDS_VERSION_MAJOR + 100 * FGDS_VERSION_MINOR + FGDS_VERSION_PATCH)

uint32_t fgds_version(void);

/* Most segments of fgds_readv/fgds_writev; of one batch element. */
#define FGDS_IOV_MAX		1024
#define FGDS_BATCH_IOV_MAX	128

/* struct fgds_config.flags */
#define FGDS_CONFIG_STRICT	(1U << 0) /* no bounce: misalignment / no P2P is an error */
#define FGDS_CONFIG_NO_IO_URING	(1U << 1) /* pread/pwrite instead of io_uring */
#define FGDS_CONFIG_NO_DIRECT	(1U << 2) /* never open O_DIRECT (always bounce) */

/* Tunables of a handle; NULL, zero fields and flags not set mean the
 * defaults (1 MiB chunks, queue depth 16, io_uring, not strict), which the
 * FGDS_* environment variables may change (README.md, "Configuration by
 * environment"). A call larger than FGDS_SPLIT_SIZE (16 MiB) runs on up to
 * FGDS_PARALLEL threads (the I/O threads' count), each with its own queue.
 *
 * The struct carries its size so that it can grow (as openat2's open_how):
 * set .size = sizeof(struct fgds_config) (FGDS_CONFIG_INIT does); 0 means
 * the first version's 24 bytes, so { 0 } and { .flags = ... } work. The
 * library reads the fields within size; a smaller size than 24, bytes it
 * does not know that are not 0 (an option of a newer header) or a
 * reserved field that is not 0 make fgds_open fail with -EINVAL, the
 * message naming the size or byte. */
struct fgds_config {
	uint32_t size;		/* sizeof(struct fgds_config), or 0 */
	uint32_t flags;		/* FGDS_CONFIG_* */
	uint64_t chunk_size;	/* bytes per request, multiple of 4096 */
	uint32_t queue_depth;	/* requests in flight per thread of a call, 1..4096 */
	uint32_t reserved;	/* 0 */
};

#define FGDS_CONFIG_SIZE_VER0	24	/* the first struct fgds_config */
#define FGDS_CONFIG_INIT	{ .size = sizeof(struct fgds_config) }

/* One segment: size bytes at base + offset; base lies in a registered
 * buffer, or in GPU memory the caller did not register (as fgds_read). */
struct fgds_io_segment {
	void *base;
	off_t offset;
	size_t size;
};

/* Which path the bytes of a handle took. */
struct fgds_stats {
	uint64_t direct_bytes;	/* O_DIRECT to/from the buffer (P2P for GPU buffers) */
	uint64_t bounce_bytes;	/* through the page cache or a host bounce buffer */
	uint64_t fallbacks;	/* calls that fell back from direct to bounce */
	uint64_t direct_ops;
	uint64_t bounce_ops;
	uint64_t read_bytes;
	uint64_t write_bytes;
	uint64_t errors;	/* calls that failed */
};

/* Opens path with open(2) flags (O_RDONLY/O_WRONLY/O_RDWR, O_CREAT, O_TRUNC;
 * O_DIRECT is implied) and mode. Returns a handle > 0 or a negative code. */
int fgds_open(const char *path, int flags, unsigned int mode,
	      const struct fgds_config *config);
/* Wraps an open descriptor (duplicated: the caller still owns fd). */
int fgds_open_fd(int fd, const struct fgds_config *config);
/* Closes a handle. I/O in flight on it completes first. */
int fgds_close(int handle);

/* Registers caller-owned host memory [ptr, ptr+len); flags must be 0. */
int fgds_buf_register_host(void *ptr, size_t len, unsigned int flags);
/* Registers size bytes at offset (page aligned) of a dma-buf on device
 * ("/dev/fgdsN"; NULL: the node whose GPU owns the memory) and maps them;
 * *out receives the address of the mapping, which is the buffer's base. */
int fgds_buf_register_dmabuf(const char *device, int dmabuf_fd,
			     uint64_t offset, uint64_t size, void **out);
/* Registers CUDA (HIP) device memory [dptr, dptr+size). If an fgds node
 * serves the GPU the range (widened to whole pages) is exported as a dma-buf and
 * registered so that I/O goes peer to peer; otherwise I/O goes through
 * pinned host bounce buffers (an error in strict mode). flags must be 0. */
int fgds_buf_register_cuda(uint64_t dptr, size_t size, unsigned int flags);
int fgds_buf_register_hip(uint64_t dptr, size_t size, unsigned int flags);
/* Deregisters the buffer whose base is base. */
int fgds_buf_deregister(void *base);

/* Reads size bytes at file_offset into base + buf_offset. Returns the bytes
 * read (fewer at end of file) or a negative code. Offsets and sizes need no
 * alignment: unaligned edges go through a small bounce buffer. base lies in
 * a registered buffer, or in CUDA (HIP) memory the caller did not register:
 * the library then serves the request, with no registration per call,
 * through a registered staging buffer and a device-to-device copy (below
 * FGDS_REG_CACHE_MIN) or its cached registration of the allocation (see
 * fgds_gpucache_counters()); -EFAULT for host memory not registered. */
ssize_t fgds_read(int handle, void *base, size_t size, off_t file_offset,
		  off_t buf_offset);
/* Writes size bytes from base + buf_offset at file_offset. */
ssize_t fgds_write(int handle, void *base, size_t size, off_t file_offset,
		   off_t buf_offset);
/* Reads into / writes from nsegs (<= FGDS_IOV_MAX) segments, in order, from
 * file_offset on. Errors about one segment name it in fgds_last_error(). */
ssize_t fgds_readv(int handle, const struct fgds_io_segment *segs, int nsegs,
		   off_t file_offset);
ssize_t fgds_writev(int handle, const struct fgds_io_segment *segs, int nsegs,
		    off_t file_offset);

/* Stream-ordered I/O (cuFileReadAsync's model), CUDA only. Enqueues on
 * stream (a CUstream of the calling thread's current context or of the
 * buffer's; NULL: its default stream) a read of *size bytes at *file_offset
 * into base + *buf_offset. The values are read when the stream reaches the
 * request (late binding); work queued on the stream after it waits for it;
 * its result (bytes, or a negative code) goes to *bytes_done. base must be
 * registered. The four pointers must stay valid until *bytes_done is
 * written (synchronise the stream). Returns 0 once enqueued, or a negative
 * code, and then nothing was enqueued (-ENOSYS: no CUDA, or HIP memory). */
int fgds_read_async(int handle, void *base, const size_t *size,
		    const off_t *file_offset, const off_t *buf_offset,
		    ssize_t *bytes_done, void *stream);
/* The same for a write from base + *buf_offset to the file at *file_offset. */
int fgds_write_async(int handle, void *base, const size_t *size,
		     const off_t *file_offset, const off_t *buf_offset,
		     ssize_t *bytes_done, void *stream);

int fgds_get_stats(int handle, struct fgds_stats *out);

/* The process's FGDS_IOCTL_REG_BUFFER / UNREG_BUFFER calls through the
 * library, and what its staging pool and registration cache for GPU memory
 * the caller never registered did (tools/lib/fgds/src/gpucache.rs). */
struct fgds_gpucache_counters {
	uint64_t registrations;		/* REG_BUFFER calls that succeeded */
	uint64_t unregistrations;	/* UNREG_BUFFER calls */
	uint64_t staged;		/* requests through a staging buffer */
	uint64_t cached;		/* requests into a cached registration */
	uint64_t uncached;		/* requests with a registration of their own */
	uint64_t pool_buffers;		/* staging buffers made, every GPU */
	uint64_t cache_hits;
	uint64_t cache_registrations;	/* registrations the cache made */
	uint64_t cache_stale;		/* dropped: their allocation was freed */
	uint64_t cache_evicted;		/* dropped: bounds, a caller's own registration, fgds_shutdown() */
	uint64_t cache_entries;		/* registrations cached now */
	uint64_t cache_bytes;		/* bytes registered in the cache now */
	uint64_t cache_full;		/* misses not registered: full of registrations in use */
};
int fgds_gpucache_counters(struct fgds_gpucache_counters *out);

/* Drops what the library keeps between calls for GPU memory the caller
 * never registered: stops and joins its registration cache's thread,
 * unregisters the cached registrations, unregisters and frees the
 * staging buffers, and destroys the copy streams and events of every
 * thread (a thread that copies again makes new ones). Registered buffers, open handles and batches stay
 * valid; the next call that needs them makes them again, and the counters
 * above go on counting. A call running meanwhile finishes on what it
 * started with, dropped when it is done. Optional: at exit the kernel
 * frees all of it with the process. libcufile calls it when
 * cuFileDriverClose drops the last use. */
void fgds_shutdown(void);

/* Fallbacks from peer to peer to the bounce path, by cause
 * (tools/lib/fgds/src/stats.rs, FallbackCause). */
struct fgds_fallbacks {
	uint64_t busy;		/* EBUSY: the range is in another registration */
	uint64_t not_supported;	/* EOPNOTSUPP: no P2P DMA for this memory or file */
	uint64_t no_device;	/* no fgds node serves the GPU */
	uint64_t misaligned;	/* the page-widened export leaves the allocation */
	uint64_t no_direct;	/* no O_DIRECT, or the kernel refused an O_DIRECT request */
	uint64_t asked;		/* the bounce path was asked for */
	uint64_t other;		/* any other error of the export or registration */
};
/* The handle's calls that fell back, by cause (their sum is
 * fgds_stats.fallbacks). */
int fgds_get_fallbacks(int handle, struct fgds_fallbacks *out);
/* The process's fallbacks since it started: calls, every handle's calls
 * that fell back; registrations, registrations of GPU memory that bounce (a
 * caller's own, and requests on GPU memory it never registered that the
 * library served through the bounce path). Either may be NULL. */
int fgds_process_fallbacks(struct fgds_fallbacks *calls,
			   struct fgds_fallbacks *registrations);
/* Why the handle's last request fell back to the bounce path: copied into
 * buf as snprintf does; returns the reason's length (0: no fallback yet) or
 * a negative code. */
ssize_t fgds_last_fallback_reason(int handle, char *buf, size_t len);
/* Whether the registered buffer containing ptr does direct peer-to-peer
 * I/O (1: GPU memory mapped through an fgds node; 0: host memory, or GPU
 * memory that bounces), or -EFAULT when ptr is not in a registered buffer. */
int fgds_buf_is_p2p(const void *ptr);
/* Why that buffer is not P2P, as fgds_last_fallback_reason() (0: no reason:
 * it is P2P, or host memory). */
ssize_t fgds_buf_p2p_reason(const void *ptr, char *buf, size_t len);
/* Static description of a code (negative or positive). */
const char *fgds_strerror(int code);
/* Static hint of what to do about a code (negative or positive). */
const char *fgds_strhint(int code);
/* Detailed message of this thread's last failure. */
const char *fgds_last_error(void);

/* Batches (cuFile model). */
#define FGDS_OP_READ	0
#define FGDS_OP_WRITE	1

/* A batch element: plain (segments == NULL: size bytes at base+buf_offset)
 * or vectored (nsegments <= FGDS_BATCH_IOV_MAX segments). */
struct fgds_io_params {
	int handle;
	int opcode;		/* FGDS_OP_* */
	uint64_t cookie;	/* returned in the event */
	off_t file_offset;
	void *base;
	off_t buf_offset;
	size_t size;
	const struct fgds_io_segment *segments;
	int nsegments;
};

/* struct fgds_io_event.status */
#define FGDS_STATUS_COMPLETE	0	/* result: bytes */
#define FGDS_STATUS_FAILED	1	/* result: negative code */
#define FGDS_STATUS_CANCELED	2	/* result: -ECANCELED */
#define FGDS_STATUS_PENDING	3
#define FGDS_STATUS_TIMEOUT	4	/* still in flight when the wait timed out */

struct fgds_io_event {
	uint64_t cookie;
	int status;
	int pad;
	int64_t result;
};

/* Creates a batch of up to capacity (1..4096) requests in flight; returns
 * its id > 0 or a negative code. */
int fgds_batch_create(unsigned int capacity);
/* Submits n requests, all or none (-EAGAIN when over capacity); base and
 * segments as fgds_read and fgds_readv (GPU memory the caller did not
 * register: the library's cached registration of its allocation). A plain
 * request of at most the chunk size, aligned for O_DIRECT, into host memory
 * or a registered buffer goes on the batch's own io_uring (handed to the
 * kernel two per system call, reaped by fgds_batch_wait); the others run
 * on the library's I/O threads. */
int fgds_batch_submit(int batch, const struct fgds_io_params *params,
		      unsigned int n);
/* Waits until min_nr requests finished or timeout_ms passed (< 0: forever,
 * 0: poll); writes up to max_nr events (on timeout the unfinished requests
 * are reported with FGDS_STATUS_TIMEOUT and stay in the batch). Returns the
 * number of events written. */
int fgds_batch_wait(int batch, unsigned int min_nr, unsigned int max_nr,
		    struct fgds_io_event *events, int timeout_ms);
/* Cancels all requests; returns how many were unfinished. */
int fgds_batch_cancel(int batch);
/* Cancels, waits for, and frees the batch. */
int fgds_batch_destroy(int batch);

#ifdef __cplusplus
}
#endif

#endif /* FGDS_H */
