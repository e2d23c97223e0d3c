// SPDX-License-Identifier: GPL-2.0
/*
 * Data through /dev/fgds0 mappings, on a raw NVMe partition, ext4, xfs, an
 * md raid0 array of two NVMes (64 KiB chunks: requests split across both) and
 * an NVMe multipath head over two controllers sharing a namespace:
 * O_DIRECT pread/pwrite/preadv/pwritev and io_uring READ/WRITE/READV/WRITEV,
 * every byte checked from the host, in the GPU stand-in's BAR file.
 * And the refusals: devices that cannot do P2P DMA get EREMOTEIO and
 * nothing reaches the BAR.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "fgds_host.h"
#include "fgds_pattern.h"
#include "fgds_test.h"
#include "fgds_util.h"

/* Compare @len bytes at @off of @fd, read through host memory, with stream @seed. */
static long long get_pattern_cmp(int fd, off_t off, size_t len, __u64 seed)
{
	unsigned char *buf = fgds_aligned_buf(len);
	long long bad;

	if (!buf)
		return -2;
	memset(buf, 0, len);
	if (pread(fd, buf, len, off) != (ssize_t)len) {
		free(buf);
		return -3;
	}
	bad = fgds_pattern_cmp(buf, len, seed, 0);
	free(buf);
	return bad;
}

FIXTURE(io) {
	struct fgds_vfio v;
	int fd;
	int file;
	char path[256];
};

FIXTURE_VARIANT(io) {
	const char *env;
	int is_dir;
};

FIXTURE_VARIANT_ADD(io, raw) { .env = "FGDS_RAW", .is_dir = 0 };
FIXTURE_VARIANT_ADD(io, ext4) { .env = "FGDS_EXT4", .is_dir = 1 };
FIXTURE_VARIANT_ADD(io, xfs) { .env = "FGDS_XFS", .is_dir = 1 };
/* md raid0 over two NVMes below the switch: it advertises P2PDMA in 7.2. */
FIXTURE_VARIANT_ADD(io, md_raid0) { .env = "FGDS_MD", .is_dir = 0 };
/* An NVMe multipath head over two controllers below the switch: so does it. */
FIXTURE_VARIANT_ADD(io, nvme_multipath) { .env = "FGDS_MPATH", .is_dir = 0 };

FIXTURE_SETUP(io)
{
	const char *where = getenv(variant->env), *why;
	int ret;

	self->fd = open(FGDS_NODE, O_RDWR | O_CLOEXEC);
	if (!where)
		SKIP(return, "%s not set: run in the fgds VM", variant->env);
	ASSERT_LE(0, self->fd) TH_LOG(FGDS_NODE ": %s", strerror(errno));
	ret = fgds_vfio_open(&self->v, &why);
	ASSERT_EQ(0, ret) TH_LOG("vfio: %s: %s", why, strerror(-ret));
	if (variant->is_dir)
		snprintf(self->path, sizeof(self->path), "%s/fgds-io-test", where);
	else
		snprintf(self->path, sizeof(self->path), "%s", where);
	self->file = open(self->path, O_RDWR | O_CREAT | O_DIRECT, 0600);
	ASSERT_LE(0, self->file) TH_LOG("%s: %s", self->path, strerror(errno));
}

FIXTURE_TEARDOWN(io)
{
	if (self->fd < 0)
		return;
	close(self->file);
	if (variant->is_dir)
		unlink(self->path);
	fgds_vfio_close(&self->v);
	close(self->fd);
}

static void host_check(struct __test_metadata *_metadata, __u64 seed, __u64 bar_off,
		       __u64 len, __u64 pos)
{
	char ans[256];

	EXPECT_EQ(0, fgds_host_req("check", seed, bar_off, len, pos, ans, sizeof(ans)))
		TH_LOG("host check of BAR %#lx+%#lx: %s", (unsigned long)bar_off,
		       (unsigned long)len, ans);
}

static void host_fill(struct __test_metadata *_metadata, __u64 seed, __u64 bar_off,
		      __u64 len, __u64 pos)
{
	char ans[256];

	ASSERT_EQ(0, fgds_host_req("fill", seed, bar_off, len, pos, ans, sizeof(ans)))
		TH_LOG("host fill: %s", ans);
}

