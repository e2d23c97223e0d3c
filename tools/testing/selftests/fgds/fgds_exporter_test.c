// SPDX-License-Identifier: GPL-2.0
/*
 * The exporter matrix: fgds against the export patterns of the real GPU
 * drivers, reproduced by lib/test_p2p_dmabuf.c (the test exporter) bound to
 * the second GPU stand-in (FGDS_GPU2_BDF) in place of vfio-pci. Each variant
 * names the driver it stands for; see Documentation/misc-devices/fgds.rst,
 * "Exporters", for the table these tests check.
 *
 * - Every variant: REG_BUFFER gives the documented outcome (a registration
 *   or the documented errno) and the kernel logs nothing.
 * - Variants that do P2P: the same data tests as on vfio-pci's dma-bufs
 *   (pread, preadv, io_uring into the mapping, from ext4, xfs and the raw
 *   NVMe, and pwrite out of it), every byte checked by the host in the
 *   stand-in's BAR file; the exporter's view (pins, maps, moves) checked;
 *   revoke and UNREG with reads in flight from the throttled NVMe, with the
 *   memory refilled by the host after UNREG and checked after every read
 *   ended (a late DMA would show); a buffer fgds pinned (amdgpu) passed by
 *   100 evictions and 100 suspends with reads in flight, every byte landing;
 *   unbinding the exporter's driver with reads in flight. No exporter waits
 *   for user I/O: fgds's callback in each revocation (timed by the exporter)
 *   returns in under CALLBACK_MAX_NS with reads still in flight after it, and
 *   leaves no fence for the exporter to wait on (100 revocations in a row
 *   print the longest callback and the exporter's longest wait).
 * - An exporter that cannot pin the buffer where peers reach it (xe pins in
 *   system memory) is refused with EOPNOTSUPP: fgds imports only what it can
 *   pin.
 * - A fence the exporter signals after map (a VRAM clear), and a user's job
 *   writing the buffer (an implicitly synchronised writer): REG_BUFFER waits
 *   for each, and what it wrote does not land over data read afterwards.
 * - rmmod of the exporter with a registration live is refused (the
 *   dma-buf pins its module) and the registration keeps working; after
 *   UNREG the module unloads and its node goes.
 * - A dma-buf kept across an unbind and a bind of an exporter that does not
 *   revoke at remove() (amdgpu, xe) is refused with ENODEV; 100 (make
 *   stress: 200) unbinds and binds of such an exporter with REG_BUFFER
 *   running and reads in flight end every registration, its reads drained
 *   whole, before the device is torn down (the exporter ends its offer
 *   first) and before the BAR's provider goes.
 * - The KUnit suite of the Rust dma-buf import and P2PDMA page abstractions
 *   (lib/test_p2p_dmabuf_kunit.rs), which needs the bound exporter: every
 *   case passed, the kernel's struct-page count back where it was.
 *
 * The first test binds the test exporter, the last gives the stand-in back
 * to vfio-pci.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "fgds_host.h"
#include "fgds_test.h"
#include "fgds_util.h"
#include "../../../../lib/test_p2p_dmabuf_uapi.h"
#include "fgds_exporter.h"

/* The test exporter takes the second stand-in from vfio-pci. */
TEST(bind_test_exporter)
{
	char cur[64];

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	if (access("/sys/module/" TPD_NAME, F_OK))
		ASSERT_EQ(0, system("modprobe " TPD_NAME " owner_pages_mib=" OWNER_MIB_STR));
	ASSERT_EQ(0, bind_to(bdf2(), TPD_NAME)) TH_LOG("binding %s to " TPD_NAME, bdf2());
	ASSERT_EQ(0, driver_of(bdf2(), cur, sizeof(cur)));
	ASSERT_STREQ(TPD_NAME, cur);
}

/*
 * The KUnit suite of the success paths of the Rust dma-buf import and
 * P2PDMA page abstractions (lib/test_p2p_dmabuf_kunit.rs) needs an exporter
 * with a P2PDMA provider, so it runs here, when its module is loaded with
 * the test exporter bound, and not at boot with the other doctests.
 */
#define KUNIT_MOD "test_p2p_dmabuf_kunit"
#define KUNIT_SUITE "rust_dma_buf_p2pdma"
#define KUNIT_CASES 10

TEST(kunit_dma_buf_and_p2p_pages)
{
	long long memmap = fgds_memmap_pages();
	int mark = fgds_klog_mark();
	int cases = 0, passed = 0, suite = -1;
	char line[512], name[128], rest[256];
	unsigned int n;
	FILE *f;

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	ASSERT_LE(0, mark);
	if (!access("/sys/module/" KUNIT_MOD, F_OK))
		ASSERT_EQ(0, system("rmmod " KUNIT_MOD));
	/* The suite runs, to its end, when the module goes live. */
	ASSERT_EQ(0, system("modprobe " KUNIT_MOD));
	f = fopen("/sys/kernel/debug/kunit/" KUNIT_SUITE "/results", "r");
	ASSERT_NE(NULL, f) TH_LOG("no KUnit results for " KUNIT_SUITE ": %s", strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		const char *p = line + strspn(line, " ");
		int ok = !strncmp(p, "ok ", 3);

		if (*p == '#' && !strstr(p, ".location:"))
			TH_LOG("%s", strtok(line, "\n"));
		if (!ok && strncmp(p, "not ok ", 7))
			continue;
		rest[0] = 0;
		if (sscanf(p + (ok ? 3 : 7), "%u %127s%255[^\n]", &n, name, rest) < 2)
			continue;
		/* A skipped case did not test anything. */
		if (strstr(rest, "# SKIP"))
			ok = 0;
		if (!strcmp(name, KUNIT_SUITE)) {
			suite = ok;
			continue;
		}
		cases++;
		passed += ok;
		TH_LOG("%s %s", ok ? "ok" : "FAILED", name);
	}
	fclose(f);
	EXPECT_EQ(0, system("rmmod " KUNIT_MOD));
	EXPECT_EQ(KUNIT_CASES, cases);
	EXPECT_EQ(KUNIT_CASES, passed) TH_LOG("the kernel log names each failed check");
	EXPECT_EQ(1, suite);
	/* Every P2PDMA page the suite made is gone again, and nothing was reported. */
	EXPECT_EQ(memmap, fgds_memmap_pages());
	EXPECT_EQ(0, fgds_kernel_reports_since(mark));
}

