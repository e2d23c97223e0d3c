// SPDX-License-Identifier: GPL-2.0
/*
 * A cuFile program on fgds's libcufile.so.0 with cuMemAlloc'd memory of the
 * GPU stand-in's runtime (tools/testing/fgds-gpurt), as cuFile programs
 * use it: registered with cuFileBufRegister, and not registered at all
 * (KvikIO's, torch's and LMCache's way). cuFileRead, cuFileWrite, a batch
 * and cuFileReadAsync/cuFileWriteAsync on a stream; the host checks every
 * byte read in the BAR file and fills every range written. Strict mode
 * (FGDS_STRICT=1): a request that would bounce fails. The level 3
 * statistics of the stand-in GPU must count cuFileRead and cuFileWrite as
 * P2P, never POSIX (bounce), stream-ordered requests counted as they are,
 * the level 1 batch counters the batch's requests as P2P.
 *
 * Unregistered memory (issue 28) never costs a registration per call: the
 * library's own REG_BUFFER count (fgds_gpucache_counters) does not move
 * over many calls through the staging pool (64 KiB, at device addresses
 * O_DIRECT could not use) and the registration cache (1 MiB and more), nor
 * over stream-ordered (cuFileReadAsync, cuFileWriteAsync) and vectored
 * (cuFileReadv, cuFileWritev) calls, every byte checked from the host; two stream-ordered requests on the same
 * unregistered memory in flight at once both run P2P; an allocation freed
 * leaves the cache (unregistered) within its bound, and the next one is
 * registered anew, its bytes where they belong.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "cufile.h"
#include "fgds.h"
#include "gpurt.h"
#include "fgds_host.h"
#include "fgds_pattern.h"
#include "fgds_test.h"
#include "guest_test.h"
#include "cufile_guest.h"

#define SZ_1M (1024 * 1024UL)
#define LEN (8 * SZ_1M)
#define SEED 0xd0

FIXTURE(cufile) {
	CUdeviceptr dptr;
	uint64_t bar_off;
	int fd;
	CUfileHandle_t fh;
	CUfileStatsLevel3_t st;
	char path[256];
};

FIXTURE_VARIANT(cufile) {
	bool registered;
};

FIXTURE_VARIANT_ADD(cufile, registered) {
	.registered = true,
};

FIXTURE_VARIANT_ADD(cufile, unregistered) {
	.registered = false,
};

FIXTURE_SETUP(cufile)
{
	const char *dir = getenv("FGDS_EXT4"), *bdf = getenv("FGDS_GPU_BDF");
	CUcontext ctx;
	int ord;

	if (!dir || !bdf)
		SKIP(return, "FGDS_EXT4 or FGDS_GPU_BDF not set: run in the fgds VM");
	setenv("FGDS_GPURT_DEVICES", bdf, 1);
	setenv("FGDS_STRICT", "1", 1);
	ASSERT_EQ(0, cuInit(0));
	ASSERT_EQ(0, cuDevicePrimaryCtxRetain(&ctx, 0));
	ASSERT_EQ(0, cuCtxSetCurrent(ctx));
	ASSERT_EQ(0, cuMemAlloc_v2(&self->dptr, LEN));
	ASSERT_EQ(0, fgds_gpurt_bar_offset(self->dptr, &ord, &self->bar_off));
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileDriverOpen().err);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileSetStatsLevel(3).err);
	if (variant->registered) {
		ASSERT_EQ(CU_FILE_SUCCESS,
			  cuFileBufRegister((void *)(uintptr_t)self->dptr, LEN, 0).err);
	}
	snprintf(self->path, sizeof(self->path), "%s/cufile-gpurt-test", dir);
	ASSERT_EQ(0, fgds_put_file(self->path, 2 * LEN, SEED));
	cufile_open_handle(_metadata, self->path, &self->fd, &self->fh);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileStatsReset().err);
}

FIXTURE_TEARDOWN(cufile)
{
	if (!self->dptr)
		return;
	cuFileHandleDeregister(self->fh);
	close(self->fd);
	if (variant->registered) {
		EXPECT_EQ(CU_FILE_SUCCESS, cuFileBufDeregister((void *)(uintptr_t)self->dptr).err);
	}
	EXPECT_EQ(CU_FILE_SUCCESS, cuFileDriverClose().err);
	EXPECT_EQ(0, cuMemFree_v2(self->dptr));
	unlink(self->path);
}

/* The stand-in GPU's record: @reads and @writes requests, all P2P. */
static void all_p2p(struct __test_metadata *_metadata, FIXTURE_DATA(cufile) *self,
		    uint64_t reads, uint64_t writes)
{
	CUfilePerGpuStats_t *g;

	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	g = cufile_gpu_stats(&self->st, getenv("FGDS_GPU_BDF"));
	ASSERT_NE(NULL, g) TH_LOG("no statistics for GPU %s (%u GPUs)", getenv("FGDS_GPU_BDF"),
				  self->st.num_gpus);
	EXPECT_EQ(reads, g->n_p2p_reads);
	EXPECT_EQ(0, g->n_posix_reads);
	EXPECT_EQ(writes, g->n_p2p_writes);
	EXPECT_EQ(0, g->n_posix_writes);
}

