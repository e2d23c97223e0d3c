/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The scenario the two cuFile guest programs share (cufile_vm_test.c, on a
 * dma-buf of vfio-pci; cufile_gpurt_test.c, on memory of the GPU
 * stand-in's runtime): the stand-in GPU's level 3 record, the test file
 * opened with O_DIRECT as a cuFile handle, and a batch of 8 reads of 1 MiB
 * whose every byte the host checks in the BAR. Include after
 * kselftest_harness.h, cufile.h and guest_test.h.
 */
#ifndef CUFILE_GUEST_H
#define CUFILE_GUEST_H

#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CUFILE_GUEST_MIB (1024 * 1024UL)

/* The level 3 record of the GPU at PCI address @bdf (cuFile's uuid there). */
static inline CUfilePerGpuStats_t *cufile_gpu_stats(CUfileStatsLevel3_t *st, const char *bdf)
{
	for (uint32_t i = 0; i < st->num_gpus && i < 16; i++)
		if (!strncasecmp(st->per_gpu_stats[i].uuid, bdf, CUFILE_GPU_UUID_LEN))
			return &st->per_gpu_stats[i];
	return NULL;
}

/* Opens @path for O_DIRECT reads and writes into *@fd, as cuFile handle *@fh. */
static inline void cufile_open_handle(struct __test_metadata *_metadata, const char *path,
				      int *fd, CUfileHandle_t *fh)
{
	CUfileDescr_t d;

	*fd = open(path, O_RDWR | O_DIRECT);
	ASSERT_LE(0, *fd) TH_LOG("open %s: %s", path, strerror(errno));
	memset(&d, 0, sizeof(d));
	d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
	d.handle.fd = *fd;
	ASSERT_EQ(CU_FILE_SUCCESS, cuFileHandleRegister(fh, &d).err);
}

/*
 * One batch of 8 reads of 1 MiB through @b: read i takes MiB 7 - i of the
 * file (stream @seed) to MiB (i + @round) % 8 of @base, which is at @bar_off
 * in the BAR; every one complete and whole, every byte checked by the host.
 */
static inline void cufile_batch_round(struct __test_metadata *_metadata, CUfileBatchHandle_t b,
				      CUfileHandle_t fh, void *base, __u64 bar_off, __u64 seed,
				      int round)
{
	CUfileIOParams_t p[8];
	CUfileIOEvents_t ev[8];
	unsigned int got = 0, nr;

	memset(p, 0, sizeof(p));
	for (int i = 0; i < 8; i++) {
		p[i].mode = CUFILE_BATCH;
		p[i].fh = fh;
		p[i].opcode = CUFILE_READ;
		p[i].cookie = (void *)(long)(100 + i);
		p[i].u.batch.devPtr_base = base;
		p[i].u.batch.devPtr_offset = ((i + round) % 8) * CUFILE_GUEST_MIB;
		p[i].u.batch.file_offset = (7 - i) * CUFILE_GUEST_MIB;
		p[i].u.batch.size = CUFILE_GUEST_MIB;
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
		EXPECT_EQ(CUFILE_GUEST_MIB, ev[i].ret);
	}
	for (int i = 0; i < 8; i++)
		guest_host_check(_metadata, seed, bar_off + ((i + round) % 8) * CUFILE_GUEST_MIB,
				 CUFILE_GUEST_MIB, (7 - i) * CUFILE_GUEST_MIB);
}

#endif /* CUFILE_GUEST_H */