FIXTURE(ex) {
	struct ex_env e;
	int raw;
	int slow;
	int mark;
};

FIXTURE_VARIANT(ex) {
	const char *driver;	/* the real exporter this reproduces */
	__u32 flags;
	__u64 bar_off;
	int reg_errno;		/* what REG_BUFFER answers: 0 or an errno */
	int pinned;		/* a registration pins the buffer */
	int pinned_rounds;	/* evictions and suspends of a pinned one */
};

/* amdgpu_dma_buf_ops / xe_dmabuf_ops as in Linux 7.2: no physical ranges. */
FIXTURE_VARIANT_ADD(ex, amdgpu_xe_stock) {
	.driver = "amdgpu, xe (7.2): dynamic, sg from dma_map_resource()",
	.flags = TEST_P2P_DMABUF_DYNAMIC,
	.reg_errno = EOPNOTSUPP,
};

/* The same through an IOMMU: the sg holds IOVAs. */
FIXTURE_VARIANT_ADD(ex, amdgpu_xe_stock_iommu) {
	.driver = "amdgpu, xe (7.2) with an IOMMU: IOVAs in the sg",
	.flags = TEST_P2P_DMABUF_DYNAMIC | TEST_P2P_DMABUF_IOVA,
	.reg_errno = EOPNOTSUPP,
};

/* virtio_gpu_vram_map_dma_buf(): static, one dma_map_resource() entry. */
FIXTURE_VARIANT_ADD(ex, virtio_gpu_vram) {
	.driver = "virtio-gpu VRAM blob: static, sg from dma_map_resource()",
	.flags = 0,
	.reg_errno = EOPNOTSUPP,
};

/*
 * nv-dmabuf.c over a static BAR1 that nvidia-uvm gave P2PDMA pages: static,
 * no pin, sg from dma_map_resource(), no get_phys(). The dma-buf core finds
 * the owner's pages behind the mapping, and fgds uses them.
 */
FIXTURE_VARIANT_ADD(ex, nvidia_static_bar1) {
	.driver = "NVIDIA open module, static BAR1 with nvidia-uvm's P2PDMA pages",
	.flags = 0,
	.bar_off = OWNER_BASE,
	.reg_errno = 0,
};

/* The same, if nv-dmabuf.c described its memory (get_phys()). */
FIXTURE_VARIANT_ADD(ex, nvidia_static_bar1_phys) {
	.driver = "NVIDIA open module + get_phys(): the owner's pages, described",
	.flags = TEST_P2P_DMABUF_PHYS,
	.bar_off = OWNER_BASE,
	.reg_errno = 0,
};

/*
 * amdgpu with what this series asks of it (provider at probe, get_phys()):
 * the buffer moves into visible VRAM when pinned (amdgpu_dma_buf_pin()),
 * and is pinned there: evictions and suspends pass it by.
 */
FIXTURE_VARIANT_ADD(ex, amdgpu_provider_phys) {
	.driver = "amdgpu + provider at probe and get_phys(): moves on pin, pinned in VRAM",
	.flags = TEST_P2P_DMABUF_DYNAMIC | TEST_P2P_DMABUF_SG_PROVIDER | TEST_P2P_DMABUF_PHYS |
		 TEST_P2P_DMABUF_MOVE_ON_MAP,
	.reg_errno = 0,
	.pinned = 1,
	.pinned_rounds = 100,
};

/*
 * xe with the same: a pin migrates the buffer to system memory
 * (xe_dma_buf_pin()), where no peer reaches it. Unpinned, each eviction or
 * suspend would move it under I/O in flight, which fgds could only follow by
 * waiting for that I/O in the exporter's callback: refused.
 */
FIXTURE_VARIANT_ADD(ex, xe_provider_phys) {
	.driver = "xe + provider at probe and get_phys(): pins only in system memory",
	.flags = TEST_P2P_DMABUF_DYNAMIC | TEST_P2P_DMABUF_SG_PROVIDER | TEST_P2P_DMABUF_PHYS |
		 TEST_P2P_DMABUF_MOVE_ON_MAP | TEST_P2P_DMABUF_PIN_SYSTEM,
	.bar_off = 40 * SZ_1M,
	.reg_errno = EOPNOTSUPP,
};

/* amdgpu through an IOMMU: fgds never reads the sg's DMA addresses. */
FIXTURE_VARIANT_ADD(ex, amdgpu_iommu_phys) {
	.driver = "amdgpu + get_phys() with an IOMMU: IOVAs in the sg, pinned",
	.flags = TEST_P2P_DMABUF_DYNAMIC | TEST_P2P_DMABUF_IOVA | TEST_P2P_DMABUF_PHYS,
	.bar_off = 8 * SZ_1M,
	.reg_errno = 0,
	.pinned = 1,
	.pinned_rounds = 20,
};

/* vfio_pci_dma_buf_map() + get_phys(): static, sg from the provider. */
FIXTURE_VARIANT_ADD(ex, vfio_like_static_phys) {
	.driver = "vfio-pci pattern: static, sg from the provider, get_phys()",
	.flags = TEST_P2P_DMABUF_SG_PROVIDER | TEST_P2P_DMABUF_PHYS,
	.bar_off = 16 * SZ_1M,
	.reg_errno = 0,
};

