// SPDX-License-Identifier: GPL-2.0
/*
 * The library's CUDA and HIP paths with real P2P: memory of the GPU
 * stand-in's runtime (tools/testing/fgds-gpurt: cuMemAlloc, hipMalloc)
 * registered with fgds_buf_register_cuda/_hip, which exports it as a
 * dma-buf through the runtime, registers and maps it; then reads and
 * writes both ways through the pread backend, io_uring, vectored I/O, one
 * call larger than the split size, a batch and (CUDA) stream-ordered I/O
 * on a created and on the legacy stream; and memory it never registered,
 * with no REG_BUFFER per call. Strict mode, and the statistics
 * must say every byte went direct; every byte read is checked by the host
 * in the BAR file, every byte written comes from a range the host filled.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "fgds.h"
#include "gpurt.h"
#include "fgds_host.h"
#include "fgds_pattern.h"
#include "fgds_test.h"
#include "guest_test.h"
#include "fgds_guest.h"

#define SZ_1M (1024 * 1024UL)
/* Larger than the library's split size (16 MiB): one call on several threads. */
#define LEN (32 * SZ_1M)
#define FILE_LEN (2 * LEN)
#define SEED 0x3c

FIXTURE(gpu) {
	uint64_t dptr;
	uint64_t bar_off;
	void *base;
	char path[256];
};

FIXTURE_VARIANT(gpu) {
	bool hip;
};

FIXTURE_VARIANT_ADD(gpu, cuda) {
	.hip = false,
};

FIXTURE_VARIANT_ADD(gpu, hip) {
	.hip = true,
};

FIXTURE_SETUP(gpu)
{
	const char *dir = getenv("FGDS_EXT4"), *bdf = getenv("FGDS_GPU_BDF");
	CUcontext ctx;
	char why[256];
	int ord;

	if (!dir || !bdf)
		SKIP(return, "FGDS_EXT4 or FGDS_GPU_BDF not set: run in the fgds VM");
	/* The first stand-in only: the one whose BAR the host checks in /fgds/out. */
	setenv("FGDS_GPURT_DEVICES", bdf, 1);
	if (variant->hip) {
		void *p = NULL;

		ASSERT_EQ(0, hipInit(0));
		ASSERT_EQ(0, hipSetDevice(0));
		ASSERT_EQ(0, hipMalloc(&p, LEN));
		self->dptr = (uintptr_t)p;
	} else {
		ASSERT_EQ(0, cuInit(0));
		ASSERT_EQ(0, cuDevicePrimaryCtxRetain(&ctx, 0));
		ASSERT_EQ(0, cuCtxSetCurrent(ctx));
		ASSERT_EQ(0, cuMemAlloc_v2(&self->dptr, LEN));
	}
	ASSERT_EQ(0, fgds_gpurt_bar_offset(self->dptr, &ord, &self->bar_off));
	ASSERT_EQ(0, variant->hip ? fgds_buf_register_hip(self->dptr, LEN, 0) :
				    fgds_buf_register_cuda(self->dptr, LEN, 0))
		TH_LOG("register: %s", fgds_last_error());
	self->base = (void *)(uintptr_t)self->dptr;
	why[0] = 0;
	fgds_buf_p2p_reason(self->base, why, sizeof(why));
	ASSERT_EQ(1, fgds_buf_is_p2p(self->base)) TH_LOG("not P2P: %s", why);
	snprintf(self->path, sizeof(self->path), "%s/gpurt-io-test", dir);
	ASSERT_EQ(0, fgds_put_file(self->path, FILE_LEN, SEED));
}

FIXTURE_TEARDOWN(gpu)
{
	if (!self->base)
		return;
	EXPECT_EQ(0, fgds_buf_deregister(self->base));
	if (variant->hip) {
		EXPECT_EQ(0, hipFree(self->base));
	} else {
		EXPECT_EQ(0, cuMemFree_v2(self->dptr));
	}
	unlink(self->path);
}

static int open_handle(const char *path, unsigned int flags)
{
	struct fgds_config cfg = { .size = sizeof(cfg), .flags = FGDS_CONFIG_STRICT | flags };

	return fgds_open(path, O_RDWR, 0, &cfg);
}

/* Every byte of the handle's I/O went direct (P2P), none bounced. */
static void all_direct(struct __test_metadata *_metadata, int h, uint64_t bytes)
{
	struct fgds_stats st;

	ASSERT_EQ(0, fgds_get_stats(h, &st));
	EXPECT_EQ(bytes, st.direct_bytes);
	EXPECT_EQ(0, st.bounce_bytes);
	EXPECT_EQ(0, st.fallbacks);
}

