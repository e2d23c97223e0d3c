/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The GPU stand-in's exporter, seen from user space: vfio-pci in no-IOMMU
 * mode exports ranges of the ivshmem BAR2 as dma-bufs
 * (VFIO_DEVICE_FEATURE_DMA_BUF), and maps the BAR for CPU access.
 */
#ifndef FGDS_VFIO_H
#define FGDS_VFIO_H

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/types.h>
#include <linux/vfio.h>

#define FGDS_VRAM_REGION VFIO_PCI_BAR2_REGION_INDEX

struct fgds_vfio {
	int container;
	int group;
	int device;
	__u64 bar_size;
	__u64 bar_offset;	/* of BAR2 in the device fd, for mmap */
};

static inline const char *fgds_gpu_bdf(void)
{
	const char *bdf = getenv("FGDS_GPU_BDF");

	return bdf ? bdf : "0000:04:00.0";
}

/*
 * Opens the vfio device @bdf in a container of @iommu (VFIO_NOIOMMU_IOMMU: the
 * fixture's no-IOMMU mode; VFIO_TYPE1v2_IOMMU behind an IOMMU, whose group
 * must be viable): returns 0 or a negative errno; @why says which step failed.
 */
static inline int fgds_vfio_open_iommu(struct fgds_vfio *v, const char *bdf, unsigned long iommu,
				       const char **why)
{
	struct vfio_region_info reg = { .argsz = sizeof(reg), .index = FGDS_VRAM_REGION };
	struct vfio_group_status st = { .argsz = sizeof(st) };
	const int noiommu = iommu == VFIO_NOIOMMU_IOMMU;
	char link[PATH_MAX], target[PATH_MAX], group[64];
	ssize_t n;

	memset(v, 0xff, sizeof(*v) - 2 * sizeof(__u64));
	snprintf(link, sizeof(link), "/sys/bus/pci/devices/%s/iommu_group", bdf);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0) {
		*why = "no iommu_group link (is the stand-in bound to vfio-pci?)";
		return -errno;
	}
	target[n] = 0;
	snprintf(group, sizeof(group), "/dev/vfio/%s%s", noiommu ? "noiommu-" : "",
		 basename(target));

	*why = "open /dev/vfio/vfio";
	v->container = open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC);
	if (v->container < 0)
		return -errno;
	*why = noiommu ? "open the noiommu group" : "open the group";
	/*
	 * A group has one opener at a time; the previous one may be a test
	 * process whose io_uring workers still hold its files for a moment.
	 */
	for (int tries = 0; tries < 100; tries++) {
		v->group = open(group, O_RDWR | O_CLOEXEC);
		if (v->group >= 0 || errno != EBUSY)
			break;
		usleep(100000);
	}
	if (v->group < 0)
		return -errno;
	*why = "the group is not viable (a device in it is bound to another driver)";
	if (ioctl(v->group, VFIO_GROUP_GET_STATUS, &st))
		return -errno;
	if (!(st.flags & VFIO_GROUP_FLAGS_VIABLE))
		return -EBUSY;
	*why = "VFIO_GROUP_SET_CONTAINER";
	if (ioctl(v->group, VFIO_GROUP_SET_CONTAINER, &v->container))
		return -errno;
	*why = noiommu ? "VFIO_SET_IOMMU(VFIO_NOIOMMU_IOMMU)" :
			 "VFIO_SET_IOMMU(VFIO_TYPE1v2_IOMMU)";
	if (ioctl(v->container, VFIO_SET_IOMMU, iommu))
		return -errno;
	*why = "VFIO_GROUP_GET_DEVICE_FD";
	v->device = ioctl(v->group, VFIO_GROUP_GET_DEVICE_FD, bdf);
	if (v->device < 0)
		return -errno;
	*why = "VFIO_DEVICE_GET_REGION_INFO(BAR2)";
	if (ioctl(v->device, VFIO_DEVICE_GET_REGION_INFO, &reg))
		return -errno;
	v->bar_size = reg.size;
	v->bar_offset = reg.offset;
	*why = NULL;
	return 0;
}

/* Opens the vfio device @bdf in the fixture's no-IOMMU mode. */
static inline int fgds_vfio_open_bdf(struct fgds_vfio *v, const char *bdf, const char **why)
{
	return fgds_vfio_open_iommu(v, bdf, VFIO_NOIOMMU_IOMMU, why);
}

/* The GPU stand-in of the fixture (FGDS_GPU_BDF). */
static inline int fgds_vfio_open(struct fgds_vfio *v, const char **why)
{
	return fgds_vfio_open_bdf(v, fgds_gpu_bdf(), why);
}

static inline void fgds_vfio_close(struct fgds_vfio *v)
{
	if (v->device >= 0)
		close(v->device);
	if (v->group >= 0)
		close(v->group);
	if (v->container >= 0)
		close(v->container);
	v->device = -1;
	v->group = -1;
	v->container = -1;
}

/*
 * VFIO_DEVICE_FEATURE_DMA_BUF with one range: the feature's header, then its
 * data (the dma-buf request), then the request's one range, back to back.
 */
struct fgds_vfio_dmabuf_req {
	struct vfio_device_feature hdr;
	struct vfio_device_feature_dma_buf db;
	struct vfio_region_dma_range range;
};

static_assert(offsetof(struct fgds_vfio_dmabuf_req, db) ==
	      offsetof(struct vfio_device_feature, data), "db is the feature's data");
static_assert(offsetof(struct fgds_vfio_dmabuf_req, range) ==
	      offsetof(struct fgds_vfio_dmabuf_req, db) +
	      offsetof(struct vfio_device_feature_dma_buf, dma_ranges),
	      "range is the request's dma_ranges[0]");

/* Export [off, off + len) of the BAR as a dma-buf: returns its fd or -errno. */
static inline int fgds_vfio_dmabuf(struct fgds_vfio *v, __u64 off, __u64 len)
{
	struct fgds_vfio_dmabuf_req req = {
		.hdr = {
			.argsz = sizeof(req),
			.flags = VFIO_DEVICE_FEATURE_GET | VFIO_DEVICE_FEATURE_DMA_BUF,
		},
		.db = {
			.region_index = FGDS_VRAM_REGION,
			.open_flags = O_RDWR | O_CLOEXEC,
			.nr_ranges = 1,
		},
		.range = { .offset = off, .length = len },
	};
	int fd = ioctl(v->device, VFIO_DEVICE_FEATURE, &req);

	return fd < 0 ? -errno : fd;
}

/* CPU mapping of the whole BAR through vfio-pci. */
static inline void *fgds_vfio_map_bar(struct fgds_vfio *v)
{
	void *p = mmap(NULL, v->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, v->device,
		       v->bar_offset);

	return p == MAP_FAILED ? NULL : p;
}

/* Value of "key:" in /proc/self/fdinfo/@fd, or "" */
static inline void fgds_fdinfo(int fd, const char *key, char *val, size_t len)
{
	char path[64], line[256];
	size_t kl = strlen(key);
	FILE *f;

	val[0] = 0;
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			char *p = line + kl + 1;

			p += strspn(p, " \t");
			p[strcspn(p, "\n")] = 0;
			snprintf(val, len, "%s", p);
			break;
		}
	}
	fclose(f);
}

#endif /* FGDS_VFIO_H */
