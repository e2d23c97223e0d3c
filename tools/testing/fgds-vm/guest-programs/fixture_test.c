// SPDX-License-Identifier: GPL-2.0
/*
 * Selftest of the fgds test fixture itself: before any fgds test means
 * anything, the VM must really have
 *  - a GPU stand-in whose BAR2 vfio-pci exports as dma-bufs;
 *  - a BAR that is the host's shared-memory file, both ways;
 *  - an NVMe that can DMA into another device's BAR through the PCIe switch
 *    (shown with the upstream p2pmem of the second NVMe's CMB), and a block
 *    device that cannot, refused by the block layer;
 *  - O_DIRECT into host memory working on the raw area, ext4 and xfs.
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
#include "fgds_host.h"
#include "fgds_pattern.h"
#include "fgds_vfio.h"

#define SZ_1M (1024 * 1024UL)

static void *aligned_buf(size_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, len))
		return NULL;
	return p;
}

FIXTURE(vfio) {
	struct fgds_vfio v;
};

FIXTURE_SETUP(vfio)
{
	const char *why;
	int ret = fgds_vfio_open(&self->v, &why);

	ASSERT_EQ(0, ret) TH_LOG("vfio setup: %s: %s", why, strerror(-ret));
}

FIXTURE_TEARDOWN(vfio)
{
	fgds_vfio_close(&self->v);
}

TEST_F(vfio, bar_is_512m_vram)
{
	ASSERT_GE(self->v.bar_size, 512 * SZ_1M);
}

TEST_F(vfio, exports_bar_range_as_dmabuf)
{
	char name[64], size[64];
	int fd = fgds_vfio_dmabuf(&self->v, 0, 2 * SZ_1M);

	ASSERT_LE(0, fd) TH_LOG("VFIO_DEVICE_FEATURE_DMA_BUF: %s", strerror(-fd));
	fgds_fdinfo(fd, "exp_name", name, sizeof(name));
	fgds_fdinfo(fd, "size", size, sizeof(size));
	EXPECT_STREQ("vfio_pci_core", name);
	EXPECT_STREQ("2097152", size);
	EXPECT_EQ(2 * SZ_1M, lseek(fd, 0, SEEK_END));
	close(fd);
}

TEST_F(vfio, refuses_range_past_bar)
{
	int fd = fgds_vfio_dmabuf(&self->v, self->v.bar_size - 4096, 8192);

	EXPECT_EQ(-EINVAL, fd);
	if (fd >= 0)
		close(fd);
}

TEST_F(vfio, guest_bar_writes_reach_host_file)
{
	const uint64_t off = 3 * SZ_1M + 123, len = 5 * SZ_1M + 7, seed = 0xf00d;
	char ans[256];
	unsigned char *bar = fgds_vfio_map_bar(&self->v);

	ASSERT_NE(NULL, bar) TH_LOG("mmap of BAR2: %s", strerror(errno));
	fgds_pattern_fill(bar + off, len, seed, 0);
	EXPECT_EQ(0, fgds_host_req("check", seed, off, len, 0, ans, sizeof(ans)))
		TH_LOG("host: %s", ans);
	/* The checker must be able to say no. */
	bar[off + len - 1] ^= 0x40;
	EXPECT_EQ(-1, fgds_host_req("check", seed, off, len, 0, ans, sizeof(ans)));
	EXPECT_NE(NULL, strstr(ans, "mismatch")) TH_LOG("host: %s", ans);
	munmap(bar, self->v.bar_size);
}

TEST_F(vfio, host_file_writes_reach_guest_bar)
{
	const uint64_t off = 100 * SZ_1M - 5, len = 2 * SZ_1M + 9, seed = 0xbeef;
	char ans[256];
	unsigned char *bar = fgds_vfio_map_bar(&self->v);

	ASSERT_NE(NULL, bar);
	ASSERT_EQ(0, fgds_host_req("fill", seed, off, len, 77, ans, sizeof(ans)))
		TH_LOG("host: %s", ans);
	EXPECT_EQ(-1, fgds_pattern_cmp(bar + off, len, seed, 77));
	munmap(bar, self->v.bar_size);
}

