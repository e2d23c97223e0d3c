// SPDX-License-Identifier: GPL-2.0

//! fgds: fast GPU direct storage.
//!
//! One misc device, `/dev/fgdsN`, per GPU BAR its driver offers. The driver that owns a GPU (or
//! vfio-pci, for a device given to user space) offers a BAR with `pcim_p2pdma_offer()` at its
//! probe; that creates an auxiliary device, and fgds is its auxiliary driver. A GPU buffer
//! exported as a dma-buf is registered on the node (`FGDS_IOCTL_REG_BUFFER`); its BAR pages become
//! PCI P2PDMA pages with the BAR's real provider (the owner's own where it made them, as
//! nvidia-uvm does over a static BAR1), mapped (with the kernel's own memory type for them:
//! uncached, or write-combined where the owner reserved that) into user space with `mmap()` at
//! the returned cookie. The mapping is then a buffer for O_DIRECT and io_uring I/O: the block
//! layer's own P2P rules decide which queues may DMA to it. See
//! `Documentation/misc-devices/fgds.rst`.
//!
//! Lifetime rules (the reason most of this driver exists):
//!
//! - No exporter ever waits for user I/O, in its callback or through a fence. fgds imports only
//!   buffers it can pin where this GPU's peers reach them, as RDMA imports what it cannot follow
//!   (`ib_umem_dmabuf_get_pinned()`): REG_BUFFER pins the dma-buf for the registration's life,
//!   and an exporter that cannot pin it in reach is refused (`EOPNOTSUPP`). Pinned, the buffer
//!   never moves: the exporter invalidates it only to revoke it (vfio-pci's reset, memory
//!   disable or close), and the pin holds the memory for the exporter's user until the
//!   registration ends, after its DMA drained.
//! - A registration takes every page of its buffer from the chunk's [`P2pPages`] as a
//!   [`P2pPage`], which holds the page's first reference (the "base" reference); mappings
//!   (`vm_insert_page()`) and O_DIRECT/io_uring pins (GUP) take their own. When a page's last
//!   reference goes, the registration's [`Drain`] is told (from any context); with the last, the
//!   drain completes.
//! - Cutting a registration ([`Buffer::cut`]) marks it dead (new faults get `SIGBUS`, new I/O
//!   `EFAULT`) and zaps every user mapping of it: no new access. It waits for nothing, so the
//!   exporter's callback does it, and unmaps, and returns: requests already issued keep their
//!   page pins and DMA into the range they were issued for, which is still pinned.
//! - UNREG, close and the owner's unbinding (which removes the offer's auxiliary device) cut
//!   the registration, drop the base references, wait for the drain with no lock of the
//!   exporter's held, then unmap, unpin and detach, and give the struct pages back. Concurrent
//!   ones of one registration are serialised ([`Buffer::attach`]): none returns before the
//!   drain.
//! - A BAR page belongs to at most one registration at a time (`EBUSY` otherwise), so a
//!   registration's pages are freed exactly when its own users are gone.
//! - Struct pages refer to the BAR's P2PDMA provider, which belongs to the owner's binding. The
//!   owner ends its offer at the start of its `remove()` (`pci_p2pdma_end_offers()`), before it
//!   tears the device down, or at the latest before it releases the provider: that deletes the
//!   offer's auxiliary device, which unbinds fgds from it and drops the node's
//!   [`MiscDeviceRegistration`], so the DMA already issued drains into a working device.
//!   Struct pages are made only by REG_BUFFER under a [`RegistrationGuard`] of the node, taken
//!   for the making and the publishing only (never across a wait for fences or a copy to user
//!   space); the registration's drop waits for every guard, then drops the node's data
//!   ([`NodeGpu`]), which tears down every registration on the GPU. No REG_BUFFER makes pages
//!   after that: no struct page of a BAR outlives the binding that offered it. Open files
//!   outlive the node; what is left to them (UNREG, close, QUERY) needs no guard.
//! - What a registration allocates is charged to the caller's memory cgroup, and an open file
//!   holds at most [`max_registrations`] of them (`ENOSPC`).
//!
//! Lock order (outermost first; each arrow is "may be held while taking"):
//!
//! - device lock of the auxiliary device (the node's drop) -> [`Buffer::attach`]
//! - mmap lock -> [`Buffer::state`] (faults)
//! - [`Buffer::attach`] -> dma-buf reservation lock -> [`Buffer::state`] (no wait for DMA
//!   under either: the drain is waited for with only [`Buffer::attach`] held)
//! - [`Gpu::state`] -> memory hotplug lock (a chunk's struct pages are created and removed with
//!   [`Gpu::state`] held, never with the reservation lock: exporters take it inside the mmap
//!   lock, which the kernel's page-table dump takes inside the memory hotplug lock)
//! - [`Buffer::state`] is never held while [`Gpu::state`] is taken: the mmap lock is held
//!   around it (faults, mmap), and [`Gpu::state`] is held around the memory hotplug lock.
//! - [`FgdsFile::buffers`] is never held across any of the above.
//!
//! See `Documentation/misc-devices/fgds.rst`.