/* NVMe -> GPU: pread into the mapping, for sizes from 4 KiB to 64 MiB (256 MiB raw). */
TEST_F_TIMEOUT(io, pread_into_vram_sizes, 900)
{
	static const size_t sizes[] = { SZ_4K, SZ_64K + SZ_4K, SZ_1M, 3 * SZ_1M + 5 * SZ_4K,
					16 * SZ_1M, 64 * SZ_1M, 256 * SZ_1M };
	const __u64 bar_off = 128 * SZ_1M;

	for (unsigned int i = 0; i < ARRAY_SIZE(sizes); i++) {
		size_t len = sizes[i];
		__u64 seed = 0x100 + i;
		struct fgds_buf b;

		if (len > 64 * SZ_1M && variant->is_dir)
			continue;
		ASSERT_EQ(0, fgds_put_pattern(self->file, 0, len, seed));
		ASSERT_EQ(0, fgds_buf_get(self->fd, &self->v, bar_off, len, &b));
		EXPECT_EQ((ssize_t)len, pread(self->file, b.p, len, 0))
			TH_LOG("pread %zu: %s", len, strerror(errno));
		host_check(_metadata, seed, bar_off, len, 0);
		fgds_buf_put(self->fd, &b);
	}
}

/* GPU -> NVMe: the host writes the BAR, pwrite from the mapping, read back via host memory. */
TEST_F_TIMEOUT(io, pwrite_from_vram_sizes, 900)
{
	static const size_t sizes[] = { SZ_4K, 5 * SZ_64K, 8 * SZ_1M + SZ_4K, 64 * SZ_1M };
	const __u64 bar_off = 200 * SZ_1M;

	for (unsigned int i = 0; i < ARRAY_SIZE(sizes); i++) {
		size_t len = sizes[i];
		__u64 seed = 0x200 + i;
		struct fgds_buf b;

		ASSERT_EQ(0, fgds_buf_get(self->fd, &self->v, bar_off, len, &b));
		host_fill(_metadata, seed, bar_off, len, 0);
		EXPECT_EQ((ssize_t)len, pwrite(self->file, b.p, len, SZ_1M))
			TH_LOG("pwrite %zu: %s", len, strerror(errno));
		EXPECT_EQ(-1, get_pattern_cmp(self->file, SZ_1M, len, seed));
		fgds_buf_put(self->fd, &b);
	}
}

/*
 * Edges: the last page, the whole buffer, and a request running one page past
 * its end into a guard page: EFAULT or a short read of the part inside, never
 * a byte outside.
 */
TEST_F_TIMEOUT(io, buffer_edges, 900)
{
	const __u64 bar_off = 300 * SZ_1M, len = SZ_1M;
	unsigned char *area, *p;
	struct fgds_buf b;
	ssize_t n;

	ASSERT_EQ(0, fgds_put_pattern(self->file, 0, 2 * SZ_1M, 0x300));
	ASSERT_EQ(0, fgds_buf_get(self->fd, &self->v, bar_off, len, &b));
	/* move the mapping in front of a PROT_NONE guard page */
	area = mmap(NULL, len + SZ_4K, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, area);
	p = mmap(area, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, self->fd, b.cookie);
	ASSERT_EQ(area, p) TH_LOG("mmap: %s", strerror(errno));

	EXPECT_EQ((ssize_t)SZ_4K, pread(self->file, p + len - SZ_4K, SZ_4K, 0));
	host_check(_metadata, 0x300, bar_off + len - SZ_4K, SZ_4K, 0);
	EXPECT_EQ((ssize_t)len, pread(self->file, p, len, SZ_1M));
	host_check(_metadata, 0x300, bar_off, len, SZ_1M);

	/* VRAM right after the registration must not change */
	host_fill(_metadata, 0x301, bar_off + len, SZ_4K, 0);
	n = pread(self->file, p + len - SZ_4K, 2 * SZ_4K, 0);
	if (n < 0) {
		/* the page inside may or may not have been filled (like any failed O_DIRECT) */
		EXPECT_EQ(EFAULT, errno);
	} else {
		EXPECT_EQ((ssize_t)SZ_4K, n);
		host_check(_metadata, 0x300, bar_off + len - SZ_4K, SZ_4K, 0);
	}
	host_check(_metadata, 0x300, bar_off, len - SZ_4K, SZ_1M);
	host_check(_metadata, 0x301, bar_off + len, SZ_4K, 0);
	munmap(area, len + SZ_4K);
	fgds_buf_put(self->fd, &b);
}

