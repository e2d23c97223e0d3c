// SPDX-License-Identifier: GPL-2.0
/*
 * A test exporter of dma-bufs over a PCI device's BAR, for testing
 * importers of PCI MMIO (fgds: tools/testing/selftests/fgds/) against the
 * export patterns of the real GPU drivers, none of which runs on an emulated
 * device. It binds to a PCI device only through driver_override and exports
 * ranges of BAR 2 through /dev/test_p2p_dmabuf.
 *
 * Each export's flags pick the pattern; the combinations reproduce:
 *
 * - DYNAMIC: amdgpu_dma_buf_ops and xe_dmabuf_ops, dynamic exporters with
 *   pin()/unpin() that move buffers and tell importers through
 *   dma_buf_invalidate_mappings(). A buffer that is not pinned is evicted
 *   (TEST_P2P_DMABUF_IOCTL_MOVE: TTM's eviction, ttm_bo_evict(), under
 *   memory pressure) and by a suspend (TEST_P2P_DMABUF_IOCTL_SUSPEND:
 *   amdgpu_device_suspend() -> amdgpu_ttm_evict_resources(), xe_bo_evict_all());
 *   a pinned one is not (TTM evicts only BOs on its LRU, which pinned ones
 *   leave: ttm_bo_pin()). A map of an unpinned buffer for a peer moves it
 *   back into reach first, from within the map (amdgpu_dma_buf_map() and
 *   xe_dma_buf_map() validate it: ttm_bo_validate(), xe_bo_validate()). A pin
 *   moves it into reach and keeps it there (amdgpu_dma_buf_pin(): VRAM,
 *   CPU-visible, when every attachment is peer-to-peer). The memory itself
 *   never changes place here: what a move changes is whether the range is
 *   the buffer's, which get_phys() says. Without DYNAMIC: a static exporter,
 *   virtio_gpu_dmabuf_ops (VRAM blobs) and the NVIDIA open module's
 *   nv-dmabuf.c, or vfio-pci.
 * - After an invalidation that is not part of a map or pin (a revoke, an
 *   eviction, a suspend), the exporter waits with the reservation lock held
 *   for every fence in the reservation object, bookkeeping ones included, as
 *   vfio_pci_dma_buf_move() and TTM (ttm_bo_evict() -> ttm_bo_wait_ctx())
 *   do: an importer whose DMA is still in flight fences it off there, and
 *   the memory is free when those fences retire. The state ioctl reports the
 *   longest invalidation (the importers' callbacks) and the longest wait.
 * - MOVE_ON_MAP: the buffer starts out of a peer's reach (amdgpu: invisible
 *   VRAM or GTT; xe: system memory), so the first map or pin moves it.
 * - PIN_SYSTEM: xe_dma_buf_pin(), which migrates the buffer to system memory
 *   (XE_PL_TT) and pins it there, where get_phys() answers -EOPNOTSUPP (the
 *   sg table still describes the BAR range here; no importer of this module
 *   DMAs by it), and fails with -EINVAL if it is pinned elsewhere.
 * - Without SG_PROVIDER: the sg table of amdgpu_vram_mgr_alloc_sgt(),
 *   xe_ttm_vram_mgr_alloc_sgt() and virtio_gpu_vram_map_dma_buf(), one
 *   dma_map_resource() of the CPU-physical address of the memory for the
 *   importing device, with no struct page. With SG_PROVIDER: the sg table of
 *   vfio_pci_dma_buf_map(), dma_buf_phys_vec_to_sgt() from the BAR's P2PDMA
 *   provider.
 * - IOVA: the DMA addresses an IOMMU gives such a dma_map_resource(): not
 *   the bus address of the BAR (here: offset by TEST_IOVA_OFFSET; nothing
 *   may DMA to them, and an importer that turns them back into a BAR offset
 *   finds no BAR).
 * - PHYS: the exporter describes the buffer by its physical ranges and the
 *   BAR's provider (dma_buf_get_phys()), as vfio_pci_dma_buf_get_phys()
 *   does; no driver in Linux 7.2 but vfio-pci has it.
 * - fence_ms: a kernel fence in the buffer's reservation object at every
 *   map, signalled fence_ms later, after the memory was filled: the clear
 *   that amdgpu (AMDGPU_GEM_CREATE_VRAM_CLEARED, amdgpu_fill_buffer()) and
 *   xe (xe_migrate_clear()) queue on a buffer and publish as a
 *   DMA_RESV_USAGE_KERNEL fence; with fence_write, a DMA_RESV_USAGE_WRITE
 *   fence instead: a user's job writing the buffer, implicitly synchronised
 *   (amdgpu_cs_submit() adds a command submission's fence so).
 *
 * The module parameter owner_pages_mib makes probe create P2PDMA pages
 * itself (pci_p2pdma_add_resource()) over the last owner_pages_mib MiB of
 * BAR 2, as the NVIDIA open module's nvidia-uvm does over all of a static,
 * uncached BAR1 (uvm_devmem.c); with the exports of no DYNAMIC, no
 * SG_PROVIDER and no PHYS flag (nv-dmabuf.c) that is the NVIDIA pattern.
 * The rest of BAR 2 is mapped write-combined at probe, as amdgpu and xe map
 * their VRAM aperture, which reserves that memory type for it.
 *
 * Probe offers BAR 2 to importers that make P2PDMA pages
 * (pcim_p2pdma_offer()), as vfio-pci, amdgpu and xe do with the series'
 * patches, and remove() ends the offer first (pci_p2pdma_end_offers()), as
 * they do: the importers remove their pages, after the DMA already issued to
 * them, while the device still takes it. Then it revokes every buffer, as
 * vfio_pci_dma_buf_cleanup() does, and waits until every importer has
 * unmapped. With revoke_at_remove=0 it revokes nothing, as amdgpu and xe do
 * (amdgpu_pci_remove() and xe_pci_remove() leave VRAM BOs and their
 * dma-bufs alone; eviction waits until the DRM device is released): the
 * end of the offer is then all that ends importers' pages, and a buffer kept
 * past the unbind answers get_phys() with -ENODEV, as the patched drivers do
 * once the DRM device is unplugged.
 *
 * The same exports are open to the kernel (test_p2p_dmabuf_kunit_*()), for
 * the KUnit suite of the Rust dma-buf import and P2PDMA page abstractions,
 * lib/test_p2p_dmabuf_kunit.rs.
 */

