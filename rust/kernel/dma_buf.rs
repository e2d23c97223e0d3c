// SPDX-License-Identifier: GPL-2.0

//! DMA-buf import: dynamic, peer-to-peer attachments with invalidation.
//!
//! C headers: [`include/linux/dma-buf.h`](srctree/include/linux/dma-buf.h),
//! [`include/linux/dma-resv.h`](srctree/include/linux/dma-resv.h).
//!
//! An importer takes a [`DmaBuf`] from a file descriptor with [`DmaBuf::get`], attaches a device
//! to it with [`DynamicAttachment::new`] and maps the attachment under the buffer's reservation
//! lock ([`DynamicAttachment::lock`], [`Locked::map`]), after pinning it ([`Locked::pin`]) when
//! it must not move. The exporter may invalidate the mapping at any time (it moves an unpinned
//! buffer or revokes the memory): [`Importer::invalidate_mappings`] is then called with
//! the reservation lock held, and must stop using the mapping before it returns, in bounded
//! time; it may unmap the attachment through the [`Invalidation`] it is given, which cannot map
//! it again. An importer whose DMA it cannot stop in bounded time pins the buffer for as long as
//! that DMA may run, as RDMA does for what it cannot follow (`ib_umem_dmabuf_get_pinned()`), so
//! that an invalidation can only be a revocation; it never makes the exporter wait for it.

use crate::{
    bindings,
    device::Device,
    dma::DataDirection,
    error::{
        from_err_ptr,
        to_result, //
    },
    prelude::*,
    scatterlist::SGTable,
    sync::aref::{
        ARef,
        AlwaysRefCounted, //
    },
    sync::Arc,
    types::Opaque,
};
use core::{
    cell::UnsafeCell,
    marker::PhantomData,
    ptr::NonNull, //
};

/// A DMA-buf: a buffer shared between drivers, reference counted through its file.
///
/// # Invariants
///
/// The inner `struct dma_buf` is valid while a reference to it is held ([`ARef<DmaBuf>`] holds
/// one: `get_dma_buf()`/`dma_buf_put()`).
#[repr(transparent)]
pub struct DmaBuf(Opaque<bindings::dma_buf>);

// SAFETY: A `struct dma_buf` may be used and released from any thread.
unsafe impl Send for DmaBuf {}
// SAFETY: All `&self` methods are safe to call concurrently.
unsafe impl Sync for DmaBuf {}

// SAFETY: The refcount of a dma-buf is its file's: `get_dma_buf()` takes one, `dma_buf_put()`
// drops one and frees the buffer with the last.
unsafe impl AlwaysRefCounted for DmaBuf {
    fn inc_ref(&self) {
        // SAFETY: By the type invariant the buffer is valid, and the caller holds a reference.
        unsafe { bindings::get_dma_buf(self.as_raw()) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller gives up a reference it owns.
        unsafe { bindings::dma_buf_put(obj.cast().as_ptr()) };
    }
}

impl DmaBuf {
    /// Takes a reference to the dma-buf behind the file descriptor `fd` of the current process.
    ///
    /// Fails with `EBADF` when `fd` is not an open file and `EINVAL` when the file is not a
    /// dma-buf.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::dma_buf::DmaBuf;
    ///
    /// assert_eq!(DmaBuf::get(-1).err(), Some(EBADF));
    /// assert_eq!(DmaBuf::get(i32::MAX).err(), Some(EBADF));
    /// ```
    pub fn get(fd: i32) -> Result<ARef<Self>> {
        // SAFETY: `dma_buf_get()` accepts any integer.
        let ptr = from_err_ptr(unsafe { bindings::dma_buf_get(fd) })?;
        // INVARIANT: `dma_buf_get()` returned a valid buffer with a reference that we now own.
        // SAFETY: `ptr` is valid and non-null, and we transfer its reference to the `ARef`.
        Ok(unsafe { ARef::from_raw(NonNull::new_unchecked(ptr.cast())) })
    }

    /// Returns the raw pointer to the `struct dma_buf`.
    pub fn as_raw(&self) -> *mut bindings::dma_buf {
        self.0.get()
    }

