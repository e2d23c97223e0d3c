// SPDX-License-Identifier: GPL-2.0

//! A registration: a pinned dma-buf whose BAR pages are handed out as struct pages, mapped into
//! user space, and torn down only once its DMA in flight drained.

use core::sync::atomic::Ordering;
use kernel::{
    dma_buf::{
        DynamicAttachment,
        Importer,
        Invalidation,
        Locked,
        PhysRanges, //
    },
    fs::file::MappingRef,
    miscdevice::RegistrationGuard,
    mm::virt::{
        VmFault,
        VmFaultResult,
        VmOperations, //
    },
    page::{
        PAGE_SHIFT,
        PAGE_SIZE, //
    },
    pci::p2pdma::P2pPage,
    prelude::*,
    sync::{
        Arc,
        Mutex, //
    }, //
};

use crate::{
    file::FgdsFile,
    gpu::{
        chunk_key,
        going_in,
        new_chunk,
        publish_chunk,
        release_chunks,
        Chunk,
        Drain,
        Gpu,
        LiveBuffer,
        Unit,
        CHUNK_SIZE,
        MAX_CHUNK_UNITS, //
    },
    page_aligned, //
};

pub(crate) struct BufState {
    /// Cut ([`Buffer::cut`]): no new faults or mappings.
    pub(crate) dead: bool,
    /// The drain's bias is still held: the base references in `pages` were not dropped yet.
    pub(crate) bias: bool,
    /// Cut by the exporter's invalidation or the owner's unbinding.
    pub(crate) revoked: bool,
    /// BAR and offset in it of the first page.
    pub(crate) bar: u32,
    pub(crate) bar_offset: u64,
    /// The BAR extents of the pages, in order: `(bar, offset, length)`.
    pub(crate) extents: KVec<(u32, u64, u64)>,
    /// Chunks holding the pages, each counted once in its [`Chunk::users`]; kept after the cut
    /// until [`Buffer::unregister`] gives them back, once the drain is done.
    pub(crate) chunks: KVec<Arc<Chunk>>,
    /// The buffer's pages, in order; each holds its base reference until
    /// [`Buffer::release_pages`].
    pub(crate) pages: KVVec<P2pPage>,
}

/// A registered buffer.
#[pin_data]
pub(crate) struct Buffer {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) _live: LiveBuffer,
    pub(crate) cookie: u64,
    pub(crate) size: u64,
    pub(crate) mapping: MappingRef,
    /// The attachment; taken (and detached) by [`Buffer::unregister`], which holds the lock
    /// until the drain and the detach are done.
    #[pin]
    pub(crate) attach: Mutex<Option<DynamicAttachment<Buffer>>>,
    #[pin]
    pub(crate) state: Mutex<BufState>,
    pub(crate) drain: Arc<Drain>,
}

impl Buffer {
    /// Ends every new access through the registration: no new fault or mapping, every mapping
    /// zapped. Requests already issued hold their own page references and complete. Idempotent;
    /// waits for nothing and frees nothing, so the exporter's callback calls it.
    pub(crate) fn cut(&self, revoked: bool) {
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
    pub(crate) fn release_pages(&self) {
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
    pub(crate) fn unregister(&self, revoked: bool) {
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
pub(crate) fn pin_error(e: Error) -> Error {
    if e == ENOMEM || e == ENODEV || e == EINTR || e == ERESTARTSYS {
        e
    } else {
        EOPNOTSUPP
    }
}

/// Maps a registration's attachment for its GPU's peers: our arguments are checked, so an
/// exporter that cannot map the buffer for this GPU (`EINVAL`, `EIO`) holds memory this GPU
/// cannot reach (`EXDEV`).
pub(crate) fn map_for_peer(locked: &Locked<'_, Buffer>) -> Result {
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
pub(crate) fn extents(
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

impl Buffer {
    /// Takes the pages of `extents`: each is handed out to this registration with its base
    /// reference. Fails with `EBUSY` when a page belongs to another registration (or, of the
    /// owner's pages, to another user of its pool), `ENODEV` when the exporter revoked the
    /// buffer meanwhile, `EEXIST` when part of a chunk's range has the owner's struct pages and
    /// part none. `node` is the caller's guard of the node's registration.
    pub(crate) fn claim(
        &self,
        node: &RegistrationGuard<'_, FgdsFile>,
        extents: &[(u32, u64, u64)],
    ) -> Result {
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
