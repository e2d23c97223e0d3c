// SPDX-License-Identifier: GPL-2.0
/*
 * Module lifetime: fgds cannot be unloaded while one of its nodes is open or
 * mapped (fops.owner), and unloads cleanly, with nothing left behind, once
 * everything is closed. Runs last: it reloads the module at the end. The
 * same holds for the other Rust misc driver, the sample
 * (samples/rust/rust_misc_device.rs): every implementation of MiscDevice
 * names its module. The module parameter max_registrations caps the
 * registrations of one open file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "fgds_test.h"
#include "fgds_util.h"

static int unload_module(const char *name)
{
	return syscall(__NR_delete_module, name, O_NONBLOCK) ? -errno : 0;
}

static int unload(void)
{
	return unload_module("fgds");
}

static int reload(void)
{
	return system("modprobe fgds");
}

TEST(unload_refused_while_open_or_mapped)
{
	struct fgds_vfio v;
	struct fgds_buf b;
	const char *why;
	int fd;

	if (!getenv("FGDS_GPU_BDF"))
		SKIP(return, "run in the fgds VM");
	fd = open(FGDS_NODE, O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, fgds_vfio_open(&v, &why));
	ASSERT_EQ(0, fgds_buf_get(fd, &v, 500 << 20, 1 << 20, &b));

	/* open node: refused */
	EXPECT_EQ(-EWOULDBLOCK, unload());
	/* closed fd, mapping alive (it holds the file): still refused */
	close(fd);
	EXPECT_EQ(-EWOULDBLOCK, unload());
	b.p[0] = 1;
	munmap(b.p, b.size);
	/* nothing left: unloads; the node is gone; loading again brings it back */
	EXPECT_EQ(0, unload());
	EXPECT_EQ(-1, access(FGDS_NODE, F_OK));
	EXPECT_EQ(0, reload());
	EXPECT_EQ(0, access(FGDS_NODE, F_OK));
	close(b.dmabuf);
	fgds_vfio_close(&v);
}

#define CAP 8
#define CAP_STR "8"

/*
 * An open file holds at most max_registrations registrations: the next one
 * fails with ENOSPC and makes nothing; another open file has a budget of its
 * own, and UNREG gives one back. fgds is reloaded with a cap of CAP, then
 * with the default.
 */
TEST(registrations_capped_per_open_file)
{
	__u64 cookies[CAP], c = 0;
	struct fgds_vfio v;
	int fd, fd2, dmabuf, i;
	long long pages;
	const char *why;

	if (!getenv("FGDS_GPU_BDF"))
		SKIP(return, "run in the fgds VM");
	ASSERT_EQ(0, unload());
	ASSERT_EQ(0, system("modprobe fgds max_registrations=" CAP_STR));
	fd = open(FGDS_NODE, O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, fgds_vfio_open(&v, &why)) TH_LOG("vfio: %s", why);
	dmabuf = fgds_vfio_dmabuf(&v, 496 << 20, 2 << 20);
	ASSERT_LE(0, dmabuf);
	for (i = 0; i < CAP; i++)
		ASSERT_EQ(0, fgds_reg(fd, dmabuf, i * 4096, 4096, &cookies[i]));
	pages = fgds_fdinfo_num(fd, "fgds-gpu-pages");
	EXPECT_EQ(-ENOSPC, fgds_reg(fd, dmabuf, CAP * 4096, 4096, &c));
	EXPECT_EQ(CAP, fgds_fdinfo_num(fd, "fgds-buffers"));
	EXPECT_EQ(CAP, fgds_fdinfo_num(fd, "fgds-gpu-buffers"));
	EXPECT_EQ(pages, fgds_fdinfo_num(fd, "fgds-gpu-pages"));
	/* Another open file: its own budget. */
	fd2 = open(FGDS_NODE, O_RDWR);
	ASSERT_LE(0, fd2);
	EXPECT_EQ(0, fgds_reg(fd2, dmabuf, CAP * 4096, 4096, &c));
	close(fd2);
	/* UNREG gives one back. */
	EXPECT_EQ(0, fgds_unreg(fd, cookies[0]));
	EXPECT_EQ(0, fgds_reg(fd, dmabuf, 0, 4096, &cookies[0]));
	EXPECT_EQ(-ENOSPC, fgds_reg(fd, dmabuf, CAP * 4096, 4096, &c));
	close(fd);
	close(dmabuf);
	fgds_vfio_close(&v);
	EXPECT_EQ(0, unload());
	EXPECT_EQ(0, reload());
}

#define SAMPLE_MOD "rust_misc_device"
#define SAMPLE_NODE "/dev/rust-misc-device"

TEST(sample_unload_refused_while_open)
{
	int fd;

	if (!getenv("FGDS_GPU_BDF"))
		SKIP(return, "run in the fgds VM");
	ASSERT_EQ(0, system("modprobe " SAMPLE_MOD)) TH_LOG("CONFIG_SAMPLE_RUST_MISC_DEVICE=m");
	fd = open(SAMPLE_NODE, O_RDWR);
	ASSERT_LE(0, fd) TH_LOG(SAMPLE_NODE ": %s", strerror(errno));
	EXPECT_EQ(-EWOULDBLOCK, unload_module(SAMPLE_MOD));
	/* Still there and working: the module was not unloaded under it. */
	EXPECT_EQ(0, access(SAMPLE_NODE, F_OK));
	close(fd);
	EXPECT_EQ(0, unload_module(SAMPLE_MOD));
	EXPECT_EQ(-1, access(SAMPLE_NODE, F_OK));
}

TEST_HARNESS_MAIN
