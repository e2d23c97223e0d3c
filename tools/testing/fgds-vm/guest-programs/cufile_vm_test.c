// SPDX-License-Identifier: GPL-2.0
/*
 * A cuFile program on fgds's libcufile.so.0 (tools/lib/cufile) against the
 * real driver: the GPU stand-in's BAR is exported by vfio-pci as a dma-buf
 * and registered as a cuFile buffer through fgds's one cuFile extension
 * (cuFileBufRegisterDmabufFGDS: no CUDA in the guest, so no cudaMalloc'd
 * pointer for cuFileBufRegister); everything else is cuFile's own API:
 * driver properties, handle registration, cuFileRead/cuFileWrite, cuFile
 * 1.19's cuFileReadv/cuFileWritev, batches, cuFile's statistics. Reads
 * land in the BAR by P2P (every byte checked by the host through
 * barcheck), writes go from the BAR to ext4, the loop
 * device (no P2P) falls back visibly; cuFileGetStatsL3 must say which path
 * each request took.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "cufile.h"
#include "fgds_host.h"
#include "fgds_pattern.h"
#include "fgds_test.h"
#include "fgds_vfio.h"
#include "guest_test.h"
#include "cufile_guest.h"

#define SZ_1M (1024 * 1024UL)
#define BAR_OFF (384 * SZ_1M)
#define LEN (8 * SZ_1M)
#define SEED 0xc0

/* The level 3 record of the stand-in GPU (its PCI address is the uuid). */
static CUfilePerGpuStats_t *gpu_stats(CUfileStatsLevel3_t *st)
{
	return cufile_gpu_stats(st, fgds_gpu_bdf());
}

FIXTURE(cufile) {
	struct fgds_vfio v;
	int dmabuf, fd;
	void *base;
	CUfileHandle_t fh;
	CUfileStatsLevel3_t st;
	char path[256];
};

FIXTURE_SETUP(cufile)
{
	const char *dir = getenv("FGDS_EXT4"), *why;
	CUfileError_t e;

	self->base = NULL;
	if (!dir)
		SKIP(return, "FGDS_EXT4 not set: run in the fgds VM");
	ASSERT_EQ(0, fgds_vfio_open(&self->v, &why)) TH_LOG("vfio: %s", why);
	self->dmabuf = fgds_vfio_dmabuf(&self->v, BAR_OFF, LEN);
	ASSERT_LE(0, self->dmabuf);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileDriverOpen().err);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileSetStatsLevel(3).err);
	e = cuFileBufRegisterDmabufFGDS(self->dmabuf, 0, LEN, &self->base);
	ASSERT_EQ(CU_FILE_SUCCESS, e.err) TH_LOG("cuFileBufRegisterDmabufFGDS: %d", e.err);
	snprintf(self->path, sizeof(self->path), "%s/cufile-vm-test", dir);
	ASSERT_EQ(0, fgds_put_file(self->path, 2 * LEN, SEED));
	cufile_open_handle(_metadata, self->path, &self->fd, &self->fh);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileStatsReset().err);
}

FIXTURE_TEARDOWN(cufile)
{
	if (!self->base)
		return;
	cuFileHandleDeregister(self->fh);
	close(self->fd);
	EXPECT_EQ(CU_FILE_SUCCESS, cuFileBufDeregister(self->base).err);
	close(self->dmabuf);
	fgds_vfio_close(&self->v);
	unlink(self->path);
	EXPECT_EQ(CU_FILE_SUCCESS, cuFileDriverClose().err);
}

TEST_F_TIMEOUT(cufile, driver_says_p2p, 300)
{
	CUfileDrvProps_t p;
	void *other;

	ASSERT_EQ(CU_FILE_SUCCESS, cuFileDriverGetProperties(&p).err);
	EXPECT_TRUE(p.fflags & (1U << CU_FILE_P2P_SUPPORTED)) TH_LOG("fflags %#x", p.fflags);
	EXPECT_TRUE(p.nvfs.dstatusflags & (1U << CU_FILE_NVME_SUPPORTED));
	EXPECT_FALSE(p.nvfs.dcontrolflags & (1U << CU_FILE_POSIX_IO_MODE));
	/* Overlapping cuFileBufRegister of the mapping, bad extension arguments. */
	EXPECT_EQ(CU_FILE_MEMORY_ALREADY_REGISTERED,
		  cuFileBufRegister((char *)self->base + 4096, 4096, 0).err);
	EXPECT_EQ(CU_FILE_INVALID_VALUE, cuFileBufRegisterDmabufFGDS(-1, 0, LEN, &other).err);
	EXPECT_EQ(CU_FILE_INVALID_VALUE, cuFileBufRegisterDmabufFGDS(self->dmabuf, 0, 0, NULL).err);
}