    /// Size of the buffer in bytes.
    pub fn size(&self) -> usize {
        // SAFETY: `size` is set at export time and never changes.
        unsafe { (*self.as_raw()).size }
    }
}

/// The importer side of a [`DynamicAttachment`].
pub trait Importer: Send + Sync + Sized {
    /// Called by the exporter, with the reservation lock held, when the memory is about to move
    /// or be revoked.
    ///
    /// When this returns, the importer must have stopped using the mapping, without waiting for
    /// anything whose end it does not control. Unmapping through `attach` tells the exporter
    /// that the mapping is no longer used.
    ///
    /// The reservation lock is held by the exporter, so this is never called while the
    /// importer holds a [`Guard`] of the same buffer, except from within an exporter operation
    /// the importer calls under its guard: [`Locked::map`] and [`Locked::pin`] are the only such
    /// operations (an exporter may move the buffer while it maps or pins it), and no reference
    /// into the attachment's state is held across those calls. `attach` can only unmap: mapping
    /// again while the exporter moves the memory is not allowed, and a pin is given back with
    /// the attachment, not here.
    fn invalidate_mappings(&self, attach: &mut Invalidation<'_, Self>);
}

/// What the attachment's `importer_priv` points to.
///
/// # Invariants
///
/// `sgt` is either null or a mapping of the attachment returned by `dma_buf_map_attachment()`
/// and not unmapped yet; `pinned` is whether `dma_buf_pin()` succeeded on the attachment and
/// `dma_buf_unpin()` was not called since. Both are only accessed with the reservation lock held.
struct Inner<T> {
    data: Arc<T>,
    sgt: UnsafeCell<*mut bindings::sg_table>,
    pinned: UnsafeCell<bool>,
    dir: DataDirection,
}

/// A dynamic attachment of a device to a [`DmaBuf`], peer-to-peer capable and revocable.
///
/// # Invariants
///
/// `attach` was returned by `dma_buf_dynamic_attach()` for `buf` with `importer_priv` pointing
/// to `inner`, and is detached only in [`Drop`].
pub struct DynamicAttachment<T: Importer> {
    attach: NonNull<bindings::dma_buf_attachment>,
    buf: ARef<DmaBuf>,
    inner: Pin<KBox<Inner<T>>>,
}

// SAFETY: The attachment may be used and dropped from any thread; `T` is `Send + Sync`.
unsafe impl<T: Importer> Send for DynamicAttachment<T> {}
// SAFETY: The mutable state (`sgt`) is only accessed under the reservation lock.
unsafe impl<T: Importer> Sync for DynamicAttachment<T> {}

impl<T: Importer> DynamicAttachment<T> {
    const OPS: bindings::dma_buf_attach_ops = bindings::dma_buf_attach_ops {
        allow_peer2peer: true,
        invalidate_mappings: Some(Self::invalidate_callback),
    };

    /// Attaches `dev` to `buf` as a dynamic importer that can handle peer-to-peer memory and
    /// invalidation. `importer` receives [`Importer::invalidate_mappings`].
    ///
    /// The exporter may refuse (`EOPNOTSUPP` from exporters that need other kinds of
    /// importers, `ENODEV` from a revoked buffer).
    pub fn new(
        buf: &ARef<DmaBuf>,
        dev: &Device,
        importer: Arc<T>,
        dir: DataDirection,
    ) -> Result<Self> {
        let inner = KBox::pin(
            Inner {
                data: importer,
                sgt: UnsafeCell::new(core::ptr::null_mut()),
                pinned: UnsafeCell::new(false),
                dir,
            },
            // Made for the caller (a user's registration, say): charged to its memory cgroup.
            GFP_KERNEL_ACCOUNT,
        )?;
        let priv_: *const Inner<T> = &*inner;
        // `buf` and `dev` are valid; `Self::OPS` is static; `priv_` stays valid until the
        // attachment is detached in `drop` because `inner` is pinned and owned by `Self`.
        // SAFETY: See the comment above.
        let attach = from_err_ptr(unsafe {
            bindings::dma_buf_dynamic_attach(
                buf.as_raw(),
                dev.as_raw(),
                &Self::OPS,
                priv_.cast_mut().cast(),
            )
        })?;
        // INVARIANT: `attach` was just returned for `buf` with `importer_priv` = `inner`.
        Ok(Self {
            // SAFETY: `from_err_ptr` returned a valid, non-null pointer.
            attach: unsafe { NonNull::new_unchecked(attach) },
            buf: buf.clone(),
            inner,
        })
    }

