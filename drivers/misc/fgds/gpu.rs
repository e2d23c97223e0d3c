// SPDX-License-Identifier: GPL-2.0

//! A GPU served by fgds: the offered BAR, its struct pages (a table of chunks, each one pagemap)
//! and the drain that counts a registration's pages in use.

use core::sync::atomic::{
    AtomicUsize,
    Ordering, //
};
use kernel::{
    miscdevice::RegistrationGuard,
    new_mutex,
    page::PAGE_SIZE,
    pci::p2pdma::{
        Offer,
        P2pPages,
        PageOwner, //
    },
    prelude::*,
    rbtree::RBTree,
    sync::{
        Arc,
        Completion,
        CondVar,
        Mutex, //
    }, //
};

use crate::{
    buffer::Buffer,
    file::FgdsFile, //
};

/// Size of the unit in which BAR ranges get struct pages: the memory hotplug subsection.
pub(crate) const CHUNK_SIZE: u64 = P2pPages::<Drain>::ALIGN;
pub(crate) const PAGES_PER_CHUNK: usize = (CHUNK_SIZE as usize) / PAGE_SIZE;
/// Most units in one [`Chunk`] (one pagemap): 1 GiB, whose page owners take 2 MiB.
pub(crate) const MAX_CHUNK_UNITS: u64 = (1 << 30) / CHUNK_SIZE;

/// A run of [`CHUNK_SIZE`] units of a BAR with struct pages: one pagemap.
///
/// A registration makes one chunk for each run of units it needs that have no struct pages
/// yet (so a large registration has one pagemap, whose removal waits for one grace period,
/// and whose pages the block layer merges into one bio), and shares the chunks of the units
/// it has in common with others.
pub(crate) struct Chunk {
    /// Key of the first unit: the chunk is in [`GpuState::chunks`] under each of
    /// `key..key + units`.
    key: u64,
    units: u64,
    pub(crate) pages: P2pPages<Drain>,
    /// Registrations owning at least one page of the chunk. Protected by [`Gpu::state`].
    pub(crate) users: AtomicUsize,
}

impl Chunk {
    /// Whether the chunk covers the unit of key `key`.
    pub(crate) fn covers(&self, key: u64) -> bool {
        key >= self.key && key - self.key < self.units
    }