TEST_F_TIMEOUT(cufile, read_and_write, 300)
{
	void *p = (void *)(uintptr_t)self->dptr;

	ASSERT_EQ((ssize_t)(4 * SZ_1M), cuFileRead(self->fh, p, 4 * SZ_1M, LEN, SZ_1M));
	guest_host_check(_metadata, SEED, self->bar_off + SZ_1M, 4 * SZ_1M, LEN);
	/* The unregistered way: a pointer into the allocation, no offset. */
	ASSERT_EQ((ssize_t)SZ_1M, cuFileRead(self->fh, (char *)p + 6 * SZ_1M, SZ_1M, 0, 0));
	guest_host_check(_metadata, SEED, self->bar_off + 6 * SZ_1M, SZ_1M, 0);
	guest_host_fill(_metadata, SEED + 1, self->bar_off, 2 * SZ_1M);
	ASSERT_EQ((ssize_t)(2 * SZ_1M), cuFileWrite(self->fh, p, 2 * SZ_1M, LEN, 0));
	EXPECT_EQ(-1, guest_file_cmp(self->path, LEN, 2 * SZ_1M, SEED + 1, 0));
	all_p2p(_metadata, self, 2, 1);
}

/* The library's own counts of registrations, cache and staging pool. */
static struct fgds_gpucache_counters counters(void)
{
	struct fgds_gpucache_counters c;

	memset(&c, 0, sizeof(c));
	fgds_gpucache_counters(&c);
	return c;
}

/* Two batches; on memory never registered, the second registers nothing. */
TEST_F_TIMEOUT(cufile, batch_of_reads, 300)
{
	CUfileStatsLevel1_t *l1 = &self->st.detailed.basic;
	void *p = (void *)(uintptr_t)self->dptr;
	struct fgds_gpucache_counters c0, c1;
	CUfileBatchHandle_t b;

	ASSERT_EQ(CU_FILE_SUCCESS, cuFileBatchIOSetUp(&b, 8).err);
	cufile_batch_round(_metadata, b, self->fh, p, self->bar_off, SEED, 0);
	c0 = counters();
	cufile_batch_round(_metadata, b, self->fh, p, self->bar_off, SEED, 3);
	c1 = counters();
	cuFileBatchIODestroy(b);
	TH_LOG("second batch: REG_BUFFER %llu, cached %llu, uncached %llu",
	       (unsigned long long)(c1.registrations - c0.registrations),
	       (unsigned long long)(c1.cached - c0.cached),
	       (unsigned long long)(c1.uncached - c0.uncached));
	EXPECT_EQ(c0.registrations, c1.registrations);
	EXPECT_EQ(c0.uncached, c1.uncached);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	EXPECT_EQ(16, l1->batch_enqueued_ops.ok);
	EXPECT_EQ(0, l1->batch_posix_enqueued_ops.ok);
	EXPECT_EQ(2, l1->batch_p2p_submit_ops.ok);
	EXPECT_EQ(16, l1->batch_complete_ops.ok);
	EXPECT_EQ(2 * LEN, l1->batch_read_bytes);
}