FIXTURE_SETUP(ex)
{
	const char *why;
	int ret;

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	ret = ex_open_raw(&self->e, &self->raw, &why);
	ASSERT_EQ(0, ret) TH_LOG("%s: %s", why, strerror(-ret));
	self->slow = open(getenv("FGDS_SLOW"), O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, self->slow) TH_LOG("FGDS_SLOW: %s", strerror(errno));
	self->mark = fgds_klog_mark();
	ksft_print_msg("%s\n", variant->driver);
}

FIXTURE_TEARDOWN(ex)
{
	if (self->slow >= 0)
		close(self->slow);
	if (self->raw >= 0)
		close(self->raw);
	ex_close(&self->e);
}

/*
 * The user mapping has the memory type the kernel's own mapping of the
 * pages has: write-combined where the owner mapped its aperture so (as
 * amdgpu and xe do; PWT, not PCD, in the PTEs), uncached over the owner's
 * own pages (nvidia-uvm's uncached BAR1; PCD). Read from the PAT memtype
 * list and the kernel's page-table dump, outside the driver.
 */
TEST_F(ex, mapping_type_agrees_with_owner)
{
	int wc = variant->bar_off < OWNER_BASE;
	unsigned long long bar = bar2_start();
	char type[64], line[256];
	struct fgds_buf b;

	if (!p2p(variant))
		SKIP(return, "%s: REG_BUFFER refuses (%s)", variant->driver,
		     strerror(variant->reg_errno));
	ASSERT_NE(0, bar);
	ASSERT_EQ(0, ex_buf(&self->e, variant->flags, variant->bar_off, &b));
	fgds_store(b.p, 1);
	fgds_store(b.p + BUF_LEN - 1, 2);
	ASSERT_EQ(0, pat_memtype_of(bar + variant->bar_off, type, sizeof(type)));
	EXPECT_STREQ(wc ? "write-combining" : "uncached-minus", type);
	ASSERT_EQ(0, fgds_ptdump_line_of((unsigned long)b.p, line, sizeof(line)));
	EXPECT_EQ(wc, !!strstr(line, " PWT")) TH_LOG("first page: %s", line);
	EXPECT_EQ(!wc, !!strstr(line, " PCD")) TH_LOG("first page: %s", line);
	ASSERT_EQ(0, fgds_ptdump_line_of((unsigned long)b.p + BUF_LEN - 1, line, sizeof(line)));
	EXPECT_EQ(wc, !!strstr(line, " PWT")) TH_LOG("last page: %s", line);
	EXPECT_EQ(!wc, !!strstr(line, " PCD")) TH_LOG("last page: %s", line);
	ksft_print_msg("memtype %s, user PTE: %s", type, strchr(line, ' ') ?: line);
	fgds_buf_put(self->e.node, &b);
}

/* REG_BUFFER's answer is the documented one, silently; the exporter's view. */
TEST_F(ex, registration_outcome)
{
	struct test_p2p_dmabuf_state st;
	char first[256];
	__u64 cookie = 0;
	int dmabuf, ret;

	dmabuf = tpd_export(self->e.tpd, variant->bar_off, BUF_LEN, variant->flags, 0, 0);
	ASSERT_LE(0, dmabuf) TH_LOG("export: %s", strerror(-dmabuf));
	ret = fgds_reg(self->e.node, dmabuf, 0, BUF_LEN, &cookie);
	EXPECT_EQ(-variant->reg_errno, ret) TH_LOG("REG_BUFFER: %s, documented: %s",
						   strerror(-ret), strerror(variant->reg_errno));
	ASSERT_EQ(0, tpd_state(self->e.tpd, dmabuf, &st));
	/* Pinned where the exporter can pin it in reach; refused: not pinned. */
	EXPECT_EQ(ret ? 0 : variant->pinned, st.pins);
	if (!ret) {
		EXPECT_EQ(1, st.attachments);
		EXPECT_EQ(1, st.maps);
		/* Moved into reach on the way (pin or map), and there now. */
		EXPECT_EQ(TEST_P2P_DMABUF_IN_BAR, st.placement);
		if (variant->flags & TEST_P2P_DMABUF_MOVE_ON_MAP)
			EXPECT_LE(1, st.moves);
		EXPECT_EQ(0, fgds_unreg(self->e.node, cookie));
		ASSERT_EQ(0, tpd_state(self->e.tpd, dmabuf, &st));
	}
	/* Refused or unregistered: fgds let go of the exporter. */
	EXPECT_EQ(0, st.attachments);
	EXPECT_EQ(0, st.maps);
	close(dmabuf);
	EXPECT_EQ(0, fgds_kernel_lines_since(self->mark, first, sizeof(first)))
		TH_LOG("the kernel logged: %s", first);
}

