// SPDX-License-Identifier: GPL-2.0

#include <linux/dma-buf.h>

__rust_helper void rust_helper_get_dma_buf(struct dma_buf *dmabuf)
{
	get_dma_buf(dmabuf);
}

__rust_helper struct dma_fence *rust_helper_dma_fence_get(struct dma_fence *fence)
{
	return dma_fence_get(fence);
}

__rust_helper void rust_helper_dma_fence_put(struct dma_fence *fence)
{
	dma_fence_put(fence);
}

__rust_helper bool rust_helper_dma_fence_is_signaled(struct dma_fence *fence)
{
	return dma_fence_is_signaled(fence);
}
