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
//! Lifetime rules (the reason most of this file exists):
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

use core::sync::atomic::{
    AtomicUsize,
    Ordering, //
};
use kernel::{
    auxiliary,
    device::Core,
    dma::DataDirection,
    dma_buf::{
        DmaBuf,
        DynamicAttachment,
        Importer,
        Invalidation,
        Locked,
        PhysRanges,
        ResvUsage, //
    },
    fs::{
        file::MappingRef,
        File, //
    },
    ioctl::{
        _IOR,
        _IOW,
        _IOWR, //
    },
    miscdevice::{
        MiscDevice,
        MiscDeviceRegistration,
        RegisteredData,
        RegistrationGuard, //
    },
    mm::virt::{
        flags as vm_flags,
        VmFault,
        VmFaultResult,
        VmOperations,
        VmaNew, //
    },
    new_mutex,
    page::{
        PAGE_SHIFT,
        PAGE_SIZE, //
    },
    pci::p2pdma::{
        Offer,
        OfferedBar,
        P2pPage,
        P2pPages,
        PageOwner, //
    },
    prelude::*,
    rbtree::RBTree,
    seq_file::SeqFile,
    seq_print,
    str::CString,
    sync::{
        Arc,
        Completion,
        CondVar,
        Mutex, //
    },
    transmute::{
        AsBytes,
        FromBytes, //
    },
    uaccess::{
        UserPtr,
        UserSlice, //
    },
    uapi,
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

/// Size of the unit in which BAR ranges get struct pages: the memory hotplug subsection.
const CHUNK_SIZE: u64 = P2pPages::<Drain>::ALIGN;
const PAGES_PER_CHUNK: usize = (CHUNK_SIZE as usize) / PAGE_SIZE;
/// Most units in one [`Chunk`] (one pagemap): 1 GiB, whose page owners take 2 MiB.
const MAX_CHUNK_UNITS: u64 = (1 << 30) / CHUNK_SIZE;
/// Largest registration (also reported by `FGDS_IOCTL_VERSION`).
const MAX_BUFFER_SIZE: u64 = 1 << 40;

const IOCTL_VERSION: u32 = _IOR::<Version>(
    uapi::FGDS_IOCTL_BASE,
    uapi::fgds_ioctl_nr_FGDS_IOCTL_NR_VERSION,
);
const IOCTL_REG_BUFFER: u32 = _IOWR::<RegBuffer>(
    uapi::FGDS_IOCTL_BASE,
    uapi::fgds_ioctl_nr_FGDS_IOCTL_NR_REG_BUFFER,
);
const IOCTL_UNREG_BUFFER: u32 = _IOW::<UnregBuffer>(
    uapi::FGDS_IOCTL_BASE,
    uapi::fgds_ioctl_nr_FGDS_IOCTL_NR_UNREG_BUFFER,
);
const IOCTL_QUERY_BUFFER: u32 = _IOWR::<BufferInfo>(
    uapi::FGDS_IOCTL_BASE,
    uapi::fgds_ioctl_nr_FGDS_IOCTL_NR_QUERY_BUFFER,
);

macro_rules! uapi_struct {
    ($name:ident, $raw:ty) => {
        #[repr(transparent)]
        struct $name($raw);

        // SAFETY: A UAPI structure: plain integers and integer arrays, no padding.
        unsafe impl FromBytes for $name {}
        // SAFETY: As above.
        unsafe impl AsBytes for $name {}
    };
}

uapi_struct!(Version, uapi::fgds_version);
uapi_struct!(RegBuffer, uapi::fgds_reg_buffer);
uapi_struct!(UnregBuffer, uapi::fgds_unreg_buffer);
uapi_struct!(BufferInfo, uapi::fgds_buffer_info);

fn page_aligned(v: u64) -> bool {
    v % PAGE_SIZE as u64 == 0
}

/// A run of [`CHUNK_SIZE`] units of a BAR with struct pages: one pagemap.
///
/// A registration makes one chunk for each run of units it needs that have no struct pages
/// yet (so a large registration has one pagemap, whose removal waits for one grace period,
/// and whose pages the block layer merges into one bio), and shares the chunks of the units
/// it has in common with others.
struct Chunk {
    /// Key of the first unit: the chunk is in [`GpuState::chunks`] under each of
    /// `key..key + units`.
    key: u64,
    units: u64,
    pages: P2pPages<Drain>,
    /// Registrations owning at least one page of the chunk. Protected by [`Gpu::state`].
    users: AtomicUsize,
}

impl Chunk {
    /// Whether the chunk covers the unit of key `key`.
    fn covers(&self, key: u64) -> bool {
        key >= self.key && key - self.key < self.units
    }

    /// Index in the chunk of the page at BAR offset `off`, in the unit of key `key`.
    fn page_index(&self, key: u64, off: u64) -> usize {
        (((key - self.key) * CHUNK_SIZE + off % CHUNK_SIZE) as usize) / PAGE_SIZE
    }
}

/// Counts a registration's pages still in use, plus one while the registration holds their base
/// references; completes when the count reaches zero.
///
/// The extra count (the bias) is dropped once, after the base references went
/// ([`Buffer::release_pages`], or a failed [`Buffer::claim`]), so the count reaches zero exactly
/// once, after the last page was freed, and waiters need not look at the count. Each page handed
/// out holds an [`Arc`] of the drain until its last-reference notification returned, so the
/// drain outlives the completion's wake-up.
#[pin_data]
struct Drain {
    live: AtomicUsize,
    #[pin]
    done: Completion,
}

impl Drain {
    fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(Drain {
            live: AtomicUsize::new(1),
            done <- Completion::new(),
        })
    }

    fn page_freed(&self) {
        if self.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.complete_all();
        }
    }

    /// Drops the bias: the drain completes when the pages counted are freed.
    fn end_bias(&self) {
        self.page_freed();
    }

    /// Waits until every page counted was freed, the bias gone. Uninterruptible: called only
    /// with no lock of the exporter's held, once the registration is cut (so only requests
    /// already issued hold pages).
    fn wait(&self) {
        self.done.wait_for_completion();
    }
}