/* Every way of reading into the mapping, and writing out of it, every byte from the host. */
TEST_F_TIMEOUT(ex, data_every_byte, 600)
{
	const char *dirs[2];
	__u64 seed = 0x7e50000 + variant->bar_off / SZ_1M;
	struct io_uring ring;
	struct fgds_buf b;
	unsigned char *tmp;
	int d;

	if (!p2p(variant))
		SKIP(return, "%s: REG_BUFFER refuses (%s), nothing to move", variant->driver,
		     strerror(variant->reg_errno));
	dirs[0] = getenv("FGDS_EXT4");
	dirs[1] = getenv("FGDS_XFS");
	ASSERT_EQ(0, ex_buf(&self->e, variant->flags, variant->bar_off, &b));
	ASSERT_EQ(0, io_uring_queue_init(NR_IOS, &ring, 0));
	tmp = fgds_aligned_buf(BUF_LEN);
	ASSERT_NE(NULL, tmp);

	/* Raw NVMe: pread. */
	ASSERT_EQ(0, fgds_put_pattern(self->raw, 0, BUF_LEN, seed));
	ASSERT_EQ(0, host2("fill", seed ^ 0xff, variant->bar_off, BUF_LEN, 0));
	ASSERT_EQ((ssize_t)BUF_LEN, pread(self->raw, b.p, BUF_LEN, 0));
	EXPECT_EQ(0, host2("check", seed, variant->bar_off, BUF_LEN, 0));

	for (d = 0; d < 2; d++) {
		__u64 s = seed + 1 + d;
		struct iovec iov[3] = {
			{ b.p + 3 * SZ_1M, SZ_1M },
			{ b.p, SZ_64K },
			{ b.p + SZ_1M, 2 * SZ_1M - SZ_64K },
		};
		struct io_uring_cqe *cqe;
		char path[256];
		int fd, i;

		ASSERT_NE(NULL, dirs[d]);
		snprintf(path, sizeof(path), "%s/exporter-%llx.bin", dirs[d],
			 (unsigned long long)variant->bar_off);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
		ASSERT_LE(0, fd) TH_LOG("%s: %s", path, strerror(errno));
		ASSERT_EQ(0, fgds_put_pattern(fd, 0, BUF_LEN, s));

		/* pread */
		ASSERT_EQ(0, host2("fill", s ^ 0xff, variant->bar_off, BUF_LEN, 0));
		ASSERT_EQ((ssize_t)BUF_LEN, pread(fd, b.p, BUF_LEN, 0));
		EXPECT_EQ(0, host2("check", s, variant->bar_off, BUF_LEN, 0));

		/* preadv, segments out of order: file [0,1M) to BAR +3M, and so on. */
		ASSERT_EQ(0, host2("fill", s ^ 0xfe, variant->bar_off, BUF_LEN, 0));
		ASSERT_EQ((ssize_t)(3 * SZ_1M), preadv(fd, iov, 3, 0));
		EXPECT_EQ(0, host2("check", s, variant->bar_off + 3 * SZ_1M, SZ_1M, 0));
		EXPECT_EQ(0, host2("check", s, variant->bar_off, SZ_64K, SZ_1M));
		EXPECT_EQ(0, host2("check", s, variant->bar_off + SZ_1M, 2 * SZ_1M - SZ_64K,
				   SZ_1M + SZ_64K));

		/* io_uring, NR_IOS reads at once */
		ASSERT_EQ(0, host2("fill", s ^ 0xfd, variant->bar_off, BUF_LEN, 0));
		for (i = 0; i < NR_IOS; i++)
			io_uring_prep_read(io_uring_get_sqe(&ring), fd, b.p + i * IO_LEN, IO_LEN,
					   i * IO_LEN);
		ASSERT_EQ(NR_IOS, io_uring_submit(&ring));
		for (i = 0; i < NR_IOS; i++) {
			ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
			EXPECT_EQ((int)IO_LEN, cqe->res);
			io_uring_cqe_seen(&ring, cqe);
		}
		EXPECT_EQ(0, host2("check", s, variant->bar_off, BUF_LEN, 0));

		/* pwrite out of the GPU: the host writes the BAR, the file must get it. */
		ASSERT_EQ(0, host2("fill", s ^ 0xabcd, variant->bar_off, BUF_LEN, 0));
		ASSERT_EQ((ssize_t)BUF_LEN, pwrite(fd, b.p, BUF_LEN, 0));
		ASSERT_EQ((ssize_t)BUF_LEN, pread(fd, tmp, BUF_LEN, 0));
		EXPECT_EQ(0, fgds_pattern_diff(tmp, BUF_LEN, s ^ 0xabcd, 0));
		close(fd);
		unlink(path);
	}
	free(tmp);
	io_uring_queue_exit(&ring);
	fgds_buf_put(self->e.node, &b);
}

/*
 * The exporter revokes, or the user unregisters, with reads from the
 * throttled NVMe in flight into the mapping; or the exporter is asked to
 * evict the buffer or suspends (dynamic exporters, whose buffers fgds pins).
 *
 * A revocation waits for no read: fgds's callback returns in under
 * CALLBACK_MAX_NS with reads still in flight after it, leaves no fence (the
 * exporter's wait after it is as short), and the pin stays until UNREG.
 * UNREG (after a revocation or alone) returns once the reads that pinned a
 * page ended: the host's refill right after it must still be there once
 * every read completed. A round counts as "in flight" only when reads were
 * pending at the teardown and at least one of them ended whole. An eviction
 * or a suspend of the pinned buffer ends nothing: the reads land, every
 * byte checked from the host (pinned_round()).
 */
