// SPDX-License-Identifier: GPL-2.0

//! PCI peer-to-peer DMA pages over a BAR range of a device another driver owns.
//!
//! C header: [`include/linux/pci-p2pdma.h`](srctree/include/linux/pci-p2pdma.h).
//!
//! [`P2pPages`] gives a range of a PCI BAR `struct page`s of type `MEMORY_DEVICE_PCI_P2PDMA`
//! with the BAR's real P2PDMA provider (set up by the driver owning the device, e.g. vfio-pci
//! for the BARs it exports as dma-bufs). The block layer then applies its own P2P rules to them:
//! they can be the buffer of an O_DIRECT request only for a queue that can do P2P DMA to that
//! BAR. The caller owns the pages' reference counts: each starts at zero, is set to one by
//! [`P2pPages::init_page_ref`], and when it drops back to zero [`PageOwner::page_free`] is called.

use crate::{
    bindings,
    error::from_err_ptr,
    page::BorrowedPage,
    pci,
    prelude::*,
    sync::Arc, //
};
use core::ptr::NonNull;

/// Receives the pages' last-reference notifications.
pub trait PageOwner: Send + Sync + Sized {
    /// Called when the reference count of page `index` of the range drops to zero.
    ///
    /// May be called from any context, hard interrupts included (the last reference can be
    /// dropped by a bio's completion): must not sleep.
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
///     sync::{aref::ARef, Arc},
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
///     let owner = Arc::new(Nobody, GFP_KERNEL)?;
///     let align = P2pPages::<Nobody>::ALIGN;
///     assert_eq!(P2pPages::new(&pdev, 0, 4096, align, owner.clone()).err(), Some(EINVAL));
///     assert_eq!(P2pPages::new(&pdev, 0, 0, 4096, owner.clone()).err(), Some(EINVAL));
///     assert_eq!(P2pPages::new(&pdev, 0, 0, 0, owner).err(), Some(EINVAL));
/// }
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `pgmap` was returned by `pci_p2pdma_memremap()` with `owner` pointing to `owner`'s data and
/// is unmapped only in [`Drop`]; it covers `nr_pages` pages from `first_pfn`.
pub struct P2pPages<T: PageOwner> {
    pgmap: NonNull<bindings::dev_pagemap>,
    first_pfn: usize,
    nr_pages: usize,
    owner: Arc<T>,
}

// SAFETY: The pagemap may be used and removed from any thread; `T` is `Send + Sync`.
unsafe impl<T: PageOwner> Send for P2pPages<T> {}
// SAFETY: `&self` methods only read immutable fields or operate on pages atomically.
unsafe impl<T: PageOwner> Sync for P2pPages<T> {}

impl<T: PageOwner> P2pPages<T> {
    const OPS: bindings::dev_pagemap_ops = bindings::dev_pagemap_ops {
        folio_free: Some(Self::folio_free),
        ..pin_init::zeroed()
    };

    /// Creates P2PDMA pages over `[offset, offset + size)` of BAR `bar` of `pdev`.
    ///
    /// `offset` and `size` must be multiples of the memory hotplug subsection size
    /// ([`P2pPages::ALIGN`]). Fails with `ENODEV` when `pdev`'s driver set up no P2PDMA
    /// providers, `EINVAL` for a range outside the BAR.
    pub fn new(
        pdev: &pci::Device,
        bar: u32,
        offset: u64,
        size: u64,
        owner: Arc<T>,
    ) -> Result<Self> {
        if offset % Self::ALIGN != 0 || size % Self::ALIGN != 0 || size == 0 {
            return Err(EINVAL);
        }
        let owner_ptr: *const T = &*owner;
        // `pdev` is valid; `Self::OPS` is static; `owner_ptr` stays valid until the
        // pagemap is removed in `drop` (we hold `owner`).
        // SAFETY: See the comment above.
        let pgmap = from_err_ptr(unsafe {
            bindings::pci_p2pdma_memremap(
                pdev.as_raw(),
                bar.try_into()?,
                offset,
                size,
                &Self::OPS,
                owner_ptr.cast_mut().cast(),
            )
        })?;
        // SAFETY: `pgmap` is valid; `range` is set by `pci_p2pdma_memremap()`.
        let start = unsafe { (*pgmap).__bindgen_anon_1.range.as_ref().start };
        // INVARIANT: `pgmap` covers `size` bytes from `start`.
        Ok(Self {
            // SAFETY: `from_err_ptr` returned a valid, non-null pointer.
            pgmap: unsafe { NonNull::new_unchecked(pgmap) },
            first_pfn: (start >> bindings::PAGE_SHIFT) as usize,
            nr_pages: (size >> bindings::PAGE_SHIFT) as usize,
            owner,
        })
    }