impl PageOwner for Drain {
    fn page_free(&self, _index: usize) {
        self.page_freed();
    }
}

/// A unit of a BAR that has struct pages, in [`GpuState::chunks`].
enum Unit {
    /// Its chunk, used by at least one registration.
    Live(Arc<Chunk>),
    /// Its chunk lost its last user and its struct pages are being removed, without
    /// [`Gpu::state`] held ([`release_chunks`]); the unit leaves the table when they are gone. A
    /// registration that needs it waits until then ([`Gpu::unit_gone`]): pages made for it now
    /// would fail with `EEXIST`.
    Going,
}

/// State of a GPU shared by its open files.
struct GpuState {
    /// Every unit that has struct pages, by the unit's key
    /// (`(bar << 56) | unit index in the BAR`): a chunk of several units is there once for each.
    chunks: RBTree<u64, Unit>,
    /// Chunks (pagemaps) in `chunks`, going ones included.
    pagemaps: usize,
    /// Chunks whose units are [`Unit::Going`].
    going: usize,
    /// Registrations on the GPU, by cookie; each leaves in [`Buffer::unregister`].
    buffers: RBTree<u64, Arc<Buffer>>,
    /// Last cookie id given out; ids are never reused.
    last_id: u64,
}

/// An offered GPU BAR served by fgds (the node's GPU).
#[pin_data]
struct Gpu {
    offer: Offer,
    #[pin]
    state: Mutex<GpuState>,
    /// Notified, with [`Gpu::state`], when a going chunk's units leave the table.
    #[pin]
    unit_gone: CondVar,
    /// [`Buffer`]s alive (registered, or torn down and still referenced), for fdinfo.
    live_buffers: AtomicUsize,
}

/// Counts a [`Buffer`] in [`Gpu::live_buffers`] while it exists.
struct LiveBuffer(Arc<Gpu>);

impl LiveBuffer {
    fn new(gpu: &Arc<Gpu>) -> Self {
        gpu.live_buffers.fetch_add(1, Ordering::Relaxed);
        Self(gpu.clone())
    }
}

impl Drop for LiveBuffer {
    fn drop(&mut self) {
        self.0.live_buffers.fetch_sub(1, Ordering::Relaxed);
    }
}

fn chunk_key(bar: u32, bar_off: u64) -> u64 {
    (u64::from(bar) << 56) | (bar_off / CHUNK_SIZE)
}

impl Gpu {
    /// The offer goes (its owner unbinds): every registration on it is torn down (as if revoked)
    /// and detached. Called once no REG_BUFFER runs on the GPU and none can start ([`NodeGpu`]).
    ///
    /// Returns when no struct page of the BAR is left: every registration is torn down, its
    /// in-flight DMA drained.
    fn revoke_all(&self) {
        let buffers = core::mem::take(&mut self.state.lock().buffers);
        for (_, buf) in buffers.iter() {
            buf.unregister(true);
        }
    }

    /// The offset in the offered BAR of CPU-physical range `[addr, addr + len)`, if it lies there.
    fn bar_offset_of(&self, addr: u64, len: u64) -> Option<u64> {
        let pdev = self.offer.pci_dev();
        let bar = self.offer.index();
        let start = pdev.resource_start(bar).ok()?;
        let size = pdev.resource_len(bar).ok()?;
        let off = addr.checked_sub(start)?;
        (off < size && len <= size - off).then_some(off)
    }
}

/// The data of a GPU's node: the GPU, whose registrations all end when the node goes.
struct NodeGpu(Arc<Gpu>);