TEST_F_TIMEOUT(ex, teardown_with_io_in_flight, 1800)
{
	int kind;

	if (!p2p(variant))
		SKIP(return, "%s: REG_BUFFER refuses (%s)", variant->driver,
		     strerror(variant->reg_errno));
	ASSERT_EQ(0, fgds_put_pattern(self->slow, 0, BUF_LEN, 0x5105));
	for (kind = REVOKE; kind <= UNREG; kind++) {
		int round, again = 0, min_p = NR_IOS, max_p = 0, min_a = NR_IOS, max_a = 0;
		int whole_all = 0, efault_all = 0;
		__u64 cb_max = 0, wait_max = 0;
		int moves = kind == MOVE || kind == SUSPEND;
		int rounds = moves ? variant->pinned_rounds : ROUNDS;

		if (moves && !(variant->flags & TEST_P2P_DMABUF_DYNAMIC))
			continue;	/* a static exporter never moves */
		/* fgds registers a dynamic exporter's buffer only pinned. */
		if (moves)
			ASSERT_TRUE(variant->pinned && rounds > 0);
		for (round = 0; round < rounds; round++) {
			__u64 fresh = 0xe0e0000 + kind * ROUNDS + round;
			struct test_p2p_dmabuf_state st;
			struct fgds_buffer_info info;
			int pending, after = 0, whole, efault;
			struct io_uring ring;
			struct fgds_buf b;

			ASSERT_EQ(0, ex_buf(&self->e, variant->flags, variant->bar_off, &b));
			ASSERT_EQ(0, io_uring_queue_init(2 * NR_IOS, &ring, 0));
			ASSERT_EQ(NR_IOS, submit_slow_reads(&ring, self->slow, b.p));
			pending = NR_IOS - io_uring_cq_ready(&ring);
			if (!pending) {
				ASSERT_EQ(0, reap_all(&ring, NR_IOS, &whole, &efault));
				io_uring_queue_exit(&ring);
				fgds_buf_put(self->e.node, &b);
				ASSERT_GT(ROUNDS, ++again);
				round--;
				continue;
			}
			min_p = pending < min_p ? pending : min_p;
			max_p = pending > max_p ? pending : max_p;
			if (moves) {
				pinned_round(_metadata, &self->e, kind, &b, &ring,
					     variant->bar_off);
				io_uring_queue_exit(&ring);
				fgds_buf_put(self->e.node, &b);
				whole_all += NR_IOS;
				continue;
			}
			if (kind == REVOKE) {
				ASSERT_EQ(0, tpd_fd_ioctl(self->e.tpd, TEST_P2P_DMABUF_IOCTL_REVOKE,
							  b.dmabuf));
				after = NR_IOS - io_uring_cq_ready(&ring);
				ASSERT_EQ(0, fgds_query(self->e.node, b.cookie, &info));
				EXPECT_EQ(FGDS_BUFFER_REVOKED, info.state);
				ASSERT_EQ(0, tpd_state(self->e.tpd, b.dmabuf, &st));
				/* Unmapped by the callback; pinned until UNREG drained. */
				EXPECT_EQ(0, st.maps);
				EXPECT_EQ(variant->pinned, st.pins);
				EXPECT_GT(CALLBACK_MAX_NS_FOR(BUF_LEN), st.invalidate_ns)
					TH_LOG("round %d: callback %llu us", round,
					       (unsigned long long)st.invalidate_ns / 1000);
				EXPECT_GT(CALLBACK_MAX_NS, st.fence_wait_ns)
					TH_LOG("round %d: the exporter waited %llu us for fences",
					       round, (unsigned long long)st.fence_wait_ns / 1000);
				/* It returned with reads in flight: it waited for none. */
				EXPECT_LT(0, after)
					TH_LOG("round %d: no read in flight after the revocation",
					       round);
				cb_max = st.invalidate_ns > cb_max ? st.invalidate_ns : cb_max;
				if (st.fence_wait_ns > wait_max)
					wait_max = st.fence_wait_ns;
			}
			ASSERT_EQ(0, fgds_unreg(self->e.node, b.cookie));
			b.cookie = 0;
			if (kind == UNREG)
				after = NR_IOS - io_uring_cq_ready(&ring);
			ASSERT_EQ(0, tpd_state(self->e.tpd, b.dmabuf, &st));
			EXPECT_EQ(0, st.maps);
			EXPECT_EQ(0, st.pins);
			ASSERT_EQ(0, host2("fill", fresh, variant->bar_off, BUF_LEN, 0));
			ASSERT_EQ(0, reap_all(&ring, NR_IOS, &whole, &efault))
				TH_LOG("%s: a read ended with another error", teardown_name[kind]);
			EXPECT_EQ(NR_IOS, whole + efault);
			/* Reads that failed all along were not in flight. */
			EXPECT_LT(0, whole) TH_LOG("%s round %d: every read failed",
						   teardown_name[kind], round);
			/* No late DMA over the refill. */
			EXPECT_EQ(0, host2("check", fresh, variant->bar_off, BUF_LEN, 0))
				TH_LOG("%s round %d: memory written after UNREG returned",
				       teardown_name[kind], round);
			if (kind == REVOKE) {
				__u64 c = 0;

				EXPECT_EQ(-ENODEV,
					  fgds_reg(self->e.node, b.dmabuf, 0, BUF_LEN, &c));
			}
			io_uring_queue_exit(&ring);
			fgds_buf_put(self->e.node, &b);
			min_a = after < min_a ? after : min_a;
			max_a = after > max_a ? after : max_a;
			whole_all += whole;
			efault_all += efault;
		}
		ksft_print_msg("%s%s: %d rounds, %d reads each, %d to %d in flight (%d reruns)\n",
			       teardown_name[kind], moves ? " of a pinned buffer" : "", rounds,
			       NR_IOS, min_p, max_p, again);
		ksft_print_msg("%s: %d reads whole, %d failed (EFAULT)\n", teardown_name[kind],
			       whole_all, efault_all);
		if (kind == REVOKE) {
			ksft_print_msg("%s: callback <= %.3f ms, the exporter waited <= %.3f ms\n",
				       teardown_name[kind], cb_max / 1e6, wait_max / 1e6);
			ksft_print_msg("%s: %d to %d reads still in flight after it\n",
				       teardown_name[kind], min_a, max_a);
		}
	}
	EXPECT_EQ(0, fgds_fdinfo_num(self->e.node, "fgds-gpu-pages"));
}

#define OWNER_ROUNDS 100

/*
 * Where the BAR's owner made the pages (nvidia-uvm over BAR1), a
 * registration uses them, out of the owner's pool while it lasts:
 * OWNER_ROUNDS rounds of REG, a read from the NVMe checked byte for byte
 * from the host, UNREG, at offsets all over the owner's range; each round
 * the pool is short of exactly the registration, and whole again after it.
 */
FIXTURE(owner) {
	struct ex_env e;
	int raw;
};