static const char *env_or_skip(struct __test_metadata *_metadata, const char *name)
{
	const char *v = getenv(name);

	if (!v)
		TH_LOG("%s is not set: run this test in the fgds VM", name);
	return v;
}

/* Write @len bytes of stream @seed at @off of @path through host memory. */
static int write_pattern(const char *path, off_t off, size_t len, uint64_t seed)
{
	void *buf = aligned_buf(len);
	int fd, ret = -1;

	if (!buf)
		return -1;
	fgds_pattern_fill(buf, len, seed, 0);
	fd = open(path, O_RDWR | O_DIRECT | O_CREAT, 0600);
	if (fd >= 0 && pwrite(fd, buf, len, off) == (ssize_t)len)
		ret = 0;
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

TEST(p2pmem_of_cmb_takes_odirect_dma_from_nvme)
{
	const char *raw = env_or_skip(_metadata, "FGDS_RAW");
	const char *cmb = env_or_skip(_metadata, "FGDS_CMB_BDF");
	const size_t len = SZ_1M;
	const off_t off = 64 * SZ_1M;
	char path[256];
	unsigned char *p2p, *host;
	int pfd, fd;

	ASSERT_NE(NULL, raw);
	ASSERT_NE(NULL, cmb);
	ASSERT_EQ(0, write_pattern(raw, off, len, 0x1234));

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/p2pmem/allocate", cmb);
	pfd = open(path, O_RDWR);
	ASSERT_LE(0, pfd) TH_LOG("%s: %s (no CMB published as p2pmem?)", path, strerror(errno));
	p2p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
	ASSERT_NE(MAP_FAILED, p2p) TH_LOG("mmap p2pmem: %s", strerror(errno));

	/* NVMe -> p2pmem (peer BAR through the switch) */
	fd = open(raw, O_RDWR | O_DIRECT);
	ASSERT_LE(0, fd);
	memset(p2p, 0, len);
	ASSERT_EQ((ssize_t)len, pread(fd, p2p, len, off)) TH_LOG("pread: %s", strerror(errno));
	EXPECT_EQ(-1, fgds_pattern_cmp(p2p, len, 0x1234, 0));

	/* p2pmem -> NVMe, then back through host memory */
	fgds_pattern_fill(p2p, len, 0x5678, 0);
	ASSERT_EQ((ssize_t)len, pwrite(fd, p2p, len, off + len)) TH_LOG("pwrite: %s", strerror(errno));
	host = aligned_buf(len);
	ASSERT_NE(NULL, host);
	ASSERT_EQ((ssize_t)len, pread(fd, host, len, off + len));
	EXPECT_EQ(-1, fgds_pattern_cmp(host, len, 0x5678, 0));

	free(host);
	close(fd);
	munmap(p2p, len);
	close(pfd);
}

TEST(p2pmem_refused_by_device_without_p2p)
{
	const char *loop = env_or_skip(_metadata, "FGDS_LOOP");
	const char *cmb = env_or_skip(_metadata, "FGDS_CMB_BDF");
	const size_t len = 64 * 1024;
	unsigned char *p2p;
	char path[256];
	int pfd, fd;

	ASSERT_NE(NULL, loop);
	ASSERT_NE(NULL, cmb);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/p2pmem/allocate", cmb);
	pfd = open(path, O_RDWR);
	ASSERT_LE(0, pfd);
	p2p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
	ASSERT_NE(MAP_FAILED, p2p);
	memset(p2p, 0xa5, len);
	fd = open(loop, O_RDONLY | O_DIRECT);
	ASSERT_LE(0, fd) TH_LOG("%s: %s", loop, strerror(errno));
	EXPECT_EQ(-1, pread(fd, p2p, len, 0));
	EXPECT_EQ(EREMOTEIO, errno);
	for (size_t i = 0; i < len; i++)
		if (p2p[i] != 0xa5) {
			EXPECT_EQ(0xa5, p2p[i]) TH_LOG("byte %zu written", i);
			break;
		}
	close(fd);
	munmap(p2p, len);
	close(pfd);
}

FIXTURE(odirect) {
	char path[256];
};

FIXTURE_VARIANT(odirect) {
	const char *env;	/* a block device, or a directory to create a file in */
	int is_dir;
};

FIXTURE_VARIANT_ADD(odirect, raw) { .env = "FGDS_RAW", .is_dir = 0 };
FIXTURE_VARIANT_ADD(odirect, ext4) { .env = "FGDS_EXT4", .is_dir = 1 };
FIXTURE_VARIANT_ADD(odirect, xfs) { .env = "FGDS_XFS", .is_dir = 1 };

FIXTURE_SETUP(odirect)
{
	const char *where = env_or_skip(_metadata, variant->env);

	ASSERT_NE(NULL, where);
	if (variant->is_dir)
		snprintf(self->path, sizeof(self->path), "%s/fixture-odirect", where);
	else
		snprintf(self->path, sizeof(self->path), "%s", where);
}

FIXTURE_TEARDOWN(odirect)
{
	if (variant->is_dir)
		unlink(self->path);
}

TEST_F(odirect, host_memory_roundtrip)
{
	const size_t len = 8 * SZ_1M;
	unsigned char *buf = aligned_buf(len);
	int fd;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, write_pattern(self->path, 4096, len, 0xabc)) TH_LOG("%s: %s", self->path,
									  strerror(errno));
	fd = open(self->path, O_RDONLY | O_DIRECT);
	ASSERT_LE(0, fd);
	memset(buf, 0, len);
	ASSERT_EQ((ssize_t)len, pread(fd, buf, len, 4096));
	EXPECT_EQ(-1, fgds_pattern_cmp(buf, len, 0xabc, 0));
	/* On the raw device O_DIRECT really is direct: an unaligned buffer is refused. */
	if (!variant->is_dir) {
		EXPECT_EQ(-1, pread(fd, buf + 1, 4096, 0));
		EXPECT_EQ(EINVAL, errno);
	}
	close(fd);
	free(buf);
}

