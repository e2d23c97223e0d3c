// SPDX-License-Identifier: GPL-2.0

//! PCI peer-to-peer DMA pages over a BAR range of a device another driver owns and offers.
//!
//! C header: [`include/linux/pci-p2pdma.h`](srctree/include/linux/pci-p2pdma.h).
//!
//! The driver that owns a PCI device offers a BAR with `pcim_p2pdma_offer()` at its probe: it
//! creates an auxiliary device `pci_p2pdma.bar.<id>`, a child of the PCI device, which is deleted
//! when that driver unbinds, before the BAR's P2PDMA provider goes. An importer binds to it as an
//! auxiliary driver ([`OfferedBar::AUXILIARY_NAME`]) and sees it as an [`OfferedBar`].
//!
//! [`P2pPages`] gives a range of an offered BAR `struct page`s of type `MEMORY_DEVICE_PCI_P2PDMA`
//! with the BAR's real P2PDMA provider: the pages the BAR's owner made where it made them
//! (`pci_p2pdma_add_resource()`, as nvidia-uvm does over a static BAR1), taken out of its pool
//! for as long as the range is held, or new ones. The block layer then applies its own P2P
//! rules to them: they can be the buffer of an O_DIRECT request only for a queue that can do
//! P2P DMA to that BAR.
//!
//! Every page starts free. [`P2pPages::activate`] hands a free page out as a [`P2pPage`], which
//! owns the page's first reference, and records who the page is for (a [`PageOwner`]). Mappings
//! and pins of the page take references of their own; when the last one is dropped the owner's
//! [`PageOwner::page_free`] is called and the page is free again. Dropping a [`P2pPages`] waits
//! until every page it handed out is free: no reference to one of its pages can outlive its
//! `struct page`s.

use crate::{
    auxiliary, bindings, container_of,
    error::{
        from_err_ptr,
        to_result, //
    },
    ffi::{
        c_ulong,
        c_void, //
    },
    page::BorrowedPage,
    mm::virt::VmaNew,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
    types::Opaque,
};
use core::{
    ptr::NonNull,
    sync::atomic::{
        AtomicPtr,
        Ordering, //
    },
};

/// A BAR offered by the driver that owns its PCI device (`pcim_p2pdma_offer()`), seen through
/// the auxiliary device the offer created.
///
/// # Invariants
///
/// The inner `struct pci_p2pdma_bar` was made by `pcim_p2pdma_offer()`: its `adev` is the
/// auxiliary device, `pdev` holds a reference to the PCI device, and `bar` and `provider` never
/// change. It lives as long as its auxiliary device. `provider` is live while the owner's driver
/// is bound, so while a driver is bound to `adev`.
#[repr(transparent)]
pub struct OfferedBar(Opaque<bindings::pci_p2pdma_bar>);

// SAFETY: The fields are immutable after the offer; the structure may be used from any thread.
unsafe impl Send for OfferedBar {}
// SAFETY: As above.
unsafe impl Sync for OfferedBar {}

impl OfferedBar {
    /// Module and device names of the auxiliary devices of offers: `pci_p2pdma.bar.<id>`.
    pub const AUXILIARY_NAME: (&'static CStr, &'static CStr) = (c"pci_p2pdma", c"bar");

    /// The offer behind `adev`, or `EINVAL` when `adev` was not created by `pcim_p2pdma_offer()`.
    pub fn of(adev: &auxiliary::Device) -> Result<&Self> {
        let dev = adev.as_ref().as_raw();
        // `dev` is the `struct device` of the live auxiliary device `adev`.
        // SAFETY: See the comment above.
        let raw = unsafe {
            bindings::pci_p2pdma_bar_of(container_of!(dev, bindings::auxiliary_device, dev))
        };
        if raw.is_null() {
            return Err(EINVAL);
        }
        // INVARIANT: `pci_p2pdma_bar_of()` found the offer that made `adev`; it lives as long as
        // `adev`, which the returned borrow cannot outlive.
        // SAFETY: `raw` is valid for the borrow of `adev`; `OfferedBar` is transparent.
        Ok(unsafe { &*raw.cast::<Self>() })
    }

