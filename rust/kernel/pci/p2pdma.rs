// SPDX-License-Identifier: GPL-2.0

//! PCI peer-to-peer DMA pages over a BAR range of a device another driver owns.
//!
//! C header: [`include/linux/pci-p2pdma.h`](srctree/include/linux/pci-p2pdma.h).
//!
//! [`P2pPages`] gives a range of a PCI BAR `struct page`s of type `MEMORY_DEVICE_PCI_P2PDMA`
//! with the BAR's real P2PDMA provider (set up by the driver owning the device, e.g. vfio-pci
//! for the BARs it exports as dma-bufs). The block layer then applies its own P2P rules to them:
//! they can be the buffer of an O_DIRECT request only for a queue that can do P2P DMA to that
//! BAR.
//!
//! Every page starts free. [`P2pPages::activate`] hands a free page out as a [`P2pPage`], which
//! owns the page's first reference, and records who the page is for (a [`PageOwner`]). Mappings
//! and pins of the page take references of their own; when the last one is dropped the owner's
//! [`PageOwner::page_free`] is called and the page is free again. Dropping a [`P2pPages`] waits
//! until every page it handed out is free: no reference to one of its pages can outlive its
//! `struct page`s.

use crate::{
    bindings,
    error::from_err_ptr,
    ffi::c_ulong,
    page::BorrowedPage,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
};
use core::{
    ptr::NonNull,
    sync::atomic::{
        AtomicPtr,
        Ordering, //
    },
};

/// Who a page handed out by [`P2pPages::activate`] is for; told when the page is free again.
pub trait PageOwner: Send + Sync {
    /// Called when the last reference to page `index` of the range is dropped.
    ///
    /// May be called from any context, hard interrupts included (the last reference can be
    /// dropped by a bio's completion): must not sleep. The reference to the owner that
    /// [`P2pPages::activate`] took is dropped right after this returns, in the same context,
    /// so the owner's `drop` must not sleep either.
    fn page_free(&self, index: usize);
}

/// P2PDMA pages over `[offset, offset + size)` of a BAR.
///
/// # Examples
///
/// Ranges are made of whole memory hotplug subsections:
///
/// ```
/// use kernel::{
///     pci::{
///         self,
///         p2pdma::{P2pPages, PageOwner},
///     },
///     sync::aref::ARef,
/// };
///
/// struct Nobody;
///
/// impl PageOwner for Nobody {
///     fn page_free(&self, _index: usize) {}
/// }
///
/// let mut first: Option<ARef<pci::Device>> = None;
/// pci::Device::for_each(|pdev| {
///     first = Some(ARef::from(pdev));
///     false
/// });
/// if let Some(pdev) = first {
///     let align = P2pPages::<Nobody>::ALIGN;
///     // SAFETY: No pages are created: each range is refused before that.
///     unsafe {
///         assert_eq!(P2pPages::<Nobody>::new(&pdev, 0, 4096, align).err(), Some(EINVAL));
///         assert_eq!(P2pPages::<Nobody>::new(&pdev, 0, 0, 4096).err(), Some(EINVAL));
///         assert_eq!(P2pPages::<Nobody>::new(&pdev, 0, 0, 0).err(), Some(EINVAL));
///         assert_eq!(P2pPages::<Nobody>::new(&pdev, 6, 0, align).err(), Some(EINVAL));
///     }
/// }
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// - `pgmap` was returned by `pci_p2pdma_memremap()` for `pdev`, covers `owners.len()` pages
///   from `first_pfn`, has `owner` pointing to the first element of `owners`, and is unmapped
///   only in [`Drop`]. `owners` is never resized.
/// - `owners[i]` is null while page `i` is free; otherwise it came from [`Arc::into_raw`] of
///   the owner the page was handed out for, and is taken back exactly once: by the pagemap's
///   `folio_free` callback when the page is free again, or by [`P2pPages::activate`] when it
///   fails to hand the page out.
pub struct P2pPages<T: PageOwner> {
    pgmap: NonNull<bindings::dev_pagemap>,
    first_pfn: usize,
    owners: KVVec<AtomicPtr<T>>,
    _pdev: ARef<pci::Device>,
}