    /// Index in the chunk of the page at BAR offset `off`, in the unit of key `key`.
    pub(crate) fn page_index(&self, key: u64, off: u64) -> usize {
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
pub(crate) struct Drain {
    pub(crate) live: AtomicUsize,
    #[pin]
    done: Completion,
}

impl Drain {
    pub(crate) fn new() -> impl PinInit<Self, Error> {
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
    pub(crate) fn end_bias(&self) {
        self.page_freed();
    }

    /// Waits until every page counted was freed, the bias gone. Uninterruptible: called only
    /// with no lock of the exporter's held, once the registration is cut (so only requests
    /// already issued hold pages).
    pub(crate) fn wait(&self) {
        self.done.wait_for_completion();
    }
}

impl PageOwner for Drain {
    fn page_free(&self, _index: usize) {
        self.page_freed();
    }
}

/// A unit of a BAR that has struct pages, in [`GpuState::chunks`].
pub(crate) enum Unit {
    /// Its chunk, used by at least one registration.
    Live(Arc<Chunk>),
    /// Its chunk lost its last user and its struct pages are being removed, without
    /// [`Gpu::state`] held ([`release_chunks`]); the unit leaves the table when they are gone. A
    /// registration that needs it waits until then ([`Gpu::unit_gone`]): pages made for it now
    /// would fail with `EEXIST`.
    Going,
}

/// State of a GPU shared by its open files.
pub(crate) struct GpuState {
    /// Every unit that has struct pages, by the unit's key
    /// (`(bar << 56) | unit index in the BAR`): a chunk of several units is there once for each.
    pub(crate) chunks: RBTree<u64, Unit>,
    /// Chunks (pagemaps) in `chunks`, going ones included.
    pub(crate) pagemaps: usize,
    /// Chunks whose units are [`Unit::Going`].
    going: usize,
    /// Registrations on the GPU, by cookie; each leaves in [`Buffer::unregister`].
    pub(crate) buffers: RBTree<u64, Arc<Buffer>>,
    /// Last cookie id given out; ids are never reused.
    pub(crate) last_id: u64,
}

/// An offered GPU BAR served by fgds (the node's GPU).
#[pin_data]
pub(crate) struct Gpu {
    pub(crate) offer: Offer,
    #[pin]
    pub(crate) state: Mutex<GpuState>,
    /// Notified, with [`Gpu::state`], when a going chunk's units leave the table.
    #[pin]
    pub(crate) unit_gone: CondVar,
    /// [`Buffer`]s alive (registered, or torn down and still referenced), for fdinfo.
    pub(crate) live_buffers: AtomicUsize,
}

/// Counts a [`Buffer`] in [`Gpu::live_buffers`] while it exists.
pub(crate) struct LiveBuffer(Arc<Gpu>);

impl LiveBuffer {
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Self {
        gpu.live_buffers.fetch_add(1, Ordering::Relaxed);
        Self(gpu.clone())
    }
}

impl Drop for LiveBuffer {
    fn drop(&mut self) {
        self.0.live_buffers.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) fn chunk_key(bar: u32, bar_off: u64) -> u64 {
    (u64::from(bar) << 56) | (bar_off / CHUNK_SIZE)
}

impl Gpu {
    /// A GPU for `offer`, with no struct pages and no registration yet.
    pub(crate) fn new(offer: Offer) -> impl PinInit<Self, Error> {
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
        })
    }

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
    pub(crate) fn bar_offset_of(&self, addr: u64, len: u64) -> Option<u64> {
        let pdev = self.offer.pci_dev();
        let bar = self.offer.index();
        let start = pdev.resource_start(bar).ok()?;
        let size = pdev.resource_len(bar).ok()?;
        let off = addr.checked_sub(start)?;
        (off < size && len <= size - off).then_some(off)
    }
}

/// The data of a GPU's node: the GPU, whose registrations all end when the node goes.
pub(crate) struct NodeGpu(pub(crate) Arc<Gpu>);

impl Drop for NodeGpu {
    fn drop(&mut self) {
        // The node's registration is dropped (its driver unbinds): it waited until no file
        // operation held a guard of it, and no new one gets one. So no REG_BUFFER runs on the
        // GPU, with unpublished struct pages, and none starts.
        self.0.revoke_all();
    }
}

/// Gives up a registration's use of `chunks` (its pages all freed); a chunk no registration uses
/// any more loses its struct pages and leaves the GPU's table.
///
/// The removal of a pagemap waits for an RCU grace period, so it runs without [`Gpu::state`]
/// held: meanwhile the chunk's units are [`Unit::Going`], and a registration that needs one of
/// them waits until they are gone, while every other use of the GPU goes on.
pub(crate) fn release_chunks(gpu: &Gpu, chunks: KVec<Arc<Chunk>>) {
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
pub(crate) fn going_in(gs: &GpuState, extents: &[(u32, u64, u64)]) -> bool {
    gs.going > 0
        && extents.iter().any(|&(bar, off, len)| {
            (chunk_key(bar, off)..=chunk_key(bar, off + len - 1))
                .any(|key| matches!(gs.chunks.get(&key), Some(Unit::Going)))
        })
}

/// Puts `chunk` in the GPU's table under each of its units, none of which is there yet. On
/// failure some may be: [`release_chunks`] removes them.
pub(crate) fn publish_chunk(gs: &mut GpuState, chunk: &Arc<Chunk>) -> Result {
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
pub(crate) fn new_chunk(
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