TEST_F_TIMEOUT(cufile, read_lands_in_the_bar_by_p2p, 300)
{
	CUfilePerGpuStats_t *g;

	ASSERT_EQ((ssize_t)LEN, cuFileRead(self->fh, self->base, LEN, LEN, 0));
	guest_host_check(_metadata, SEED, BAR_OFF, LEN, LEN);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	EXPECT_EQ(1, self->st.detailed.basic.read_ops.ok);
	EXPECT_EQ(LEN, self->st.detailed.basic.read_bytes);
	g = gpu_stats(&self->st);
	ASSERT_NE(NULL, g) TH_LOG("no statistics for GPU %s (%u GPUs)", fgds_gpu_bdf(),
				  self->st.num_gpus);
	EXPECT_EQ(1, g->n_total_reads);
	EXPECT_EQ(1, g->n_p2p_reads);
	EXPECT_EQ(0, g->n_posix_reads);
	EXPECT_EQ(0, g->n_unaligned_reads);
	EXPECT_EQ(LEN, g->read_bytes);
}

TEST_F_TIMEOUT(cufile, unaligned_read_is_p2p_but_its_edges, 300)
{
	const size_t len = 3 * SZ_1M + 1234;
	CUfilePerGpuStats_t *g;

	ASSERT_EQ((ssize_t)len, cuFileRead(self->fh, self->base, len, 4096 + 77, 77));
	guest_host_check(_metadata, SEED, BAR_OFF + 77, len, 4096 + 77);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	g = gpu_stats(&self->st);
	ASSERT_NE(NULL, g);
	EXPECT_EQ(1, g->n_p2p_reads);
	EXPECT_EQ(1, g->n_unaligned_reads);
	/* A short read at the end of the file. */
	ASSERT_EQ((ssize_t)SZ_1M, cuFileRead(self->fh, self->base, 4 * SZ_1M, 2 * LEN - SZ_1M, 0));
	guest_host_check(_metadata, SEED, BAR_OFF, SZ_1M, 2 * LEN - SZ_1M);
}

TEST_F_TIMEOUT(cufile, batch_of_reads, 300)
{
	CUfileBatchHandle_t b;
	CUfileStatsLevel1_t *l1 = &self->st.detailed.basic;

	ASSERT_EQ(CU_FILE_SUCCESS, cuFileBatchIOSetUp(&b, 8).err);
	cufile_batch_round(_metadata, b, self->fh, self->base, BAR_OFF, SEED, 0);
	cuFileBatchIODestroy(b);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	EXPECT_EQ(8, l1->batch_enqueued_ops.ok);
	EXPECT_EQ(0, l1->batch_posix_enqueued_ops.ok);
	EXPECT_EQ(1, l1->batch_p2p_submit_ops.ok);
	EXPECT_EQ(8, l1->batch_complete_ops.ok);
	EXPECT_EQ(LEN, l1->batch_read_bytes);
}

TEST_F_TIMEOUT(cufile, write_from_the_bar, 300)
{
	CUfilePerGpuStats_t *g;

	guest_host_fill(_metadata, SEED + 1, BAR_OFF, LEN);
	ASSERT_EQ((ssize_t)LEN, cuFileWrite(self->fh, self->base, LEN, 0, 0));
	EXPECT_EQ(-1, guest_file_cmp(self->path, 0, LEN, SEED + 1, 0));
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	g = gpu_stats(&self->st);
	ASSERT_NE(NULL, g);
	EXPECT_EQ(1, g->n_p2p_writes);
	EXPECT_EQ(0, g->n_posix_writes);
	EXPECT_EQ(LEN, g->writes_bytes);
}

/*
 * cuFile 1.19's cuFileReadv: one call, the segments in order from the file
 * offset on, scattered over the BAR out of order, one of them unaligned
 * (its edges bounce, the rest goes by P2P): every segment host-checked.
 */