impl Drop for NodeGpu {
    fn drop(&mut self) {
        // The node's registration is dropped (its driver unbinds): it waited until no file
        // operation held a guard of it, and no new one gets one. So no REG_BUFFER runs on the
        // GPU, with unpublished struct pages, and none starts.
        self.0.revoke_all();
    }
}

struct BufState {
    /// Cut ([`Buffer::cut`]): no new faults or mappings.
    dead: bool,
    /// The drain's bias is still held: the base references in `pages` were not dropped yet.
    bias: bool,
    /// Cut by the exporter's invalidation or the owner's unbinding.
    revoked: bool,
    /// BAR and offset in it of the first page.
    bar: u32,
    bar_offset: u64,
    /// The BAR extents of the pages, in order: `(bar, offset, length)`.
    extents: KVec<(u32, u64, u64)>,
    /// Chunks holding the pages, each counted once in its [`Chunk::users`]; kept after the cut
    /// until [`Buffer::unregister`] gives them back, once the drain is done.
    chunks: KVec<Arc<Chunk>>,
    /// The buffer's pages, in order; each holds its base reference until
    /// [`Buffer::release_pages`].
    pages: KVVec<P2pPage>,
}

/// A registered buffer.
#[pin_data]
struct Buffer {
    gpu: Arc<Gpu>,
    _live: LiveBuffer,
    cookie: u64,
    size: u64,
    mapping: MappingRef,
    /// The attachment; taken (and detached) by [`Buffer::unregister`], which holds the lock
    /// until the drain and the detach are done.
    #[pin]
    attach: Mutex<Option<DynamicAttachment<Buffer>>>,
    #[pin]
    state: Mutex<BufState>,
    drain: Arc<Drain>,
}

impl Buffer {
    /// Ends every new access through the registration: no new fault or mapping, every mapping
    /// zapped. Requests already issued hold their own page references and complete. Idempotent;
    /// waits for nothing and frees nothing, so the exporter's callback calls it.
    fn cut(&self, revoked: bool) {
        {
            let mut st = self.state.lock();
            if st.dead {
                return;
            }
            st.dead = true;
            st.revoked = revoked;
        }
        // Faults now fail; remove what earlier faults mapped, in every process.
        self.mapping.unmap_range(self.cookie, self.size);
    }

    /// Drops the base references of a cut registration and the drain's bias: pins taken by
    /// O_DIRECT and io_uring are then the only references left, each dropped when its I/O
    /// completes, and the drain completes with the last. Idempotent.
    fn release_pages(&self) {
        let pages = {
            let mut st = self.state.lock();
            if !st.bias {
                return;
            }
            st.bias = false;
            core::mem::take(&mut st.pages)
        };
        drop(pages);
        self.drain.end_bias();
    }

    /// UNREG, close, or the unbinding of the BAR's owner (`revoked`): cuts the registration,
    /// waits for its DMA in flight, unpins, detaches and gives its struct pages back. A second
    /// caller waits until the first is done.
    fn unregister(&self, revoked: bool) {
        let mut attach = self.attach.lock();
        if let Some(a) = attach.take() {
            self.cut(revoked);
            self.release_pages();
            // No lock of the exporter's is held: the buffer stays pinned where it is meanwhile,
            // and a revocation that comes now finds the registration cut and only unmaps.
            self.drain.wait();
            drop(a);
            let chunks = core::mem::take(&mut self.state.lock().chunks);
            release_chunks(&self.gpu, chunks);
        }
        drop(attach);
        self.gpu.state.lock().buffers.remove(&self.cookie);
    }
}

/// Gives up a registration's use of `chunks` (its pages all freed); a chunk no registration uses
/// any more loses its struct pages and leaves the GPU's table.
///
/// The removal of a pagemap waits for an RCU grace period, so it runs without [`Gpu::state`]
/// held: meanwhile the chunk's units are [`Unit::Going`], and a registration that needs one of
/// them waits until they are gone, while every other use of the GPU goes on.
fn release_chunks(gpu: &Gpu, chunks: KVec<Arc<Chunk>>) {
    for chunk in chunks {
        let mut gs = gpu.state.lock();
        if chunk.users.fetch_sub(1, Ordering::Relaxed) != 1 {
            continue;
        }
        let key = chunk.key;
        let published = mark_going(&mut gs, &chunk);
        if published == 0 {
            // Never published: no page of it was handed out, and no other registration knows
            // it. Its struct pages go before the lock does, so that none is made for its range
            // meanwhile.
            drop(chunk);
            continue;
        }
        drop(gs);
        // The last reference: the table's went in `mark_going`, and a registration holds one
        // only while it counts in `users`, which no registration can join now (it finds no
        // chunk in the table). Every page of it is free, each user's drain done.
        drop(chunk);
        let mut gs = gpu.state.lock();
        for k in key..key + published {
            gs.chunks.remove(&k);
        }
        gs.pagemaps -= 1;
        gs.going -= 1;
        drop(gs);
        gpu.unit_gone.notify_all();
    }
}