    fn raw(&self) -> *mut bindings::pci_p2pdma_bar {
        self.0.get()
    }

    /// The PCI device whose BAR this is.
    pub fn pci_dev(&self) -> &pci::Device {
        // `pdev` holds a reference to the device (type invariant) for as long as `self` lives;
        // `pci::Device` is a transparent wrapper of `struct pci_dev`.
        // SAFETY: See the comment above.
        unsafe { &*(*self.raw()).pdev.cast::<pci::Device>() }
    }

    /// The BAR's index.
    pub fn index(&self) -> u32 {
        // SAFETY: `bar` never changes (type invariant); it is a BAR index, 0 to 5.
        unsafe { (*self.raw()).bar as u32 }
    }

    /// The BAR's P2PDMA provider, as an identity: never to be dereferenced here.
    pub(crate) fn provider(&self) -> *const bindings::p2pdma_provider {
        // SAFETY: `provider` never changes (type invariant).
        unsafe { (*self.raw()).provider.cast_const() }
    }

    /// Gives `vma`, being set up to map P2PDMA pages of `ranges` (`(offset, size)` in this BAR),
    /// the memory type the kernel's own mapping of them has (`pci_p2pdma_page_prot()`):
    /// uncached, or the type the BAR's owner reserved the ranges with (write-combined, where
    /// amdgpu and xe map their VRAM aperture so). Every page later inserted into `vma` gets it.
    ///
    /// Fails with `EINVAL` for a range outside the BAR, or ranges of several memory types.
    pub fn set_user_page_prot(
        &self,
        vma: &VmaNew,
        ranges: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result {
        let vma = vma.as_ptr();
        // `vma` is being set up by `mmap()` (type invariant of `VmaNew`), under the mmap lock
        // held by our caller: its `vm_page_prot` may be read and written, and no PTE has it yet.
        // SAFETY: See the comment above.
        let base = unsafe { (*vma).vm_page_prot };
        let mut chosen: Option<bindings::pgprot_t> = None;
        for (offset, size) in ranges {
            let mut prot = base;
            // SAFETY: `self` is a live offer (type invariant); `prot` is a local.
            to_result(unsafe {
                bindings::pci_p2pdma_page_prot(self.raw(), offset, size, &mut prot)
            })?;
            match chosen {
                Some(c) if c.pgprot != prot.pgprot => return Err(EINVAL),
                _ => chosen = Some(prot),
            }
        }
        // SAFETY: As above.
        unsafe { (*vma).vm_page_prot = chosen.ok_or(EINVAL)? };
        Ok(())
    }

    /// Whether the physical ranges of a mapped dma-buf lie in this BAR: whether its exporter
    /// named this BAR's P2PDMA provider.
    ///
    /// A provider of another BAR, another device or an earlier binding of the same device
    /// (which an exporter must refuse to hand out, with `ENODEV`) is not this BAR's.
    #[cfg(CONFIG_DMA_SHARED_BUFFER)]
    pub fn provides(&self, ranges: &crate::dma_buf::PhysRanges<'_>) -> bool {
        core::ptr::eq(ranges.provider(), self.provider())
    }
}

/// An [`OfferedBar`] kept alive by a reference to its auxiliary device.
///
/// # Invariants
///
/// `bar` is the offer behind `adev`, which lives as long as `adev`.
pub struct Offer {
    adev: ARef<auxiliary::Device>,
    bar: NonNull<OfferedBar>,
}

// SAFETY: `OfferedBar` is `Send + Sync`, and a device reference may be dropped on any thread.
unsafe impl Send for Offer {}
// SAFETY: As above.
unsafe impl Sync for Offer {}

impl Offer {
    /// The offer behind `adev`, or `EINVAL` when `adev` was not created by `pcim_p2pdma_offer()`.
    pub fn new(adev: &auxiliary::Device) -> Result<Self> {
        let bar = NonNull::from(OfferedBar::of(adev)?);
        // INVARIANT: `bar` is `adev`'s offer, which lives as long as the reference taken here.
        Ok(Self {
            adev: adev.into(),
            bar,
        })
    }