    /// The dma-buf this attachment is for.
    pub fn dma_buf(&self) -> &DmaBuf {
        &self.buf
    }

    /// Whether the exporter agreed to give peer-to-peer (struct-page-less) memory.
    pub fn peer2peer(&self) -> bool {
        // SAFETY: `peer2peer` is set by `dma_buf_dynamic_attach()` and never changes.
        unsafe { (*self.attach.as_ptr()).peer2peer }
    }

    /// Takes the buffer's reservation lock.
    pub fn lock(&self) -> Guard<'_, T> {
        // `resv` is valid for the lifetime of the buffer; a NULL context asks for a plain
        // (non-ww) lock, which cannot fail with `EDEADLK`.
        // SAFETY: See the comment above.
        unsafe { bindings::dma_resv_lock((*self.buf.as_raw()).resv, core::ptr::null_mut()) };
        // INVARIANT: the lock was just taken and is released by `Guard::drop`.
        Guard {
            locked: Locked {
                attach: self.attach,
                inner: &self.inner,
                _p: PhantomData,
            },
        }
    }

    /// The importer's `move_notify` callback, called with the reservation lock held.
    ///
    /// # Safety
    ///
    /// `attach` is an attachment made by [`DynamicAttachment::new`] and not yet detached.
    unsafe extern "C" fn invalidate_callback(attach: *mut bindings::dma_buf_attachment) {
        // The dma-buf core calls this for an attachment made by `new`, whose
        // `importer_priv` points to an `Inner<T>` that lives until the attachment is detached.
        // SAFETY: See the comment above.
        let inner = unsafe { &*(*attach).importer_priv.cast::<Inner<T>>() };
        // INVARIANT: the dma-buf core holds the reservation lock across this callback.
        let mut inval = Invalidation {
            locked: Locked {
                // SAFETY: `attach` is valid and non-null for the duration of the callback.
                attach: unsafe { NonNull::new_unchecked(attach) },
                inner,
                _p: PhantomData,
            },
        };
        inner.data.invalidate_mappings(&mut inval);
    }
}

impl<T: Importer> Drop for DynamicAttachment<T> {
    fn drop(&mut self) {
        {
            let mut locked = self.lock();
            locked.unmap();
            locked.unpin();
        }
        // By the type invariant `attach` belongs to `buf` and is still attached. After
        // this no callback can reach `inner`.
        // SAFETY: See the comment above.
        unsafe { bindings::dma_buf_detach(self.buf.as_raw(), self.attach.as_ptr()) };
    }
}

/// How the fences of a reservation object are used (`enum dma_resv_usage`), in the order in
/// which waiting for one waits for those before it too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ResvUsage {
    /// The exporter's memory management (moves, clears): always waited for before access.
    Kernel = bindings::dma_resv_usage_DMA_RESV_USAGE_KERNEL,
    /// Implicitly synchronised writers: what a reader waits for.
    Write = bindings::dma_resv_usage_DMA_RESV_USAGE_WRITE,
    /// Implicitly synchronised readers (and writers): what a writer waits for.
    Read = bindings::dma_resv_usage_DMA_RESV_USAGE_READ,
}

/// A [`DynamicAttachment`] whose buffer's reservation lock is held.
///
/// # Invariants
///
/// The reservation lock of the attachment's buffer is held for `'a`.
pub struct Locked<'a, T: Importer> {
    attach: NonNull<bindings::dma_buf_attachment>,
    inner: &'a Inner<T>,
    _p: PhantomData<&'a ()>,
}