#include <linux/auxiliary_bus.h>
#include <linux/delay.h>
#include <linux/dma-buf.h>
#include <linux/dma-buf-mapping.h>
#include <linux/dma-fence.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/file.h>
#include <linux/io.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/pci-p2pdma.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "test_p2p_dmabuf.h"
#include "test_p2p_dmabuf_uapi.h"

MODULE_IMPORT_NS("DMA_BUF");

#define TEST_BAR		2
#define TEST_IOVA_OFFSET	BIT_ULL(52)

static unsigned int owner_pages_mib;
module_param(owner_pages_mib, uint, 0444);
MODULE_PARM_DESC(owner_pages_mib,
		 "MiB at the end of BAR 2 given P2PDMA pages at probe, as nvidia-uvm does for a static BAR1");

static bool revoke_at_remove = true;
module_param(revoke_at_remove, bool, 0644);
MODULE_PARM_DESC(revoke_at_remove,
		 "Revoke every buffer when unbound, as vfio-pci does (N: as amdgpu and xe, which do not)");

struct test_dev {
	struct pci_dev *pdev;
	struct pci_p2pdma_bar *offer;
	struct p2pdma_provider *provider;
	phys_addr_t bar_start;
	resource_size_t bar_len;
	struct mutex lock;		/* protects bufs */
	struct list_head bufs;
};

struct test_buf {
	struct dma_buf *dmabuf;
	struct test_dev *tdev;		/* NULL once the device is unbound */
	struct list_head node;		/* in tdev->bufs */
	struct phys_vec phys;
	u32 flags;
	u32 fence_ms;
	u8 fence_fill;
	bool fence_write;
	bool revoked;
	u32 placement;			/* TEST_P2P_DMABUF_IN_*; under the resv lock */
	atomic64_t moves;
	atomic64_t attachments;
	atomic64_t maps;
	atomic64_t pins;
	atomic64_t maps_total;
	atomic64_t fences;
	atomic64_t invalidate_ns;	/* the longest dma_buf_invalidate_mappings() */
	atomic64_t fence_wait_ns;	/* the longest test_wait_importers() */
	wait_queue_head_t unmapped;
};

struct test_fence {
	struct dma_fence base;
	spinlock_t lock;		/* the fence's */
	struct delayed_work work;
	struct pci_dev *pdev;		/* referenced */
	struct phys_vec phys;
	u8 fill;
};

static DEFINE_MUTEX(test_lock);		/* protects test_dev, test_buf::tdev */
static struct test_dev *test_dev;
static struct workqueue_struct *test_wq;
/* Holds of test_p2p_dmabuf_kunit_get() on test_dev's binding. */
static atomic_t test_kunit_users = ATOMIC_INIT(0);
static DECLARE_WAIT_QUEUE_HEAD(test_kunit_wait);
static u64 test_fence_context;
static atomic64_t test_fence_seqno;

static const char *test_fence_name(struct dma_fence *f)
{
	return "test_p2p_dmabuf";
}

static const struct dma_fence_ops test_fence_ops = {
	.get_driver_name = test_fence_name,
	.get_timeline_name = test_fence_name,
};