TEST_F_TIMEOUT(cufile, async_on_a_stream, 300)
{
	size_t size = 2 * SZ_1M;
	off_t foff = 3 * SZ_1M, boff = 4 * SZ_1M, woff = LEN + SZ_1M, wboff = 0;
	ssize_t done = -1, wdone = -1;
	void *pin;
	CUstream s;

	ASSERT_EQ(0, cuStreamCreate(&s, CU_STREAM_DEFAULT));
	ASSERT_EQ(0, cuMemHostAlloc(&pin, size, 0));
	guest_host_fill(_metadata, SEED + 2, self->bar_off, size);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileReadAsync(self->fh, (void *)(uintptr_t)self->dptr, &size,
						   &foff, &boff, &done, s).err);
	/* Queued behind the read: sees its bytes. */
	ASSERT_EQ(0, cuMemcpyDtoHAsync_v2(pin, self->dptr + boff, size, s));
	/*
	 * In flight with the read, over the same pages: unregistered, both
	 * use the cached registration of the allocation (before the cache,
	 * each registered its own range and the second got EBUSY: strict, an
	 * error). A BAR page is in one registration at a time.
	 */
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileWriteAsync(self->fh, (void *)(uintptr_t)self->dptr, &size,
						    &woff, &wboff, &wdone, s).err);
	ASSERT_EQ(0, cuStreamSynchronize(s));
	EXPECT_EQ((ssize_t)size, done);
	EXPECT_EQ((ssize_t)size, wdone);
	/* counted as cuFileRead and cuFileWrite are, P2P */
	all_p2p(_metadata, self, 1, 1);
	EXPECT_EQ(-1, fgds_pattern_cmp(pin, size, SEED, foff));
	guest_host_check(_metadata, SEED, self->bar_off + boff, size, foff);
	EXPECT_EQ(-1, guest_file_cmp(self->path, woff, size, SEED + 2, 0));
	EXPECT_EQ(0, cuMemFreeHost(pin));
	EXPECT_EQ(0, cuStreamDestroy_v2(s));
}

/*
 * Many requests, none registering: 64 KiB into an allocation that never
 * sees a larger request, through the staging pool (at device addresses no
 * O_DIRECT could use: 256 bytes into a page), 1 MiB and 3 MiB into the
 * cached registration of the fixture's allocation, then 64 KiB into that
 * one (it is cached: no copy); reads checked in the BAR from the host,
 * writes in the file.
 */
