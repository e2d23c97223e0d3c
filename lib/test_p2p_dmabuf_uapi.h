/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The interface of lib/test_p2p_dmabuf.c, a test exporter of dma-bufs over
 * a PCI device's BAR, used by tools/testing/selftests/fgds/.
 */
#ifndef _LIB_TEST_P2P_DMABUF_UAPI_H
#define _LIB_TEST_P2P_DMABUF_UAPI_H

#include <linux/const.h>
#include <linux/ioctl.h>
#include <linux/types.h>

/*
 * How a buffer is exported; each combination reproduces a real exporter
 * (see lib/test_p2p_dmabuf.c for which function of which driver).
 */
/* A dynamic exporter: it has pin()/unpin() and may move the buffer. */
#define TEST_P2P_DMABUF_DYNAMIC		_BITUL(0)
/* The sg table comes from the BAR's P2PDMA provider (dma_buf_phys_vec_to_sgt). */
#define TEST_P2P_DMABUF_SG_PROVIDER	_BITUL(1)
/* The sg table's DMA addresses are IOVAs, not the BAR's bus addresses. */
#define TEST_P2P_DMABUF_IOVA		_BITUL(2)
/* The exporter describes the buffer by its physical ranges (get_phys()). */
#define TEST_P2P_DMABUF_PHYS		_BITUL(3)
/*
 * With DYNAMIC: the buffer starts out of peers' reach (invisible VRAM or
 * GTT), and the first map for a peer, or a pin, moves it into reach first.
 */
#define TEST_P2P_DMABUF_MOVE_ON_MAP	_BITUL(4)
/* With DYNAMIC: a pin moves the buffer to system memory and keeps it there. */
#define TEST_P2P_DMABUF_PIN_SYSTEM	_BITUL(5)
#define TEST_P2P_DMABUF_FLAGS		0x3fU

/* Where a dynamic buffer is (struct test_p2p_dmabuf_state's placement). */
#define TEST_P2P_DMABUF_IN_BAR		0	/* in reach: the exported range */
#define TEST_P2P_DMABUF_AWAY		1	/* evicted, or not yet placed */
#define TEST_P2P_DMABUF_IN_SYSTEM	2	/* pinned in system memory */

struct test_p2p_dmabuf_export {
	__u64 offset;		/* in the BAR, page aligned */
	__u64 size;		/* page aligned */
	__u32 flags;		/* TEST_P2P_DMABUF_* */
	/*
	 * If not 0: every map() adds a kernel fence to the buffer's
	 * reservation object, signalled fence_ms later, after the range was
	 * filled with the byte fence_fill (an exporter clearing the memory
	 * before handing it out).
	 */
	__u32 fence_ms;
	__u32 fence_fill;
	/*
	 * The fence's usage: 0 DMA_RESV_USAGE_KERNEL (the exporter's clear),
	 * 1 DMA_RESV_USAGE_WRITE (a job of the GPU's user writing the buffer,
	 * implicitly synchronised).
	 */
	__u32 fence_write;
	__s32 fd;		/* out: the dma-buf */
};

struct test_p2p_dmabuf_state {
	__s32 fd;		/* in: a dma-buf of this exporter */
	__u32 revoked;		/* out */
	__u64 attachments;	/* out: attachments now */
	__u64 maps;		/* out: mappings now */
	__u64 pins;		/* out: pins now */
	__u64 maps_total;	/* out: map() calls so far */
	__u64 fences;		/* out: fences added so far */
	__u64 moves;		/* out: moves (invalidations) so far */
	__u32 placement;	/* out: TEST_P2P_DMABUF_IN_BAR, ... */
	__u32 pad;
	/* out: the longest dma_buf_invalidate_mappings() call: the importers' callbacks */
	__u64 invalidate_ns;
	/* out: the longest wait after one for the importers' fences (DMA still in flight) */
	__u64 fence_wait_ns;
};

#define TEST_P2P_DMABUF_IOCTL_EXPORT	_IOWR('P', 0x00, struct test_p2p_dmabuf_export)
/* Invalidates every mapping; later maps fail with ENODEV. Takes the fd. */
#define TEST_P2P_DMABUF_IOCTL_REVOKE	_IOW('P', 0x01, __s32)
/*
 * Evicts a dynamic buffer (a move out of peers' reach, which invalidates
 * every mapping); the next map moves it back. EBUSY while it is pinned.
 * Takes the fd.
 */
#define TEST_P2P_DMABUF_IOCTL_MOVE	_IOW('P', 0x02, __s32)
#define TEST_P2P_DMABUF_IOCTL_STATE	_IOWR('P', 0x03, struct test_p2p_dmabuf_state)
/*
 * Suspends the device: evicts every dynamic buffer that is not pinned.
 * Returns how many it evicted.
 */
#define TEST_P2P_DMABUF_IOCTL_SUSPEND	_IO('P', 0x04)

#endif /* _LIB_TEST_P2P_DMABUF_UAPI_H */