// SAFETY: The pagemap may be used and removed from any thread; `T` is `Send + Sync`.
unsafe impl<T: PageOwner> Send for P2pPages<T> {}
// SAFETY: `&self` methods only read immutable fields or operate on pages and owners atomically.
unsafe impl<T: PageOwner> Sync for P2pPages<T> {}

impl<T: PageOwner> P2pPages<T> {
    const OPS: bindings::dev_pagemap_ops = bindings::dev_pagemap_ops {
        folio_free: Some(Self::folio_free),
        ..pin_init::zeroed()
    };

    /// Alignment of the offset and size of a range: the memory hotplug subsection.
    pub const ALIGN: u64 = 1 << bindings::SUBSECTION_SHIFT;

    /// Creates P2PDMA pages over `[offset, offset + size)` of BAR `bar` of `pdev`.
    ///
    /// `offset` and `size` must be multiples of [`P2pPages::ALIGN`]. Fails with `ENODEV` when
    /// `pdev`'s driver set up no P2PDMA providers, `EINVAL` for a range outside the BAR or not
    /// aligned, `EEXIST` when part of the range already has struct pages (made by the BAR's
    /// owner, or by another [`P2pPages`]).
    ///
    /// # Safety
    ///
    /// The pages refer to `pdev`'s P2PDMA provider, which belongs to `pdev`'s driver and is
    /// released when that driver is unbound. The caller must drop the returned value before
    /// `pdev`'s driver is unbound (for example from a bus notification of the unbind, which
    /// comes before the driver's `remove()`, or before a revocation of a dma-buf over the range
    /// completes, when the exporter revokes before it releases its providers).
    pub unsafe fn new(pdev: &pci::Device, bar: u32, offset: u64, size: u64) -> Result<Self> {
        if offset % Self::ALIGN != 0 || size % Self::ALIGN != 0 || size == 0 {
            return Err(EINVAL);
        }
        if !pdev.bar_is_mem(bar) {
            return Err(EINVAL);
        }
        let nr_pages = usize::try_from(size >> bindings::PAGE_SHIFT)?;
        // One pointer per page: 2 MiB for a range of 1 GiB, which need not be contiguous memory.
        let mut owners = KVVec::with_capacity(nr_pages, GFP_KERNEL)?;
        for _ in 0..nr_pages {
            owners.push(AtomicPtr::new(core::ptr::null_mut()), GFP_KERNEL)?;
        }
        // `pdev` is valid; `Self::OPS` is static; the owner pointer is the heap buffer of
        // `owners`, which is never resized and is dropped only after the pagemap is removed.
        // SAFETY: See the comment above.
        let pgmap = from_err_ptr(unsafe {
            bindings::pci_p2pdma_memremap(
                pdev.as_raw(),
                bar.try_into()?,
                offset,
                size,
                &Self::OPS,
                owners.as_ptr().cast_mut().cast(),
            )
        })?;
        // SAFETY: `pgmap` is valid; `range` is set by `pci_p2pdma_memremap()`.
        let start = unsafe { (*pgmap).__bindgen_anon_1.range.as_ref().start };
        // INVARIANT: `pgmap` covers `size` bytes from `start`, its owner is `owners`, and every
        // page is free, with a null owner.
        Ok(Self {
            // SAFETY: `from_err_ptr` returned a valid, non-null pointer.
            pgmap: unsafe { NonNull::new_unchecked(pgmap) },
            first_pfn: (start >> bindings::PAGE_SHIFT) as usize,
            owners,
            _pdev: ARef::from(pdev),
        })
    }

    /// Number of pages.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether there are no pages (never true for a created range).
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    /// Physical address of the first byte of the range.
    pub fn phys_start(&self) -> u64 {
        (self.first_pfn as u64) << bindings::PAGE_SHIFT
    }

