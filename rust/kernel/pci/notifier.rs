// SPDX-License-Identifier: GPL-2.0

//! Notifications of PCI devices added to and removed from the system.
//!
//! C header: [`include/linux/device/bus.h`](srctree/include/linux/device/bus.h).
//!
//! A driver that serves PCI devices it does not bind to (it finds them with
//! [`Device::for_each`]) learns here when such a device appears or goes away: hot-plug, `remove`
//! and `rescan` in sysfs, SR-IOV.

use crate::{
    bindings,
    device,
    error::to_result,
    ffi::{
        c_int,
        c_ulong,
        c_void, //
    },
    pci::Device,
    prelude::*,
    types::Opaque, //
};

/// Receives the PCI bus's device notifications. Every method does nothing by default.
///
/// The callbacks run in process context and may sleep. They may run concurrently for different
/// devices, and concurrently with a [`Device::for_each`] walk of the caller's own.
pub trait BusEvents: Send + Sync {
    /// `pdev` was added to the system (`BUS_NOTIFY_ADD_DEVICE`). Its resources may not be
    /// assigned yet, and no driver is bound to it.
    fn added(&self, _pdev: &Device) {}

    /// A driver was bound to `pdev` (`BUS_NOTIFY_BOUND_DRIVER`): its resources are assigned and
    /// its driver's probe succeeded. Called with the device lock held.
    fn driver_bound(&self, _pdev: &Device) {}

    /// `pdev`'s driver is about to be unbound (`BUS_NOTIFY_UNBIND_DRIVER`): its `remove()` has
    /// not run yet and its device-managed resources (P2PDMA providers among them) still exist.
    /// The unbind waits for this call.
    fn driver_unbinding(&self, _pdev: &Device) {}

    /// `pdev`'s driver was unbound (`BUS_NOTIFY_UNBOUND_DRIVER`).
    fn driver_unbound(&self, _pdev: &Device) {}

    /// `pdev` is being removed from the system (`BUS_NOTIFY_DEL_DEVICE`).
    ///
    /// The PCI core unbinds the device's driver before; the device is still in sysfs, and
    /// whatever was made its child (a class device, say) must be gone when this returns.
    fn removed(&self, _pdev: &Device) {}
}

/// A [`BusEvents`] registered with the PCI bus for as long as this object lives.
///
/// Devices present when it is registered are not reported: the owner enumerates them after
/// registering, ready for a device to be both enumerated and reported.
///
/// # Invariants
///
/// `nb` is a `notifier_block` whose `notifier_call` is `Self::call`, registered on the PCI
/// bus's notifier chain from the end of initialisation until `PinnedDrop::drop`.
///
/// # Examples
///
/// ```
/// use core::sync::atomic::{AtomicUsize, Ordering};
/// use kernel::pci;
///
/// #[pin_data]
/// struct Removals {
///     seen: AtomicUsize,
/// }
///
/// impl pci::BusEvents for Removals {
///     fn removed(&self, _pdev: &pci::Device) {
///         self.seen.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// let events = try_pin_init!(Removals {
///     seen: AtomicUsize::new(0),
/// });
/// let n = KBox::pin_init(pci::BusNotifier::new(events), GFP_KERNEL)?;
/// assert_eq!(n.events().seen.load(Ordering::Relaxed), 0);
/// // Dropping it unregisters it, after any call in progress.
/// drop(n);
/// # Ok::<(), Error>(())
/// ```
#[pin_data(PinnedDrop)]
pub struct BusNotifier<T: BusEvents> {
    #[pin]
    events: T,
    #[pin]
    nb: Opaque<bindings::notifier_block>,
}

// SAFETY: `nb` is used only by the notifier chain, under the chain's own lock, and registration
// may be dropped on any thread; `T` is `Send`.
unsafe impl<T: BusEvents> Send for BusNotifier<T> {}
// SAFETY: `&self` gives access to `events` only, and `T` is `Sync`.
unsafe impl<T: BusEvents> Sync for BusNotifier<T> {}

impl<T: BusEvents> BusNotifier<T> {
    /// Initialises `events`, then registers it for the PCI bus's notifications.
    pub fn new(events: impl PinInit<T, Error>) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            // Fields are initialised in this order: `events` is ready before the first call.
            events <- events,
            nb <- Opaque::try_ffi_init(|nb: *mut bindings::notifier_block| {
                // SAFETY: `try_ffi_init` gives a slot valid for writes.
                unsafe {
                    nb.write(bindings::notifier_block {
                        notifier_call: Some(Self::call),
                        ..pin_init::zeroed()
                    })
                };
                // `nb` is initialised and pinned, and stays registered until `drop`, which
                // unregisters it before `events` is dropped.
                // INVARIANT: On success, `nb` is registered with `Self::call`.
                // SAFETY: As just said, `nb` outlives its registration.
                to_result(unsafe {
                    bindings::bus_register_notifier(&raw const bindings::pci_bus_type, nb)
                })
            }),
        })
    }

    /// Returns the registered [`BusEvents`].
    pub fn events(&self) -> &T {
        &self.events
    }

    /// The notifier chain's callback.
    ///
    /// # Safety
    ///
    /// `nb` is the `nb` field of a live `BusNotifier<T>`, `data` the `struct device` notified.
    unsafe extern "C" fn call(
        nb: *mut bindings::notifier_block,
        action: c_ulong,
        data: *mut c_void,
    ) -> c_int {
        let nb = nb.cast::<Opaque<bindings::notifier_block>>();
        // SAFETY: By the safety requirements, `nb` is the field `nb` of a live `Self`.
        let this = unsafe { &*kernel::container_of!(nb, Self, nb) };
        // SAFETY: The bus notifies a valid `struct device` and holds it for the call.
        let dev = unsafe { device::Device::from_raw(data.cast()) };
        let Ok(pdev) = <&Device>::try_from(dev) else {
            return bindings::NOTIFY_DONE as c_int;
        };
        match action as bindings::bus_notifier_event {
            bindings::bus_notifier_event_BUS_NOTIFY_ADD_DEVICE => this.events.added(pdev),
            bindings::bus_notifier_event_BUS_NOTIFY_BOUND_DRIVER => this.events.driver_bound(pdev),
            bindings::bus_notifier_event_BUS_NOTIFY_UNBIND_DRIVER => {
                this.events.driver_unbinding(pdev)
            }
            bindings::bus_notifier_event_BUS_NOTIFY_UNBOUND_DRIVER => {
                this.events.driver_unbound(pdev)
            }
            bindings::bus_notifier_event_BUS_NOTIFY_DEL_DEVICE => this.events.removed(pdev),
            _ => {}
        }
        bindings::NOTIFY_DONE as c_int
    }
}

#[pinned_drop]
impl<T: BusEvents> PinnedDrop for BusNotifier<T> {
    fn drop(self: Pin<&mut Self>) {
        // `nb` is registered (type invariant); unregistering waits for calls in progress, so
        // `events` is no longer used when it is dropped after this.
        // SAFETY: As just said.
        unsafe {
            bindings::bus_unregister_notifier(&raw const bindings::pci_bus_type, self.nb.get())
        };
    }
}
