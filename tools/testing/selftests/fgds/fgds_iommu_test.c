// SPDX-License-Identifier: GPL-2.0
/*
 * fgds behind a translating IOMMU: the selftests of make check's IOMMU boot
 * (tools/testing/fgds-vm/run-vm.sh iommu: QEMU's intel-iommu in front of
 * every PCI device, intel_iommu=on, strict invalidation).
 *
 * What must hold there:
 * - the storage's DMA is translated, and O_DIRECT into host memory moves
 *   every byte right (the baseline: the IOMMU is in the path and works);
 * - exporters register as without an IOMMU: vfio-pci with a type1 container
 *   (real IOMMU groups instead of no-IOMMU mode), and lib/test_p2p_dmabuf.c's
 *   amdgpu/xe pattern, whose sg table now holds IOVAs the IOMMU really
 *   allocated (fgds never reads them);
 * - O_DIRECT between the NVMe and the mapping either moves every byte right
 *   or is refused with the documented errno (EINVAL: the block layer found no
 *   P2P path), with the BAR and the disk untouched and no DMA fault (a DMA
 *   the IOMMU blocked) in the kernel log. Which of the two is the kernel's
 *   P2PDMA rule (pci_p2pdma_map_type()), which the test applies itself to the
 *   path it finds and asserts: through the root complex, which the kernel
 *   allows on AMD Zen or newer (cpu_supports_p2pdma()) or on allow-listed host
 *   bridges (QEMU's q35 is not one), the IOMMU maps the BAR for the NVMe.
 *
 * The NVMe is "fgdsfar" (FGDS_FAR), on a root port of its own: the IOMMU
 * boot's vCPUs are Zen, so the kernel routes its P2P through the root
 * complex and the IOMMU. The NVMe below the stand-ins' switch is not used
 * for P2P here: QEMU's x3130 switch has no ACS, so the kernel uses bus
 * addresses, which a switch routes between its ports without the IOMMU; QEMU
 * sends every DMA through the IOMMU instead, which faults it and (QEMU's
 * NVMe) completes the read as if it had worked. That is the emulator, not
 * something a test of fgds could assert.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/types.h>
#include <linux/vfio.h>

#include "kselftest_harness.h"
#include "fgds_host.h"
#include "fgds_test.h"
#include "fgds_util.h"
#include "../../../../lib/test_p2p_dmabuf_uapi.h"

#define TPD_NAME "test_p2p_dmabuf"
#define TPD_DEV "/dev/" TPD_NAME
#define BUF_LEN (4 * SZ_1M)
#define NR_IOS 16
#define IO_LEN (BUF_LEN / NR_IOS)
/* PCI_ACS_RR | PCI_ACS_CR: requests and completions redirected upstream */
#define ACS_REDIRECT 0x000c
#define NO_IOMMU "no IOMMU unit (tools/testing/fgds-vm/run-vm.sh iommu boots with one)"

/* The PCI function behind a block device such as /dev/nvme0n1. */
static int pci_of_block(const char *dev, char *bdf, size_t len)
{
	char path[PATH_MAX], real[PATH_MAX];

	snprintf(path, sizeof(path), "/sys/class/block/%s/device/device", basename((char *)dev));
	if (!realpath(path, real))
		return -errno;
	snprintf(bdf, len, "%s", basename(real));
	return 0;
}

/* The IOMMU group of @bdf: its number, and its domain type in @type. */
static int group_of(const char *bdf, char *type, size_t len)
{
	char path[PATH_MAX], target[PATH_MAX];
	ssize_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/iommu_group", bdf);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return -errno;
	target[n] = 0;
	type[0] = 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/iommu_group/type", bdf);
	f = fopen(path, "r");
	if (f) {
		if (!fgets(type, len, f))
			type[0] = 0;
		type[strcspn(type, "\n")] = 0;
		fclose(f);
	}
	return atoi(basename(target));
}