impl Importer for Buffer {
    fn invalidate_mappings(&self, attach: &mut Invalidation<'_, Self>) {
        // Not mapped: the exporter moves the buffer while REG_BUFFER pins or maps it (into reach
        // of this GPU's peers, or to where it can pin it). No page of it exists yet: nothing to
        // end, and the map that follows finds it where it went.
        if !attach.is_mapped() {
            return;
        }
        // Mapped, and so pinned: a revocation. No new access from now on; requests already
        // issued keep their page pins and DMA into the range they were issued for, which the
        // pin keeps this buffer's until UNREG, close or the unbinding drains them. Nothing here
        // waits for them, however long their issuer holds them (cgroup throttling, IOPOLL rings,
        // multipath requeueing), and no fence is left for the exporter to wait on. The DMA goes
        // to the pages' bus addresses, which the block layer mapped from the BAR's provider,
        // never through this mapping: it may go now.
        self.cut(true);
        attach.unmap();
    }
}

/// What REG_BUFFER answers when the exporter cannot pin the buffer: `EOPNOTSUPP` (fgds imports
/// only what it can pin), unless the pin failed for want of memory, a revocation or a signal.
fn pin_error(e: Error) -> Error {
    if e == ENOMEM || e == ENODEV || e == EINTR || e == ERESTARTSYS {
        e
    } else {
        EOPNOTSUPP
    }
}

/// Maps a registration's attachment for its GPU's peers: our arguments are checked, so an
/// exporter that cannot map the buffer for this GPU (`EINVAL`, `EIO`) holds memory this GPU
/// cannot reach (`EXDEV`).
fn map_for_peer(locked: &Locked<'_, Buffer>) -> Result {
    locked
        .map()
        .map(|_| ())
        .map_err(|e| if e == EINVAL || e == EIO { EXDEV } else { e })
}

impl VmOperations for Buffer {
    fn fault(buf: &Self, fault: &VmFault<'_>) -> VmFaultResult {
        let st = buf.state.lock();
        if st.dead {
            return VmFaultResult::SIGBUS;
        }
        let Some(index) = fault
            .pgoff()
            .checked_sub((buf.cookie >> PAGE_SHIFT) as usize)
        else {
            return VmFaultResult::SIGBUS;
        };
        match st.pages.get(index) {
            Some(page) => fault.insert_page(&page.page()),
            None => VmFaultResult::SIGBUS,
        }
    }
}

/// The BAR extents of `[offset, offset + size)` of a mapped dma-buf: `(bar, offset, length)`.
///
/// Found from the physical ranges the exporter describes the memory by, or, for an exporter that
/// does not (NVIDIA's), the dma-buf core's reading of its mapping, trusted only where it names
/// pages the BAR's owner made; fgds itself never reads the mapping's DMA addresses (with an
/// IOMMU they are IOVAs, and bus and CPU addresses differ on many platforms). Memory of another
/// BAR, another device or an earlier binding of this node's device (another P2PDMA provider than
/// the offered BAR's) is `EXDEV`.
fn extents(
    gpu: &Gpu,
    phys: &PhysRanges<'_>,
    offset: u64,
    size: u64,
) -> Result<KVec<(u32, u64, u64)>> {
    if !gpu.offer.provides(phys) {
        return Err(EXDEV);
    }
    let bar = gpu.offer.index();
    let end = offset + size;
    let mut out = KVec::new();
    let mut pos = 0u64;
    for (addr, len) in phys.iter() {
        let start = pos;
        pos = pos.checked_add(len).ok_or(EINVAL)?;
        if pos <= offset {
            continue;
        }
        if start >= end {
            break;
        }
        let from = start.max(offset);
        let to = pos.min(end);
        let bar_off = gpu
            .bar_offset_of(addr + (from - start), to - from)
            .ok_or(EXDEV)?;
        if !page_aligned(bar_off) || !page_aligned(to - from) {
            return Err(EXDEV);
        }
        out.push((bar, bar_off, to - from), GFP_KERNEL)?;
    }
    if pos < end {
        return Err(ERANGE);
    }
    Ok(out)
}

/// Marks the units of `chunk` that are in the GPU's table [`Unit::Going`], dropping the
/// table's references to it, and returns how many there were: all of them, unless its
/// publication failed half way, and then the first ones ([`publish_chunk`] goes in order). A
/// chunk with one counts in [`GpuState::pagemaps`], and now in [`GpuState::going`].
fn mark_going(gs: &mut GpuState, chunk: &Arc<Chunk>) -> u64 {
    let mut published = 0;
    while published < chunk.units {
        let Some(unit) = gs.chunks.get_mut(&(chunk.key + published)) else {
            break;
        };
        if !matches!(unit, Unit::Live(c) if Arc::ptr_eq(c, chunk)) {
            break;
        }
        *unit = Unit::Going;
        published += 1;
    }
    if published > 0 {
        gs.going += 1;
    }
    published
}

