// SPDX-License-Identifier: GPL-2.0

//! KUnit tests of the success paths of the kernel crate's dma-buf import
//! (`kernel::dma_buf`) and P2PDMA page (`kernel::pci::p2pdma`) abstractions.
//!
//! They need an exporter of PCI MMIO dma-bufs with a P2PDMA provider, which no device has at
//! boot, when the crate's doctests run: this module takes the device `lib/test_p2p_dmabuf.c` is
//! bound to and exports ranges of its BAR 2 in the kernel. Load it after binding that exporter
//! to a device with a 64 MiB BAR 2 (`tools/testing/selftests/fgds/fgds_exporter_test.c` does).

use core::{
    ptr::NonNull,
    sync::atomic::{
        AtomicUsize,
        Ordering, //
    },
};
use kernel::{
    auxiliary, bindings,
    device::Device,
    dma::DataDirection,
    dma_buf::{
        DmaBuf,
        DynamicAttachment,
        Importer,
        Invalidation,
        ResvUsage, //
    },
    error::from_err_ptr,
    ffi::{
        c_int,
        c_void, //
    },
    fs::File,
    pci::{
        self,
        p2pdma::{
            OfferedBar,
            P2pPages,
            PageOwner, //
        },
    },
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
};

module! {
    type: TestP2pDmabufKunit,
    name: "test_p2p_dmabuf_kunit",
    description: "KUnit tests of the Rust dma-buf import and P2PDMA page abstractions",
    license: "GPL",
    imports_ns: ["DMA_BUF"],
}

struct TestP2pDmabufKunit;

impl kernel::Module for TestP2pDmabufKunit {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(Self)
    }
}

// The exporter's in-kernel exports, as lib/test_p2p_dmabuf.h declares them (lib/test_p2p_dmabuf.c
// documents them). The opaque pointers are a `struct device *` and `struct dma_buf *`s.
extern "C" {
    fn test_p2p_dmabuf_kunit_get(owner_off: *mut u64) -> *mut c_void;
    fn test_p2p_dmabuf_kunit_put(dev: *mut c_void);
    fn test_p2p_dmabuf_kunit_offer(dev: *mut c_void) -> *mut c_void;
    fn test_p2p_dmabuf_kunit_export(
        dev: *mut c_void,
        offset: u64,
        size: u64,
        flags: u32,
        fence_ms: u32,
    ) -> *mut c_void;
    fn test_p2p_dmabuf_kunit_invalidate(dmabuf: *mut c_void, revoke: bool) -> c_int;
    fn test_p2p_dmabuf_kunit_state(
        dmabuf: *mut c_void,
        attachments: *mut u64,
        maps: *mut u64,
        pins: *mut u64,
    ) -> c_int;
}

// Export flags, as in lib/test_p2p_dmabuf_uapi.h.
const DYNAMIC: u32 = 1 << 0;
const SG_PROVIDER: u32 = 1 << 1;
const PHYS: u32 = 1 << 3;
const MOVE_ON_MAP: u32 = 1 << 4;
const PIN_SYSTEM: u32 = 1 << 5;

const SZ_1M: u64 = 1 << 20;
/// The BAR the exporter exports.
const BAR: u32 = 2;

/// The exporter's device, held bound (its P2PDMA provider alive) while this lives.
///
/// # Invariants
///
/// `dev` was returned by `test_p2p_dmabuf_kunit_get()` and is put only in [`Drop`].
struct Exporter {
    dev: NonNull<bindings::device>,
    owner_off: u64,
}

impl Exporter {
    fn get() -> Result<Self> {
        let mut owner_off = 0;
        // SAFETY: `owner_off` is a valid out-pointer.
        let dev = unsafe { test_p2p_dmabuf_kunit_get(&mut owner_off) }.cast::<bindings::device>();
        let Some(dev) = NonNull::new(dev) else {
            kernel::kunit::err(fmt!(
                "    # the test exporter is bound to no device: bind test_p2p_dmabuf first\n"
            ));
            return Err(ENODEV);
        };
        // INVARIANT: `dev` was just returned by `test_p2p_dmabuf_kunit_get()`.
        Ok(Self { dev, owner_off })
    }

    fn device(&self) -> &Device {
        // SAFETY: `test_p2p_dmabuf_kunit_get()` took a reference (type invariant), dropped only
        // when `self` is.
        unsafe { Device::from_raw(self.dev.as_ptr()) }
    }