/* The ACS control register of @dir's function, or -1 if it has no ACS capability. */
static int acs_ctrl(const char *dir)
{
	unsigned char cfg[4096];
	char path[PATH_MAX + 16];
	unsigned int pos = 0x100;
	ssize_t n;
	int fd, hops;

	snprintf(path, sizeof(path), "%s/config", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = pread(fd, cfg, sizeof(cfg), 0);
	close(fd);
	if (n < 0x104)
		return -1;
	for (hops = 0; hops < 64 && pos >= 0x100 && pos + 8 <= (size_t)n; hops++) {
		__u32 h = cfg[pos] | cfg[pos + 1] << 8 | cfg[pos + 2] << 16 |
			     (__u32)cfg[pos + 3] << 24;

		if ((h & 0xffff) == PCI_EXT_CAP_ID_ACS)
			return cfg[pos + PCI_ACS_CTRL] | cfg[pos + PCI_ACS_CTRL + 1] << 8;
		pos = h >> 20;
	}
	return -1;
}

/* What pci_p2pdma_map_type() decides for a path (see route()). */
enum route {
	ROUTE_SWITCH,	/* a common upstream bridge, no ACS redirect: bus addresses */
	ROUTE_HOST,	/* through the root complex: the IOMMU maps the BAR */
};

/*
 * The route between the functions @a and @b (pci_p2pdma's
 * __upstream_bridge_distance()): ROUTE_SWITCH when they share an upstream
 * bridge and no function on the way up to it, that bridge included,
 * redirects peer requests upstream (ACS P2P Request or Completion
 * Redirect); ROUTE_HOST otherwise, with the redirecting function, if any, in
 * @where. Walks sysfs.
 */
static int route(const char *a, const char *b, char *where, size_t len)
{
	char pa[PATH_MAX], pb[PATH_MAX], path[PATH_MAX + 32];
	size_t common = 0;
	int side;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", a);
	if (!realpath(path, pa))
		return -errno;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", b);
	if (!realpath(path, pb))
		return -errno;
	while (pa[common] && pa[common] == pb[common])
		common++;
	/* The common upstream bridge's directory, without its final slash. */
	while (common && pa[common] != '/')
		common--;
	where[0] = 0;
	/* Only the root bus (/sys/devices/pciDDDD:BB) in common: no bridge. */
	if (!strncmp(basename(strndupa(pa, common)), "pci", 3))
		return ROUTE_HOST;
	for (side = 0; side < 2; side++) {
		char dir[PATH_MAX];
		char *slash;

		snprintf(dir, sizeof(dir), "%s", side ? pb : pa);
		for (;;) {
			int ctrl = acs_ctrl(dir);

			if (ctrl > 0 && (ctrl & ACS_REDIRECT)) {
				snprintf(where, len, "%s", basename(dir));
				return ROUTE_HOST;
			}
			if (strlen(dir) <= common)
				break;
			slash = strrchr(dir, '/');
			if (!slash)
				break;
			*slash = 0;
		}
	}
	return ROUTE_SWITCH;
}

/* Whether the kernel lets the root complex carry P2P: cpu_supports_p2pdma(). */
static int cpu_supports_p2pdma(void)
{
	char line[256], vendor[64] = "";
	int family = -1;
	FILE *f = fopen("/proc/cpuinfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f) && (family < 0 || !vendor[0])) {
		if (sscanf(line, "vendor_id : %63s", vendor) == 1)
			continue;
		if (sscanf(line, "cpu family : %d", &family) == 1)
			continue;
	}
	fclose(f);
	return !strcmp(vendor, "AuthenticAMD") && family >= 0x17;
}

/* The number of IOMMU units the kernel found. */
static int iommu_units(void)
{
	DIR *d = opendir("/sys/class/iommu");
	struct dirent *de;
	int units = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		units += de->d_name[0] != '.';
	closedir(d);
	return units;
}

/* The IOMMU is there and translates for the data NVMe and both stand-ins. */
TEST(iommu_translates_storage_and_stand_ins)
{
	const char *gpus[2] = { getenv("FGDS_GPU_BDF"), getenv("FGDS_GPU2_BDF") };
	char nvme[32], type[32];
	int units, g, i;

	if (!getenv("FGDS_NVME"))
		SKIP(return, "not in the fgds VM (FGDS_NVME is not set)");
	units = iommu_units();
	if (!units)
		SKIP(return, NO_IOMMU);
	ASSERT_EQ(0, pci_of_block(getenv("FGDS_NVME"), nvme, sizeof(nvme)));
	g = group_of(nvme, type, sizeof(type));
	ASSERT_LE(0, g) TH_LOG("%s has no IOMMU group", nvme);
	/* "DMA" (strict) or "DMA-FQ": translated; "identity" would bypass it. */
	ASSERT_EQ(0, strncmp(type, "DMA", 3)) TH_LOG("group %d of %s is '%s'", g, nvme, type);
	ksft_print_msg("%d IOMMU unit(s); NVMe %s in group %d (%s)\n", units, nvme, g, type);
	for (i = 0; i < 2; i++) {
		ASSERT_NE(NULL, gpus[i]);
		g = group_of(gpus[i], type, sizeof(type));
		ASSERT_LE(0, g) TH_LOG("%s has no IOMMU group", gpus[i]);
		ksft_print_msg("stand-in %s in group %d\n", gpus[i], g);
	}
}

/* The baseline: the NVMe's DMA into host memory, through the IOMMU, every byte. */
TEST(host_memory_io_through_the_iommu)
{
	const char *raw = getenv("FGDS_RAW");
	struct io_uring_cqe *cqe;
	struct io_uring ring;
	unsigned char *p;
	int fd, i;

	if (!raw)
		SKIP(return, "not in the fgds VM (FGDS_RAW is not set)");
	if (!iommu_units())
		SKIP(return, NO_IOMMU);
	fd = open(raw, O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, fd);
	p = fgds_aligned_buf(BUF_LEN);
	ASSERT_NE(NULL, p);
	fgds_pattern_fill(p, BUF_LEN, 0x10a0, 0);
	ASSERT_EQ((ssize_t)BUF_LEN, pwrite(fd, p, BUF_LEN, 0));
	memset(p, 0, BUF_LEN);
	ASSERT_EQ((ssize_t)BUF_LEN, pread(fd, p, BUF_LEN, 0));
	EXPECT_EQ(0, fgds_pattern_diff(p, BUF_LEN, 0x10a0, 0));
	memset(p, 0, BUF_LEN);
	ASSERT_EQ(0, io_uring_queue_init(NR_IOS, &ring, 0));
	for (i = 0; i < NR_IOS; i++)
		io_uring_prep_read(io_uring_get_sqe(&ring), fd, p + i * IO_LEN, IO_LEN, i * IO_LEN);
	ASSERT_EQ(NR_IOS, io_uring_submit(&ring));
	for (i = 0; i < NR_IOS; i++) {
		ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
		EXPECT_EQ((int)IO_LEN, cqe->res);
		io_uring_cqe_seen(&ring, cqe);
	}
	io_uring_queue_exit(&ring);
	EXPECT_EQ(0, fgds_pattern_diff(p, BUF_LEN, 0x10a0, 0));
	free(p);
	close(fd);
}

/* Binds @bdf to the test exporter (driver_override), from whatever has it. */
static int bind_test_exporter(const char *bdf)
{
	char path[PATH_MAX], target[PATH_MAX];
	ssize_t n;
	int ret;

	if (access("/sys/module/" TPD_NAME, F_OK) && system("modprobe " TPD_NAME))
		return -ENOENT;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver", bdf);
	n = readlink(path, target, sizeof(target) - 1);
	if (n >= 0) {
		target[n] = 0;
		if (!strcmp(basename(target), TPD_NAME))
			return 0;
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver/unbind", bdf);
		ret = fgds_sysfs_write(path, bdf);
		if (ret)
			return ret;
	}
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver_override", bdf);
	ret = fgds_sysfs_write(path, TPD_NAME);
	if (ret)
		return ret;
	return fgds_sysfs_write("/sys/bus/pci/drivers/" TPD_NAME "/bind", bdf);
}

FIXTURE(io) {
	struct fgds_vfio v;
	const char *bdf;
	const char *host_dir;
	int tpd;
	int node;
	int raw;
	int dmabuf;
	__u64 cookie;
	unsigned char *p;
	long long memmap;
};

FIXTURE_VARIANT(io) {
	const char *exporter;	/* the real driver whose export this is */
	int test_exporter;	/* 0: vfio-pci on the first stand-in */
	__u32 flags;		/* of the test exporter's export */
	__u64 bar_off;
};

FIXTURE_VARIANT_ADD(io, vfio_pci_type1) {
	.exporter = "vfio-pci, type1 IOMMU container",
	.bar_off = 200 * SZ_1M,
};

/* amdgpu_vram_mgr_alloc_sgt()/xe: sg from dma_map_resource(), IOVAs now. */
FIXTURE_VARIANT_ADD(io, amdgpu_xe_dma_map_resource) {
	.exporter = "amdgpu, xe + provider and get_phys(): sg from dma_map_resource() (IOVAs)",
	.test_exporter = 1,
	.flags = TEST_P2P_DMABUF_DYNAMIC | TEST_P2P_DMABUF_PHYS,
	.bar_off = 4 * SZ_1M,
};

FIXTURE_VARIANT_ADD(io, vfio_like_provider_sg) {
	.exporter = "vfio-pci pattern on the test exporter: sg from the provider",
	.test_exporter = 1,
	.flags = TEST_P2P_DMABUF_SG_PROVIDER | TEST_P2P_DMABUF_PHYS,
	.bar_off = 12 * SZ_1M,
};

FIXTURE_SETUP(io)
{
	char node[64], first[256];
	const char *why;
	int i, mark, ret;

	self->tpd = -1;
	self->node = -1;
	self->raw = -1;
	self->dmabuf = -1;
	self->v.container = -1;
	self->v.group = -1;
	self->v.device = -1;
	self->p = NULL;
	if (!getenv("FGDS_GPU2_BDF") || !getenv("FGDS_FAR"))
		SKIP(return, "not in the fgds VM (FGDS_GPU2_BDF or FGDS_FAR is not set)");
	if (!iommu_units())
		SKIP(return, NO_IOMMU);
	ksft_print_msg("%s\n", variant->exporter);
	self->memmap = fgds_memmap_pages();
	if (variant->test_exporter) {
		self->bdf = getenv("FGDS_GPU2_BDF");
		self->host_dir = FGDS_HOST2_DIR;
		ASSERT_EQ(0, bind_test_exporter(self->bdf)) TH_LOG("binding %s", self->bdf);
		self->tpd = open(TPD_DEV, O_RDWR | O_CLOEXEC);
		ASSERT_LE(0, self->tpd) TH_LOG(TPD_DEV ": %s", strerror(errno));
	} else {
		self->bdf = getenv("FGDS_GPU_BDF");
		self->host_dir = FGDS_HOST_DIR;
		ret = fgds_vfio_open_iommu(&self->v, self->bdf, VFIO_TYPE1v2_IOMMU, &why);
		ASSERT_EQ(0, ret) TH_LOG("vfio %s: %s: %s", self->bdf, why, strerror(-ret));
	}
	for (i = 0; i < 100 && fgds_node_of(self->bdf, node, sizeof(node)); i++)
		usleep(100000);
	self->node = open(node, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->node) TH_LOG("fgds node of %s: %s", self->bdf, strerror(errno));
	if (variant->test_exporter) {
		struct test_p2p_dmabuf_export e = {
			.offset = variant->bar_off, .size = BUF_LEN, .flags = variant->flags,
		};

		ASSERT_EQ(0, ioctl(self->tpd, TEST_P2P_DMABUF_IOCTL_EXPORT, &e))
			TH_LOG("export: %s", strerror(errno));
		self->dmabuf = e.fd;
	} else {
		self->dmabuf = fgds_vfio_dmabuf(&self->v, variant->bar_off, BUF_LEN);
		ASSERT_LE(0, self->dmabuf) TH_LOG("vfio dma-buf: %s", strerror(-self->dmabuf));
	}
	/* From here fgds alone: vfio-pci logs its reset when the device is opened. */
	mark = fgds_klog_mark();
	ret = fgds_reg(self->node, self->dmabuf, 0, BUF_LEN, &self->cookie);
	ASSERT_EQ(0, ret) TH_LOG("REG_BUFFER behind the IOMMU: %s", strerror(-ret));
	self->p = fgds_map(self->node, self->cookie, BUF_LEN);
	ASSERT_NE(NULL, self->p) TH_LOG("mmap: %s", strerror(errno));
	/* Registration is silent behind an IOMMU too. */
	ASSERT_EQ(0, fgds_kernel_lines_since(mark, first, sizeof(first)))
		TH_LOG("the kernel logged: %s", first);
	/* The NVMe on a root port of its own (see the top of the file). */
	self->raw = open(getenv("FGDS_FAR"), O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, self->raw);
}

FIXTURE_TEARDOWN(io)
{
	if (self->p)
		munmap(self->p, BUF_LEN);
	if (self->node >= 0 && self->dmabuf >= 0)
		fgds_unreg(self->node, self->cookie);
	if (self->dmabuf >= 0)
		close(self->dmabuf);
	if (self->raw >= 0)
		close(self->raw);
	if (self->node >= 0)
		close(self->node);
	if (self->tpd >= 0)
		close(self->tpd);
	fgds_vfio_close(&self->v);
	/* Nothing left of the registration's struct pages (the kernel's count). */
	if (self->memmap >= 0)
		EXPECT_EQ(self->memmap, fgds_memmap_pages());
}

/* Counts of the outcomes of the I/O into and out of the mapping. */
struct outcomes {
	int moved;
	int refused;
};

/*
 * One I/O's outcome: @n of @len bytes with @err, and @check (0: what the
 * outcome requires: the bytes moved, or nothing touched) is recorded.
 */
static void outcome(struct __test_metadata *_metadata, struct outcomes *o, const char *what,
		    ssize_t n, size_t len, int err, int check)
{
	if (n == (ssize_t)len) {
		o->moved++;
		EXPECT_EQ(0, check) TH_LOG("%s: moved, bytes wrong", what);
		return;
	}
	o->refused++;
	EXPECT_EQ(-1, n) TH_LOG("%s: %zd of %zu", what, n, len);
	EXPECT_EQ(EINVAL, err) TH_LOG("%s: %s", what, strerror(err));
	EXPECT_EQ(0, check) TH_LOG("%s: refused, but the BAR or the disk changed", what);
}

/*
 * Every way of moving data between the NVMe and the mapping: every byte
 * right, or refused with EINVAL with the BAR and the disk untouched, as the
 * P2PDMA rule predicts for the path; never a DMA fault.
 */
TEST_F_TIMEOUT(io, storage_io_every_byte_or_refused_untouched, 600)
{
	const __u64 seed = 0x10b00 + variant->bar_off / SZ_1M, off = variant->bar_off;
	const char *dir = self->host_dir;
	char nvme[32], where[64];
	struct io_uring_cqe *cqe;
	struct io_uring ring;
	struct iovec iov[2];
	struct outcomes o = { 0 };
	int r, expect_ok, mark, i, faults, err;
	unsigned char *tmp;
	ssize_t n;

	ASSERT_EQ(0, pci_of_block(getenv("FGDS_FAR"), nvme, sizeof(nvme)));
	r = route(nvme, self->bdf, where, sizeof(where));
	ASSERT_LE(0, r);
	/* Bus addresses below a switch: QEMU cannot stand for that here (see the top). */
	ASSERT_EQ(ROUTE_HOST, r) TH_LOG("%s and %s share a switch", nvme, self->bdf);
	expect_ok = cpu_supports_p2pdma();
	ksft_print_msg("path %s -> %s: through the root complex%s%s; expected: %s\n", nvme,
		       self->bdf, where[0] ? ", ACS redirecting at " : "", where, expect_ok ?
		       "P2P through the IOMMU moves every byte (AMD Zen: cpu_supports_p2pdma())" :
		       "refused with EINVAL (no P2P through this root complex)");
	tmp = fgds_aligned_buf(BUF_LEN);
	ASSERT_NE(NULL, tmp);
	ASSERT_EQ(0, io_uring_queue_init(NR_IOS, &ring, 0));
	mark = fgds_klog_mark();

	/* pread: disk seed, BAR seed ^ 0xff before. */
	ASSERT_EQ(0, fgds_put_pattern(self->raw, 0, BUF_LEN, seed));
	ASSERT_EQ(0, fgds_host_at(dir, "fill", seed ^ 0xff, off, BUF_LEN, 0));
	n = pread(self->raw, self->p, BUF_LEN, 0);
	err = errno;
	outcome(_metadata, &o, "pread", n, BUF_LEN, err, n == BUF_LEN ?
		fgds_host_at(dir, "check", seed, off, BUF_LEN, 0) :
		fgds_host_at(dir, "check", seed ^ 0xff, off, BUF_LEN, 0));

	/* preadv, two segments swapped. */
	ASSERT_EQ(0, fgds_host_at(dir, "fill", seed ^ 0xfe, off, BUF_LEN, 0));
	iov[0] = (struct iovec){ self->p + SZ_1M, SZ_1M };
	iov[1] = (struct iovec){ self->p, SZ_1M };
	n = preadv(self->raw, iov, 2, 0);
	err = errno;
	outcome(_metadata, &o, "preadv", n, 2 * SZ_1M, err, n == 2 * SZ_1M ?
		fgds_host_at(dir, "check", seed, off + SZ_1M, SZ_1M, 0) |
		fgds_host_at(dir, "check", seed, off, SZ_1M, SZ_1M) :
		fgds_host_at(dir, "check", seed ^ 0xfe, off, BUF_LEN, 0));

	/* io_uring: NR_IOS reads at once. */
	ASSERT_EQ(0, fgds_host_at(dir, "fill", seed ^ 0xfd, off, BUF_LEN, 0));
	for (i = 0; i < NR_IOS; i++)
		io_uring_prep_read(io_uring_get_sqe(&ring), self->raw, self->p + i * IO_LEN,
				   IO_LEN, i * IO_LEN);
	ASSERT_EQ(NR_IOS, io_uring_submit(&ring));
	n = 0;
	err = 0;
	for (i = 0; i < NR_IOS; i++) {
		ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
		if (cqe->res < 0)
			err = -cqe->res;
		else
			n += cqe->res;
		io_uring_cqe_seen(&ring, cqe);
	}
	/* All or none: a mix of moved and refused reads would be a finding. */
	EXPECT_TRUE(!err || !n) TH_LOG("io_uring: %zd bytes moved and %s", n, strerror(err));
	if (err)
		n = -1;
	outcome(_metadata, &o, "io_uring read", n, BUF_LEN, err, n == BUF_LEN ?
		fgds_host_at(dir, "check", seed, off, BUF_LEN, 0) :
		fgds_host_at(dir, "check", seed ^ 0xfd, off, BUF_LEN, 0));

	/* pwrite out of the mapping: the host writes the BAR, the disk must get it or stay. */
	ASSERT_EQ(0, fgds_host_at(dir, "fill", seed ^ 0xabcd, off, BUF_LEN, 0));
	n = pwrite(self->raw, self->p, BUF_LEN, 0);
	err = errno;
	ASSERT_EQ((ssize_t)BUF_LEN, pread(self->raw, tmp, BUF_LEN, 0));
	outcome(_metadata, &o, "pwrite", n, BUF_LEN, err, n == BUF_LEN ?
		!!fgds_pattern_diff(tmp, BUF_LEN, seed ^ 0xabcd, 0) :
		!!fgds_pattern_diff(tmp, BUF_LEN, seed, 0));

	faults = fgds_kernel_reports_since(mark);
	EXPECT_EQ(0, faults) TH_LOG("%d DMA faults or kernel reports (see the console)", faults);
	ksft_print_msg("%s: %d moved every byte, %d refused with EINVAL, %d DMA faults\n",
		       variant->exporter, o.moved, o.refused, faults);
	EXPECT_EQ(expect_ok ? 4 : 0, o.moved);
	EXPECT_EQ(expect_ok ? 0 : 4, o.refused);
	io_uring_queue_exit(&ring);
	free(tmp);
}

TEST_HARNESS_MAIN