/* preadv/pwritev over three registrations at odd offsets, plus host memory. */
TEST_F_TIMEOUT(io, vectored_across_buffers, 900)
{
	const __u64 offs[3] = { 400 * SZ_1M, 410 * SZ_1M, 420 * SZ_1M };
	const size_t lens[3] = { 3 * SZ_4K, SZ_1M + SZ_4K, 5 * SZ_4K };
	const size_t skip[3] = { SZ_4K, 0, 17 * SZ_4K };
	struct fgds_buf b[3];
	struct iovec iov[4];
	unsigned char *host = fgds_aligned_buf(2 * SZ_4K);
	size_t total = 0, pos;

	ASSERT_NE(NULL, host);
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(0, fgds_buf_get(self->fd, &self->v, offs[i], 2 * SZ_1M, &b[i]));
	for (int i = 0; i < 3; i++) {
		iov[i].iov_base = b[i].p + skip[i];
		iov[i].iov_len = lens[i];
		total += lens[i];
	}
	iov[3].iov_base = host;
	iov[3].iov_len = 2 * SZ_4K;
	total += 2 * SZ_4K;

	ASSERT_EQ(0, fgds_put_pattern(self->file, 0, total, 0x400));
	EXPECT_EQ((ssize_t)total, preadv(self->file, iov, 4, 0))
		TH_LOG("preadv: %s", strerror(errno));
	for (int i = 0, p = 0; i < 3; p += lens[i], i++)
		host_check(_metadata, 0x400, offs[i] + skip[i], lens[i], p);
	pos = lens[0] + lens[1] + lens[2];
	EXPECT_EQ(-1, fgds_pattern_cmp(host, 2 * SZ_4K, 0x400, pos));

	/* and back: the host fills the three ranges, pwritev gathers them */
	for (int i = 0, p = 0; i < 3; p += lens[i], i++)
		host_fill(_metadata, 0x401, offs[i] + skip[i], lens[i], p);
	fgds_pattern_fill(host, 2 * SZ_4K, 0x401, pos);
	EXPECT_EQ((ssize_t)total, pwritev(self->file, iov, 4, 8 * SZ_1M));
	EXPECT_EQ(-1, get_pattern_cmp(self->file, 8 * SZ_1M, total, 0x401));

	for (int i = 0; i < 3; i++)
		fgds_buf_put(self->fd, &b[i]);
	free(host);
}