/* The host: the BAR holds seed's stream at @pos over [buf_off, buf_off + len) of the buffer. */
static void host_check(struct __test_metadata *_metadata, FIXTURE_DATA(gpu) *self,
		       uint64_t seed, uint64_t buf_off, uint64_t len, uint64_t pos)
{
	guest_host_check(_metadata, seed, self->bar_off + buf_off, len, pos);
}

static void host_fill(struct __test_metadata *_metadata, FIXTURE_DATA(gpu) *self,
		      uint64_t seed, uint64_t buf_off, uint64_t len)
{
	guest_host_fill(_metadata, seed, self->bar_off + buf_off, len);
}

/*
 * One handle (opened with @flags) both ways, @len bytes each: a read from
 * @rd_pos of the file into @rd_off of the memory, which the host checks; a
 * write from @wr_off of it, which the host fills with stream @fill first, to
 * @wr_pos of the file, read back; every byte the direct way.
 */
static void both_ways(struct __test_metadata *_metadata, FIXTURE_DATA(gpu) *self,
		      unsigned int flags, size_t len, off_t rd_pos, off_t rd_off, uint64_t fill,
		      off_t wr_off, off_t wr_pos)
{
	int h = open_handle(self->path, flags);

	ASSERT_LT(0, h) TH_LOG("open: %s", fgds_last_error());
	ASSERT_EQ((ssize_t)len, fgds_read(h, self->base, len, rd_pos, rd_off))
		TH_LOG("%s", fgds_last_error());
	host_check(_metadata, self, SEED, rd_off, len, rd_pos);
	host_fill(_metadata, self, fill, wr_off, len);
	ASSERT_EQ((ssize_t)len, fgds_write(h, self->base, len, wr_pos, wr_off))
		TH_LOG("%s", fgds_last_error());
	EXPECT_EQ(-1, guest_file_cmp(self->path, wr_pos, len, fill, 0));
	all_direct(_metadata, h, 2 * len);
	fgds_close(h);
}

TEST_F_TIMEOUT(gpu, pread_backend_both_ways, 300)
{
	both_ways(_metadata, self, FGDS_CONFIG_NO_IO_URING, 8 * SZ_1M, SZ_1M, 4 * SZ_1M, 0x41, 0,
		  LEN);
}

TEST_F_TIMEOUT(gpu, io_uring_both_ways, 300)
{
	both_ways(_metadata, self, 0, 8 * SZ_1M, 3 * SZ_1M, 8 * SZ_1M, 0x42, 16 * SZ_1M,
		  LEN + SZ_1M);
}

TEST_F_TIMEOUT(gpu, vectored_both_ways, 300)
{
	char *b = self->base;
	struct fgds_io_segment segs[3] = {
		{ b, 4096, 8192 },
		{ b, 2 * SZ_1M, SZ_1M },
		{ b, 20 * SZ_1M, 3 * 4096 },
	};
	const size_t total = 8192 + SZ_1M + 3 * 4096;
	size_t pos = 0;
	int h = open_handle(self->path, 0);

	ASSERT_LT(0, h) TH_LOG("open: %s", fgds_last_error());
	ASSERT_EQ((ssize_t)total, fgds_readv(h, segs, 3, 5 * SZ_1M))
		TH_LOG("%s", fgds_last_error());
	for (int i = 0; i < 3; pos += segs[i].size, i++)
		host_check(_metadata, self, SEED, segs[i].offset, segs[i].size, 5 * SZ_1M + pos);
	/* The same segments written back in one call: the file holds them in order. */
	for (int i = 0; i < 3; i++)
		host_fill(_metadata, self, 0x43 + i, segs[i].offset, segs[i].size);
	ASSERT_EQ((ssize_t)total, fgds_writev(h, segs, 3, LEN)) TH_LOG("%s", fgds_last_error());
	pos = 0;
	for (int i = 0; i < 3; pos += segs[i].size, i++)
		EXPECT_EQ(-1, guest_file_cmp(self->path, LEN + pos, segs[i].size, 0x43 + i, 0));
	all_direct(_metadata, h, 2 * total);
	fgds_close(h);
}

TEST_F_TIMEOUT(gpu, one_call_larger_than_the_split_size, 600)
{
	both_ways(_metadata, self, 0, LEN, 0, 0, 0x47, 0, LEN);
}

