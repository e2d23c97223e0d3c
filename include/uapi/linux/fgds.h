/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * fgds - fast GPU direct storage: O_DIRECT and io_uring I/O between files
 * and GPU memory, peer to peer.
 *
 * A GPU buffer exported as a dma-buf is registered on /dev/fgdsN (one node
 * per PCIe GPU). Its BAR pages become PCI P2PDMA pages that user space maps
 * with mmap(2) at the returned cookie; the mapping is then a valid buffer for
 * O_DIRECT read/write/readv/writev and io_uring READ/WRITE/READV/WRITEV on
 * devices whose queues can do P2P DMA (NVMe over PCIe below the same switch,
 * or an allow-listed host bridge). See Documentation/misc-devices/fgds.rst.
 *
 * Ioctl letter 0x88, numbers 0x00-0x1f (Documentation/userspace-api/ioctl/
 * ioctl-number.rst). Every structure has fixed-size fields and explicit
 * padding; reserved fields and flags must be zero (EINVAL otherwise), so
 * that later versions can give them a meaning.
 *
 * Lifetime: a registration ends with FGDS_IOCTL_UNREG_BUFFER, the last close
 * of its open file (a mapping keeps the file open; exit and SIGKILL close
 * it), the exporter's revocation or the GPU's removal from the system (its
 * node then goes away; open files of it get ENODEV for new registrations).
 * Then CPU access to its mappings raises SIGBUS, new I/O on them fails with
 * EFAULT and mmap with ENODEV. UNREG, the close and the unbinding return only
 * once the DMA of requests already in flight is done. The exporter's revoke
 * waits for none of it: requests issued before it complete against the
 * memory they were issued for, which stays pinned until UNREG or the close.
 * Only buffers the exporter can pin where peers reach them are registered
 * (EOPNOTSUPP otherwise). Mappings are not inherited across fork and cannot
 * grow (mremap: EFAULT). A revoked registration (or one of a removed GPU) is
 * reported by FGDS_IOCTL_QUERY_BUFFER and must still be unregistered. The
 * unbinding of the GPU's driver ends its registrations too, first thing in
 * its remove(), and its node with them; registration on an open file of that
 * node fails with ENODEV, and a new binding makes a new node. What a
 * registration makes is charged to the caller's memory cgroup (ENOMEM over
 * its limit), and an open file holds at most the module parameter
 * max_registrations of them (ENOSPC).
 *
 * I/O into a mapping fails with EREMOTEIO on a device that cannot do P2P
 * DMA at all (loop, virtio, dm; md or an NVMe multipath head over a member
 * that cannot), with EINVAL on one that can but has no
 * P2P path to the GPU (an NVMe sharing no switch with it behind a host bridge
 * that is not on the P2PDMA allow list) - the same errno as a misaligned
 * O_DIRECT request - and nothing reaches the GPU's memory. A read crossing
 * the end of a file on ext4 or xfs zero-fills the buffer past the returned
 * count up to the requested length, as it does in host memory.
 */
#ifndef _UAPI_LINUX_FGDS_H
#define _UAPI_LINUX_FGDS_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* Version of this interface, reported by FGDS_IOCTL_VERSION. */
#define FGDS_API_VERSION	1

/* Features reported by FGDS_IOCTL_VERSION in &fgds_version.features. */
#define FGDS_FEATURE_QUERY	(1ULL << 0)	/* FGDS_IOCTL_QUERY_BUFFER */
#define FGDS_FEATURE_REVOKE	(1ULL << 1)	/* exporter revocation is honoured */

/**
 * struct fgds_version - FGDS_IOCTL_VERSION
 * @version: out: FGDS_API_VERSION of the driver.
 * @pad: out: zero.
 * @features: out: FGDS_FEATURE_* bits.
 * @page_size: out: alignment of &fgds_reg_buffer.offset and .size (PAGE_SIZE).
 * @max_size: out: largest size one registration may have.
 */
struct fgds_version {
	__u32 version;
	__u32 pad;
	__u64 features;
	__u64 page_size;
	__u64 max_size;
};

/**
 * struct fgds_reg_buffer - FGDS_IOCTL_REG_BUFFER
 * @dmabuf_fd: in: a dma-buf whose memory lies in a BAR of this node's GPU.
 * @flags: in: must be 0.
 * @offset: in: offset of the buffer in the dma-buf, page aligned.
 * @size: in: bytes, page aligned, non-zero, @offset + @size <= dma-buf size.
 * @cookie: out: the offset to pass to mmap(2) to map the buffer; valid on
 *	this open file only, until FGDS_IOCTL_UNREG_BUFFER or close.
 * @reserved: in: must be zero.
 */
struct fgds_reg_buffer {
	__s32 dmabuf_fd;
	__u32 flags;
	__u64 offset;
	__u64 size;
	__u64 cookie;
	__u64 reserved[2];
};

/**
 * struct fgds_unreg_buffer - FGDS_IOCTL_UNREG_BUFFER
 * @cookie: in: a cookie returned by FGDS_IOCTL_REG_BUFFER on this open file.
 * @reserved: in: must be zero.
 */
struct fgds_unreg_buffer {
	__u64 cookie;
	__u64 reserved;
};

/* &fgds_buffer_info.state */
#define FGDS_BUFFER_REVOKED	(1U << 0)	/* the exporter revoked the memory */

/**
 * struct fgds_buffer_info - FGDS_IOCTL_QUERY_BUFFER
 * @cookie: in: a cookie of this open file.
 * @size: out: size of the registration.
 * @bar_offset: out: offset of the buffer's first byte in @bar.
 * @bar: out: index of the GPU BAR holding the buffer.
 * @state: out: FGDS_BUFFER_* bits.
 * @reserved: in: must be zero; out: zero.
 */
struct fgds_buffer_info {
	__u64 cookie;
	__u64 size;
	__u64 bar_offset;
	__u32 bar;
	__u32 state;
	__u64 reserved[2];
};

#define FGDS_IOCTL_BASE		0x88

/* Ioctl numbers, also as an enum so that bindgen sees them. */
enum fgds_ioctl_nr {
	FGDS_IOCTL_NR_VERSION = 0x00,
	FGDS_IOCTL_NR_REG_BUFFER = 0x01,
	FGDS_IOCTL_NR_UNREG_BUFFER = 0x02,
	FGDS_IOCTL_NR_QUERY_BUFFER = 0x03,
};

#define FGDS_IOCTL_VERSION \
	_IOR(FGDS_IOCTL_BASE, FGDS_IOCTL_NR_VERSION, struct fgds_version)
#define FGDS_IOCTL_REG_BUFFER \
	_IOWR(FGDS_IOCTL_BASE, FGDS_IOCTL_NR_REG_BUFFER, struct fgds_reg_buffer)
#define FGDS_IOCTL_UNREG_BUFFER \
	_IOW(FGDS_IOCTL_BASE, FGDS_IOCTL_NR_UNREG_BUFFER, struct fgds_unreg_buffer)
#define FGDS_IOCTL_QUERY_BUFFER \
	_IOWR(FGDS_IOCTL_BASE, FGDS_IOCTL_NR_QUERY_BUFFER, struct fgds_buffer_info)

#endif /* _UAPI_LINUX_FGDS_H */