TEST_F_TIMEOUT(cufile, no_registration_per_call, 600)
{
	const size_t small = 64 * 1024;
	char *p = (char *)(uintptr_t)self->dptr, *q;
	struct fgds_gpucache_counters c0, c1;
	const int rounds = 8;
	/* registered memory must be aligned for O_DIRECT (strict mode); staged need not */
	const uint64_t u = variant->registered ? 0 : 256;
	CUdeviceptr sm;
	uint64_t sm_off;
	int ord;

	ASSERT_EQ(0, cuMemAlloc_v2(&sm, SZ_1M));
	ASSERT_EQ(0, fgds_gpurt_bar_offset(sm, &ord, &sm_off));
	q = (char *)(uintptr_t)sm;
	if (variant->registered) {
		ASSERT_EQ(CU_FILE_SUCCESS, cuFileBufRegister(q, SZ_1M, 0).err);
	}
	/* the first of each kind may set up: a staging buffer, a cached registration */
	ASSERT_EQ((ssize_t)small, cuFileRead(self->fh, q + u, small, 0, 0));
	ASSERT_EQ((ssize_t)SZ_1M, cuFileRead(self->fh, p + SZ_1M, SZ_1M, 0, 0));
	c0 = counters();
	for (int i = 0; i < rounds; i++) {
		uint64_t at = (i % 4) * 3 * small / 2 + u * (i % 2 + 1);
		off_t fo = (i + 1) * small;

		ASSERT_EQ((ssize_t)small, cuFileRead(self->fh, q + at, small, fo, 0));
		guest_host_check(_metadata, SEED, sm_off + at, small, fo);
		at = 2 * SZ_1M + (i % 3) * SZ_1M;
		fo = (i + 1) * SZ_1M;
		ASSERT_EQ((ssize_t)(i % 2 ? 3 * SZ_1M : SZ_1M),
			  cuFileRead(self->fh, p + at, i % 2 ? 3 * SZ_1M : SZ_1M, fo, 0));
		guest_host_check(_metadata, SEED, self->bar_off + at, i % 2 ? 3 * SZ_1M : SZ_1M, fo);
	}
	ASSERT_EQ((ssize_t)small, cuFileRead(self->fh, p + 4096, small, 3 * small, 0));
	guest_host_check(_metadata, SEED, self->bar_off + 4096, small, 3 * small);
	guest_host_fill(_metadata, SEED + 3, sm_off, SZ_1M);
	for (int i = 0; i < rounds; i++) {
		ASSERT_EQ((ssize_t)small, cuFileWrite(self->fh, q + u + i * small, small,
						      LEN + i * small, 0));
	}
	c1 = counters();
	/* the host filled sm from its start with SEED + 3: file byte LEN + x is pattern byte x + u */
	{
		void *buf;
		int fd = open(self->path, O_RDONLY | O_DIRECT);

		ASSERT_LE(0, fd);
		ASSERT_EQ(0, posix_memalign(&buf, 4096, rounds * small + 4096));
		ASSERT_EQ((ssize_t)(rounds * small + 4096),
			  pread(fd, buf, rounds * small + 4096, LEN - 4096));
		EXPECT_EQ(-1, fgds_pattern_cmp((char *)buf + 4096, rounds * small, SEED + 3, u));
		free(buf);
		close(fd);
	}
	TH_LOG("registrations %llu -> %llu, staged %llu -> %llu, cached %llu -> %llu, pool buffers %llu",
	       (unsigned long long)c0.registrations, (unsigned long long)c1.registrations,
	       (unsigned long long)c0.staged, (unsigned long long)c1.staged,
	       (unsigned long long)c0.cached, (unsigned long long)c1.cached,
	       (unsigned long long)c1.pool_buffers);
	EXPECT_EQ(c0.registrations, c1.registrations);
	EXPECT_EQ(c0.unregistrations, c1.unregistrations);
	if (!variant->registered) {
		EXPECT_EQ(c0.staged + 2 * rounds, c1.staged);
		EXPECT_EQ(c0.cached + rounds + 1, c1.cached);
		EXPECT_LE(1, c1.pool_buffers);
	}
	all_p2p(_metadata, self, 3 + 2 * rounds, rounds);
	if (variant->registered) {
		EXPECT_EQ(CU_FILE_SUCCESS, cuFileBufDeregister(q).err);
	}
	EXPECT_EQ(0, cuMemFree_v2(sm));
}

/*
 * An allocation freed leaves the cache within its bound (its registration
 * dropped, unregistered), and an allocation made after it is registered
 * anew, never served by the old registration; its bytes are where the
 * runtime put it.
 */
TEST_F_TIMEOUT(cufile, freed_allocation_leaves_the_cache, 300)
{
	struct fgds_gpucache_counters c0, c1, c2;
	CUdeviceptr b, c;
	uint64_t boff;
	int ord, waited = 0;

	/* Its own allocations, never registered: the same in both variants. */
	ASSERT_EQ(0, cuMemAlloc_v2(&b, 4 * SZ_1M));
	ASSERT_EQ((ssize_t)(2 * SZ_1M),
		  cuFileRead(self->fh, (void *)(uintptr_t)(b + SZ_1M), 2 * SZ_1M, SZ_1M, 0));
	c0 = counters();
	ASSERT_LE(1, c0.cache_entries);
	ASSERT_EQ(0, cuMemFree_v2(b));
	/* the bound: 500 ms between checks, plus the UNREG */
	do {
		usleep(100 * 1000);
		c1 = counters();
	} while (c1.cache_stale == c0.cache_stale && ++waited < 30);
	TH_LOG("dropped after %d ms: stale %llu -> %llu, unregistrations %llu -> %llu",
	       waited * 100, (unsigned long long)c0.cache_stale,
	       (unsigned long long)c1.cache_stale, (unsigned long long)c0.unregistrations,
	       (unsigned long long)c1.unregistrations);
	EXPECT_EQ(c0.cache_stale + 1, c1.cache_stale);
	EXPECT_EQ(c0.cache_entries - 1, c1.cache_entries);
	EXPECT_LE(c0.unregistrations + 1, c1.unregistrations);
	EXPECT_GE(15, waited);
	ASSERT_EQ(0, cuMemAlloc_v2(&c, 4 * SZ_1M));
	ASSERT_EQ(0, fgds_gpurt_bar_offset(c, &ord, &boff));
	ASSERT_EQ((ssize_t)(2 * SZ_1M),
		  cuFileRead(self->fh, (void *)(uintptr_t)(c + SZ_1M), 2 * SZ_1M, 3 * SZ_1M, 0));
	guest_host_check(_metadata, SEED, boff + SZ_1M, 2 * SZ_1M, 3 * SZ_1M);
	c2 = counters();
	EXPECT_EQ(c1.cache_registrations + 1, c2.cache_registrations);
	EXPECT_EQ(c1.cache_hits, c2.cache_hits);
	EXPECT_EQ(0, cuMemFree_v2(c));
}