static void run_batch(struct __test_metadata *_metadata, int h, struct fgds_io_params *p, int n)
{
	struct fgds_io_event ev[8];
	int batch = fgds_batch_create(8), got = 0;

	ASSERT_LT(0, batch);
	ASSERT_EQ(0, fgds_batch_submit(batch, p, n)) TH_LOG("%s", fgds_last_error());
	while (got < n) {
		int k = fgds_batch_wait(batch, 1, n - got, ev + got, 60000);

		ASSERT_LT(0, k);
		got += k;
	}
	for (int i = 0; i < n; i++) {
		EXPECT_EQ(FGDS_STATUS_COMPLETE, ev[i].status);
		EXPECT_EQ((int64_t)p[i].size, ev[i].result);
	}
	EXPECT_EQ(0, fgds_batch_destroy(batch));
}

/*
 * GPU memory the caller never registered, through the C ABI: fgds_read and
 * fgds_write (a request under FGDS_REG_CACHE_MIN through the staging pool
 * until the allocation has a cached registration, larger ones into that
 * registration) and fgds_readv (its segments into it). After one warm-up
 * round, four more make no REG_BUFFER (the library's own count) and no
 * registration of their own; the host checks every byte read in the BAR
 * file, and every byte written is compared in the file.
 */
TEST_F_TIMEOUT(gpu, unregistered_memory_without_registration_per_call, 300)
{
	const size_t small = 256 * 1024, large = 2 * SZ_1M, len = 8 * SZ_1M;
	struct fgds_gpucache_counters c0, c1;
	uint64_t dptr, bar;
	char *b;
	int h, r, ord;

	if (variant->hip) {
		void *p = NULL;

		ASSERT_EQ(0, hipMalloc(&p, len));
		dptr = (uintptr_t)p;
	} else {
		ASSERT_EQ(0, cuMemAlloc_v2(&dptr, len));
	}
	b = (char *)(uintptr_t)dptr;
	ASSERT_EQ(0, fgds_gpurt_bar_offset(dptr, &ord, &bar));
	h = open_handle(self->path, 0);
	ASSERT_LT(0, h) TH_LOG("open: %s", fgds_last_error());
	memset(&c0, 0, sizeof(c0));
	for (r = 0; r < 5; r++) {
		const uint64_t fo = r * SZ_1M;
		struct fgds_io_segment segs[2] = {
			{ b, 4 * SZ_1M, small },
			{ b, 6 * SZ_1M, small },
		};

		if (r == 1)
			ASSERT_EQ(0, fgds_gpucache_counters(&c0));
		ASSERT_EQ((ssize_t)small, fgds_read(h, b, small, fo, r * small))
			TH_LOG("round %d: %s", r, fgds_last_error());
		guest_host_check(_metadata, SEED, bar + r * small, small, fo);
		ASSERT_EQ((ssize_t)large, fgds_read(h, b, large, fo + SZ_1M, 2 * SZ_1M))
			TH_LOG("round %d: %s", r, fgds_last_error());
		guest_host_check(_metadata, SEED, bar + 2 * SZ_1M, large, fo + SZ_1M);
		ASSERT_EQ((ssize_t)(2 * small), fgds_readv(h, segs, 2, fo + 3 * SZ_1M))
			TH_LOG("round %d: %s", r, fgds_last_error());
		guest_host_check(_metadata, SEED, bar + 4 * SZ_1M, small, fo + 3 * SZ_1M);
		guest_host_check(_metadata, SEED, bar + 6 * SZ_1M, small, fo + 3 * SZ_1M + small);
		guest_host_fill(_metadata, 0x50 + r, bar + 2 * SZ_1M, large);
		ASSERT_EQ((ssize_t)large, fgds_write(h, b, large, LEN + r * large, 2 * SZ_1M))
			TH_LOG("round %d: %s", r, fgds_last_error());
		EXPECT_EQ(-1, guest_file_cmp(self->path, LEN + r * large, large, 0x50 + r, 0));
	}
	ASSERT_EQ(0, fgds_gpucache_counters(&c1));
	printf("# 4 rounds of 4 requests on unregistered %s memory: REG_BUFFER %llu, "
	       "staged %llu, cached %llu, uncached %llu\n", variant->hip ? "HIP" : "CUDA",
	       (unsigned long long)(c1.registrations - c0.registrations),
	       (unsigned long long)(c1.staged - c0.staged),
	       (unsigned long long)(c1.cached - c0.cached),
	       (unsigned long long)(c1.uncached - c0.uncached));
	EXPECT_EQ(c0.registrations, c1.registrations);
	EXPECT_EQ(c0.uncached, c1.uncached);
	EXPECT_LE(c0.cached + 4 * 3, c1.cached);
	fgds_close(h);
	if (variant->hip) {
		EXPECT_EQ(0, hipFree(b));
	} else {
		EXPECT_EQ(0, cuMemFree_v2(dptr));
	}
}