/* The guest user space the tests and benchmarks rely on really runs here. */
TEST(python3_runs_in_the_guest)
{
	EXPECT_EQ(0, system("python3 -c 'import os, sys; sys.exit(0 if os.O_DIRECT else 1)'"));
	EXPECT_NE(0, system("python3 -c 'import sys; sys.exit(3)' 2>/dev/null"));
}

/*
 * fio's io_uring engine reads a file on ext4 with O_DIRECT and verifies it
 * (fio writes it first with a checksum in every block).
 */
FIXTURE(tools) {
	int unused;
};

FIXTURE_SETUP(tools)
{
}

FIXTURE_TEARDOWN(tools)
{
}

TEST_F_TIMEOUT(tools, fio_runs_in_the_guest, 300)
{
	const char *ext4 = getenv("FGDS_EXT4");
	char cmd[512];

	if (!ext4)
		SKIP(return, "not in the fgds VM (FGDS_EXT4 is not set)");
	snprintf(cmd, sizeof(cmd),
		 "fio --name=fixture --filename=%s/fio.bin --size=8M --bs=64k --direct=1 "
		 "--ioengine=io_uring --iodepth=8 --rw=write --verify=crc32c --do_verify=1 "
		 "--output=/dev/null && rm -f %s/fio.bin", ext4, ext4);
	EXPECT_EQ(0, system(cmd));
	/* and fails on a file system that is not there */
	EXPECT_NE(0, system("fio --name=fixture --filename=/nonexistent/dir/f --size=1M "
			    "--rw=read --output=/dev/null 2>/dev/null"));
}

TEST_HARNESS_MAIN
