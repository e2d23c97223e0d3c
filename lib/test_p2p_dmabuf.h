/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The in-kernel exports of lib/test_p2p_dmabuf.c, for the KUnit suite of
 * the Rust dma-buf import and P2PDMA page abstractions
 * (lib/test_p2p_dmabuf_kunit.rs, whose extern block declares them the same
 * way). lib/test_p2p_dmabuf.c documents each.
 */
#ifndef _LIB_TEST_P2P_DMABUF_H
#define _LIB_TEST_P2P_DMABUF_H

#include <linux/types.h>

struct auxiliary_device;
struct device;
struct dma_buf;

struct device *test_p2p_dmabuf_kunit_get(u64 *owner_off);
void test_p2p_dmabuf_kunit_put(struct device *dev);
struct auxiliary_device *test_p2p_dmabuf_kunit_offer(struct device *dev);
struct dma_buf *test_p2p_dmabuf_kunit_export(struct device *dev, u64 offset,
					     u64 size, u32 flags,
					     u32 fence_ms);
int test_p2p_dmabuf_kunit_invalidate(struct dma_buf *dmabuf, bool revoke);
int test_p2p_dmabuf_kunit_state(struct dma_buf *dmabuf, u64 *attachments,
				u64 *maps, u64 *pins);

#endif /* _LIB_TEST_P2P_DMABUF_H */