    /// Hands page `index`, which must be free, out for `owner`.
    ///
    /// The returned [`P2pPage`] owns the page's first reference. When the page's last reference
    /// is dropped (the [`P2pPage`]'s, or a mapping's or a pin's taken while it existed),
    /// `owner`'s [`PageOwner::page_free`] is called and the page is free again. Fails with
    /// `EBUSY` when the page is in use, `EINVAL` for an index outside the range.
    pub fn activate(&self, index: usize, owner: Arc<T>) -> Result<P2pPage> {
        let slot = self.owners.get(index).ok_or(EINVAL)?;
        let raw = Arc::into_raw(owner).cast_mut();
        if slot
            .compare_exchange(
                core::ptr::null_mut(),
                raw,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // SAFETY: `raw` came from `Arc::into_raw` above and was not stored anywhere.
            drop(unsafe { Arc::from_raw(raw) });
            return Err(EBUSY);
        }
        // `pgmap` is live (type invariant) and `index` is in its range.
        // SAFETY: See the comment above.
        let page = from_err_ptr(unsafe {
            bindings::pci_p2pdma_page_get(self.pgmap.as_ptr(), index as c_ulong)
        });
        match page {
            // INVARIANT: `pci_p2pdma_page_get()` gave us the page's first reference; until it
            // is free again the pagemap stays (`pci_p2pdma_memunmap()` waits for it).
            // SAFETY: `from_err_ptr` returned a valid, non-null pointer.
            Ok(page) => Ok(P2pPage(unsafe { NonNull::new_unchecked(page) })),
            Err(e) => {
                // The page was not handed out, so `folio_free` cannot take the owner back: the
                // slot is still ours (we set it and nobody clears a slot of a page in use).
                let raw = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
                // SAFETY: `raw` is the pointer we stored above, taken back exactly once.
                drop(unsafe { Arc::from_raw(raw) });
                Err(e)
            }
        }
    }

    /// The pagemap's `folio_free` callback: a page's refcount dropped to zero.
    ///
    /// # Safety
    ///
    /// `folio` is a page of a pagemap made by [`P2pPages::new`], whose refcount just dropped to
    /// zero; `pci_p2pdma_memunmap()` of that pagemap waits for this call to return.
    unsafe extern "C" fn folio_free(folio: *mut bindings::folio) {
        // A P2PDMA folio is one page. Its pagemap is live (removal waits for this call) and was
        // made by `new`, so its `owner` points to the `owners` of a live `P2pPages<T>`, of
        // which the page's index is an element.
        // SAFETY: See the comment above.
        let (index, slot) = unsafe {
            let page = folio.cast::<bindings::page>();
            let pgmap = bindings::page_pgmap(page);
            let first = (*pgmap).__bindgen_anon_1.range.as_ref().start >> bindings::PAGE_SHIFT;
            let index = bindings::page_to_pfn(page) - first as usize;
            (index, &*(*pgmap).owner.cast::<AtomicPtr<T>>().add(index))
        };
        let raw = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !raw.is_null() {
            // The page was handed out for this owner (type invariant); its reference is taken
            // back here, once.
            // SAFETY: As just said.
            let owner = unsafe { Arc::from_raw(raw) };
            owner.page_free(index);
        }
    }
}

impl<T: PageOwner> Drop for P2pPages<T> {
    fn drop(&mut self) {
        // By the type invariant `pgmap` is live and unmapped only here. This waits until every
        // page handed out is free (`folio_free` returned for it), then removes the pages.
        // SAFETY: As just said.
        unsafe { bindings::pci_p2pdma_memunmap(self.pgmap.as_ptr()) };
        // Every page is free, so every slot is null; `owners` can go.
    }
}

/// A page handed out by [`P2pPages::activate`]: owns one reference to it.
///
/// Dropping it drops the reference. It may outlive the [`P2pPages`] it came from, whose drop
/// then waits for it.
///
/// # Invariants
///
/// The pointer is a page of a pagemap made by `pci_p2pdma_memremap()`, on which we own one
/// reference; the pagemap is not removed while the page has references.
pub struct P2pPage(NonNull<bindings::page>);

// SAFETY: A page reference may be used and dropped from any thread.
unsafe impl Send for P2pPage {}
// SAFETY: `&self` only gives out a borrow of the page, whose users take their own references.
unsafe impl Sync for P2pPage {}

impl P2pPage {
    /// The page, for as long as this reference is held.
    pub fn page(&self) -> BorrowedPage<'_> {
        // SAFETY: We own a reference (type invariant), so the page is valid for the borrow.
        unsafe { BorrowedPage::from_raw(self.0) }
    }
}

impl Drop for P2pPage {
    fn drop(&mut self) {
        // SAFETY: We own a reference (type invariant), given up here.
        unsafe { bindings::put_page(self.0.as_ptr()) };
    }
}