/// Whether a unit of an extent is [`Unit::Going`].
fn going_in(gs: &GpuState, extents: &[(u32, u64, u64)]) -> bool {
    gs.going > 0
        && extents.iter().any(|&(bar, off, len)| {
            (chunk_key(bar, off)..=chunk_key(bar, off + len - 1))
                .any(|key| matches!(gs.chunks.get(&key), Some(Unit::Going)))
        })
}

/// Puts `chunk` in the GPU's table under each of its units, none of which is there yet. On
/// failure some may be: [`release_chunks`] removes them.
fn publish_chunk(gs: &mut GpuState, chunk: &Arc<Chunk>) -> Result {
    for key in chunk.key..chunk.key + chunk.units {
        gs.chunks
            .try_create_and_insert(key, Unit::Live(chunk.clone()), GFP_KERNEL_ACCOUNT)?;
        if key == chunk.key {
            gs.pagemaps += 1;
        }
    }
    Ok(())
}

/// Gives `units` units of the offered BAR from `chunk_off` struct pages, as one chunk whose first
/// unit has key `key`. Called with [`Gpu::state`] held, by a REG_BUFFER that holds `node`, a
/// guard of the registration of `gpu`'s node.
fn new_chunk(
    gpu: &Gpu,
    _node: &RegistrationGuard<'_, FgdsFile>,
    chunk_off: u64,
    units: u64,
    key: u64,
) -> Result<Arc<Chunk>> {
    // fgds is the driver bound to the offer's auxiliary device (`gpu.offer`), and the chunk is
    // dropped before fgds's driver data is: the node's registration is part of it, and its drop
    // waits until `_node` is dropped, when the REG_BUFFER making the chunk has published its
    // registration on the GPU or dropped it (a registration still being made holds its chunks
    // unpublished, with no mapping and no I/O, and drops them when it fails). Then the node's
    // data, `NodeGpu`, tears down every published registration, each of which drops its use of
    // its chunks once its pages are free.
    let size = units * CHUNK_SIZE;
    // SAFETY: As just said, the pages go before fgds's binding to `gpu.offer` ends.
    let pages = unsafe { P2pPages::new(&gpu.offer, chunk_off, size) }?;
    Ok(Arc::new(
        Chunk {
            key,
            units,
            pages,
            users: AtomicUsize::new(0),
        },
        GFP_KERNEL_ACCOUNT,
    )?)
}

impl Buffer {
    /// Takes the pages of `extents`: each is handed out to this registration with its base
    /// reference. Fails with `EBUSY` when a page belongs to another registration (or, of the
    /// owner's pages, to another user of its pool), `ENODEV` when the exporter revoked the
    /// buffer meanwhile, `EEXIST` when part of a chunk's range has the owner's struct pages and
    /// part none. `node` is the caller's guard of the node's registration.
    fn claim(&self, node: &RegistrationGuard<'_, FgdsFile>, extents: &[(u32, u64, u64)]) -> Result {
        let npages = (self.size / PAGE_SIZE as u64) as usize;
        // [`Buffer::state`] is not held while struct pages are made: mmap() and faults take it
        // under the mmap lock, and making pages takes the memory hotplug lock, which other code
        // (the page-table dump) holds while it takes an mmap lock. A cut that comes meanwhile
        // finds no pages; the drain counts the ones made here, which are dropped below when
        // this finds the registration dead.
        if self.state.lock().dead {
            return Err(ENODEV);
        }
        let mut chunks: KVec<Arc<Chunk>> = KVec::new();
        // 8 bytes per page, charged to the caller's memory cgroup like the struct pages.
        let mut pages: KVVec<P2pPage> = KVVec::with_capacity(
            npages,
            GFP_KERNEL_ACCOUNT | __GFP_RETRY_MAYFAIL | __GFP_NOWARN,
        )?;
        let mut gs = self.gpu.state.lock();
        let res = (|| -> Result {
            // Struct pages still being removed from a unit it needs: wait until they are gone.
            // None of its units becomes going while `gs` is held from here, so the table's
            // units below are all live.
            while going_in(&gs, extents) {
                if self.gpu.unit_gone.wait_interruptible(&mut gs) {
                    return Err(ERESTARTSYS);
                }
            }
            for &(bar, off, len) in extents {
                let last_key = chunk_key(bar, off + len - 1);
                let mut o = off;
                while o < off + len {
                    let key = chunk_key(bar, o);
                    let ci = match chunks.iter().rposition(|c| c.covers(key)) {
                        Some(i) => i,
                        None => {
                            let chunk = match gs.chunks.get(&key) {
                                Some(Unit::Live(c)) => c.clone(),
                                // Not while `gs` is held (see above).
                                Some(Unit::Going) => return Err(EBUSY),
                                None => {
                                    // One chunk for the run of units from here that the
                                    // extent needs and that have no struct pages yet.
                                    let mut units = 1;
                                    while units < MAX_CHUNK_UNITS
                                        && key + units <= last_key
                                        && gs.chunks.get(&(key + units)).is_none()
                                    {
                                        units += 1;
                                    }
                                    new_chunk(&self.gpu, node, o - o % CHUNK_SIZE, units, key)?
                                }
                            };
                            chunks.push(chunk.clone(), GFP_KERNEL_ACCOUNT)?;
                            if chunk.users.fetch_add(1, Ordering::Relaxed) == 0 {
                                // New: counted in `chunks` first, so that the error path
                                // unpublishes what of it was published.
                                publish_chunk(&mut gs, &chunk)?;
                            }
                            chunks.len() - 1
                        }
                    };
                    let index = chunks[ci].page_index(key, o);
                    // Counted before it is handed out: its release may come at once.
                    self.drain.live.fetch_add(1, Ordering::AcqRel);
                    match chunks[ci].pages.activate(index, self.drain.clone()) {
                        Ok(page) => pages.push(page, GFP_KERNEL_ACCOUNT)?,
                        Err(e) => {
                            // Not handed out: no release will come for it (the bias keeps the
                            // count above zero).
                            self.drain.live.fetch_sub(1, Ordering::AcqRel);
                            return Err(e);
                        }
                    }
                    o += PAGE_SIZE as u64;
                }
            }
            Ok(())
        })();
        drop(gs);
        let mut st = self.state.lock();
        let torn_down = st.dead;
        if res.is_ok() && !torn_down {
            if let Some(&(bar, off, _)) = extents.first() {
                st.bar = bar;
                st.bar_offset = off;
            }
            st.chunks = chunks;
            st.pages = pages;
            return Ok(());
        }
        // Failed, or cut meanwhile (by the exporter's revocation). No user mapping or I/O has
        // these pages: they are freed as their base references go here, and the drain, its
        // bias dropped, completes with them at once.
        st.dead = true;
        st.bias = false;
        drop(st);
        drop(pages);
        self.drain.end_bias();
        self.drain.wait();
        release_chunks(&self.gpu, chunks);
        res.and(Err(ENODEV))
    }
}