    fn pci(&self) -> Result<&pci::Device> {
        self.device().try_into()
    }

    /// BAR 2's offer (`pcim_p2pdma_offer()` at the exporter's probe).
    fn offer(&self) -> Result<&OfferedBar> {
        // SAFETY: `dev` is held (type invariant), so the exporter is bound to it.
        let adev = unsafe { test_p2p_dmabuf_kunit_offer(self.dev.as_ptr().cast()) };
        // SAFETY: The offer's auxiliary device lives while the binding does, so while `self`
        // holds it; `auxiliary::Device` is a transparent wrapper of `struct auxiliary_device`.
        let adev = unsafe { &*adev.cast::<auxiliary::Device>() };
        OfferedBar::of(adev)
    }

    /// BAR offset of the P2PDMA pages the exporter made at probe, if it made any.
    fn owner_pages(&self) -> Option<u64> {
        (self.owner_off != u64::MAX).then_some(self.owner_off)
    }

    fn export(&self, offset: u64, size: u64, flags: u32, fence_ms: u32) -> Result<ARef<DmaBuf>> {
        // SAFETY: `dev` is held (type invariant); the function accepts any range and flags.
        let ptr = from_err_ptr(unsafe {
            test_p2p_dmabuf_kunit_export(self.dev.as_ptr().cast(), offset, size, flags, fence_ms)
        })?;
        // SAFETY: `ptr` is a valid, non-null dma-buf whose reference is ours, transferred to the
        // `ARef`; `DmaBuf` is a transparent wrapper of `struct dma_buf`.
        Ok(unsafe { ARef::from_raw(NonNull::new_unchecked(ptr.cast())) })
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // SAFETY: `dev` came from `test_p2p_dmabuf_kunit_get()` (type invariant), put once here.
        unsafe { test_p2p_dmabuf_kunit_put(self.dev.as_ptr().cast()) };
    }
}

/// Moves (`revoke == false`) or revokes a buffer of the exporter.
fn invalidate(buf: &DmaBuf, revoke: bool) -> Result {
    // SAFETY: `buf` is valid while borrowed; the function checks that it is the exporter's.
    kernel::error::to_result(unsafe {
        test_p2p_dmabuf_kunit_invalidate(buf.as_raw().cast(), revoke)
    })
}

/// The exporter's count of `(attachments, maps, pins)` of `buf`.
fn state(buf: &DmaBuf) -> Result<(u64, u64, u64)> {
    let (mut attachments, mut maps, mut pins) = (0, 0, 0);
    // SAFETY: `buf` is valid while borrowed; the out-pointers point to locals.
    kernel::error::to_result(unsafe {
        test_p2p_dmabuf_kunit_state(buf.as_raw().cast(), &mut attachments, &mut maps, &mut pins)
    })?;
    Ok((attachments, maps, pins))
}

/// Whether every `DMA_RESV_USAGE_KERNEL` fence of `buf` has signalled.
fn kernel_fences_signalled(buf: &DmaBuf) -> bool {
    // SAFETY: `buf` is valid while borrowed and so is its `resv`; testing the fences needs no
    // lock (it walks them under RCU).
    unsafe {
        bindings::dma_resv_test_signaled(
            (*buf.as_raw()).resv,
            bindings::dma_resv_usage_DMA_RESV_USAGE_KERNEL,
        )
    }
}

/// Whether every fence of `buf` has signalled, bookkeeping ones included: what an exporter
/// waits for before it revokes, moves or frees the memory.
fn all_fences_signalled(buf: &DmaBuf) -> bool {
    // SAFETY: `buf` is valid while borrowed and so is its `resv`; testing the fences needs no
    // lock (it walks them under RCU).
    unsafe {
        bindings::dma_resv_test_signaled(
            (*buf.as_raw()).resv,
            bindings::dma_resv_usage_DMA_RESV_USAGE_BOOKKEEP,
        )
    }
}

/// An importer that counts its invalidations and unmaps in each.
struct Counting {
    invalidations: AtomicUsize,
}

impl Counting {
    fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                invalidations: AtomicUsize::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    fn invalidations(&self) -> usize {
        self.invalidations.load(Ordering::Relaxed)
    }
}

