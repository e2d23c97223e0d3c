//! The calling thread's CUDA context or HIP device: switched for a call
//! and made the caller's again when the guard ([`Current`]) drops.

use super::runtime::{unavailable, DeviceMemory, Kind, Runtime};
use crate::error::{Error, Result};
use std::ffi::{c_int, c_void};

impl Runtime {
    /// What is current on the calling thread now (CUDA: the context, HIP:
    /// the device), made current again when the returned guard drops.
    pub(super) fn save_current(&self) -> Result<Current<'_>> {
        let prev = if let Some(get) = self.get_ctx {
            let mut ctx: *mut c_void = std::ptr::null_mut();
            // SAFETY: ctx is a valid out pointer.
            self.check("CtxGetCurrent", unsafe { get(&mut ctx) })?;
            Some(Saved::Context(ctx as usize))
        } else if let Some(get) = self.get_device {
            let mut dev: c_int = 0;
            // SAFETY: dev is a valid out pointer.
            self.check("GetDevice", unsafe { get(&mut dev) })?;
            Some(Saved::Device(dev))
        } else {
            None
        };
        Ok(Current {
            rt: self,
            prev,
            _thread: std::marker::PhantomData,
        })
    }

    /// Makes the memory's context (CUDA) or device (HIP) current on the
    /// calling thread until the returned guard drops, which makes the
    /// caller's own current again (`torch.cuda.current_device()` is as it
    /// was). Nothing is switched when it is current already.
    pub fn make_current(&self, mem: &DeviceMemory) -> Result<Current<'_>> {
        match self.kind {
            Kind::Cuda if mem.ctx == 0 => Ok(Current {
                rt: self,
                prev: None,
                _thread: std::marker::PhantomData,
            }),
            Kind::Cuda => self.enter_context(mem.ctx),
            Kind::Hip => {
                let mut cur = self.save_current()?;
                if cur.prev == Some(Saved::Device(mem.ordinal)) {
                    cur.prev = None;
                    return Ok(cur);
                }
                if let Some(f) = self.set_device {
                    // SAFETY: plain value argument.
                    if let Err(e) = self.check("SetDevice", unsafe { f(mem.ordinal) }) {
                        cur.prev = None; // nothing was switched
                        return Err(e);
                    }
                }
                Ok(cur)
            }
        }
    }

    /// Makes CUDA context `ctx` (from [`Runtime::current_context`] or
    /// [`DeviceMemory::ctx`]) current on the calling thread until the
    /// returned guard drops, as [`Runtime::make_current`].
    pub fn enter_context(&self, ctx: usize) -> Result<Current<'_>> {
        let Some(set) = self.set_ctx else {
            return Err(unavailable(self.kind, "no CtxSetCurrent"));
        };
        let mut cur = self.save_current()?;
        if cur.prev == Some(Saved::Context(ctx)) {
            cur.prev = None;
            return Ok(cur);
        }
        // SAFETY: ctx came from the driver.
        if let Err(e) = self.check("CtxSetCurrent", unsafe { set(ctx as *mut c_void) }) {
            cur.prev = None; // nothing was switched
            return Err(e);
        }
        Ok(cur)
    }

    /// The context current on the calling thread.
    pub fn current_context(&self) -> Result<usize> {
        let s = self.stream_fns()?;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: ctx is a valid out pointer.
        self.check("CtxGetCurrent", unsafe { (s.ctx_get)(&mut ctx) })?;
        if ctx.is_null() {
            return Err(Error::Runtime {
                call: "CtxGetCurrent (no current context)",
                code: 201,
            });
        }
        Ok(ctx as usize)
    }

    /// Makes `ctx` (from [`Runtime::current_context`]) current on the calling thread, and
    /// leaves it so ([`Runtime::enter_context`] restores the caller's).
    pub fn set_context(&self, ctx: usize) -> Result<()> {
        let f = self
            .set_ctx
            .ok_or_else(|| unavailable(self.kind, "no CtxSetCurrent"))?;
        // SAFETY: ctx came from the driver.
        self.check("CtxSetCurrent", unsafe { f(ctx as *mut c_void) })
    }

    /// Makes device `ordinal` current on this thread (CUDA: its primary context), and leaves it
    /// so: for a program that allocates, as `cudaSetDevice`.
    pub fn use_device(&self, ordinal: i32) -> Result<()> {
        if let Some(f) = self.set_device {
            // SAFETY: plain value argument.
            return self.check("SetDevice", unsafe { f(ordinal) });
        }
        let (Some(get), Some(primary), Some(set)) = (self.dev_get, self.primary, self.set_ctx)
        else {
            return Err(unavailable(self.kind, "no device/context entry points"));
        };
        let mut dev: c_int = 0;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: out pointers are valid locals.
        unsafe {
            self.check("DeviceGet", get(&mut dev, ordinal))?;
            self.check("DevicePrimaryCtxRetain", primary(&mut ctx, dev))?;
            self.check("CtxSetCurrent", set(ctx))
        }
    }
}

/// What [`Current`] makes current again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Saved {
    /// A CUDA context (0: none).
    Context(usize),
    /// A HIP device.
    Device(c_int),
}

/// The calling thread's CUDA context or HIP device as it was before a
/// call of the library switched it ([`Runtime::make_current`],
/// [`Runtime::enter_context`]): made current again on drop, on error
/// paths too. Dropped on the thread it was made on.
#[must_use = "dropping it makes the caller's context current again at once"]
pub struct Current<'a> {
    rt: &'a Runtime,
    /// What to make current again; `None`: nothing was switched.
    prev: Option<Saved>,
    /// Not `Send`: a thread's current context is the thread's.
    _thread: std::marker::PhantomData<*const ()>,
}

impl std::fmt::Debug for Current<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Current").field("prev", &self.prev).finish()
    }
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        // A failure here cannot be reported; the driver fails these only
        // for a context that was destroyed meanwhile, which is no longer
        // the caller's to have current.
        match self.prev {
            Some(Saved::Context(ctx)) => {
                if let Some(set) = self.rt.set_ctx {
                    // SAFETY: ctx was current on this thread (null: none).
                    unsafe { set(ctx as *mut c_void) };
                }
            }
            Some(Saved::Device(dev)) => {
                if let Some(set) = self.rt.set_device {
                    // SAFETY: plain value argument.
                    unsafe { set(dev) };
                }
            }
            None => {}
        }
    }
}