/* io_uring READ/WRITE/READV/WRITEV, 32 requests in flight. */
TEST_F_TIMEOUT(io, io_uring_qd32, 900)
{
	const unsigned int qd = 32;
	const size_t chunk = 256 * 1024;
	const __u64 bar_off = 256 * SZ_1M;
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct fgds_buf b;
	struct iovec iov[32][2];
	int op;

	ASSERT_EQ(0, io_uring_queue_init(qd, &ring, 0));
	ASSERT_EQ(0, fgds_buf_get(self->fd, &self->v, bar_off, qd * chunk, &b));
	ASSERT_EQ(0, fgds_put_pattern(self->file, 0, qd * chunk, 0x500));

	for (op = 0; op < 2; op++) {	/* 0: READ, 1: READV (two halves) */
		for (unsigned int i = 0; i < qd; i++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			ASSERT_NE(NULL, sqe);
			if (!op) {
				io_uring_prep_read(sqe, self->file, b.p + i * chunk, chunk,
						   i * chunk);
			} else {
				iov[i][0].iov_base = b.p + i * chunk;
				iov[i][0].iov_len = chunk / 2;
				iov[i][1].iov_base = b.p + i * chunk + chunk / 2;
				iov[i][1].iov_len = chunk / 2;
				io_uring_prep_readv(sqe, self->file, iov[i], 2, i * chunk);
			}
			sqe->user_data = i;
		}
		ASSERT_EQ((int)qd, io_uring_submit(&ring));
		for (unsigned int i = 0; i < qd; i++) {
			ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
			EXPECT_EQ((int)chunk, cqe->res)
				TH_LOG("op %d req %llu: %s", op, cqe->user_data,
				       strerror(-cqe->res));
			io_uring_cqe_seen(&ring, cqe);
		}
		host_check(_metadata, 0x500, bar_off, qd * chunk, 0);
		/* clobber for the next op */
		host_fill(_metadata, 0x9999, bar_off, qd * chunk, 0);
	}

	/* WRITE then WRITEV from VRAM the host filled */
	for (op = 0; op < 2; op++) {
		host_fill(_metadata, 0x600 + op, bar_off, qd * chunk, 0);
		for (unsigned int i = 0; i < qd; i++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			if (!op) {
				io_uring_prep_write(sqe, self->file, b.p + i * chunk, chunk,
						    4 * SZ_1M + i * chunk);
			} else {
				iov[i][0].iov_base = b.p + i * chunk;
				iov[i][0].iov_len = chunk / 2;
				iov[i][1].iov_base = b.p + i * chunk + chunk / 2;
				iov[i][1].iov_len = chunk / 2;
				io_uring_prep_writev(sqe, self->file, iov[i], 2,
						     4 * SZ_1M + i * chunk);
			}
		}
		ASSERT_EQ((int)qd, io_uring_submit(&ring));
		for (unsigned int i = 0; i < qd; i++) {
			ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
			EXPECT_EQ((int)chunk, cqe->res)
				TH_LOG("write op %d: %s", op, strerror(-cqe->res));
			io_uring_cqe_seen(&ring, cqe);
		}
		EXPECT_EQ(-1, get_pattern_cmp(self->file, 4 * SZ_1M, qd * chunk, 0x600 + op));
	}
	fgds_buf_put(self->fd, &b);
	io_uring_queue_exit(&ring);
}

/* A block device without P2P DMA (loop): EREMOTEIO, and the BAR is untouched. */
TEST(no_p2p_device_is_refused)
{
	const char *loop = getenv("FGDS_LOOP");
	const __u64 bar_off = 480 * SZ_1M;
	struct fgds_vfio v;
	struct fgds_buf b;
	const char *why;
	int fd, dev;

	fd = open(FGDS_NODE, O_RDWR);
	if (!loop)
		SKIP(return, "FGDS_LOOP not set: run in the fgds VM");
	ASSERT_LE(0, fd) TH_LOG(FGDS_NODE ": %s", strerror(errno));
	ASSERT_EQ(0, fgds_vfio_open(&v, &why));
	ASSERT_EQ(0, fgds_buf_get(fd, &v, bar_off, SZ_1M, &b));
	host_fill(_metadata, 0x700, bar_off, SZ_1M, 0);
	dev = open(loop, O_RDWR | O_DIRECT);
	ASSERT_LE(0, dev);
	ASSERT_EQ(0, fgds_put_pattern(dev, 0, SZ_1M, 0x701));
	EXPECT_EQ(-1, pread(dev, b.p, SZ_1M, 0));
	EXPECT_EQ(EREMOTEIO, errno);
	EXPECT_EQ(-1, pwrite(dev, b.p, SZ_1M, 0));
	EXPECT_EQ(EREMOTEIO, errno);
	host_check(_metadata, 0x700, bar_off, SZ_1M, 0);
	EXPECT_EQ(-1, get_pattern_cmp(dev, 0, SZ_1M, 0x701));
	close(dev);
	fgds_buf_put(fd, &b);
	fgds_vfio_close(&v);
	close(fd);
}

/*
 * An NVMe that can do P2P DMA but shares no switch with the GPU (its own
 * root port; the host bridge is not on the P2PDMA allow list): GUP lets the
 * pages through, the block layer's DMA mapping refuses them, and every
 * request fails with EINVAL; the BAR and the disk are untouched.
 */
