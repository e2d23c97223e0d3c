//! Device and pinned host memory: what a device pointer is
//! ([`Runtime::describe`], its buffer id), its export as a dma-buf, and
//! allocations.

use super::runtime::{unavailable, DeviceMemory, Kind, Runtime};
use crate::error::{Error, Result};
use std::ffi::{c_char, c_int, c_ulonglong, c_void};

/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD` (and HIP's equivalent).
pub const RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
pub(super) const POINTER_ATTRIBUTE_CONTEXT: c_int = 1;
pub(super) const POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
/// `CU_POINTER_ATTRIBUTE_BUFFER_ID` (HIP's has the same value): a number
/// per allocation that a freed and re-allocated range does not keep.
const POINTER_ATTRIBUTE_BUFFER_ID: c_int = 7;

impl Runtime {
    /// Describes device memory at `dptr`: (allocation base, allocation size,
    /// device ordinal, context).
    pub fn describe(&self, dptr: u64) -> Result<DeviceMemory> {
        let mut base = 0u64;
        let mut size = 0usize;
        // SAFETY: out pointers are valid locals.
        let mut r = unsafe { (self.addr_range)(&mut base, &mut size, dptr) };
        if r == 201 && self.kind == Kind::Cuda {
            // CUDA_ERROR_INVALID_CONTEXT: a thread with no current context
            // (a caller's worker thread). Make the pointer's own context
            // current (the driver names it without one), else its device's
            // primary context, and ask again; the thread has no current
            // context again when this returns.
            let saved = self.save_current()?;
            if let Some(attr) = self.ptr_attr {
                let mut ctx: *mut c_void = std::ptr::null_mut();
                let mut ordinal: c_int = -1;
                // SAFETY: the attributes are written into correctly sized
                // locals; ctx came from the driver.
                let current = unsafe {
                    match self.set_ctx {
                        Some(set)
                            if attr(
                                &mut ctx as *mut *mut c_void as *mut c_void,
                                POINTER_ATTRIBUTE_CONTEXT,
                                dptr,
                            ) == 0
                                && !ctx.is_null() =>
                        {
                            set(ctx) == 0
                        }
                        _ => {
                            attr(
                                &mut ordinal as *mut c_int as *mut c_void,
                                POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                dptr,
                            ) == 0
                                && self.use_device(ordinal).is_ok()
                        }
                    }
                };
                if current {
                    // SAFETY: out pointers are valid locals.
                    r = unsafe { (self.addr_range)(&mut base, &mut size, dptr) };
                }
            }
            drop(saved);
        }
        self.check("MemGetAddressRange", r)?;
        let mut ordinal: c_int = 0;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        if let Some(attr) = self.ptr_attr {
            // SAFETY: attribute values are written into correctly sized locals.
            unsafe {
                self.check(
                    "PointerGetAttribute(DEVICE_ORDINAL)",
                    attr(
                        &mut ordinal as *mut c_int as *mut c_void,
                        POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                        dptr,
                    ),
                )?;
                if self.kind == Kind::Cuda {
                    self.check(
                        "PointerGetAttribute(CONTEXT)",
                        attr(
                            &mut ctx as *mut *mut c_void as *mut c_void,
                            POINTER_ATTRIBUTE_CONTEXT,
                            dptr,
                        ),
                    )?;
                }
            }
        }
        let mut bus = [0 as c_char; 32];
        // SAFETY: bus has the length passed.
        let pci = if unsafe { (self.bus_id)(bus.as_mut_ptr(), bus.len() as c_int, ordinal) } == 0 {
            // SAFETY: the driver wrote a NUL-terminated string.
            let s = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) };
            Some(s.to_string_lossy().to_lowercase())
        } else {
            None
        };
        Ok(DeviceMemory {
            base,
            size: size as u64,
            ordinal,
            ctx: ctx as usize,
            pci_address: pci,
        })
    }

    /// Exports `[dptr, dptr+size)` as a dma-buf fd (owned by the caller).
    pub fn export_dmabuf(&self, dptr: u64, size: u64) -> Result<std::os::fd::OwnedFd> {
        let Some(f) = self.handle else {
            return Err(unavailable(
                self.kind,
                "driver has no MemGetHandleForAddressRange (too old)",
            ));
        };
        let mut fd: c_int = -1;
        // SAFETY: fd is a valid out location for an int handle.
        self.check("MemGetHandleForAddressRange", unsafe {
            f(
                &mut fd as *mut c_int as *mut c_void,
                dptr,
                size as usize,
                RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        if fd < 0 {
            return Err(Error::Runtime {
                call: "MemGetHandleForAddressRange",
                code: -1,
            });
        }
        // SAFETY: the driver returned a new fd owned by us.
        Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
    }

    /// The allocation's buffer id (`CU_POINTER_ATTRIBUTE_BUFFER_ID`,
    /// `HIP_POINTER_ATTRIBUTE_BUFFER_ID`): the same for every pointer of one
    /// allocation, another once the range was freed and allocated again.
    pub fn buffer_id(&self, dptr: u64) -> Result<u64> {
        let attr = self
            .ptr_attr
            .ok_or_else(|| unavailable(self.kind, "no PointerGetAttribute"))?;
        let mut id: c_ulonglong = 0;
        // SAFETY: the attribute is an unsigned long long, written into a local.
        self.check("PointerGetAttribute(BUFFER_ID)", unsafe {
            attr(
                &mut id as *mut c_ulonglong as *mut c_void,
                POINTER_ATTRIBUTE_BUFFER_ID,
                dptr,
            )
        })?;
        Ok(id)
    }

    /// Allocates device memory (needs a current context: for CUDA the
    /// caller must have one; see [`Runtime::use_device`]).
    pub fn mem_alloc(&self, len: usize) -> Result<u64> {
        let f = self
            .mem_alloc
            .ok_or_else(|| unavailable(self.kind, "no MemAlloc"))?;
        let mut p = 0u64;
        // SAFETY: p is a valid out pointer.
        self.check("MemAlloc", unsafe { f(&mut p, len) })?;
        Ok(p)
    }

    /// Frees device memory from [`Runtime::mem_alloc`].
    pub fn mem_free(&self, p: u64) -> Result<()> {
        let f = self
            .mem_free
            .ok_or_else(|| unavailable(self.kind, "no MemFree"))?;
        // SAFETY: p came from mem_alloc.
        self.check("MemFree", unsafe { f(p) })
    }

    /// Allocates pinned host memory.
    pub fn host_alloc(&self, len: usize) -> Result<*mut u8> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: p is a valid out pointer.
        self.check("MemHostAlloc", unsafe { (self.host_alloc)(&mut p, len, 0) })?;
        Ok(p as *mut u8)
    }

    /// Frees pinned host memory.
    ///
    /// # Safety
    /// `p` must come from [`Runtime::host_alloc`].
    pub unsafe fn host_free(&self, p: *mut u8) {
        (self.host_free)(p as *mut c_void);
    }
}