    /// The auxiliary device of the offer.
    pub fn device(&self) -> &auxiliary::Device {
        &self.adev
    }
}

impl core::ops::Deref for Offer {
    type Target = OfferedBar;

    fn deref(&self) -> &OfferedBar {
        // SAFETY: `bar` lives as long as `adev`, which we hold (type invariant).
        unsafe { self.bar.as_ref() }
    }
}

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

/// P2PDMA pages over `[offset, offset + size)` of an offered BAR.
///
/// Its success paths are tested by the KUnit suite of `lib/test_p2p_dmabuf_kunit.rs`, over the
/// test exporter's offer.
///
/// # Invariants
///
/// - `pages` was returned by `pci_p2pdma_memremap()` for `pdev`'s offered BAR, covers
///   `owners.len()` pages, was given [`P2pPages::page_free`] with the first element of
///   `owners` as its owner, and is given back only in [`Drop`]. `owners` is never resized.
/// - `owners[i]` is null while page `i` is free; otherwise it came from [`Arc::into_raw`] of
///   the owner the page was handed out for, and is taken back exactly once: by
///   [`P2pPages::page_free`] when the page is free again, or by [`P2pPages::activate`] when it
///   fails to hand the page out.
pub struct P2pPages<T: PageOwner> {
    pages: NonNull<bindings::pci_p2pdma_pages>,
    phys_start: u64,
    owners: KVVec<AtomicPtr<T>>,
    _pdev: ARef<pci::Device>,
}

// SAFETY: The pages may be used and given back from any thread; `T` is `Send + Sync`.
unsafe impl<T: PageOwner> Send for P2pPages<T> {}
// SAFETY: `&self` methods only read immutable fields or operate on pages and owners atomically.
unsafe impl<T: PageOwner> Sync for P2pPages<T> {}

impl<T: PageOwner> P2pPages<T> {
    /// Alignment of the offset and size of a range: the memory hotplug subsection.
    pub const ALIGN: u64 = 1 << bindings::SUBSECTION_SHIFT;