/// An open file's registrations, by cookie.
struct FileBuffers {
    tree: RBTree<u64, Arc<Buffer>>,
    /// Entries in `tree`, at most [`max_registrations`].
    count: usize,
}

/// Most registrations one open file holds (`ENOSPC` past it): the module parameter
/// `max_registrations`, 65536 by default. Each registration costs a few hundred bytes of kernel
/// memory besides its struct pages, all charged to the caller's memory cgroup.
fn max_registrations() -> usize {
    *module_parameters::max_registrations.value()
}

impl FileBuffers {
    /// Whether the file holds as many registrations as it may.
    fn full(&self) -> bool {
        self.count >= max_registrations()
    }

    fn insert(&mut self, buf: &Arc<Buffer>) -> Result {
        if self.full() {
            return Err(ENOSPC);
        }
        self.tree
            .try_create_and_insert(buf.cookie, buf.clone(), GFP_KERNEL_ACCOUNT)?;
        self.count += 1;
        Ok(())
    }

    fn remove(&mut self, cookie: u64) -> Option<Arc<Buffer>> {
        let buf = self.tree.remove(&cookie);
        if buf.is_some() {
            self.count -= 1;
        }
        buf
    }
}

/// The state of an open `/dev/fgdsN`.
#[pin_data(PinnedDrop)]
struct FgdsFile {
    /// The node's data while the node exists: REG_BUFFER holds a guard of it.
    node: Arc<RegisteredData<FgdsFile>>,
    /// The node's GPU, for the accounting of registrations after the node is gone.
    gpu: Arc<Gpu>,
    /// Registrations of this open file.
    #[pin]
    buffers: Mutex<FileBuffers>,
}

#[pinned_drop]
impl PinnedDrop for FgdsFile {
    fn drop(self: Pin<&mut Self>) {
        let buffers = core::mem::take(&mut self.buffers.lock().tree);
        for (_, buf) in buffers.iter() {
            buf.unregister(false);
        }
    }
}

impl FgdsFile {
    fn lookup(&self, cookie: u64) -> Result<Arc<Buffer>> {
        self.buffers.lock().tree.get(&cookie).cloned().ok_or(ENOENT)
    }

    fn version(&self, arg: usize) -> Result<isize> {
        let v = Version(uapi::fgds_version {
            version: uapi::FGDS_API_VERSION,
            pad: 0,
            features: u64::from(uapi::FGDS_FEATURE_QUERY | uapi::FGDS_FEATURE_REVOKE),
            page_size: PAGE_SIZE as u64,
            max_size: MAX_BUFFER_SIZE,
        });
        UserSlice::new(UserPtr::from_addr(arg), size_of::<Version>())
            .writer()
            .write(&v)?;
        Ok(0)
    }