impl Importer for Counting {
    fn invalidate_mappings(&self, attach: &mut Invalidation<'_, Self>) {
        self.invalidations.fetch_add(1, Ordering::Relaxed);
        attach.unmap();
    }
}

/// A page owner that records which pages were freed, and how often.
struct Freed {
    count: AtomicUsize,
    last: AtomicUsize,
}

impl Freed {
    fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(
            Freed {
                count: AtomicUsize::new(0),
                last: AtomicUsize::new(usize::MAX),
            },
            GFP_KERNEL,
        )?)
    }
}

impl PageOwner for Freed {
    fn page_free(&self, index: usize) {
        self.last.store(index, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Fails the test with `what` (and the line) when `cond` is false, dropping what it holds on the
/// way out: a KUnit assertion would end the test's thread without running destructors, and a
/// held [`Exporter`] would then keep its device from unbinding.
macro_rules! check {
    ($cond:expr) => {
        if !$cond {
            kernel::kunit::err(fmt!(
                "    # {}:{}: check failed: {}\n",
                file!(),
                line!(),
                stringify!($cond)
            ));
            return Err(EINVAL);
        }
    };
}

#[kunit_tests(rust_dma_buf_p2pdma)]
mod tests {
    use super::*;

    /// A buffer of amdgpu's and xe's pattern (dynamic, with physical ranges) at 44 MiB,
    /// attached for `importer` and mapped.
    fn dynamic_mapped<I: Importer>(
        exp: &Exporter,
        importer: Arc<I>,
    ) -> Result<(ARef<DmaBuf>, DynamicAttachment<I>)> {
        let buf = exp.export(44 * SZ_1M, 2 * SZ_1M, DYNAMIC | SG_PROVIDER | PHYS, 0)?;
        let attach =
            DynamicAttachment::new(&buf, exp.device(), importer, DataDirection::FromDevice)?;
        attach.lock().map()?;
        Ok((buf, attach))
    }

    /// vfio-pci's pattern: static, sg from the provider, physical ranges.
    #[test]
    fn static_map_and_phys_ranges() -> Result {
        let exp = Exporter::get()?;
        let bar_start = exp.pci()?.resource_start(BAR)?;
        let (off, size) = (40 * SZ_1M, 4 * SZ_1M);
        let buf = exp.export(off, size, SG_PROVIDER | PHYS, 0)?;
        check!(buf.size() as u64 == size);

        let importer = Counting::new()?;
        let attach = DynamicAttachment::new(
            &buf,
            exp.device(),
            importer.clone(),
            DataDirection::Bidirectional,
        )?;
        check!(attach.peer2peer());
        check!(core::ptr::eq(attach.dma_buf(), &*buf));
        check!(state(&buf)? == (1, 0, 0));
        {
            let mut locked = attach.lock();
            check!(!locked.is_mapped());
            check!(locked.phys_ranges().err() == Some(EINVAL));
            let table = locked.map()?;
            check!(locked.is_mapped());
            let mut len = 0;
            for entry in table.iter() {
                len += entry.dma_len();
            }
            check!(len == size);
            // Mapped once: a second map() gives the same table.
            check!(core::ptr::eq(table, locked.map()?));
            check!(state(&buf)? == (1, 1, 0));

            {
                let ranges = locked.phys_ranges()?;
                check!(exp.offer()?.provides(&ranges));
                check!(exp.offer()?.index() == BAR);
                check!(core::ptr::eq(exp.offer()?.pci_dev(), exp.pci()?));
                let mut it = ranges.iter();
                check!(it.next() == Some((bar_start + off, size)));
                check!(it.next().is_none());
            }
            check!(locked.wait_fences(ResvUsage::Kernel).is_ok());
        }
        {
            let mut locked = attach.lock();
            check!(locked.is_mapped());
            locked.unmap();
            check!(!locked.is_mapped());
            check!(state(&buf)? == (1, 0, 0));
            locked.unmap();
            check!(locked.phys_ranges().err() == Some(EINVAL));
            locked.map()?;
        }
        // Dropping a mapped attachment unmaps and detaches it.
        drop(attach);
        check!(state(&buf)? == (0, 0, 0));
        check!(importer.invalidations() == 0);
        Ok(())
    }

    /// amdgpu's and xe's pattern with physical ranges: moves, then a revocation.
    #[test]
    fn dynamic_move_and_revoke() -> Result {
        let exp = Exporter::get()?;
        let importer = Counting::new()?;
        let (buf, attach) = dynamic_mapped(&exp, importer.clone())?;
        check!(state(&buf)? == (1, 1, 0));

        // A move: the importer is told and unmaps; the buffer maps again.
        invalidate(&buf, false)?;
        check!(importer.invalidations() == 1);
        check!(!attach.lock().is_mapped());
        check!(state(&buf)? == (1, 0, 0));
        {
            let mut locked = attach.lock();
            locked.map()?;
            check!(locked.phys_ranges().is_ok());
        }

        // A revocation: told again, and the buffer never maps again.
        invalidate(&buf, true)?;
        check!(importer.invalidations() == 2);
        {
            let locked = attach.lock();
            check!(!locked.is_mapped());
            check!(locked.map().err() == Some(ENODEV));
            check!(!locked.is_mapped());
        }
        // Not pinned unless asked: a dynamic exporter stays free to move the buffer.
        check!(state(&buf)? == (1, 0, 0));
        drop(attach);
        check!(
            DynamicAttachment::new(&buf, exp.device(), importer, DataDirection::FromDevice).err()
                == Some(ENODEV)
        );
        check!(state(&buf)? == (0, 0, 0));
        Ok(())
    }

    /// A pinned importer (fgds's pattern): a revocation is told through the callback, which
    /// unmaps and returns, and the pin stays with the attachment until it is dropped, so the
    /// exporter cannot move the memory under DMA the importer has not drained yet. No fence is
    /// left in the reservation object for the exporter to wait on.
    #[test]
    fn revocation_of_pinned_keeps_pin_until_drop() -> Result {
        let exp = Exporter::get()?;
        let buf = exp.export(52 * SZ_1M, 2 * SZ_1M, DYNAMIC | SG_PROVIDER | PHYS, 0)?;
        let importer = Counting::new()?;
        let attach = DynamicAttachment::new(
            &buf,
            exp.device(),
            importer.clone(),
            DataDirection::Bidirectional,
        )?;
        {
            let mut locked = attach.lock();
            locked.pin()?;
            locked.map()?;
        }
        check!(state(&buf)? == (1, 1, 1));
        invalidate(&buf, true)?;
        check!(importer.invalidations() == 1);
        {
            let locked = attach.lock();
            check!(!locked.is_mapped());
            check!(locked.is_pinned());
            check!(locked.map().err() == Some(ENODEV));
        }
        check!(state(&buf)? == (1, 0, 1));
        check!(all_fences_signalled(&buf));
        drop(attach);
        check!(state(&buf)? == (0, 0, 0));
        Ok(())
    }

    /// amdgpu's pin: the buffer moves into reach (the importer told while unmapped) and stays;
    /// unpinning and dropping the attachment give the pin back.
    #[test]
    fn pin_moves_into_reach_and_holds() -> Result {
        let exp = Exporter::get()?;
        let buf = exp.export(
            50 * SZ_1M,
            2 * SZ_1M,
            DYNAMIC | SG_PROVIDER | PHYS | MOVE_ON_MAP,
            0,
        )?;
        let importer = Counting::new()?;
        let attach = DynamicAttachment::new(
            &buf,
            exp.device(),
            importer.clone(),
            DataDirection::Bidirectional,
        )?;
        {
            let mut locked = attach.lock();
            check!(!locked.is_pinned());
            locked.pin()?;
            check!(locked.is_pinned());
            // Moved into reach to be pinned, while nothing was mapped.
            check!(importer.invalidations() == 1);
            locked.pin()?;
            check!(state(&buf)? == (1, 0, 1));
            locked.map()?;
            check!(locked.phys_ranges().is_ok());
            // Pinned: mapping moved nothing.
            check!(importer.invalidations() == 1);
            check!(state(&buf)? == (1, 1, 1));
            locked.unpin();
            check!(!locked.is_pinned());
            check!(state(&buf)? == (1, 1, 0));
            locked.pin()?;
        }
        // Dropping a pinned, mapped attachment unmaps, unpins and detaches it.
        drop(attach);
        check!(state(&buf)? == (0, 0, 0));
        check!(importer.invalidations() == 1);
        Ok(())
    }

    /// xe's pin: into system memory, where the exporter gives no physical ranges.
    #[test]
    fn pin_into_system_memory() -> Result {
        let exp = Exporter::get()?;
        let flags = DYNAMIC | SG_PROVIDER | PHYS | MOVE_ON_MAP | PIN_SYSTEM;
        let buf = exp.export(52 * SZ_1M, 2 * SZ_1M, flags, 0)?;
        let importer = Counting::new()?;
        let attach = DynamicAttachment::new(
            &buf,
            exp.device(),
            importer.clone(),
            DataDirection::Bidirectional,
        )?;
        let mut locked = attach.lock();
        locked.pin()?;
        locked.map()?;
        check!(locked.phys_ranges().err() == Some(EOPNOTSUPP));
        locked.unmap();
        locked.unpin();
        check!(state(&buf)? == (1, 0, 0));
        // Unpinned, a map for a peer moves it back into reach.
        let before = importer.invalidations();
        locked.map()?;
        check!(importer.invalidations() == before + 1);
        check!(locked.phys_ranges().is_ok());
        Ok(())
    }

    /// `File::mapping()` holds the inode that hosts the file's page-cache mapping until it is
    /// dropped, and its `unmap_range()` zaps (here: nothing mapped) and returns. A dma-buf is a
    /// file: its own.
    #[test]
    fn file_mapping_holds_its_inode() -> Result {
        let exp = Exporter::get()?;
        let buf = exp.export(54 * SZ_1M, 2 * SZ_1M, SG_PROVIDER | PHYS, 0)?;
        // SAFETY: The dma-buf's file is valid while `buf` holds a reference to the dma-buf.
        let file = unsafe { File::from_raw_file((*buf.as_raw()).file) };
        let count = || {
            // SAFETY: The file is valid (above), so are its mapping and the mapping's host.
            unsafe { bindings::atomic_read(&(*(*(*file.as_ptr()).f_mapping).host).i_count) }
        };
        let before = count();
        let mapping = file.mapping();
        check!(count() == before + 1);
        mapping.unmap_range(0, 2 * SZ_1M);
        drop(mapping);
        check!(count() == before);
        Ok(())
    }

    /// amdgpu's and xe's pattern in Linux 7.2: no physical ranges.
    #[test]
    fn no_phys_ranges() -> Result {
        let exp = Exporter::get()?;
        let buf = exp.export(46 * SZ_1M, 2 * SZ_1M, DYNAMIC, 0)?;
        let attach = DynamicAttachment::new(
            &buf,
            exp.device(),
            Counting::new()?,
            DataDirection::ToDevice,
        )?;
        let mut locked = attach.lock();
        locked.map()?;
        check!(locked.phys_ranges().err() == Some(EOPNOTSUPP));
        Ok(())
    }

    /// An exporter's clear at map time (a `DMA_RESV_USAGE_KERNEL` fence) is waited for.
    #[test]
    fn kernel_fence_is_waited_for() -> Result {
        let exp = Exporter::get()?;
        let buf = exp.export(48 * SZ_1M, 2 * SZ_1M, SG_PROVIDER | PHYS, 500)?;
        let attach = DynamicAttachment::new(
            &buf,
            exp.device(),
            Counting::new()?,
            DataDirection::Bidirectional,
        )?;
        let locked = attach.lock();
        check!(kernel_fences_signalled(&buf));
        locked.map()?;
        // Signalled 500 ms after the map.
        check!(!kernel_fences_signalled(&buf));
        locked.wait_fences(ResvUsage::Kernel)?;
        check!(kernel_fences_signalled(&buf));
        Ok(())
    }

    /// Pages are handed out, freed with their last reference, and gone with their range.
    #[test]
    fn p2p_pages_lifecycle() -> Result {
        let exp = Exporter::get()?;
        let offer = exp.offer()?;
        let bar_start = exp.pci()?.resource_start(BAR)?;
        let align = P2pPages::<Freed>::ALIGN;
        let off = 32 * SZ_1M;
        let owner = Freed::new()?;

        // SAFETY: `exp` holds the device bound, and with it the offer and the BAR's provider,
        // until it is dropped, after `pages` (declared later, so dropped earlier): the exporter's
        // remove() waits for it, and the offer goes after remove().
        let pages = unsafe { P2pPages::<Freed>::new(offer, off, 2 * align) }?;
        check!(pages.len() as u64 == (2 * align) >> bindings::PAGE_SHIFT);
        check!(!pages.is_empty());
        check!(pages.phys_start() == bar_start + off);
        // Another range over the same pages is refused.
        // SAFETY: As above; and this fails before any page is made.
        check!(unsafe { P2pPages::<Freed>::new(offer, off + align, align) }.err() == Some(EEXIST));

        let page = pages.activate(5, owner.clone())?;
        let raw = page.page().as_ptr();
        // SAFETY: `raw` is a page we hold a reference to.
        let pfn = unsafe { bindings::page_to_pfn(raw) };
        check!(
            (pfn as u64) << bindings::PAGE_SHIFT == bar_start + off + (5 << bindings::PAGE_SHIFT)
        );
        check!(pages.activate(5, owner.clone()).err() == Some(EBUSY));
        check!(pages.activate(pages.len(), owner.clone()).err() == Some(EINVAL));

        // A second reference (as a mapping or a pin takes) keeps the page in use.
        // SAFETY: `raw` is a page we hold a reference to.
        unsafe { bindings::get_page(raw) };
        drop(page);
        check!(owner.count.load(Ordering::Relaxed) == 0);
        check!(pages.activate(5, owner.clone()).err() == Some(EBUSY));
        // SAFETY: The reference taken above, given up.
        unsafe { bindings::put_page(raw) };
        check!(owner.count.load(Ordering::Relaxed) == 1);
        check!(owner.last.load(Ordering::Relaxed) == 5);

        // Free again, it can be handed out again.
        drop(pages.activate(5, owner.clone())?);
        check!(owner.count.load(Ordering::Relaxed) == 2);
        drop(pages.activate(pages.len() - 1, owner.clone())?);
        check!(owner.last.load(Ordering::Relaxed) == pages.len() - 1);

        // Dropping the range removes its pages: the same range can be made again.
        drop(pages);
        // SAFETY: As above.
        drop(unsafe { P2pPages::<Freed>::new(offer, off, 2 * align) }?);
        Ok(())
    }

    /// Where the BAR's owner made pages (nvidia-uvm's over BAR1), a range is those pages, taken
    /// out of the owner's pool while held: once at a time, handed out, freed, given back.
    #[test]
    fn owner_pages_claimed() -> Result {
        let exp = Exporter::get()?;
        // The selftest loads the exporter with owner_pages_mib set.
        let owner_off = exp.owner_pages().ok_or(ENODEV)?;
        let offer = exp.offer()?;
        let bar_start = exp.pci()?.resource_start(BAR)?;
        let align = P2pPages::<Freed>::ALIGN;
        let owner = Freed::new()?;

        // SAFETY: As in `p2p_pages_lifecycle`: `exp` outlives `claim` and the failed attempts.
        let claim = unsafe { P2pPages::<Freed>::new(offer, owner_off, 2 * align) }?;
        check!(claim.phys_start() == bar_start + owner_off);
        // SAFETY: As above.
        unsafe {
            // Out of the pool: no second range gets the same pages.
            check!(P2pPages::<Freed>::new(offer, owner_off + align, align).err() == Some(EBUSY));
            // Half the owner's pages, half none: refused.
            check!(
                P2pPages::<Freed>::new(offer, owner_off - align, 2 * align).err() == Some(EEXIST)
            );
        }
        let page = claim.activate(7, owner.clone())?;
        let raw = page.page().as_ptr();
        // SAFETY: `raw` is a page we hold a reference to.
        let pfn = unsafe { bindings::page_to_pfn(raw) };
        check!(
            (pfn as u64) << bindings::PAGE_SHIFT
                == bar_start + owner_off + (7 << bindings::PAGE_SHIFT)
        );
        check!(claim.activate(7, owner.clone()).err() == Some(EBUSY));
        drop(page);
        check!(owner.count.load(Ordering::Relaxed) == 1);
        check!(owner.last.load(Ordering::Relaxed) == 7);
        drop(claim.activate(7, owner.clone())?);
        check!(owner.count.load(Ordering::Relaxed) == 2);

        // Given back to the pool: the same range can be claimed again.
        drop(claim);
        // SAFETY: As above.
        drop(unsafe { P2pPages::<Freed>::new(offer, owner_off, 2 * align) }?);
        Ok(())
    }
}