mod buffer;
mod file;
mod gpu;

use kernel::{
    auxiliary,
    device::Core,
    miscdevice::MiscDeviceRegistration,
    page::PAGE_SIZE,
    pci::p2pdma::{
        Offer,
        OfferedBar, //
    },
    prelude::*,
    str::CString,
    sync::Arc, //
};

use file::FgdsFile;
use gpu::{
    Gpu,
    NodeGpu, //
};

kernel::module_auxiliary_driver! {
    type: FgdsDriver,
    name: "fgds",
    description: "fast GPU direct storage: O_DIRECT and io_uring I/O into GPU memory, peer to peer",
    license: "GPL",
    imports_ns: ["DMA_BUF"],
    params: {
        max_registrations: usize {
            default: 65536,
            description: "Most registrations one open file holds (ENOSPC past it)",
        },
    },
}

kernel::auxiliary_device_table!(
    AUX_TABLE,
    MODULE_AUX_TABLE,
    <FgdsDriver as auxiliary::Driver>::IdInfo,
    [(
        auxiliary::DeviceId::new(OfferedBar::AUXILIARY_NAME.0, OfferedBar::AUXILIARY_NAME.1),
        ()
    )]
);

fn page_aligned(v: u64) -> bool {
    v % PAGE_SIZE as u64 == 0
}

/// The misc device of an offered BAR, the driver data of its auxiliary device.
///
/// Dropped when fgds unbinds from the offer (the owner unbinds, or fgds is unloaded), while the
/// BAR's P2PDMA provider, which the GPU's struct pages refer to, still exists: the node goes,
/// and with its data ([`NodeGpu`]) every registration on the GPU.
#[pin_data]
struct GpuNode {
    /// The node, a child of the offer's auxiliary device.
    #[pin]
    misc: MiscDeviceRegistration<FgdsFile>,
}

impl GpuNode {
    fn new(adev: &auxiliary::Device<Core<'_>>) -> Result<Pin<KBox<Self>>> {
        let offer = Offer::new(adev)?;
        // `fgdsN` for the offer `pci_p2pdma.bar.N`: the offers' ids are unique while they
        // exist, so no two nodes share a name, and there is no limit of our own on their count.
        let name = CString::try_from_fmt(fmt!("fgds{}", adev.id()))?;
        let gpu = Arc::pin_init(Gpu::new(offer), GFP_KERNEL)?;
        KBox::try_pin_init(
            try_pin_init!(GpuNode {
                misc <- MiscDeviceRegistration::register_named(
                    name,
                    Some(adev.as_ref()),
                    NodeGpu(gpu)
                ),
            }),
            GFP_KERNEL,
        )
    }
}

struct FgdsDriver;

impl auxiliary::Driver for FgdsDriver {
    type IdInfo = ();
    type Data<'bound> = Pin<KBox<GpuNode>>;
    const ID_TABLE: auxiliary::IdTable<Self::IdInfo> = &AUX_TABLE;

    fn probe<'bound>(
        adev: &'bound auxiliary::Device<Core<'_>>,
        _info: &'bound Self::IdInfo,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        GpuNode::new(adev)
    }
}