    fn reg_buffer(&self, file: &File, arg: usize) -> Result<isize> {
        let (mut reader, mut writer) =
            UserSlice::new(UserPtr::from_addr(arg), size_of::<RegBuffer>()).reader_writer();
        let mut req: RegBuffer = reader.read()?;
        let r = &req.0;
        if r.flags != 0 || r.reserved != [0; 2] || r.cookie != 0 {
            return Err(EINVAL);
        }
        if r.size == 0
            || !page_aligned(r.offset)
            || !page_aligned(r.size)
            || r.size > MAX_BUFFER_SIZE
        {
            return Err(EINVAL);
        }
        // Checked again when the registration is listed on the file.
        if self.buffers.lock().full() {
            return Err(ENOSPC);
        }
        let dmabuf = DmaBuf::get(r.dmabuf_fd)?;
        let end = r.offset.checked_add(r.size).ok_or(ERANGE)?;
        if end > dmabuf.size() as u64 {
            return Err(ERANGE);
        }
        // `ENODEV` at once on a node that is gone; the guard that making pages needs is taken
        // later, around that alone.
        drop(self.node.access()?);
        let cookie = {
            let mut gs = self.gpu.state.lock();
            gs.last_id += 1;
            gs.last_id << PAGE_SHIFT
        };
        let drain = Arc::pin_init(Drain::new(), GFP_KERNEL_ACCOUNT)?;
        let buf = Arc::pin_init(
            try_pin_init!(Buffer {
                gpu: self.gpu.clone(),
                _live: LiveBuffer::new(&self.gpu),
                cookie,
                size: r.size,
                mapping: file.mapping(),
                attach <- new_mutex!(None),
                state <- new_mutex!(BufState {
                    dead: false,
                    bias: true,
                    revoked: false,
                    bar: 0,
                    bar_offset: 0,
                    extents: KVec::new(),
                    chunks: KVec::new(),
                    pages: KVVec::new(),
                }),
                drain,
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        let attach = DynamicAttachment::new(
            &dmabuf,
            self.gpu.offer.pci_dev().as_ref(),
            buf.clone(),
            DataDirection::Bidirectional,
        )?;
        if !attach.peer2peer() {
            return Err(EOPNOTSUPP);
        }
        let ext = {
            let mut locked = attach.lock();
            // Pinned for the registration's life, or not registered: the struct pages describe
            // one place in the BAR, and fgds cannot follow a move without waiting for I/O in the
            // exporter's callback. The exporter may move the buffer to satisfy the pin (amdgpu:
            // into visible VRAM); one without pin support (static: vfio-pci, virtio-gpu,
            // NVIDIA) never moves it and succeeds.
            locked.pin().map_err(pin_error)?;
            map_for_peer(&locked)?;
            // The exporter's moves and clears of the memory come before any use of it, and so
            // does every implicitly synchronised job on it: storage both writes the registration
            // (reads of files) and reads it (writes), so its readers and writers too.
            locked.wait_fences(ResvUsage::Read)?;
            // `EOPNOTSUPP`: neither the exporter nor the dma-buf core describes the memory as
            // PCI MMIO (system memory, as where xe pins; a driver without `get_phys()` over
            // memory its owner made no P2PDMA pages of); `ENODEV`: revoked meanwhile.
            let phys = locked.phys_ranges()?;
            extents(&self.gpu, &phys, r.offset, r.size)?
        };
        {
            // Every struct page this block makes is published on the GPU, or gone, before the
            // guard is dropped and with it the node's registration may be. `ENODEV` once the
            // node is going.
            let node = self.node.access()?;
            buf.claim(&node, &ext)?;
            buf.state.lock().extents = ext;
            *buf.attach.lock() = Some(attach);
            if let Err(e) = self.publish(&buf) {
                buf.unregister(false);
                return Err(e);
            }
        }
        req.0.cookie = cookie;
        if let Err(e) = writer.write(&req) {
            if let Some(buf) = self.buffers.lock().remove(cookie) {
                buf.unregister(false);
            }
            return Err(e);
        }
        Ok(0)
    }

    /// Lists a new registration on its GPU, whose removal then tears it down, and on the file.
    fn publish(&self, buf: &Arc<Buffer>) -> Result {
        self.gpu.state.lock().buffers.try_create_and_insert(
            buf.cookie,
            buf.clone(),
            GFP_KERNEL_ACCOUNT,
        )?;
        self.buffers.lock().insert(buf)
    }

    fn unreg_buffer(&self, arg: usize) -> Result<isize> {
        let req: UnregBuffer = UserSlice::new(UserPtr::from_addr(arg), size_of::<UnregBuffer>())
            .reader()
            .read()?;
        if req.0.reserved != 0 {
            return Err(EINVAL);
        }
        // Torn down before it leaves the file's table: a concurrent UNREG of the same cookie
        // waits in `unregister()` until the drain is done, then finds it gone (`ENOENT`). Either
        // way no caller returns while DMA into the buffer may be in flight.
        let buf = self.lookup(req.0.cookie)?;
        buf.unregister(false);
        match self.buffers.lock().remove(req.0.cookie) {
            Some(_) => Ok(0),
            None => Err(ENOENT),
        }
    }

    fn query_buffer(&self, arg: usize) -> Result<isize> {
        let (mut reader, mut writer) =
            UserSlice::new(UserPtr::from_addr(arg), size_of::<BufferInfo>()).reader_writer();
        let mut info: BufferInfo = reader.read()?;
        if info.0.reserved != [0; 2] {
            return Err(EINVAL);
        }
        let buf = self.lookup(info.0.cookie)?;
        {
            let st = buf.state.lock();
            info.0.size = buf.size;
            info.0.bar = st.bar;
            info.0.bar_offset = st.bar_offset;
            info.0.state = if st.revoked {
                uapi::FGDS_BUFFER_REVOKED
            } else {
                0
            };
        }
        writer.write(&info)?;
        Ok(0)
    }
}

#[vtable]
impl MiscDevice for FgdsFile {
    type Ptr = Pin<KBox<Self>>;
    /// The node's GPU.
    type RegistrationData = NodeGpu;

    const OWNER: &'static ThisModule = &THIS_MODULE;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Self::Ptr> {
        KBox::try_pin_init(
            try_pin_init!(FgdsFile {
                node: misc.registered_data(),
                gpu: misc.data().0.clone(),
                buffers <- new_mutex!(FileBuffers {
                    tree: RBTree::new(),
                    count: 0,
                }),
            }),
            GFP_KERNEL,
        )
    }

    fn ioctl(me: Pin<&FgdsFile>, file: &File, cmd: u32, arg: usize) -> Result<isize> {
        match cmd {
            IOCTL_VERSION => me.version(arg),
            IOCTL_REG_BUFFER => me.reg_buffer(file, arg),
            IOCTL_UNREG_BUFFER => me.unreg_buffer(arg),
            IOCTL_QUERY_BUFFER => me.query_buffer(arg),
            _ => Err(ENOTTY),
        }
    }

    fn mmap(me: Pin<&FgdsFile>, _file: &File, vma: &VmaNew) -> Result {
        let cookie = (vma.pgoff() as u64) << PAGE_SHIFT;
        let buf = me.lookup(cookie).map_err(|_| ENXIO)?;
        if vma.flags() & vm_flags::MAYSHARE == 0 {
            return Err(EINVAL);
        }
        if (vma.end() - vma.start()) as u64 != buf.size {
            return Err(EINVAL);
        }
        if vma.flags() & vm_flags::EXEC != 0 {
            return Err(EPERM);
        }
        vma.try_clear_mayexec()?;
        {
            let st = buf.state.lock();
            if st.dead {
                return Err(ENODEV);
            }
            // MMIO, never write-back: the memory type of the kernel's own mapping of the pages,
            // uncached or what the BAR's owner reserved (write-combined VRAM apertures).
            me.gpu
                .offer
                .set_user_page_prot(vma, st.extents.iter().map(|&(_, off, len)| (off, len)))?;
        }
        vma.set_dontcopy();
        vma.set_dontexpand();
        vma.set_dontdump();
        vma.set_vm_ops(buf);
        Ok(())
    }

    fn show_fdinfo(me: Pin<&FgdsFile>, m: &SeqFile, _file: &File) {
        let buffers = me.buffers.lock().count;
        let (chunks, pagemaps) = {
            let gs = me.gpu.state.lock();
            (gs.chunks.iter().count(), gs.pagemaps)
        };
        let live = me.gpu.live_buffers.load(Ordering::Relaxed);
        seq_print!(m, "fgds-buffers:\t{}\n", buffers);
        seq_print!(m, "fgds-gpu-buffers:\t{}\n", live);
        seq_print!(m, "fgds-gpu-chunks:\t{}\n", chunks);
        seq_print!(m, "fgds-gpu-pagemaps:\t{}\n", pagemaps);
        seq_print!(m, "fgds-gpu-pages:\t{}\n", chunks * PAGES_PER_CHUNK);
    }
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
        let gpu = Arc::pin_init(
            try_pin_init!(Gpu {
                offer,
                state <- new_mutex!(GpuState {
                    chunks: RBTree::new(),
                    pagemaps: 0,
                    going: 0,
                    buffers: RBTree::new(),
                    last_id: 0,
                }),
                unit_gone <- kernel::new_condvar!(),
                live_buffers: AtomicUsize::new(0),
            }),
            GFP_KERNEL,
        )?;
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