/* Fills the memory, then signals: a clear queued by the exporter. */
static void test_fence_work(struct work_struct *work)
{
	struct test_fence *tf = container_of(to_delayed_work(work),
					     struct test_fence, work);
	void __iomem *io;

	io = ioremap(tf->phys.paddr, tf->phys.len);
	if (io) {
		memset_io(io, tf->fill, tf->phys.len);
		iounmap(io);
	} else {
		dma_fence_set_error(&tf->base, -ENOMEM);
	}
	dma_fence_signal(&tf->base);
	pci_dev_put(tf->pdev);
	dma_fence_put(&tf->base);
}

static int test_add_fence(struct test_buf *buf)
{
	struct test_fence *tf;
	int ret;

	ret = dma_resv_reserve_fences(buf->dmabuf->resv, 1);
	if (ret)
		return ret;
	tf = kzalloc_obj(*tf);
	if (!tf)
		return -ENOMEM;
	spin_lock_init(&tf->lock);
	dma_fence_init(&tf->base, &test_fence_ops, &tf->lock,
		       test_fence_context,
		       atomic64_inc_return(&test_fence_seqno));
	INIT_DELAYED_WORK(&tf->work, test_fence_work);
	tf->pdev = pci_dev_get(buf->tdev->pdev);
	tf->phys = buf->phys;
	tf->fill = buf->fence_fill;
	dma_resv_add_fence(buf->dmabuf->resv, &tf->base,
			   buf->fence_write ? DMA_RESV_USAGE_WRITE :
			   DMA_RESV_USAGE_KERNEL);
	/* The reference of the work, dropped when it signalled. */
	dma_fence_get(&tf->base);
	queue_delayed_work(test_wq, &tf->work, msecs_to_jiffies(buf->fence_ms));
	atomic64_inc(&buf->fences);
	dma_fence_put(&tf->base);
	return 0;
}

static int test_attach(struct dma_buf *dmabuf,
		       struct dma_buf_attachment *attach)
{
	struct test_buf *buf = dmabuf->priv;

	if (!attach->peer2peer)
		return -EOPNOTSUPP;
	if (READ_ONCE(buf->revoked))
		return -ENODEV;
	atomic64_inc(&buf->attachments);
	return 0;
}

static void test_detach(struct dma_buf *dmabuf,
			struct dma_buf_attachment *attach)
{
	struct test_buf *buf = dmabuf->priv;

	atomic64_dec(&buf->attachments);
}

static void test_record_max(atomic64_t *max, ktime_t since)
{
	s64 ns = ktime_to_ns(ktime_sub(ktime_get(), since));
	s64 old = atomic64_read(max);

	while (ns > old && !atomic64_try_cmpxchg(max, &old, ns))
		;
}

/* Tells the importers; the time their callbacks took is recorded. */
static void test_invalidate_importers(struct test_buf *buf)
{
	ktime_t t0 = ktime_get();

	dma_buf_invalidate_mappings(buf->dmabuf);
	test_record_max(&buf->invalidate_ns, t0);
}

/*
 * Waits, after an invalidation, until the importers' access to the memory
 * ended: the fences they added for DMA still in flight retired. Only then is
 * the memory free. With the reservation lock held, as vfio_pci_dma_buf_move()
 * and TTM's eviction (ttm_bo_evict() -> ttm_bo_wait_ctx(), or a copy that
 * depends on every fence) do.
 */
static void test_wait_importers(struct test_buf *buf)
{
	ktime_t t0 = ktime_get();

	dma_resv_assert_held(buf->dmabuf->resv);
	dma_resv_wait_timeout(buf->dmabuf->resv, DMA_RESV_USAGE_BOOKKEEP, false,
			      MAX_SCHEDULE_TIMEOUT);
	test_record_max(&buf->fence_wait_ns, t0);
}

/*
 * A move of @buf to @to, importers told first (amdgpu_bo_move_notify() and
 * xe_bo_move_notify() call dma_buf_invalidate_mappings() for exported BOs).
 * The memory it leaves is free once the importers' fences retired: a move
 * that an importer's map or pin makes finds none (nothing was mapped), an
 * eviction waits for them.
 */
static void test_move_locked(struct test_buf *buf, u32 to)
{
	dma_resv_assert_held(buf->dmabuf->resv);

	if (buf->placement == to)
		return;
	atomic64_inc(&buf->moves);
	test_invalidate_importers(buf);
	buf->placement = to;
	test_wait_importers(buf);
}

/* amdgpu_dma_buf_pin(), or xe_dma_buf_pin() with PIN_SYSTEM. */
static int test_pin(struct dma_buf_attachment *attach)
{
	struct test_buf *buf = attach->dmabuf->priv;
	u32 to = buf->flags & TEST_P2P_DMABUF_PIN_SYSTEM ?
		 TEST_P2P_DMABUF_IN_SYSTEM : TEST_P2P_DMABUF_IN_BAR;

	dma_resv_assert_held(buf->dmabuf->resv);

	if (atomic64_read(&buf->pins) && buf->placement != to)
		return -EINVAL;
	test_move_locked(buf, to);
	atomic64_inc(&buf->pins);
	return 0;
}