TEST_F_TIMEOUT(gpu, batch_both_ways, 300)
{
	struct fgds_io_params p[8];
	int h = open_handle(self->path, 0);

	ASSERT_LT(0, h) TH_LOG("open: %s", fgds_last_error());
	fgds_guest_reversed_reads(p, h, self->base);
	run_batch(_metadata, h, p, 8);
	for (int i = 0; i < 8; i++)
		host_check(_metadata, self, SEED, i * SZ_1M, SZ_1M, (7 - i) * SZ_1M);
	for (int i = 0; i < 8; i++) {
		host_fill(_metadata, self, 0x50 + i, (8 + i) * SZ_1M, SZ_1M);
		p[i].opcode = FGDS_OP_WRITE;
		p[i].file_offset = LEN + (7 - i) * SZ_1M;
		p[i].buf_offset = (8 + i) * SZ_1M;
	}
	run_batch(_metadata, h, p, 8);
	for (int i = 0; i < 8; i++)
		EXPECT_EQ(-1, guest_file_cmp(self->path, LEN + (7 - i) * SZ_1M, SZ_1M, 0x50 + i, 0));
	all_direct(_metadata, h, 16 * SZ_1M);
	fgds_close(h);
}

/*
 * Stream-ordered I/O: a read, then on the same stream a copy of what it read
 * to pinned memory, which must see the read's bytes; then a write from a
 * range the host filled. On a created stream and on the legacy one.
 */
static void stream_io(struct __test_metadata *_metadata, FIXTURE_DATA(gpu) *self,
		      const FIXTURE_VARIANT(gpu) *variant, CUstream s)
{
	size_t size = 4 * SZ_1M;
	off_t foff = 6 * SZ_1M, boff = 12 * SZ_1M, woff = LEN + 4 * SZ_1M, wboff = 24 * SZ_1M;
	ssize_t done = -1, wdone = -1;
	int h = open_handle(self->path, 0);
	void *pin = NULL;

	ASSERT_LT(0, h) TH_LOG("open: %s", fgds_last_error());
	if (variant->hip) {
		/* CUDA streams only: -ENOSYS, the library's code for no CUDA. */
		EXPECT_EQ(-ENOSYS,
			  fgds_read_async(h, self->base, &size, &foff, &boff, &done, NULL));
		fgds_close(h);
		return;
	}
	ASSERT_EQ(0, cuMemHostAlloc(&pin, size, 0));
	ASSERT_EQ(0, fgds_read_async(h, self->base, &size, &foff, &boff, &done, s))
		TH_LOG("%s", fgds_last_error());
	ASSERT_EQ(0, cuMemcpyDtoHAsync_v2(pin, self->dptr + boff, size, s));
	host_fill(_metadata, self, 0x60, wboff, size);
	ASSERT_EQ(0, fgds_write_async(h, self->base, &size, &woff, &wboff, &wdone, s))
		TH_LOG("%s", fgds_last_error());
	ASSERT_EQ(0, cuStreamSynchronize(s));
	EXPECT_EQ((ssize_t)size, done);
	EXPECT_EQ((ssize_t)size, wdone);
	EXPECT_EQ(-1, fgds_pattern_cmp(pin, size, SEED, foff));
	host_check(_metadata, self, SEED, boff, size, foff);
	EXPECT_EQ(-1, guest_file_cmp(self->path, woff, size, 0x60, 0));
	all_direct(_metadata, h, 2 * size);
	EXPECT_EQ(0, cuMemFreeHost(pin));
	fgds_close(h);
}

TEST_F_TIMEOUT(gpu, stream_ordered_on_a_created_stream, 300)
{
	CUstream s = NULL;

	if (!variant->hip) {
		ASSERT_EQ(0, cuStreamCreate(&s, CU_STREAM_DEFAULT));
	}
	stream_io(_metadata, self, variant, s);
	if (s) {
		EXPECT_EQ(0, cuStreamDestroy_v2(s));
	}
}

TEST_F_TIMEOUT(gpu, stream_ordered_on_the_legacy_stream, 300)
{
	stream_io(_metadata, self, variant, NULL);
}

TEST_HARNESS_MAIN