impl<T: Importer> Locked<'_, T> {
    /// Maps the attachment for its device, if not mapped yet, and returns the mapping.
    ///
    /// The addresses in the table are DMA addresses for the attached device. The table is
    /// borrowed from `self`: it cannot be used after [`Locked::unmap`], which needs `&mut self`,
    /// nor after the lock is released.
    pub fn map(&self) -> Result<&SGTable> {
        let slot = self.inner.sgt.get();
        // The reservation lock is held (type invariant), which protects `sgt`; the value is
        // copied out, and no reference into `sgt` is held across the exporter's call below.
        // SAFETY: See the comment above.
        let mut sgt = unsafe { *slot };
        if sgt.is_null() {
            // `attach` is valid and the reservation lock is held, as a dynamic
            // importer's mapping requires. The exporter may invalidate the attachment from
            // within (a move on map): the importer's callback then sees it unmapped.
            // SAFETY: See the comment above.
            sgt = from_err_ptr(unsafe {
                bindings::dma_buf_map_attachment(self.attach.as_ptr(), self.inner.dir.into())
            })?;
            // INVARIANT: `sgt` is a live mapping of the attachment.
            // SAFETY: The lock is held (type invariant); no other reference to `sgt` exists.
            unsafe { *slot = sgt };
        }
        // `sgt` is a valid mapping until it is unmapped, which needs `&mut self` (so not while
        // this borrow of `self` lives) and the lock, which `self` holds for its lifetime.
        // SAFETY: See the comment above.
        Ok(unsafe { SGTable::from_raw(sgt) })
    }

    /// The memory behind the mapped attachment, as the exporter describes it: physical ranges of
    /// PCI MMIO, in buffer order, and the P2PDMA provider they belong to (`dma_buf_get_phys()`).
    /// An exporter that does not describe its memory, but whose device's owner made P2PDMA
    /// pages of it (the NVIDIA open module), is answered for by the dma-buf core from the
    /// mapping (`dma_buf_phys_of_mapping()`), only where the answer names the owner's pages.
    ///
    /// Fails with `EINVAL` when the attachment is not mapped ([`Locked::map`] first),
    /// `EOPNOTSUPP` when neither can say (or the attachment is not peer-to-peer), `ENOMEM`, and
    /// `ENODEV` when the buffer was revoked or its exporter's binding is gone. Borrowed mutably
    /// from `self`: the exporter keeps the ranges valid, and in place, until it invalidates the
    /// mapping (which it does with the lock held, so not during the borrow), the attachment is
    /// unmapped (which needs `&mut self`), or it is asked again (an exporter may replace the
    /// array it gave), which the exclusive borrow rules out.
    pub fn phys_ranges(&mut self) -> Result<PhysRanges<'_>> {
        if !self.is_mapped() {
            return Err(EINVAL);
        }
        let mut provider: *mut bindings::p2pdma_provider = core::ptr::null_mut();
        let mut phys: *const bindings::phys_vec = core::ptr::null();
        let mut nr: usize = 0;
        // `attach` is valid, mapped, and its reservation lock is held (type invariant); the
        // out-pointers point to locals.
        // SAFETY: See the comment above.
        let ret = to_result(unsafe {
            bindings::dma_buf_get_phys(self.attach.as_ptr(), &mut provider, &mut phys, &mut nr)
        });
        if ret == Err(EOPNOTSUPP) {
            return self.phys_of_mapping();
        }
        ret?;
        if provider.is_null() || (nr != 0 && phys.is_null()) {
            return Err(EINVAL);
        }
        // On success the exporter hands out `nr` ranges at `phys`, valid until it invalidates
        // the mapping, the attachment is unmapped or it is asked again: none can happen while
        // `self` is borrowed (see above). The provider is kept as an identity only, never
        // dereferenced: it is only known to be live to the driver bound to its BAR's offer.
        // SAFETY: See the comment above.
        let ranges = unsafe {
            if nr == 0 {
                &[][..]
            } else {
                core::slice::from_raw_parts(phys, nr)
            }
        };
        Ok(PhysRanges {
            provider: provider.cast_const(),
            ranges,
            owned: None,
        })
    }

    /// The dma-buf core's answer for an exporter without `get_phys()`: `dma_buf_phys_of_mapping()`.
    fn phys_of_mapping(&mut self) -> Result<PhysRanges<'_>> {
        let mut provider: *mut bindings::p2pdma_provider = core::ptr::null_mut();
        let mut phys: *mut bindings::phys_vec = core::ptr::null_mut();
        let mut nr: usize = 0;
        // `attach` is valid and its reservation lock is held (type invariant); it is mapped
        // (checked by the caller) by `*sgt`, a live mapping of it; the out-pointers point to
        // locals.
        // SAFETY: See the comment above.
        to_result(unsafe {
            bindings::dma_buf_phys_of_mapping(
                self.attach.as_ptr(),
                *self.inner.sgt.get(),
                &mut provider,
                &mut phys,
                &mut nr,
            )
        })?;
        let owned = NonNull::new(phys).ok_or(EINVAL)?;
        // On success `phys` is an array of `nr` ranges that we own until we `kvfree()` it, which
        // the returned value does when dropped.
        // SAFETY: See the comment above.
        let ranges = unsafe { core::slice::from_raw_parts(phys.cast_const(), nr) };
        Ok(PhysRanges {
            provider: provider.cast_const(),
            ranges,
            owned: Some(owned),
        })
    }

    /// Whether the attachment is mapped.
    pub fn is_mapped(&self) -> bool {
        // SAFETY: The reservation lock is held (type invariant).
        !unsafe { *self.inner.sgt.get() }.is_null()
    }

    /// Pins the buffer (`dma_buf_pin()`), if not pinned yet: the exporter keeps it where it is
    /// until [`Locked::unpin`] or the attachment is dropped, and only invalidates the mapping to
    /// revoke it (or when it cannot help it: device removal, reset).
    ///
    /// The exporter may move the buffer to satisfy the pin (into memory the importer can reach,
    /// or into memory it can pin, which may be system memory): the importer's
    /// [`Importer::invalidate_mappings`] may then be called from within, with the attachment
    /// mapped (when it was) or not. An exporter without pin support pins nothing and succeeds.
    /// Takes `&mut self`, so no table returned by [`Locked::map`] is borrowed across the call.
    pub fn pin(&mut self) -> Result {
        let pinned = self.inner.pinned.get();
        // SAFETY: The reservation lock is held (type invariant); the value is copied out.
        if unsafe { *pinned } {
            return Ok(());
        }
        // `attach` is a dynamic attachment, valid, and its reservation lock is held, as
        // `dma_buf_pin()` requires. No reference into `inner`'s cells is held across the call,
        // which may re-enter the invalidate callback.
        // SAFETY: See the comment above.
        to_result(unsafe { bindings::dma_buf_pin(self.attach.as_ptr()) })?;
        // INVARIANT: the pin succeeded.
        // SAFETY: The lock is held; no other reference into `pinned` exists.
        unsafe { *pinned = true };
        Ok(())
    }

    /// Whether the buffer is pinned by this attachment ([`Locked::pin`]).
    pub fn is_pinned(&self) -> bool {
        // SAFETY: The reservation lock is held (type invariant).
        unsafe { *self.inner.pinned.get() }
    }

    /// Unpins the buffer if this attachment pinned it: the exporter may move it again (and
    /// invalidates the mapping when it does). Dropping the attachment unpins it too.
    pub fn unpin(&mut self) {
        let pinned = self.inner.pinned.get();
        // SAFETY: The reservation lock is held (type invariant).
        if unsafe { *pinned } {
            // `attach` is valid, pinned by `dma_buf_pin()` (type invariant of `Inner`) and its
            // reservation lock is held.
            // SAFETY: See the comment above.
            unsafe { bindings::dma_buf_unpin(self.attach.as_ptr()) };
            // INVARIANT: unpinned.
            // SAFETY: The lock is held; no other reference into `pinned` exists.
            unsafe { *pinned = false };
        }
    }

    /// Waits for the fences of `usage` and of every usage before it (see [`ResvUsage`]) in the
    /// buffer's reservation object, as the dma-buf rules for dynamic importers ask after
    /// [`Locked::map`]: the exporter's moves and clears always ([`ResvUsage::Kernel`]), and for
    /// implicit synchronisation the writers before a read ([`ResvUsage::Write`]), the readers and
    /// writers before a write ([`ResvUsage::Read`]). Interruptible: fails with `ERESTARTSYS`.
    pub fn wait_fences(&self, usage: ResvUsage) -> Result {
        // The attachment is valid and so is its buffer's `resv`; the lock is held (type
        // invariant), under which waiting is allowed.
        // SAFETY: See the comment above.
        let ret = unsafe {
            bindings::dma_resv_wait_timeout(
                (*(*self.attach.as_ptr()).dmabuf).resv,
                usage as bindings::dma_resv_usage,
                true,
                // MAX_SCHEDULE_TIMEOUT
                crate::ffi::c_long::MAX as crate::ffi::c_ulong,
            )
        };
        if ret < 0 {
            return Err(Error::from_errno(ret as i32));
        }
        Ok(())
    }

    /// Unmaps the attachment if it is mapped: tells the exporter the importer no longer uses it.
    ///
    /// Takes `&mut self`, so no table returned by [`Locked::map`] is still borrowed.
    pub fn unmap(&mut self) {
        // SAFETY: The reservation lock is held (type invariant).
        let sgt = unsafe { &mut *self.inner.sgt.get() };
        if !sgt.is_null() {
            // SAFETY: `*sgt` is the live mapping of `attach`; the lock is held.
            unsafe {
                bindings::dma_buf_unmap_attachment(
                    self.attach.as_ptr(),
                    *sgt,
                    self.inner.dir.into(),
                )
            };
            // INVARIANT: the mapping is gone.
            *sgt = core::ptr::null_mut();
        }
    }
}