static void test_unpin(struct dma_buf_attachment *attach)
{
	struct test_buf *buf = attach->dmabuf->priv;

	atomic64_dec(&buf->pins);
}

/* amdgpu_vram_mgr_alloc_sgt(): one dma_map_resource(), no struct page. */
static struct sg_table *test_map_resource(struct test_buf *buf,
					  struct dma_buf_attachment *attach,
					  enum dma_data_direction dir)
{
	struct sg_table *sgt;
	dma_addr_t addr;
	int ret;

	sgt = kzalloc_obj(*sgt);
	if (!sgt)
		return ERR_PTR(-ENOMEM);
	ret = sg_alloc_table(sgt, 1, GFP_KERNEL);
	if (ret)
		goto err_free;
	addr = dma_map_resource(attach->dev, buf->phys.paddr, buf->phys.len,
				dir, DMA_ATTR_SKIP_CPU_SYNC);
	ret = dma_mapping_error(attach->dev, addr);
	if (ret)
		goto err_table;
	if (buf->flags & TEST_P2P_DMABUF_IOVA)
		addr += TEST_IOVA_OFFSET;
	sg_set_page(sgt->sgl, NULL, buf->phys.len, 0);
	sg_dma_address(sgt->sgl) = addr;
	sg_dma_len(sgt->sgl) = buf->phys.len;
	return sgt;

err_table:
	sg_free_table(sgt);
err_free:
	kfree(sgt);
	return ERR_PTR(ret);
}

static struct sg_table *test_map(struct dma_buf_attachment *attach,
				 enum dma_data_direction dir)
{
	struct test_buf *buf = attach->dmabuf->priv;
	struct sg_table *sgt;
	int ret;

	dma_resv_assert_held(buf->dmabuf->resv);

	if (buf->revoked || !buf->tdev)
		return ERR_PTR(-ENODEV);
	/* Validated into a placement the peer reaches, unless pinned. */
	if ((buf->flags & TEST_P2P_DMABUF_DYNAMIC) && !atomic64_read(&buf->pins))
		test_move_locked(buf, TEST_P2P_DMABUF_IN_BAR);
	if (buf->fence_ms) {
		ret = test_add_fence(buf);
		if (ret)
			return ERR_PTR(ret);
	}
	if (buf->flags & TEST_P2P_DMABUF_SG_PROVIDER)
		sgt = dma_buf_phys_vec_to_sgt(attach, buf->tdev->provider,
					      &buf->phys, 1, buf->phys.len, dir);
	else
		sgt = test_map_resource(buf, attach, dir);
	if (IS_ERR(sgt))
		return sgt;
	atomic64_inc(&buf->maps);
	atomic64_inc(&buf->maps_total);
	return sgt;
}

static void test_unmap(struct dma_buf_attachment *attach,
		       struct sg_table *sgt, enum dma_data_direction dir)
{
	struct test_buf *buf = attach->dmabuf->priv;

	dma_resv_assert_held(buf->dmabuf->resv);

	if (buf->flags & TEST_P2P_DMABUF_SG_PROVIDER) {
		dma_buf_free_sgt(attach, sgt, dir);
	} else {
		dma_addr_t addr = sg_dma_address(sgt->sgl);

		if (buf->flags & TEST_P2P_DMABUF_IOVA)
			addr -= TEST_IOVA_OFFSET;
		dma_unmap_resource(attach->dev, addr, sg_dma_len(sgt->sgl),
				   dir, DMA_ATTR_SKIP_CPU_SYNC);
		sg_free_table(sgt);
		kfree(sgt);
	}
	if (atomic64_dec_and_test(&buf->maps))
		wake_up_all(&buf->unmapped);
}

/* vfio_pci_dma_buf_get_phys(). */
static int test_get_phys(struct dma_buf_attachment *attach,
			 struct p2pdma_provider **provider,
			 const struct phys_vec **phys, size_t *nr_ranges)
{
	struct test_buf *buf = attach->dmabuf->priv;

	dma_resv_assert_held(buf->dmabuf->resv);

	if (buf->revoked || !buf->tdev)
		return -ENODEV;
	/* xe_dma_buf_get_phys(): a BO not in visible VRAM is not described. */
	if (buf->placement != TEST_P2P_DMABUF_IN_BAR)
		return -EOPNOTSUPP;
	*provider = buf->tdev->provider;
	*phys = &buf->phys;
	*nr_ranges = 1;
	return 0;
}

static void test_release(struct dma_buf *dmabuf)
{
	struct test_buf *buf = dmabuf->priv;

	mutex_lock(&test_lock);
	if (buf->tdev) {
		mutex_lock(&buf->tdev->lock);
		list_del(&buf->node);
		mutex_unlock(&buf->tdev->lock);
	}
	mutex_unlock(&test_lock);
	kfree(buf);
}