/*
 * Freed and allocated again at once, before the cache's check runs: CUDA
 * hands the freed address out again at once, with a new buffer id, while
 * the old memory stays behind the cache's dma-buf until it is closed
 * (driver 580, tools/testing/fgds-gpurt/cuda_facts.py; the stand-in does
 * the same). A read into the new allocation lands in its memory, not the
 * old registration's, and the old entry is dropped on that lookup.
 */
TEST_F_TIMEOUT(cufile, address_reused_at_once_never_hits_the_old_entry, 120)
{
	struct fgds_gpucache_counters c0, c1;
	uint64_t boff, coff;
	CUdeviceptr b, c;
	int ord;

	ASSERT_EQ(0, cuMemAlloc_v2(&b, 4 * SZ_1M));
	ASSERT_EQ(0, fgds_gpurt_bar_offset(b, &ord, &boff));
	ASSERT_EQ((ssize_t)(2 * SZ_1M),
		  cuFileRead(self->fh, (void *)(uintptr_t)(b + SZ_1M), 2 * SZ_1M, SZ_1M, 0));
	c0 = counters();
	ASSERT_EQ(0, cuMemFree_v2(b));
	ASSERT_EQ(0, cuMemAlloc_v2(&c, 4 * SZ_1M));
	ASSERT_EQ(b, c) TH_LOG("the runtime did not hand the freed address out again");
	ASSERT_EQ(0, fgds_gpurt_bar_offset(c, &ord, &coff));
	EXPECT_NE(boff, coff) TH_LOG("the exported memory was handed out again");
	ASSERT_EQ((ssize_t)(2 * SZ_1M),
		  cuFileRead(self->fh, (void *)(uintptr_t)(c + SZ_1M), 2 * SZ_1M, 5 * SZ_1M, 0));
	guest_host_check(_metadata, SEED, coff + SZ_1M, 2 * SZ_1M, 5 * SZ_1M);
	c1 = counters();
	TH_LOG("old memory at BAR %#llx, new at %#llx: stale %llu -> %llu, registrations %llu -> %llu",
	       (unsigned long long)boff, (unsigned long long)coff,
	       (unsigned long long)c0.cache_stale, (unsigned long long)c1.cache_stale,
	       (unsigned long long)c0.cache_registrations,
	       (unsigned long long)c1.cache_registrations);
	EXPECT_EQ(c0.cache_stale + 1, c1.cache_stale);
	EXPECT_EQ(c0.cache_registrations + 1, c1.cache_registrations);
	EXPECT_EQ(c0.cache_hits, c1.cache_hits);
	EXPECT_EQ(0, cuMemFree_v2(c));
}

/*
 * Round @r of async_and_vectored_register_nothing_per_call: a
 * cuFileReadAsync and a cuFileWriteAsync of 1 MiB on @s, then a cuFileReadv
 * and a cuFileWritev of two segments each, out of order; reads from the
 * first half of the file, writes to the second. The host checks every byte
 * read in the BAR; every byte written is compared in the file.
 */