/// The memory behind a mapped attachment: physical ranges of one BAR's PCI MMIO
/// ([`Locked::phys_ranges`]).
///
/// # Invariants
///
/// `owned`, if set, is the start of `ranges`, an array `dma_buf_phys_of_mapping()` allocated
/// that nothing else refers to.
pub struct PhysRanges<'a> {
    provider: *const bindings::p2pdma_provider,
    ranges: &'a [bindings::phys_vec],
    owned: Option<NonNull<bindings::phys_vec>>,
}

impl Drop for PhysRanges<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.owned {
            // The array is ours alone (type invariant), and `ranges` goes with `self`.
            // SAFETY: As just said.
            unsafe { bindings::kvfree(p.as_ptr().cast()) };
        }
    }
}

impl PhysRanges<'_> {
    /// The P2PDMA provider the exporter named for the ranges, as an identity: to be compared
    /// with a BAR's (`OfferedBar::provides()` in `pci::p2pdma`), never dereferenced. It is only
    /// known to be live to the driver bound to its BAR's offer.
    pub fn provider(&self) -> *const bindings::p2pdma_provider {
        self.provider
    }

    /// The ranges, in buffer order: `(CPU-physical address, length)`.
    // `phys_addr_t` is `u32` on 32-bit kernels without PAE, where the conversion is not useless.
    #[allow(clippy::useless_conversion)]
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges
            .iter()
            .map(|r| (u64::from(r.paddr), r.len as u64))
    }
}