#define TEST_OPS(name, pin_fn, unpin_fn, get_phys_fn)		\
	static const struct dma_buf_ops name = {		\
		.attach = test_attach,				\
		.detach = test_detach,				\
		.pin = pin_fn,					\
		.unpin = unpin_fn,				\
		.map_dma_buf = test_map,			\
		.unmap_dma_buf = test_unmap,			\
		.get_phys = get_phys_fn,			\
		.release = test_release,			\
	}

TEST_OPS(test_ops_static, NULL, NULL, NULL);
TEST_OPS(test_ops_static_phys, NULL, NULL, test_get_phys);
TEST_OPS(test_ops_dynamic, test_pin, test_unpin, NULL);
TEST_OPS(test_ops_dynamic_phys, test_pin, test_unpin, test_get_phys);

static const struct dma_buf_ops *test_ops(u32 flags)
{
	bool dynamic = flags & TEST_P2P_DMABUF_DYNAMIC;

	if (flags & TEST_P2P_DMABUF_PHYS)
		return dynamic ? &test_ops_dynamic_phys : &test_ops_static_phys;
	return dynamic ? &test_ops_dynamic : &test_ops_static;
}

static bool test_is_ours(struct dma_buf *dmabuf)
{
	return dmabuf->ops == &test_ops_static ||
	       dmabuf->ops == &test_ops_static_phys ||
	       dmabuf->ops == &test_ops_dynamic ||
	       dmabuf->ops == &test_ops_dynamic_phys;
}

/* Exports [req->offset, req->offset + req->size) of BAR 2 as @req says. */
static struct dma_buf *test_new_buf(struct test_dev *tdev,
				    const struct test_p2p_dmabuf_export *req)
{
	DEFINE_DMA_BUF_EXPORT_INFO(exp_info);
	struct test_buf *buf;

	if (req->flags & ~TEST_P2P_DMABUF_FLAGS || req->fence_fill > 0xff ||
	    ((req->flags & (TEST_P2P_DMABUF_MOVE_ON_MAP | TEST_P2P_DMABUF_PIN_SYSTEM)) &&
	     !(req->flags & TEST_P2P_DMABUF_DYNAMIC)) ||
	    req->fence_write > 1 ||
	    !req->size || !PAGE_ALIGNED(req->offset) ||
	    !PAGE_ALIGNED(req->size) || req->offset >= tdev->bar_len ||
	    req->size > tdev->bar_len - req->offset)
		return ERR_PTR(-EINVAL);

	buf = kzalloc_obj(*buf);
	if (!buf)
		return ERR_PTR(-ENOMEM);
	buf->tdev = tdev;
	buf->phys.paddr = tdev->bar_start + req->offset;
	buf->phys.len = req->size;
	buf->flags = req->flags;
	buf->fence_ms = req->fence_ms;
	buf->fence_fill = req->fence_fill;
	buf->fence_write = req->fence_write;
	buf->placement = req->flags & TEST_P2P_DMABUF_MOVE_ON_MAP ?
			 TEST_P2P_DMABUF_AWAY : TEST_P2P_DMABUF_IN_BAR;
	init_waitqueue_head(&buf->unmapped);

	exp_info.ops = test_ops(req->flags);
	exp_info.size = req->size;
	exp_info.flags = O_RDWR;
	exp_info.priv = buf;
	buf->dmabuf = dma_buf_export(&exp_info);
	if (IS_ERR(buf->dmabuf)) {
		struct dma_buf *err = buf->dmabuf;

		kfree(buf);
		return err;
	}
	mutex_lock(&tdev->lock);
	list_add(&buf->node, &tdev->bufs);
	mutex_unlock(&tdev->lock);
	return buf->dmabuf;
}

static long test_export(struct test_dev *tdev, void __user *uarg)
{
	struct test_p2p_dmabuf_export req;
	struct dma_buf *dmabuf;
	int fd;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	dmabuf = test_new_buf(tdev, &req);
	if (IS_ERR(dmabuf))
		return PTR_ERR(dmabuf);
	fd = dma_buf_fd(dmabuf, O_CLOEXEC);
	if (fd < 0) {
		dma_buf_put(dmabuf);
		return fd;
	}
	req.fd = fd;
	if (copy_to_user(uarg, &req, sizeof(req)))
		return -EFAULT;	/* the fd stays, as for any ioctl that made one */
	return 0;
}

/*
 * Invalidates every mapping of @buf, for good if @revoke, and, if @wait,
 * returns once the importers' access ended (vfio_pci_dma_buf_move()).
 */
static void test_invalidate(struct test_buf *buf, bool revoke, bool wait)
{
	dma_resv_lock(buf->dmabuf->resv, NULL);
	if (revoke)
		buf->revoked = true;
	test_invalidate_importers(buf);
	if (wait)
		test_wait_importers(buf);
	dma_resv_unlock(buf->dmabuf->resv);
}