FIXTURE_VARIANT(owner) {
	const char *driver;	/* the real exporter this reproduces */
	__u32 flags;
};

FIXTURE_VARIANT_ADD(owner, nvidia_static_bar1) {
	.driver = "NVIDIA open module, static BAR1 with nvidia-uvm's P2PDMA pages",
	.flags = 0,
};

FIXTURE_VARIANT_ADD(owner, nvidia_static_bar1_phys) {
	.driver = "NVIDIA open module + get_phys(): the owner's pages, described",
	.flags = TEST_P2P_DMABUF_PHYS,
};

FIXTURE_SETUP(owner)
{
	const char *why;
	int ret;

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	ret = ex_open_raw(&self->e, &self->raw, &why);
	ASSERT_EQ(0, ret) TH_LOG("%s: %s", why, strerror(-ret));
	ksft_print_msg("%s\n", variant->driver);
}

FIXTURE_TEARDOWN(owner)
{
	if (self->raw >= 0)
		close(self->raw);
	ex_close(&self->e);
}

TEST_F_TIMEOUT(owner, reg_read_unreg_rounds, 600)
{
	long long pool0 = pool_available(), pool;
	__u64 len = 2 * SZ_1M, off;
	struct fgds_buf b;
	int i;

	ASSERT_LE((long long)(OWNER_MIB * SZ_1M), pool0) TH_LOG("pool: %s", strerror(-pool0));
	for (i = 0; i < OWNER_ROUNDS; i++) {
		__u64 seed = 0x0a9e0000 + i;

		off = OWNER_BASE + (i % (OWNER_MIB / 2)) * len;
		ASSERT_EQ(0, fgds_put_pattern(self->raw, 0, len, seed));
		ASSERT_EQ(0, ex_buf_len(&self->e, variant->flags, off, len, &b))
			TH_LOG("round %d", i);
		pool = pool_available();
		EXPECT_EQ(pool0 - (long long)len, pool) TH_LOG("round %d: pool during", i);
		ASSERT_EQ(0, host2("fill", seed ^ 0xff, off, len, 0));
		ASSERT_EQ((ssize_t)len, pread(self->raw, b.p, len, 0));
		EXPECT_EQ(0, host2("check", seed, off, len, 0)) TH_LOG("round %d", i);
		fgds_buf_put(self->e.node, &b);
		EXPECT_EQ(pool0, pool_available()) TH_LOG("round %d: pool after", i);
	}
	ksft_print_msg("%d rounds over the owner's pages, every byte checked from the host\n", i);
}

/* Tests that run after the matrix (fixtures run in the order they are declared). */
FIXTURE(late) {
	int unused;
};

FIXTURE_SETUP(late)
{
}

FIXTURE_TEARDOWN(late)
{
}

/*
 * REG_BUFFER waits for the fences the dma-buf rules ask a dynamic importer
 * that reads and writes the memory to obey: the exporter's (a clear,
 * DMA_RESV_USAGE_KERNEL) and implicitly synchronised writers
 * (DMA_RESV_USAGE_WRITE).
 */
TEST_F(late, fence_after_map_is_waited_for)
{
	struct ex_env e;
	const char *why;
	int raw, ret;

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	ret = ex_open(&e, &why);
	ASSERT_EQ(0, ret) TH_LOG("%s: %s", why, strerror(-ret));
	raw = open(getenv("FGDS_RAW"), O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, raw);
	ASSERT_EQ(0, fgds_put_pattern(raw, 0, BUF_LEN, 0xfe7ce));
	fence_at_map(_metadata, &e, raw, 24 * SZ_1M, 0);
	fence_at_map(_metadata, &e, raw, 24 * SZ_1M, 1);
	close(raw);
	ex_close(&e);
}

TEST_F_TIMEOUT(late, revoke_callback_bounded_with_io_in_flight, 1200)
{
	const char *env = getenv("FGDS_REVOKE_ROUNDS");
	int slow;

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	slow = open(getenv("FGDS_SLOW"), O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, slow);
	revoke_rounds(_metadata, slow, env ? atoi(env) : 100, "revoke");
	close(slow);
}

TEST_F_TIMEOUT(late, unbind_exporter_with_io_in_flight, 300)
{
	int slow;

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	slow = open(getenv("FGDS_SLOW"), O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, slow);
	unbind_with_reads_in_flight(_metadata, slow, "throttled NVMe");
	close(slow);
}

/*
 * The same with the reads held by the block layer itself, before they
 * reach the device: the test runs in a cgroup whose io.max lets the raw
 * NVMe read 4 MiB/s, so each round's reads wait in blk-throttle for half a
 * second with their pages pinned, as a user's throttled job would. The
 * callback still waits for none of them; UNREG waits for them all. Then the
 * exporter's driver is unbound and bound again with throttled reads in
 * flight: both finish, the reads end, nothing lands after the unbind, and
 * no task hangs.
 */
TEST_F_TIMEOUT(late, revoke_and_unbind_with_iomax_reads, 1200)
{
	char dev[64], pid[32];
	struct stat st;
	int raw, mark = fgds_klog_mark();

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	raw = open(getenv("FGDS_RAW"), O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, raw);
	ASSERT_EQ(0, fstat(raw, &st));
	/* io.max applies to whole disks: the one FGDS_RAW is on. */
	ASSERT_EQ(0, whole_disk_of(st.st_rdev, dev, sizeof(dev)));
	strncat(dev, " rbps=" IOMAX_RBPS, sizeof(dev) - strlen(dev) - 1);
	rmdir(IOMAX_CG);
	ASSERT_EQ(0, fgds_cgroup2_mount());
	ASSERT_EQ(0, fgds_sysfs_write("/sys/fs/cgroup/cgroup.subtree_control", "+io"));
	ASSERT_EQ(0, mkdir(IOMAX_CG, 0755));
	ASSERT_EQ(0, iomax_write("io.max", dev)) TH_LOG("io.max: %s", dev);
	snprintf(pid, sizeof(pid), "%d", getpid());
	ASSERT_EQ(0, iomax_write("cgroup.procs", pid));
	revoke_rounds(_metadata, raw, 100, "revoke, io.max");
	unbind_with_reads_in_flight(_metadata, raw, "io.max");
	EXPECT_EQ(0, fgds_sysfs_write("/sys/fs/cgroup/cgroup.procs", pid));
	EXPECT_EQ(0, rmdir(IOMAX_CG));
	EXPECT_EQ(0, fgds_kernel_reports_since(mark));
	close(raw);
}