TEST_F_TIMEOUT(cufile, readv_scatters_into_the_bar, 300)
{
	char *base = self->base;
	CUfileIOVec_t iov[4] = {
		{ base + 4 * SZ_1M, SZ_1M },
		{ base, 2 * SZ_1M },
		{ base + 6 * SZ_1M, SZ_1M },
		{ base + 7 * SZ_1M + 77, 5000 },
	};
	CUfileStatsLevel1_t *l1 = &self->st.detailed.basic;
	const size_t total = 4 * SZ_1M + 5000;

	ASSERT_EQ((ssize_t)total, cuFileReadv(self->fh, iov, 4, SZ_1M, 0));
	guest_host_check(_metadata, SEED, BAR_OFF + 4 * SZ_1M, SZ_1M, SZ_1M);
	guest_host_check(_metadata, SEED, BAR_OFF, 2 * SZ_1M, 2 * SZ_1M);
	guest_host_check(_metadata, SEED, BAR_OFF + 6 * SZ_1M, SZ_1M, 4 * SZ_1M);
	guest_host_check(_metadata, SEED, BAR_OFF + 7 * SZ_1M + 77, 5000, 5 * SZ_1M);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	EXPECT_EQ(1, l1->readv_ops.ok);
	EXPECT_EQ(total, l1->readv_bytes);
	/* A bad call: flags, or no segments with a NULL array. */
	EXPECT_GT(0, cuFileReadv(self->fh, iov, 4, 0, 1));
	EXPECT_EQ(0, cuFileReadv(self->fh, NULL, 0, 0, 0));
}

/*
 * cuFileWritev: segments of the BAR, out of order, gathered into the file
 * in the order given; the file read back with O_DIRECT, every byte.
 */
TEST_F_TIMEOUT(cufile, writev_gathers_from_the_bar, 300)
{
	char *base = self->base;
	CUfileIOVec_t iov[3] = {
		{ base + 3 * SZ_1M, SZ_1M },
		{ base, SZ_1M },
		{ base + 6 * SZ_1M, 2 * SZ_1M },
	};
	CUfileStatsLevel1_t *l1 = &self->st.detailed.basic;

	guest_host_fill(_metadata, SEED + 3, BAR_OFF, LEN);
	ASSERT_EQ((ssize_t)(4 * SZ_1M), cuFileWritev(self->fh, iov, 3, 0, 0));
	EXPECT_EQ(-1, guest_file_cmp(self->path, 0, SZ_1M, SEED + 3, 3 * SZ_1M));
	EXPECT_EQ(-1, guest_file_cmp(self->path, SZ_1M, SZ_1M, SEED + 3, 0));
	EXPECT_EQ(-1, guest_file_cmp(self->path, 2 * SZ_1M, 2 * SZ_1M, SEED + 3, 6 * SZ_1M));
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	EXPECT_EQ(1, l1->writev_ops.ok);
	EXPECT_EQ(4 * SZ_1M, l1->writev_bytes);
}

TEST_F_TIMEOUT(cufile, no_p2p_device_falls_back_visibly, 300)
{
	const char *loop = getenv("FGDS_LOOP");
	CUfilePerGpuStats_t *g;
	CUfileDrvProps_t p;
	CUfileHandle_t fh;
	int fd;

	ASSERT_NE(NULL, loop);
	ASSERT_EQ(0, fgds_put_file(loop, SZ_1M, SEED + 2));
	cufile_open_handle(_metadata, loop, &fd, &fh);
	ASSERT_EQ((ssize_t)SZ_1M, cuFileRead(fh, self->base, SZ_1M, 0, 0));
	guest_host_check(_metadata, SEED + 2, BAR_OFF, SZ_1M, 0);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileGetStatsL3(&self->st).err);
	g = gpu_stats(&self->st);
	ASSERT_NE(NULL, g);
	EXPECT_EQ(0, g->n_p2p_reads);
	EXPECT_EQ(1, g->n_posix_reads);
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileDriverGetProperties(&p).err);
	EXPECT_TRUE(p.nvfs.dcontrolflags & (1U << CU_FILE_FALLBACK_IO_MODE));
	cuFileHandleDeregister(fh);
	close(fd);
}

TEST_HARNESS_MAIN