static long test_with_buf(void __user *uarg, long (*fn)(struct test_buf *, void __user *))
{
	struct dma_buf *dmabuf;
	s32 fd;
	long ret;

	if (get_user(fd, (s32 __user *)uarg))
		return -EFAULT;
	dmabuf = dma_buf_get(fd);
	if (IS_ERR(dmabuf))
		return PTR_ERR(dmabuf);
	if (!test_is_ours(dmabuf))
		ret = -EINVAL;
	else
		ret = fn(dmabuf->priv, uarg);
	dma_buf_put(dmabuf);
	return ret;
}

static long test_revoke(struct test_buf *buf, void __user *uarg)
{
	test_invalidate(buf, true, true);
	return 0;
}

/* An eviction (ttm_bo_evict()): only of a buffer that is not pinned. */
static long test_move(struct test_buf *buf, void __user *uarg)
{
	long ret = 0;

	if (!(buf->flags & TEST_P2P_DMABUF_DYNAMIC))
		return -EINVAL;	/* a static exporter never moves */
	dma_resv_lock(buf->dmabuf->resv, NULL);
	if (atomic64_read(&buf->pins))
		ret = -EBUSY;
	else
		test_move_locked(buf, TEST_P2P_DMABUF_AWAY);
	dma_resv_unlock(buf->dmabuf->resv);
	return ret;
}

/*
 * A suspend: every dynamic buffer that is not pinned leaves VRAM
 * (amdgpu_ttm_evict_resources(), xe_bo_evict_all()). Pinned ones stay.
 */
static long test_suspend(struct test_dev *tdev)
{
	struct test_buf *buf;
	long n = 0;

	mutex_lock(&tdev->lock);
	list_for_each_entry(buf, &tdev->bufs, node) {
		struct file *file;

		if (!(buf->flags & TEST_P2P_DMABUF_DYNAMIC))
			continue;
		file = get_file_active(&buf->dmabuf->file);
		if (!file)
			continue;	/* being released */
		dma_resv_lock(buf->dmabuf->resv, NULL);
		if (!atomic64_read(&buf->pins) &&
		    buf->placement != TEST_P2P_DMABUF_AWAY) {
			test_move_locked(buf, TEST_P2P_DMABUF_AWAY);
			n++;
		}
		dma_resv_unlock(buf->dmabuf->resv);
		fput(file);
	}
	mutex_unlock(&tdev->lock);
	return n;
}

static long test_state(struct test_buf *buf, void __user *uarg)
{
	struct test_p2p_dmabuf_state st = {
		.revoked = READ_ONCE(buf->revoked),
		.attachments = atomic64_read(&buf->attachments),
		.maps = atomic64_read(&buf->maps),
		.pins = atomic64_read(&buf->pins),
		.maps_total = atomic64_read(&buf->maps_total),
		.fences = atomic64_read(&buf->fences),
		.moves = atomic64_read(&buf->moves),
		.placement = READ_ONCE(buf->placement),
		.invalidate_ns = atomic64_read(&buf->invalidate_ns),
		.fence_wait_ns = atomic64_read(&buf->fence_wait_ns),
	};

	if (get_user(st.fd, (s32 __user *)uarg))
		return -EFAULT;
	return copy_to_user(uarg, &st, sizeof(st)) ? -EFAULT : 0;
}

static long test_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;
	long ret;

	switch (cmd) {
	case TEST_P2P_DMABUF_IOCTL_EXPORT:
		mutex_lock(&test_lock);
		ret = test_dev ? test_export(test_dev, uarg) : -ENODEV;
		mutex_unlock(&test_lock);
		return ret;
	case TEST_P2P_DMABUF_IOCTL_REVOKE:
		return test_with_buf(uarg, test_revoke);
	case TEST_P2P_DMABUF_IOCTL_MOVE:
		return test_with_buf(uarg, test_move);
	case TEST_P2P_DMABUF_IOCTL_STATE:
		return test_with_buf(uarg, test_state);
	case TEST_P2P_DMABUF_IOCTL_SUSPEND:
		mutex_lock(&test_lock);
		ret = test_dev ? test_suspend(test_dev) : -ENODEV;
		mutex_unlock(&test_lock);
		return ret;
	default:
		return -ENOTTY;
	}
}

static const struct file_operations test_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = test_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice test_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "test_p2p_dmabuf",
	.fops = &test_fops,
};

/**
 * test_p2p_dmabuf_kunit_get - hold the exporter's device bound
 * @owner_off: set to the offset in BAR 2 of the P2PDMA pages probe made
 *	(owner_pages_mib), U64_MAX when it made none
 *
 * Until test_p2p_dmabuf_kunit_put(), unbinding the device waits in
 * test_remove(), before the BAR's P2PDMA provider (devres of the binding)
 * is released: P2PDMA pages over the BAR may live until then.
 *
 * Return: the device the exporter is bound to, with a reference, or NULL
 * when it is bound to none.
 */