TEST(nvme_without_a_p2p_path_is_refused)
{
	const char *far = getenv("FGDS_FAR");
	const __u64 bar_off = 484 * SZ_1M;
	struct io_uring_cqe *cqe;
	struct io_uring ring;
	struct fgds_vfio v;
	struct fgds_buf b;
	struct iovec iov[2];
	const char *why;
	int fd, dev;

	if (!far)
		SKIP(return, "FGDS_FAR not set: run in the fgds VM");
	fd = open(FGDS_NODE, O_RDWR);
	ASSERT_LE(0, fd) TH_LOG(FGDS_NODE ": %s", strerror(errno));
	ASSERT_EQ(0, fgds_vfio_open(&v, &why));
	ASSERT_EQ(0, fgds_buf_get(fd, &v, bar_off, SZ_1M, &b));
	host_fill(_metadata, 0x710, bar_off, SZ_1M, 0);
	dev = open(far, O_RDWR | O_DIRECT);
	ASSERT_LE(0, dev);
	ASSERT_EQ(0, fgds_put_pattern(dev, 0, SZ_1M, 0x711));
	EXPECT_EQ(-1, pread(dev, b.p, SZ_1M, 0));
	EXPECT_EQ(EINVAL, errno) TH_LOG("pread: %s", strerror(errno));
	EXPECT_EQ(-1, pwrite(dev, b.p, SZ_1M, 0));
	EXPECT_EQ(EINVAL, errno) TH_LOG("pwrite: %s", strerror(errno));
	iov[0] = (struct iovec){ b.p, SZ_64K };
	iov[1] = (struct iovec){ b.p + SZ_64K, SZ_64K };
	EXPECT_EQ(-1, preadv(dev, iov, 2, 0));
	EXPECT_EQ(EINVAL, errno) TH_LOG("preadv: %s", strerror(errno));
	ASSERT_EQ(0, io_uring_queue_init(4, &ring, 0));
	io_uring_prep_read(io_uring_get_sqe(&ring), dev, b.p, SZ_64K, 0);
	ASSERT_EQ(1, io_uring_submit(&ring));
	ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
	EXPECT_EQ(-EINVAL, cqe->res) TH_LOG("io_uring READ: %d", cqe->res);
	io_uring_cqe_seen(&ring, cqe);
	io_uring_queue_exit(&ring);
	host_check(_metadata, 0x710, bar_off, SZ_1M, 0);
	EXPECT_EQ(-1, get_pattern_cmp(dev, 0, SZ_1M, 0x711));
	close(dev);
	fgds_buf_put(fd, &b);
	fgds_vfio_close(&v);
	close(fd);
}

/*
 * Buffered I/O (no O_DIRECT) and tmpfs, which implements O_DIRECT by copying,
 * are not peer to peer: the kernel copies with the CPU through the mapping,
 * which works (uncached BAR access) and is documented so. Checked here so the
 * documentation stays true.
 */
TEST(buffered_and_tmpfs_io_copy_through_the_mapping)
{
	const char *dir = getenv("FGDS_EXT4");
	const __u64 bar_off = 490 * SZ_1M, len = SZ_1M;
	const char *paths[2] = { NULL, "/tmp/fgds-tmpfs-io" };
	const int flags[2] = { 0, O_DIRECT };
	char buffered[256];
	struct fgds_vfio v;
	struct fgds_buf b;
	const char *why;
	int fd;

	if (!dir)
		SKIP(return, "FGDS_EXT4 not set: run in the fgds VM");
	snprintf(buffered, sizeof(buffered), "%s/fgds-buffered", dir);
	paths[0] = buffered;
	fd = open(FGDS_NODE, O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, fgds_vfio_open(&v, &why));
	ASSERT_EQ(0, fgds_buf_get(fd, &v, bar_off, len, &b));
	for (int i = 0; i < 2; i++) {
		int f = open(paths[i], O_RDWR | O_CREAT | flags[i], 0600);

		ASSERT_LE(0, f) TH_LOG("%s: %s", paths[i], strerror(errno));
		ASSERT_EQ(0, fgds_put_pattern(f, 0, len, 0x800 + i));
		EXPECT_EQ((ssize_t)len, pread(f, b.p, len, 0)) TH_LOG("%s: %s", paths[i],
								      strerror(errno));
		host_check(_metadata, 0x800 + i, bar_off, len, 0);
		close(f);
		unlink(paths[i]);
	}
	fgds_buf_put(fd, &b);
	fgds_vfio_close(&v);
	close(fd);
}

TEST_HARNESS_MAIN