    /// Creates P2PDMA pages over `[offset, offset + size)` of the offered BAR `bar`.
    ///
    /// Where the BAR's owner made pages for the whole range, those: out of the owner's pool
    /// until this is dropped. Where none exist, new ones.
    ///
    /// `offset` and `size` must be multiples of [`P2pPages::ALIGN`]. Fails with `EINVAL` for a
    /// range outside the BAR or not aligned, `EEXIST` when part of the range has struct pages
    /// that are not all the owner's (made by another [`P2pPages`], say), `EBUSY` when the
    /// owner's pages of the range are in use, `ENOMEM` when the struct pages and the owners'
    /// array (`size_of::<struct page>() + 8` bytes per page, charged to the calling task's
    /// memory cgroup; the owner's pages cost the array and a bitmap) do not fit.
    ///
    /// # Safety
    ///
    /// The pages refer to the BAR's P2PDMA provider, which the owner of the PCI device releases
    /// when it unbinds, right after it deleted the offer's auxiliary device. The caller must be
    /// the driver bound to that auxiliary device, and must drop the returned value before its
    /// `remove()` returns (and, for a dma-buf importer, before a revocation of a dma-buf over the
    /// range completes).
    pub unsafe fn new(bar: &OfferedBar, offset: u64, size: u64) -> Result<Self> {
        if offset % Self::ALIGN != 0 || size % Self::ALIGN != 0 || size == 0 {
            return Err(EINVAL);
        }
        let nr_pages = usize::try_from(size >> bindings::PAGE_SHIFT)?;
        // One pointer per page: 2 MiB for a range of 1 GiB, which need not be contiguous memory,
        // charged like the struct pages to the caller's memory cgroup (`ENOMEM` over its limit).
        let mut owners = KVVec::with_capacity(
            nr_pages,
            GFP_KERNEL_ACCOUNT | __GFP_RETRY_MAYFAIL | __GFP_NOWARN,
        )?;
        for _ in 0..nr_pages {
            owners.push(AtomicPtr::new(core::ptr::null_mut()), GFP_KERNEL)?;
        }
        // `bar` is a live offer; `page_free` has the signature asked for; the owner pointer is
        // the heap buffer of `owners`, which is never resized and is dropped only after the
        // pages are given back.
        // SAFETY: See the comment above.
        let pages = from_err_ptr(unsafe {
            bindings::pci_p2pdma_memremap(
                bar.raw(),
                offset,
                size,
                Some(Self::page_free),
                owners.as_mut_ptr().cast(),
            )
        })?;
        // SAFETY: `pages` is valid.
        let start = unsafe { bindings::pci_p2pdma_pages_start(pages) };
        // INVARIANT: `pages` covers `size` bytes, its owner is `owners`, and every page is
        // free, with a null owner.
        Ok(Self {
            // SAFETY: `from_err_ptr` returned a valid, non-null pointer.
            pages: unsafe { NonNull::new_unchecked(pages) },
            phys_start: start,
            owners,
            _pdev: ARef::from(bar.pci_dev()),
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
    // `phys_addr_t` is `u32` on 32-bit kernels without PAE, where the conversion is not useless.
    #[allow(clippy::useless_conversion)]
    pub fn phys_start(&self) -> u64 {
        u64::from(self.phys_start)
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
        // `pages` is live (type invariant) and `index` is in its range.
        // SAFETY: See the comment above.
        let page = from_err_ptr(unsafe {
            bindings::pci_p2pdma_page_get(self.pages.as_ptr(), index as c_ulong)
        });
        match page {
            // INVARIANT: `pci_p2pdma_page_get()` gave us the page's first reference; until it
            // is free again the pages stay (`pci_p2pdma_memunmap()` waits for it).
            // SAFETY: `from_err_ptr` returned a valid, non-null pointer.
            Ok(page) => Ok(P2pPage(unsafe { NonNull::new_unchecked(page) })),
            Err(e) => {
                // The page was not handed out, so `page_free` cannot take the owner back: the
                // slot is still ours (we set it and nobody clears a slot of a page in use).
                let raw = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
                // SAFETY: `raw` is the pointer we stored above, taken back exactly once.
                drop(unsafe { Arc::from_raw(raw) });
                Err(e)
            }
        }
    }

    /// The pages' `page_free` callback: page `index`, handed out, has no reference left.
    ///
    /// # Safety
    ///
    /// `owner` is the owner pointer [`P2pPages::new`] gave `pci_p2pdma_memremap()`, whose pages
    /// are not given back before this call returns (`pci_p2pdma_memunmap()` waits for it), and
    /// `index` is the index of one of them that was handed out.
    unsafe extern "C" fn page_free(owner: *mut c_void, index: c_ulong) {
        // `owner` points to the `owners` of a live `P2pPages<T>` (type invariant), of which
        // `index` is an element.
        // SAFETY: See the comment above.
        let slot = unsafe { &*owner.cast::<AtomicPtr<T>>().add(index) };
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
        // By the type invariant `pages` is live and given back only here. This waits until every
        // page handed out is free (`page_free` returned for it), then removes the pages or
        // gives the owner's back to its pool.
        // SAFETY: As just said.
        unsafe { bindings::pci_p2pdma_memunmap(self.pages.as_ptr()) };
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
/// The pointer is a page of a range of `pci_p2pdma_memremap()`, on which we own one reference;
/// the range is not given back while the page has references.
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