struct device *test_p2p_dmabuf_kunit_get(u64 *owner_off)
{
	struct device *dev = NULL;

	mutex_lock(&test_lock);
	if (test_dev) {
		atomic_inc(&test_kunit_users);
		dev = get_device(&test_dev->pdev->dev);
		*owner_off = owner_pages_mib ?
			     test_dev->bar_len - ((u64)owner_pages_mib << 20) :
			     U64_MAX;
	}
	mutex_unlock(&test_lock);
	return dev;
}
EXPORT_SYMBOL_GPL(test_p2p_dmabuf_kunit_get);

/**
 * test_p2p_dmabuf_kunit_offer - the auxiliary device of BAR 2's offer
 * @dev: held by test_p2p_dmabuf_kunit_get()
 *
 * Return: the auxiliary device pcim_p2pdma_offer() made at probe; it lives
 * while @dev is held (test_remove() ends the offer once nobody holds @dev).
 */
struct auxiliary_device *test_p2p_dmabuf_kunit_offer(struct device *dev)
{
	struct test_dev *tdev = dev_get_drvdata(dev);

	return &tdev->offer->adev;
}
EXPORT_SYMBOL_GPL(test_p2p_dmabuf_kunit_offer);

/**
 * test_p2p_dmabuf_kunit_put - release test_p2p_dmabuf_kunit_get()'s hold
 * @dev: what it returned
 */
void test_p2p_dmabuf_kunit_put(struct device *dev)
{
	put_device(dev);
	if (atomic_dec_and_test(&test_kunit_users))
		wake_up_all(&test_kunit_wait);
}
EXPORT_SYMBOL_GPL(test_p2p_dmabuf_kunit_put);

/**
 * test_p2p_dmabuf_kunit_export - export a range of BAR 2 in the kernel
 * @dev: held by test_p2p_dmabuf_kunit_get()
 * @offset: in BAR 2, page aligned
 * @size: page aligned
 * @flags: TEST_P2P_DMABUF_*
 * @fence_ms: as struct test_p2p_dmabuf_export's (the fill byte is 0)
 *
 * Return: the dma-buf, with a reference for the caller, or an ERR_PTR():
 * -EINVAL for a bad range or flags.
 */
struct dma_buf *test_p2p_dmabuf_kunit_export(struct device *dev, u64 offset,
					     u64 size, u32 flags, u32 fence_ms)
{
	const struct test_p2p_dmabuf_export req = {
		.offset = offset,
		.size = size,
		.flags = flags,
		.fence_ms = fence_ms,
	};

	/* Bound while held: drvdata is the test_dev probe set. */
	return test_new_buf(dev_get_drvdata(dev), &req);
}
EXPORT_SYMBOL_GPL(test_p2p_dmabuf_kunit_export);

/**
 * test_p2p_dmabuf_kunit_invalidate - move or revoke a buffer
 * @dmabuf: one of this exporter's
 * @revoke: for good (later maps fail with -ENODEV), or a move
 *
 * Returns without waiting for the fences the importers added: the caller
 * sees them in the reservation object.
 *
 * Return: 0, or -EINVAL when @dmabuf is not ours or a static one is moved.
 */
int test_p2p_dmabuf_kunit_invalidate(struct dma_buf *dmabuf, bool revoke)
{
	struct test_buf *buf = dmabuf->priv;

	if (!test_is_ours(dmabuf) ||
	    (!revoke && !(buf->flags & TEST_P2P_DMABUF_DYNAMIC)))
		return -EINVAL;
	test_invalidate(buf, revoke, false);
	return 0;
}
EXPORT_SYMBOL_GPL(test_p2p_dmabuf_kunit_invalidate);

/**
 * test_p2p_dmabuf_kunit_state - what importers hold of a buffer
 * @dmabuf: one of this exporter's
 * @attachments: set to its attachments now
 * @maps: set to its mappings now
 * @pins: set to its pins now
 *
 * Return: 0, or -EINVAL when @dmabuf is not ours.
 */
int test_p2p_dmabuf_kunit_state(struct dma_buf *dmabuf, u64 *attachments,
				u64 *maps, u64 *pins)
{
	struct test_buf *buf = dmabuf->priv;

	if (!test_is_ours(dmabuf))
		return -EINVAL;
	*attachments = atomic64_read(&buf->attachments);
	*maps = atomic64_read(&buf->maps);
	*pins = atomic64_read(&buf->pins);
	return 0;
}
EXPORT_SYMBOL_GPL(test_p2p_dmabuf_kunit_state);

