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
 * P2P, never POSIX (bounce), the level 1 batch counters the batch's
 * requests as P2P (libcufile keeps no statistics of stream-ordered
 * requests).
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
#include "gpurt.h"
#include "fgds_host.h"
#include "fgds_pattern.h"
#include "fgds_test.h"

#define SZ_1M (1024 * 1024UL)
#define LEN (8 * SZ_1M)
#define SEED 0xd0

/* The level 3 record of the stand-in GPU (its PCI address is the uuid). */
static CUfilePerGpuStats_t *gpu_stats(CUfileStatsLevel3_t *st)
{
	for (uint32_t i = 0; i < st->num_gpus && i < 16; i++)
		if (!strncasecmp(st->per_gpu_stats[i].uuid, getenv("FGDS_GPU_BDF"),
				 CUFILE_GPU_UUID_LEN))
			return &st->per_gpu_stats[i];
	return NULL;
}

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
	CUfileDescr_t d;
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
	self->fd = open(self->path, O_RDWR | O_DIRECT);
	ASSERT_LE(0, self->fd);
	memset(&d, 0, sizeof(d));
	d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
	d.handle.fd = self->fd;
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileHandleRegister(&self->fh, &d).err);
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

static void host_check(struct __test_metadata *_metadata, uint64_t bar_off, uint64_t len,
		       uint64_t pos)
{
	char ans[256];

	EXPECT_EQ(0, fgds_host_req("check", SEED, bar_off, len, pos, ans, sizeof(ans)))
		TH_LOG("host: %s", ans);
}

static void host_fill(struct __test_metadata *_metadata, uint64_t seed, uint64_t bar_off,
		      uint64_t len)
{
	char ans[256];

	ASSERT_EQ(0, fgds_host_req("fill", seed, bar_off, len, 0, ans, sizeof(ans)))
		TH_LOG("host: %s", ans);
}

static long long file_cmp(const char *path, off_t off, size_t len, uint64_t seed)
{
	long long ret = -2;
	void *buf;
	int fd;

	if (posix_memalign(&buf, 4096, len))
		return -2;
	fd = open(path, O_RDONLY | O_DIRECT);
	if (fd >= 0 && pread(fd, buf, len, off) == (ssize_t)len)
		ret = fgds_pattern_cmp(buf, len, seed, 0);
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

/* The stand-in GPU's record: @reads and @writes requests, all P2P. */
static void all_p2p(struct __test_metadata *_metadata, FIXTURE_DATA(cufile) *self,
		    uint64_t reads, uint64_t writes)
{
	CUfilePerGpuStats_t *g;

	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	g = gpu_stats(&self->st);
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
	host_check(_metadata, self->bar_off + SZ_1M, 4 * SZ_1M, LEN);
	/* The unregistered way: a pointer into the allocation, no offset. */
	ASSERT_EQ((ssize_t)SZ_1M, cuFileRead(self->fh, (char *)p + 6 * SZ_1M, SZ_1M, 0, 0));
	host_check(_metadata, self->bar_off + 6 * SZ_1M, SZ_1M, 0);
	host_fill(_metadata, SEED + 1, self->bar_off, 2 * SZ_1M);
	ASSERT_EQ((ssize_t)(2 * SZ_1M), cuFileWrite(self->fh, p, 2 * SZ_1M, LEN, 0));
	EXPECT_EQ(-1, file_cmp(self->path, LEN, 2 * SZ_1M, SEED + 1));
	all_p2p(_metadata, self, 2, 1);
}

TEST_F_TIMEOUT(cufile, batch_of_reads, 300)
{
	CUfileIOParams_t p[8];
	CUfileIOEvents_t ev[8];
	CUfileStatsLevel1_t *l1 = &self->st.detailed.basic;
	CUfileBatchHandle_t b;
	unsigned int got = 0, nr;

	ASSERT_EQ(CU_FILE_SUCCESS, cuFileBatchIOSetUp(&b, 8).err);
	memset(p, 0, sizeof(p));
	for (int i = 0; i < 8; i++) {
		p[i].mode = CUFILE_BATCH;
		p[i].fh = self->fh;
		p[i].opcode = CUFILE_READ;
		p[i].cookie = (void *)(long)(100 + i);
		p[i].u.batch.devPtr_base = (void *)(uintptr_t)self->dptr;
		p[i].u.batch.devPtr_offset = i * SZ_1M;
		p[i].u.batch.file_offset = (7 - i) * SZ_1M;
		p[i].u.batch.size = SZ_1M;
	}
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileBatchIOSubmit(b, 8, p, 0).err);
	while (got < 8) {
		struct timespec t = { .tv_sec = 30 };

		nr = 8 - got;
		ASSERT_EQ(CU_FILE_SUCCESS, cuFileBatchIOGetStatus(b, 1, &nr, ev + got, &t).err);
		ASSERT_LT(0, nr);
		got += nr;
	}
	for (int i = 0; i < 8; i++) {
		EXPECT_EQ(CUFILE_COMPLETE, ev[i].status);
		EXPECT_EQ(SZ_1M, ev[i].ret);
	}
	for (int i = 0; i < 8; i++)
		host_check(_metadata, self->bar_off + i * SZ_1M, SZ_1M, (7 - i) * SZ_1M);
	cuFileBatchIODestroy(b);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	EXPECT_EQ(8, l1->batch_enqueued_ops.ok);
	EXPECT_EQ(0, l1->batch_posix_enqueued_ops.ok);
	EXPECT_EQ(1, l1->batch_p2p_submit_ops.ok);
	EXPECT_EQ(8, l1->batch_complete_ops.ok);
	EXPECT_EQ(LEN, l1->batch_read_bytes);
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
	host_fill(_metadata, SEED + 2, self->bar_off, size);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileReadAsync(self->fh, (void *)(uintptr_t)self->dptr, &size,
						   &foff, &boff, &done, s).err);
	/* Queued behind the read: sees its bytes. */
	ASSERT_EQ(0, cuMemcpyDtoHAsync_v2(pin, self->dptr + boff, size, s));
	/*
	 * Unregistered, the read registers [dptr, dptr + boff + size) for as long
	 * as it is in flight (its offsets are read late), and a BAR page is in one
	 * registration at a time: a write in flight with it over the same pages
	 * would get EBUSY and bounce (strict: EREMOTEIO). Seen here; what
	 * issue 28's registration cache is for. One request at a time until then.
	 */
	if (!variant->registered) {
		ASSERT_EQ(0, cuStreamSynchronize(s));
	}
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileWriteAsync(self->fh, (void *)(uintptr_t)self->dptr, &size,
						    &woff, &wboff, &wdone, s).err);
	ASSERT_EQ(0, cuStreamSynchronize(s));
	EXPECT_EQ((ssize_t)size, done);
	EXPECT_EQ((ssize_t)size, wdone);
	EXPECT_EQ(-1, fgds_pattern_cmp(pin, size, SEED, foff));
	host_check(_metadata, self->bar_off + boff, size, foff);
	EXPECT_EQ(-1, file_cmp(self->path, woff, size, SEED + 2));
	EXPECT_EQ(0, cuMemFreeHost(pin));
	EXPECT_EQ(0, cuStreamDestroy_v2(s));
}

TEST_HARNESS_MAIN
