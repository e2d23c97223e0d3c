/* SPDX-License-Identifier: GPL-2.0 */
/* Helpers for the fgds selftests: registration, mapping, revocation. */
#ifndef FGDS_UTIL_H
#define FGDS_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/types.h>
#include <linux/fgds.h>
#include <linux/pci_regs.h>

#include "fgds_vfio.h"

#define FGDS_NODE "/dev/fgds0"

/* REG_BUFFER: returns 0 and the cookie, or -errno. */
static inline int fgds_reg(int fd, int dmabuf, __u64 off, __u64 size, __u64 *cookie)
{
	struct fgds_reg_buffer r = { .dmabuf_fd = dmabuf, .offset = off, .size = size };

	if (ioctl(fd, FGDS_IOCTL_REG_BUFFER, &r))
		return -errno;
	*cookie = r.cookie;
	return 0;
}

static inline int fgds_unreg(int fd, __u64 cookie)
{
	struct fgds_unreg_buffer u = { .cookie = cookie };

	return ioctl(fd, FGDS_IOCTL_UNREG_BUFFER, &u) ? -errno : 0;
}

static inline int fgds_query(int fd, __u64 cookie, struct fgds_buffer_info *info)
{
	memset(info, 0, sizeof(*info));
	info->cookie = cookie;
	return ioctl(fd, FGDS_IOCTL_QUERY_BUFFER, info) ? -errno : 0;
}

/*
 * A load from @p that the compiler keeps (as the kernel's READ_ONCE()): it
 * faults the page in, or raises the signal a test expects.
 */
static inline unsigned char fgds_load(const unsigned char *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* A store of @val to @p that the compiler keeps (as WRITE_ONCE()). */
static inline void fgds_store(unsigned char *p, unsigned char val)
{
	__atomic_store_n(p, val, __ATOMIC_RELAXED);
}

static inline void *fgds_map(int fd, __u64 cookie, __u64 size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, cookie);

	return p == MAP_FAILED ? NULL : p;
}

/*
 * A GPU buffer the way an application gets one: a dma-buf of [bar_off,
 * bar_off + size) of the stand-in's VRAM, registered and mapped.
 */
struct fgds_buf {
	int dmabuf;
	__u64 bar_off;
	__u64 size;
	__u64 cookie;
	unsigned char *p;
};

static inline int fgds_buf_get(int fd, struct fgds_vfio *v, __u64 bar_off, __u64 size,
			       struct fgds_buf *b)
{
	int ret;

	memset(b, 0, sizeof(*b));
	b->bar_off = bar_off;
	b->size = size;
	b->dmabuf = fgds_vfio_dmabuf(v, bar_off, size);
	if (b->dmabuf < 0)
		return b->dmabuf;
	ret = fgds_reg(fd, b->dmabuf, 0, size, &b->cookie);
	if (ret)
		return ret;
	b->p = fgds_map(fd, b->cookie, size);
	return b->p ? 0 : -errno;
}

static inline void fgds_buf_put(int fd, struct fgds_buf *b)
{
	if (b->p)
		munmap(b->p, b->size);
	if (b->cookie)
		fgds_unreg(fd, b->cookie);
	if (b->dmabuf > 0)
		close(b->dmabuf);
	memset(b, 0, sizeof(*b));
}

/* Clear the stand-in's memory-space enable through vfio: vfio-pci revokes its dma-bufs. */
static inline int fgds_vfio_set_memory(struct fgds_vfio *v, int enable)
{
	struct vfio_region_info reg = {
		.argsz = sizeof(reg),
		.index = VFIO_PCI_CONFIG_REGION_INDEX,
	};
	__u16 cmd;

	if (ioctl(v->device, VFIO_DEVICE_GET_REGION_INFO, &reg))
		return -errno;
	if (pread(v->device, &cmd, 2, reg.offset + PCI_COMMAND) != 2)
		return -errno;
	if (enable)
		cmd |= PCI_COMMAND_MEMORY;
	else
		cmd &= ~PCI_COMMAND_MEMORY;
	if (pwrite(v->device, &cmd, 2, reg.offset + PCI_COMMAND) != 2)
		return -errno;
	return 0;
}

#endif /* FGDS_UTIL_H */