static void async_and_vectored_round(struct __test_metadata *_metadata,
				     FIXTURE_DATA(cufile) *self, CUstream s, int r)
{
	char *p = (char *)(uintptr_t)self->dptr;
	size_t size = SZ_1M;
	off_t foff = r * SZ_1M, boff = (r % 4) * SZ_1M;
	off_t woff = LEN + r * SZ_1M / 2, wboff = 7 * SZ_1M;
	ssize_t done = -1, wdone = -1;
	CUfileIOVec_t rv[2] = {
		{ p + 4 * SZ_1M + r * 4096, SZ_1M / 2 },
		{ p + 5 * SZ_1M, SZ_1M / 4 },
	};
	CUfileIOVec_t wv[2] = {
		{ p + 6 * SZ_1M + SZ_1M / 2, SZ_1M / 4 },
		{ p + 6 * SZ_1M, SZ_1M / 4 },
	};
	const off_t vfoff = r * SZ_1M / 4, vwoff = LEN + 4 * SZ_1M + r * SZ_1M / 2;

	ASSERT_EQ(CU_FILE_SUCCESS, cuFileReadAsync(self->fh, p, &size, &foff, &boff, &done,
						   s).err);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileWriteAsync(self->fh, p, &size, &woff, &wboff, &wdone,
						    s).err);
	ASSERT_EQ(0, cuStreamSynchronize(s));
	ASSERT_EQ((ssize_t)size, done);
	ASSERT_EQ((ssize_t)size, wdone);
	guest_host_check(_metadata, SEED, self->bar_off + boff, size, foff);
	EXPECT_EQ(-1, guest_file_cmp(self->path, woff, size, SEED + 5, 0));
	ASSERT_EQ((ssize_t)(3 * SZ_1M / 4), cuFileReadv(self->fh, rv, 2, vfoff, 0));
	guest_host_check(_metadata, SEED, self->bar_off + 4 * SZ_1M + r * 4096, SZ_1M / 2, vfoff);
	guest_host_check(_metadata, SEED, self->bar_off + 5 * SZ_1M, SZ_1M / 4, vfoff + SZ_1M / 2);
	ASSERT_EQ((ssize_t)(SZ_1M / 2), cuFileWritev(self->fh, wv, 2, vwoff, 0));
	EXPECT_EQ(-1, guest_file_cmp(self->path, vwoff, SZ_1M / 4, SEED + 4, SZ_1M / 2));
	EXPECT_EQ(-1, guest_file_cmp(self->path, vwoff + SZ_1M / 4, SZ_1M / 4, SEED + 4, 0));
}

/*
 * Stream-ordered and vectored requests register nothing per call (issue
 * 40): after one round, which may register the allocation in the cache
 * (unregistered variant), 4 more rounds of cuFileReadAsync,
 * cuFileWriteAsync, cuFileReadv and cuFileWritev leave the library's
 * REG_BUFFER, UNREG_BUFFER and staging counts where they were. Strict mode:
 * none bounces.
 */
TEST_F_TIMEOUT(cufile, async_and_vectored_register_nothing_per_call, 300)
{
	struct fgds_gpucache_counters c0, c1;
	const int rounds = 4;
	CUstream s;

	ASSERT_EQ(0, cuStreamCreate(&s, CU_STREAM_DEFAULT));
	/* the host's streams in the two ranges the writes take from */
	guest_host_fill(_metadata, SEED + 4, self->bar_off + 6 * SZ_1M, SZ_1M);
	guest_host_fill(_metadata, SEED + 5, self->bar_off + 7 * SZ_1M, SZ_1M);
	async_and_vectored_round(_metadata, self, s, 0);
	c0 = counters();
	for (int r = 1; r <= rounds; r++)
		async_and_vectored_round(_metadata, self, s, r);
	c1 = counters();
	TH_LOG("%d rounds of 4 requests: REG_BUFFER %llu, UNREG_BUFFER %llu, cached %llu, staged %llu",
	       rounds, (unsigned long long)(c1.registrations - c0.registrations),
	       (unsigned long long)(c1.unregistrations - c0.unregistrations),
	       (unsigned long long)(c1.cached - c0.cached),
	       (unsigned long long)(c1.staged - c0.staged));
	EXPECT_EQ(c0.registrations, c1.registrations);
	EXPECT_EQ(c0.unregistrations, c1.unregistrations);
	EXPECT_EQ(c0.staged, c1.staged);
	EXPECT_EQ(0, cuStreamDestroy_v2(s));
}

TEST_HARNESS_MAIN