static int test_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	resource_size_t owner_size = (resource_size_t)owner_pages_mib << 20;
	struct test_dev *tdev;
	int ret;

	if (!(pci_resource_flags(pdev, TEST_BAR) & IORESOURCE_MEM))
		return -ENODEV;
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	/* A GPU's DMA reach, as amdgpu_device_init() and xe set it. */
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		return ret;
	tdev = devm_kzalloc(&pdev->dev, sizeof(*tdev), GFP_KERNEL);
	if (!tdev)
		return -ENOMEM;
	tdev->pdev = pdev;
	tdev->bar_start = pci_resource_start(pdev, TEST_BAR);
	tdev->bar_len = pci_resource_len(pdev, TEST_BAR);
	mutex_init(&tdev->lock);
	INIT_LIST_HEAD(&tdev->bufs);

	/*
	 * A provider for the BAR, offered to importers that make P2PDMA pages,
	 * as vfio_pci_core_init_dev() and the patched amdgpu and xe do.
	 */
	tdev->offer = pcim_p2pdma_offer(pdev, TEST_BAR);
	if (IS_ERR(tdev->offer))
		return PTR_ERR(tdev->offer);
	tdev->provider = tdev->offer->provider;
	if (owner_size > tdev->bar_len)
		return -EINVAL;
	/*
	 * The VRAM aperture mapped write-combined, as amdgpu_ttm_init()
	 * (ioremap_wc() of the visible aperture) and xe_vram.c
	 * (devm_ioremap_wc() of LMEMBAR) do, which reserves that memory type
	 * for the range in the PAT memtype list; the owner's own pages, as
	 * nvidia-uvm's over a BAR1 that is not write-combined, are left out.
	 */
	if (owner_size < tdev->bar_len &&
	    !devm_ioremap_wc(&pdev->dev, tdev->bar_start,
			     tdev->bar_len - owner_size))
		return -ENOMEM;
	if (owner_size) {
		ret = pci_p2pdma_add_resource(pdev, TEST_BAR, owner_size,
					      tdev->bar_len - owner_size);
		if (ret)
			return ret;
	}

	mutex_lock(&test_lock);
	if (test_dev) {
		mutex_unlock(&test_lock);
		return -EBUSY;
	}
	test_dev = tdev;
	mutex_unlock(&test_lock);
	pci_set_drvdata(pdev, tdev);
	return 0;
}

/*
 * The offer's end first, as the patched vfio-pci, amdgpu and xe do; then
 * vfio_pci_dma_buf_cleanup(): revoke everything, wait for the unmaps.
 */
static void test_remove(struct pci_dev *pdev)
{
	struct test_dev *tdev = pci_get_drvdata(pdev);
	struct test_buf *buf, *next;

	mutex_lock(&test_lock);
	test_dev = NULL;
	mutex_unlock(&test_lock);
	/* The KUnit suite's P2PDMA pages refer to the provider released next. */
	wait_event(test_kunit_wait, !atomic_read(&test_kunit_users));
	pci_p2pdma_end_offers(pdev);

	mutex_lock(&test_lock);
	mutex_lock(&tdev->lock);
	list_for_each_entry_safe(buf, next, &tdev->bufs, node) {
		struct file *file = get_file_active(&buf->dmabuf->file);

		/*
		 * One being released has no attachment left; test_release()
		 * then waits for test_lock and finds it unlisted.
		 */
		if (file && revoke_at_remove) {
			test_invalidate(buf, true, true);
			wait_event(buf->unmapped, !atomic64_read(&buf->maps));
		}
		dma_resv_lock(buf->dmabuf->resv, NULL);
		buf->tdev = NULL;
		dma_resv_unlock(buf->dmabuf->resv);
		list_del_init(&buf->node);
		if (file)
			fput(file);
	}
	mutex_unlock(&tdev->lock);
	mutex_unlock(&test_lock);
}

static struct pci_driver test_driver = {
	.name = "test_p2p_dmabuf",
	.id_table = NULL,	/* driver_override only */
	.probe = test_probe,
	.remove = test_remove,
};

static int __init test_init(void)
{
	int ret;

	test_fence_context = dma_fence_context_alloc(1);
	test_wq = alloc_workqueue("test_p2p_dmabuf", WQ_UNBOUND, 0);
	if (!test_wq)
		return -ENOMEM;
	ret = misc_register(&test_misc);
	if (ret)
		goto err_wq;
	ret = pci_register_driver(&test_driver);
	if (ret)
		goto err_misc;
	return 0;

err_misc:
	misc_deregister(&test_misc);
err_wq:
	destroy_workqueue(test_wq);
	return ret;
}

static void __exit test_exit(void)
{
	pci_unregister_driver(&test_driver);
	misc_deregister(&test_misc);
	destroy_workqueue(test_wq);
}

module_init(test_init);
module_exit(test_exit);
MODULE_DESCRIPTION("Test exporter of dma-bufs over PCI MMIO");
MODULE_LICENSE("GPL");