/// A [`DynamicAttachment`] being invalidated by its exporter ([`Importer::invalidate_mappings`]),
/// with the reservation lock held: it can be unmapped, not mapped again.
pub struct Invalidation<'a, T: Importer> {
    locked: Locked<'a, T>,
}

impl<T: Importer> Invalidation<'_, T> {
    /// Whether the attachment is mapped.
    pub fn is_mapped(&self) -> bool {
        self.locked.is_mapped()
    }

    /// Unmaps the attachment if it is mapped: tells the exporter the importer no longer uses it.
    pub fn unmap(&mut self) {
        self.locked.unmap();
    }
}

/// The reservation lock of a [`DynamicAttachment`]'s buffer, released on drop.
pub struct Guard<'a, T: Importer> {
    locked: Locked<'a, T>,
}

impl<'a, T: Importer> core::ops::Deref for Guard<'a, T> {
    type Target = Locked<'a, T>;

    fn deref(&self) -> &Self::Target {
        &self.locked
    }
}

impl<T: Importer> core::ops::DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.locked
    }
}

impl<T: Importer> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: The guard took the lock in `DynamicAttachment::lock` and holds it.
        unsafe {
            bindings::dma_resv_unlock((*(*self.locked.attach.as_ptr()).dmabuf).resv);
        }
    }
}
