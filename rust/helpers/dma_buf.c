// SPDX-License-Identifier: GPL-2.0

#include <linux/dma-buf.h>

__rust_helper void rust_helper_get_dma_buf(struct dma_buf *dmabuf)
{
	get_dma_buf(dmabuf);
}