    /// Alignment of the offset and size of a range: the memory hotplug subsection.
    pub const ALIGN: u64 = 1 << bindings::SUBSECTION_SHIFT;

    /// Number of pages.
    pub fn len(&self) -> usize {
        self.nr_pages
    }

    /// Whether there are no pages (never true for a created range).
    pub fn is_empty(&self) -> bool {
        self.nr_pages == 0
    }

    /// The owner given to [`P2pPages::new`].
    pub fn owner(&self) -> &Arc<T> {
        &self.owner
    }

    fn page_ptr(&self, index: usize) -> Result<*mut bindings::page> {
        if index >= self.nr_pages {
            return Err(EINVAL);
        }
        // SAFETY: `first_pfn + index` is a pfn of this pagemap, which has struct pages.
        Ok(unsafe { bindings::pfn_to_page(self.first_pfn + index) })
    }

    /// Page `index` of the range.
    pub fn page(&self, index: usize) -> Result<BorrowedPage<'_>> {
        let page = self.page_ptr(index)?;
        // SAFETY: The page exists as long as the pagemap, which outlives the borrow.
        Ok(unsafe { BorrowedPage::from_raw(NonNull::new_unchecked(page)) })
    }

    /// Gives page `index`, whose reference count is zero, its first reference.
    ///
    /// # Safety
    ///
    /// The page's reference count must be zero and nobody else may be giving it one: the caller
    /// owns the page. The reference is dropped with [`P2pPages::put_page`].
    pub unsafe fn init_page_ref(&self, index: usize) -> Result {
        let page = self.page_ptr(index)?;
        // SAFETY: The caller guarantees the count is zero and that we have exclusive ownership.
        unsafe { bindings::set_page_count(page, 1) };
        Ok(())
    }

    /// Reference count of page `index`.
    pub fn page_ref_count(&self, index: usize) -> Result<i32> {
        let page = self.page_ptr(index)?;
        // SAFETY: `page` is a valid struct page.
        Ok(unsafe { bindings::page_ref_count(page) })
    }

    /// Drops a reference to page `index`; the last one calls [`PageOwner::page_free`].
    ///
    /// # Safety
    ///
    /// The caller must own a reference to the page (from [`P2pPages::init_page_ref`]).
    pub unsafe fn put_page(&self, index: usize) -> Result {
        let page = self.page_ptr(index)?;
        // SAFETY: The caller owns a reference, which is given up here.
        unsafe { bindings::put_page(page) };
        Ok(())
    }

    /// Physical address of the first byte of the range.
    pub fn phys_start(&self) -> u64 {
        (self.first_pfn as u64) << bindings::PAGE_SHIFT
    }

    /// The pagemap's `folio_free` callback: a page's reference count dropped to zero.
    ///
    /// # Safety
    ///
    /// `folio` is a folio of a pagemap made by [`P2pPages::new`] and not yet removed.
    unsafe extern "C" fn folio_free(folio: *mut bindings::folio) {
        // `folio` is a P2PDMA folio of a pagemap made by `new`, whose `owner` points to
        // a live `T`: the pagemap is removed only after every page was freed, and `T` outlives
        // the pagemap.
        // SAFETY: See the comment above.
        let (owner, pfn, first) = unsafe {
            // A folio starts with its head page.
            let page = folio.cast::<bindings::page>();
            let pgmap = bindings::page_pgmap(page);
            let owner = &*(*pgmap).owner.cast::<T>();
            let first =
                ((*pgmap).__bindgen_anon_1.range.as_ref().start >> bindings::PAGE_SHIFT) as usize;
            (owner, bindings::page_to_pfn(page), first)
        };
        owner.page_free(pfn - first);
    }
}

impl<T: PageOwner> Drop for P2pPages<T> {
    fn drop(&mut self) {
        // SAFETY: By the type invariant `pgmap` is live; this waits until no page is in use.
        unsafe { bindings::pci_p2pdma_memunmap(self.pgmap.as_ptr()) };
    }
}
