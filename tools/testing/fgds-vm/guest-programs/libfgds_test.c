// SPDX-License-Identifier: GPL-2.0
/*
 * The user-space library (tools/lib/fgds, C ABI) against the real driver:
 * a dma-buf of the GPU stand-in registered through libfgds, then sync,
 * unaligned, vectored, batch and write I/O on ext4, and the loop device
 * (no P2P) in strict and fallback modes. Every byte is checked by the host in
 * the BAR file; the stats must say which path ran.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "fgds.h"
#include "fgds_host.h"
#include "fgds_pattern.h"
#include "fgds_test.h"
#include "fgds_vfio.h"
#include "guest_test.h"
#include "fgds_guest.h"

#define SZ_1M (1024 * 1024UL)
#define BAR_OFF (448 * SZ_1M)
#define LEN (8 * SZ_1M)

FIXTURE(lib) {
	struct fgds_vfio v;
	int dmabuf;
	void *base;
	char path[256];
};

FIXTURE_SETUP(lib)
{
	const char *dir = getenv("FGDS_EXT4"), *why;
	int ret;

	if (!dir)
		SKIP(return, "FGDS_EXT4 not set: run in the fgds VM");
	ASSERT_EQ(0, fgds_vfio_open(&self->v, &why)) TH_LOG("vfio: %s", why);
	self->dmabuf = fgds_vfio_dmabuf(&self->v, BAR_OFF, LEN);
	ASSERT_LE(0, self->dmabuf);
	ret = fgds_buf_register_dmabuf(NULL, self->dmabuf, 0, LEN, &self->base);
	ASSERT_EQ(0, ret) TH_LOG("register: %s", fgds_last_error());
	snprintf(self->path, sizeof(self->path), "%s/libfgds-test", dir);
	ASSERT_EQ(0, fgds_put_file(self->path, 2 * LEN, 0xa0));
}

FIXTURE_TEARDOWN(lib)
{
	if (!self->base)
		return;
	EXPECT_EQ(0, fgds_buf_deregister(self->base));
	close(self->dmabuf);
	fgds_vfio_close(&self->v);
	unlink(self->path);
}

TEST_F_TIMEOUT(lib, aligned_read_is_peer_to_peer, 300)
{
	struct fgds_stats st;
	int h = fgds_open(self->path, O_RDWR, 0, NULL);

	ASSERT_LT(0, h) TH_LOG("open: %s", fgds_last_error());
	ASSERT_EQ((ssize_t)LEN, fgds_read(h, self->base, LEN, LEN, 0)) TH_LOG("%s", fgds_last_error());
	guest_host_check(_metadata, 0xa0, BAR_OFF, LEN, LEN);
	ASSERT_EQ(0, fgds_get_stats(h, &st));
	EXPECT_EQ(LEN, st.direct_bytes);
	EXPECT_EQ(0, st.bounce_bytes);
	EXPECT_EQ(0, st.fallbacks);
	fgds_close(h);
}

TEST_F_TIMEOUT(lib, unaligned_read_bounces_only_the_edges, 300)
{
	const size_t len = 3 * SZ_1M + 1234;
	struct fgds_stats st;
	int h = fgds_open(self->path, O_RDWR, 0, NULL);

	ASSERT_LT(0, h);
	ASSERT_EQ((ssize_t)len, fgds_read(h, self->base, len, 4096 + 77, 77));
	guest_host_check(_metadata, 0xa0, BAR_OFF + 77, len, 4096 + 77);
	ASSERT_EQ(0, fgds_get_stats(h, &st));
	EXPECT_GT(st.direct_bytes, 3 * SZ_1M - 8192);
	EXPECT_LT(st.bounce_bytes, 3 * 4096);
	fgds_close(h);
}

TEST_F_TIMEOUT(lib, readv_and_batch, 300)
{
	struct fgds_io_segment segs[3] = {
		{ self->base, 4096, 8192 },
		{ self->base, SZ_1M, SZ_1M },
		{ self->base, 5 * SZ_1M, 3 * 4096 },
	};
	struct fgds_io_params p[8];
	struct fgds_io_event ev[8];
	int h = fgds_open(self->path, O_RDWR, 0, NULL), batch, got = 0;
	size_t pos = 0;

	ASSERT_LT(0, h);
	ASSERT_EQ((ssize_t)(8192 + SZ_1M + 3 * 4096), fgds_readv(h, segs, 3, 0));
	for (int i = 0; i < 3; pos += segs[i].size, i++)
		guest_host_check(_metadata, 0xa0, BAR_OFF + segs[i].offset, segs[i].size, pos);

	batch = fgds_batch_create(8);
	ASSERT_LT(0, batch);
	fgds_guest_reversed_reads(p, h, self->base);
	ASSERT_EQ(0, fgds_batch_submit(batch, p, 8));
	while (got < 8) {
		int n = fgds_batch_wait(batch, 1, 8 - got, ev + got, 30000);

		ASSERT_LT(0, n);
		got += n;
	}
	for (int i = 0; i < 8; i++) {
		EXPECT_EQ(FGDS_STATUS_COMPLETE, ev[i].status);
		EXPECT_EQ((int64_t)SZ_1M, ev[i].result);
	}
	for (int i = 0; i < 8; i++)
		guest_host_check(_metadata, 0xa0, BAR_OFF + i * SZ_1M, SZ_1M, (7 - i) * SZ_1M);
	EXPECT_EQ(0, fgds_batch_destroy(batch));
	fgds_close(h);
}

TEST_F_TIMEOUT(lib, write_from_vram, 300)
{
	char ans[256];
	int h = fgds_open(self->path, O_RDWR, 0, NULL), fd;
	void *buf;

	ASSERT_LT(0, h);
	ASSERT_EQ(0, fgds_host_req("fill", 0xa1, BAR_OFF, LEN, 0, ans, sizeof(ans)));
	ASSERT_EQ((ssize_t)LEN, fgds_write(h, self->base, LEN, 0, 0));
	fgds_close(h);
	ASSERT_EQ(0, posix_memalign(&buf, 4096, LEN));
	fd = open(self->path, O_RDONLY | O_DIRECT);
	ASSERT_EQ((ssize_t)LEN, pread(fd, buf, LEN, 0));
	EXPECT_EQ(-1, fgds_pattern_cmp(buf, LEN, 0xa1, 0));
	close(fd);
	free(buf);
}

TEST_F_TIMEOUT(lib, no_p2p_device_strict_fails_else_falls_back, 300)
{
	const char *loop = getenv("FGDS_LOOP");
	struct fgds_config strict = { .flags = FGDS_CONFIG_STRICT };
	struct fgds_stats st;
	int h;

	ASSERT_NE(NULL, loop);
	ASSERT_EQ(0, fgds_put_file(loop, SZ_1M, 0xa2));
	h = fgds_open(loop, O_RDWR, 0, &strict);
	ASSERT_LT(0, h);
	EXPECT_EQ(-EREMOTEIO, fgds_read(h, self->base, SZ_1M, 0, 0)) TH_LOG("%s", fgds_last_error());
	fgds_close(h);

	h = fgds_open(loop, O_RDWR, 0, NULL);
	ASSERT_LT(0, h);
	EXPECT_EQ((ssize_t)SZ_1M, fgds_read(h, self->base, SZ_1M, 0, 0)) TH_LOG("%s", fgds_last_error());
	guest_host_check(_metadata, 0xa2, BAR_OFF, SZ_1M, 0);
	ASSERT_EQ(0, fgds_get_stats(h, &st));
	EXPECT_EQ(SZ_1M, st.bounce_bytes);
	EXPECT_EQ(1, st.fallbacks);
	fgds_close(h);
}

TEST_HARNESS_MAIN