/*
 * amdgpu and xe do not revoke their dma-bufs at remove(), so a dma-buf kept
 * open across an unbind and a bind describes VRAM of the old binding, which
 * the new one may give to someone else: REG_BUFFER of it on the new node
 * fails with ENODEV (the exporter refuses it), and nothing is made.
 */
TEST_F(late, stale_dma_buf_across_rebind)
{
	__u32 flags = TEST_P2P_DMABUF_DYNAMIC | TEST_P2P_DMABUF_SG_PROVIDER |
			 TEST_P2P_DMABUF_PHYS;
	long long memmap0;
	__u64 cookie;
	struct ex_env e;
	const char *why;
	int dmabuf, ret;

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	ASSERT_EQ(0, set_revoke_at_remove(0));
	memmap0 = fgds_memmap_pages();
	ret = ex_open(&e, &why);
	ASSERT_EQ(0, ret) TH_LOG("%s: %s", why, strerror(-ret));
	dmabuf = tpd_export(e.tpd, 40 * SZ_1M, BUF_LEN, flags, 0, 0);
	ASSERT_LE(0, dmabuf);
	ASSERT_EQ(0, fgds_reg(e.node, dmabuf, 0, BUF_LEN, &cookie));
	ex_close(&e);
	/* Unbound with the registration live: the node's unbind ends it. */
	ASSERT_EQ(0, rebind_exporter());
	ret = ex_open(&e, &why);
	ASSERT_EQ(0, ret) TH_LOG("%s after the rebind: %s", why, strerror(-ret));
	EXPECT_EQ(-ENODEV, fgds_reg(e.node, dmabuf, 0, BUF_LEN, &cookie));
	EXPECT_EQ(0, fgds_fdinfo_num(e.node, "fgds-gpu-pages"));
	EXPECT_EQ(0, fgds_fdinfo_num(e.node, "fgds-gpu-buffers"));
	close(dmabuf);
	ex_close(&e);
	EXPECT_EQ(memmap0, fgds_memmap_pages());
	ASSERT_EQ(0, set_revoke_at_remove(1));
}

/*
 * The owner is unbound and bound again, rebind_rounds() times, as amdgpu and xe
 * are (no revocation at remove(): the offer's auxiliary device, deleted
 * before the BAR's provider, is what ends the registrations), with reads
 * from the throttled NVMe in flight into a mapped registration and
 * REG_BUFFER running on the node: each unbind returns after the reads that
 * were in flight ended (the host's refill right after it is intact once
 * every read completed), every REG_BUFFER either registers or fails with
 * ENODEV, no struct page is left, and the node comes back with the binding.
 */
TEST_F_TIMEOUT(late, rebind_with_reg_and_io_in_flight, 1800)
{
	__u32 flags = TEST_P2P_DMABUF_DYNAMIC | TEST_P2P_DMABUF_SG_PROVIDER |
			 TEST_P2P_DMABUF_PHYS;
	int slow, whole, efault, ret, round, again = 0, min_p = NR_IOS, max_p = 0;
	int rounds = rebind_rounds();
	struct reg_loop r = { 0 };
	struct fgds_buffer_info info;
	struct unbind_arg u = { 0 };
	struct io_uring ring;
	pthread_t thr, reg;
	struct fgds_buf b;
	long long memmap0;
	struct ex_env e;
	const char *why;

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	ASSERT_EQ(0, set_revoke_at_remove(0));
	slow = open(getenv("FGDS_SLOW"), O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, slow);
	ASSERT_EQ(0, fgds_put_pattern(slow, 0, BUF_LEN, 0x5107));
	memmap0 = fgds_memmap_pages();
	for (round = 0; round < rounds; round++) {
		ret = ex_open(&e, &why);
		ASSERT_EQ(0, ret) TH_LOG("round %d: %s: %s", round, why, strerror(-ret));
		ASSERT_EQ(0, ex_buf(&e, flags, 32 * SZ_1M, &b));
		r.node = e.node;
		r.dmabuf = tpd_export(e.tpd, 40 * SZ_1M, BUF_LEN, flags, 0, 0);
		ASSERT_LE(0, r.dmabuf);
		r.stop = 0;
		ASSERT_EQ(0, pthread_create(&reg, NULL, reg_loop, &r));
		ASSERT_EQ(0, io_uring_queue_init(2 * NR_IOS, &ring, 0));
		ASSERT_EQ(NR_IOS, submit_slow_reads(&ring, slow, b.p));
		u.ring = &ring;
		ASSERT_EQ(0, pthread_create(&thr, NULL, unbind_exporter, &u));
		pthread_join(thr, NULL);
		ASSERT_EQ(0, u.ret) TH_LOG("round %d: unbind: %s", round, strerror(-u.ret));
		__atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
		pthread_join(reg, NULL);
		ASSERT_EQ(0, host2("fill", 0xbead0 + round, 32 * SZ_1M, BUF_LEN, 0));
		ASSERT_EQ(0, reap_all(&ring, NR_IOS, &whole, &efault));
		EXPECT_EQ(0, host2("check", 0xbead0 + round, 32 * SZ_1M, BUF_LEN, 0))
			TH_LOG("round %d: DMA after the unbind returned", round);
		ksft_print_msg("rebind round %d: %d reads, %d in flight, %d whole, %d EFAULT\n",
			       round, NR_IOS, u.in_flight, whole, efault);
		ASSERT_EQ(0, fgds_query(e.node, b.cookie, &info));
		EXPECT_EQ(FGDS_BUFFER_REVOKED, info.state);
		EXPECT_EQ(0, fgds_fdinfo_num(e.node, "fgds-gpu-pages"));
		io_uring_queue_exit(&ring);
		fgds_buf_put(e.node, &b);
		close(r.dmabuf);
		ex_close(&e);
		ASSERT_EQ(0, fgds_sysfs_write("/sys/bus/pci/drivers/" TPD_NAME "/bind", bdf2()));
		if (!u.in_flight || !whole) {
			/*
			 * Nothing was in flight, or every read failed (none was
			 * really in flight): this round does not count.
			 */
			ASSERT_GT(50, ++again) TH_LOG("too many rounds with nothing in flight");
			round--;
			continue;
		}
		min_p = u.in_flight < min_p ? u.in_flight : min_p;
		max_p = u.in_flight > max_p ? u.in_flight : max_p;
	}
	EXPECT_EQ(0, r.other) TH_LOG("a REG_BUFFER or UNREG_BUFFER failed with %s",
				     strerror(-r.last_err));
	EXPECT_EQ(memmap0, fgds_memmap_pages());
	ksft_print_msg("rebind: %d rounds with %d to %d of %d reads in flight (%d reruns)\n",
		       rounds, min_p, max_p, NR_IOS, again);
	ksft_print_msg("rebind: REG during the unbinds: %d registered, %d ENODEV\n",
		       r.ok, r.enodev);
	close(slow);
	ASSERT_EQ(0, set_revoke_at_remove(1));
}

/*
 * rmmod of the BAR's owner with a registration live, the dma-buf's fd
 * closed: the registration holds the dma-buf, and dma_buf_export() took a
 * reference on the exporter's module for it, so delete_module() fails with
 * EWOULDBLOCK (rmmod: "in use") and the registration keeps working (a read
 * into its mapping moves every byte, checked by the host). Once it is
 * unregistered the module unloads: the owner's unbind removes the offer and
 * the node, and no struct page is left. The exporter is loaded and bound
 * again for the tests after this one.
 */
TEST_F(late, rmmod_owner_with_registration_live)
{
	__u32 flags = TEST_P2P_DMABUF_DYNAMIC | TEST_P2P_DMABUF_SG_PROVIDER |
			 TEST_P2P_DMABUF_PHYS;
	struct fgds_buffer_info info;
	long long memmap0;
	struct fgds_buf b;
	struct ex_env e;
	char node[64];
	const char *why;
	int raw, ret;

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	ASSERT_EQ(0, access("/sys/module/" KUNIT_MOD, F_OK) ? 0 : system("rmmod " KUNIT_MOD));
	raw = open(getenv("FGDS_RAW"), O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, raw);
	ASSERT_EQ(0, fgds_put_pattern(raw, 0, BUF_LEN, 0x5108));
	memmap0 = fgds_memmap_pages();
	ret = ex_open(&e, &why);
	ASSERT_EQ(0, ret) TH_LOG("%s: %s", why, strerror(-ret));
	ASSERT_EQ(0, ex_buf(&e, flags, 32 * SZ_1M, &b));
	close(b.dmabuf);
	b.dmabuf = -1;
	/* Nothing of ours but the registration holds the exporter now. */
	close(e.tpd);
	e.tpd = -1;

	ret = syscall(__NR_delete_module, TPD_NAME, O_NONBLOCK) ? errno : 0;
	EXPECT_EQ(EWOULDBLOCK, ret) TH_LOG("rmmod with a registration live: %s", strerror(ret));
	ASSERT_NE(0, ret) TH_LOG("the exporter went with a registration live");
	ASSERT_EQ(0, fgds_query(e.node, b.cookie, &info));
	EXPECT_EQ(0, info.state);
	ASSERT_EQ(BUF_LEN, pread(raw, b.p, BUF_LEN, 0));
	EXPECT_EQ(0, host2("check", 0x5108, 32 * SZ_1M, BUF_LEN, 0))
		TH_LOG("a read after the refused rmmod did not land");

	fgds_buf_put(e.node, &b);
	ret = syscall(__NR_delete_module, TPD_NAME, O_NONBLOCK) ? errno : 0;
	EXPECT_EQ(0, ret) TH_LOG("rmmod after UNREG: %s", strerror(ret));
	EXPECT_EQ(-ENODEV, fgds_node_of(bdf2(), node, sizeof(node)));
	ex_close(&e);
	close(raw);
	if (access("/sys/module/" TPD_NAME, F_OK))
		ASSERT_EQ(0, system("modprobe " TPD_NAME " owner_pages_mib=" OWNER_MIB_STR));
	ASSERT_EQ(0, bind_to(bdf2(), TPD_NAME));
	/* Bound again, the exporter made its own pages again: none of fgds's is left. */
	EXPECT_EQ(memmap0, fgds_memmap_pages());
}

/* The second stand-in goes back to vfio-pci, for every later test. */
TEST_F(late, give_back_to_vfio_pci)
{
	char cur[64];

	if (!bdf2())
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF is not set)");
	ASSERT_EQ(0, bind_to(bdf2(), "vfio-pci"));
	ASSERT_EQ(0, driver_of(bdf2(), cur, sizeof(cur)));
	ASSERT_STREQ("vfio-pci", cur);
	EXPECT_EQ(0, system("rmmod " TPD_NAME));
}

TEST_HARNESS_MAIN
