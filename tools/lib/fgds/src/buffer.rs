//! Buffers the engine reads into and writes from.

use crate::device::{list_devices, Device};
use crate::error::{Error, Result};
use crate::gpu::{self, DeviceMemory, Runtime};
use crate::stats::FallbackCause;
use std::alloc::Layout;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::sys::page_size;

/// What kind of memory a [`Buffer`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferKind {
    /// Host memory allocated by the library (page aligned).
    Host,
    /// Host memory owned by the caller.
    HostUser,
    /// A dma-buf registered on an fgds node and mapped.
    Fgds,
    /// CUDA device memory.
    Cuda,
    /// HIP device memory.
    Hip,
}

/// An fgds registration mapped into this process (`munmap` + UNREG on drop).
#[derive(Debug)]
pub struct FgdsMapping {
    dev: Arc<Device>,
    cookie: u64,
    map: *mut u8,
    len: usize,
}

impl FgdsMapping {
    /// Registers `size` bytes at `offset` of `dmabuf_fd` on `dev` and maps them.
    pub fn new(dev: Arc<Device>, dmabuf_fd: RawFd, offset: u64, size: u64) -> Result<Self> {
        if size == 0 {
            return Err(Error::InvalidArgument("registration size is zero".into()));
        }
        let ps = dev.version().page_size.max(1);
        if offset % ps != 0 || size % ps != 0 {
            return Err(Error::Misaligned {
                what: "dma-buf offset/size",
                value: offset | size,
                align: ps,
            });
        }
        let len = usize::try_from(size)
            .map_err(|_| Error::InvalidArgument("registration size too large".into()))?;
        let cookie = dev.register(dmabuf_fd, offset, size)?;
        // SAFETY: mapping the device at the cookie the driver returned.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                dev.raw_fd(),
                cookie as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            let e = Error::last_os("mmap fgds registration");
            let _ = dev.unregister(cookie);
            return Err(e);
        }
        Ok(FgdsMapping {
            dev,
            cookie,
            map: map as *mut u8,
            len,
        })
    }

    /// The mmap cookie.
    pub fn cookie(&self) -> u64 {
        self.cookie
    }

    /// The device it is registered on.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }
}

impl Drop for FgdsMapping {
    fn drop(&mut self) {
        // SAFETY: map/len describe the mapping created in new().
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.len);
        }
        let _ = self.dev.unregister(self.cookie);
    }
}

enum Memory {
    HostOwned {
        ptr: *mut u8,
        layout: Layout,
    },
    HostUser {
        ptr: *mut u8,
    },
    /// Host memory the engine may not hand the kernel: it bounces, as GPU
    /// memory without an fgds mapping does ([`Buffer::alloc_host_bounced`]).
    HostBounced {
        ptr: *mut u8,
        layout: Layout,
    },
    Fgds(FgdsMapping),
    Gpu {
        dptr: u64,
        rt: Arc<Runtime>,
        mem: DeviceMemory,
        p2p: Option<(FgdsMapping, usize)>,
        no_p2p_reason: Option<String>,
        no_p2p_cause: Option<FallbackCause>,
    },
}

/// A buffer: host memory, an fgds registration, or GPU memory.
///
/// Buffers are `Send + Sync`; the engine writes into them through `&Buffer`
/// (the memory is never exposed as a Rust reference, so that is sound), and
/// callers must not read a range while a read into it is in flight.
pub struct Buffer {
    mem: Memory,
    len: usize,
}

// SAFETY: the raw pointers refer to memory owned by the Buffer (or, for
// from_host_ptr, memory the caller promised stays valid); access is by copies.
unsafe impl Send for Buffer {}
// SAFETY: see above.
unsafe impl Sync for Buffer {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("kind", &self.kind())
            .field("len", &self.len)
            .field("p2p", &self.is_p2p())
            .finish()
    }
}

fn shared_device(path: PathBuf) -> Result<Arc<Device>> {
    static DEVS: OnceLock<Mutex<HashMap<PathBuf, Arc<Device>>>> = OnceLock::new();
    let m = DEVS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = g.get(&path) {
        return Ok(d.clone());
    }
    let d = Arc::new(Device::open(&path)?);
    g.insert(path, d.clone());
    Ok(d)
}

/// What runs before a caller's own registration of GPU memory, with its
/// allocation: set by the layer above that keeps registrations of its own
/// (the registration cache), when it first keeps one, so that its
/// registration of the same allocation goes first.
static BEFORE_OWN_REGISTRATION: OnceLock<fn(&Runtime, &DeviceMemory)> = OnceLock::new();

/// Sets [`BEFORE_OWN_REGISTRATION`]; the first call wins.
pub(crate) fn before_own_registration(release: fn(&Runtime, &DeviceMemory)) {
    let _ = BEFORE_OWN_REGISTRATION.set(release);
}

impl Buffer {
    /// Allocates `len` bytes of zeroed, page-aligned host memory.
    pub fn alloc_host(len: usize) -> Result<Buffer> {
        if len == 0 {
            return Err(Error::InvalidArgument("buffer length is zero".into()));
        }
        let layout = Layout::from_size_align(len, page_size())
            .map_err(|_| Error::InvalidArgument(format!("bad buffer length {len}")))?;
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::os("allocate host buffer", libc::ENOMEM));
        }
        Ok(Buffer {
            mem: Memory::HostOwned { ptr, layout },
            len,
        })
    }

    /// Allocates `len` bytes of zeroed host memory that the engine treats
    /// as memory it cannot hand the kernel: every I/O goes through bounce
    /// buffers, exactly as for GPU memory without an fgds mapping (the copy
    /// in and out is a `memcpy` instead of a GPU copy). For tests and
    /// measurements of the bounce path on machines without a GPU.
    pub fn alloc_host_bounced(len: usize) -> Result<Buffer> {
        let b = Self::alloc_host(len)?;
        let (ptr, layout) = match &b.mem {
            Memory::HostOwned { ptr, layout } => (*ptr, *layout),
            _ => return Err(Error::InvalidArgument("internal: not host memory".into())),
        };
        std::mem::forget(b);
        Ok(Buffer {
            mem: Memory::HostBounced { ptr, layout },
            len,
        })
    }

    /// Wraps caller-owned host memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for the whole life
    /// of the returned buffer and of every I/O using it.
    pub unsafe fn from_host_ptr(ptr: *mut u8, len: usize) -> Result<Buffer> {
        if ptr.is_null() || len == 0 {
            return Err(Error::InvalidArgument("null pointer or zero length".into()));
        }
        Ok(Buffer {
            mem: Memory::HostUser { ptr },
            len,
        })
    }

    /// Registers `size` bytes at `offset` of a dma-buf on `device` and maps
    /// them. With `None`, on the fgds node whose GPU owns the memory: the
    /// nodes are tried in order and those that answer `EXDEV` (not their
    /// GPU's memory) are passed over.
    pub fn register_dmabuf(
        device: Option<&std::path::Path>,
        dmabuf_fd: RawFd,
        offset: u64,
        size: u64,
    ) -> Result<Buffer> {
        if dmabuf_fd < 0 {
            return Err(Error::os("dma-buf fd", libc::EBADF));
        }
        let paths = match device {
            Some(p) => vec![p.to_path_buf()],
            None => list_devices()?.into_iter().map(|d| d.dev_path).collect(),
        };
        let mut last = Error::NoDevice(
            "no /sys/class/misc/fgds* node: the fgds module is not loaded or no GPU is bound"
                .into(),
        );
        for path in paths {
            let m =
                shared_device(path).and_then(|dev| FgdsMapping::new(dev, dmabuf_fd, offset, size));
            match m {
                Ok(m) => {
                    let len = m.len;
                    return Ok(Buffer {
                        mem: Memory::Fgds(m),
                        len,
                    });
                }
                Err(e) if device.is_none() && e.errno() == libc::EXDEV => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Wraps CUDA device memory `[dptr, dptr+size)`. If an fgds node serves
    /// the GPU, the range (widened to whole pages) is exported as a dma-buf,
    /// registered and mapped so that I/O goes peer to peer; otherwise the
    /// buffer works through pinned host bounce buffers and
    /// [`Buffer::p2p_unavailable_reason`] says why.
    pub fn from_cuda(dptr: u64, size: u64) -> Result<Buffer> {
        Self::from_gpu(Runtime::cuda()?, dptr, size)
    }

    /// Same as [`Buffer::from_cuda`] for HIP (AMD) memory.
    pub fn from_hip(dptr: u64, size: u64) -> Result<Buffer> {
        Self::from_gpu(Runtime::hip()?, dptr, size)
    }

    /// Wraps GPU memory of `rt` without an fgds mapping: every I/O goes
    /// through pinned host bounce buffers, as where no fgds node serves the
    /// GPU ([`Buffer::p2p_unavailable_reason`] says "bounce path asked
    /// for"). For measuring the bounce path next to the P2P one.
    pub fn from_gpu_staged(rt: Arc<Runtime>, dptr: u64, size: u64) -> Result<Buffer> {
        Self::new_gpu(rt, dptr, size, false, false)
    }

    /// A caller's registration: the library's cached registration of the
    /// same allocation is dropped first ([`before_own_registration`]), as
    /// the driver registers a BAR page once at a time.
    fn from_gpu(rt: Arc<Runtime>, dptr: u64, size: u64) -> Result<Buffer> {
        Self::new_gpu(rt, dptr, size, true, true)
    }

    /// A registration of the library's own (its registration cache's or
    /// staging pool's).
    pub(crate) fn from_gpu_uncached(rt: Arc<Runtime>, dptr: u64, size: u64) -> Result<Buffer> {
        Self::new_gpu(rt, dptr, size, true, false)
    }

    fn new_gpu(
        rt: Arc<Runtime>,
        dptr: u64,
        size: u64,
        try_p2p: bool,
        release_cached: bool,
    ) -> Result<Buffer> {
        if size == 0 || dptr == 0 {
            return Err(Error::InvalidArgument(
                "null device pointer or zero size".into(),
            ));
        }
        let len =
            usize::try_from(size).map_err(|_| Error::InvalidArgument("size too large".into()))?;
        let mem = rt.describe(dptr)?;
        if dptr < mem.base || dptr + size > mem.base + mem.size {
            return Err(Error::OutOfBounds {
                what: "device allocation",
                offset: dptr - mem.base.min(dptr),
                size,
                len: mem.size,
            });
        }
        if release_cached {
            if let Some(release) = BEFORE_OWN_REGISTRATION.get() {
                release(&rt, &mem);
            }
        }
        let (p2p, no_p2p_reason, no_p2p_cause) = if !try_p2p {
            (
                None,
                Some("bounce path asked for".to_string()),
                Some(FallbackCause::Asked),
            )
        } else {
            match Self::gpu_p2p(&rt, &mem, dptr, size) {
                Ok(m) => (Some(m), None, None),
                Err(e) => (None, Some(e.to_string()), Some(FallbackCause::of_error(&e))),
            }
        };
        // A caller's registration that bounces is counted here; the
        // library's own are counted where they send a request to the
        // bounce path (`gpucache`), not where it tries another way.
        if let (true, Some(c)) = (release_cached, no_p2p_cause) {
            crate::stats::registration_fallback(c);
        }
        Ok(Buffer {
            mem: Memory::Gpu {
                dptr,
                rt,
                mem,
                p2p,
                no_p2p_reason,
                no_p2p_cause,
            },
            len,
        })
    }

    fn gpu_p2p(
        rt: &Runtime,
        mem: &DeviceMemory,
        dptr: u64,
        size: u64,
    ) -> Result<(FgdsMapping, usize)> {
        let devs = list_devices()?;
        if devs.is_empty() {
            return Err(Error::NoDevice(
                "no /sys/class/misc/fgds* node (fgds module not loaded)".into(),
            ));
        }
        let pci = mem.pci_address.clone().unwrap_or_default();
        let dev = devs
            .iter()
            .find(|d| {
                d.pci_address.as_deref().is_some_and(|a| {
                    a.eq_ignore_ascii_case(&pci) || a.ends_with(&pci) || pci.ends_with(a)
                })
            })
            .ok_or_else(|| Error::NoDevice(format!("no fgds node for GPU {pci}")))?;
        let a = gpu::export_align();
        let start = dptr & !(a - 1);
        let end = (dptr + size).div_ceil(a) * a;
        if start < mem.base || end > mem.base + mem.size {
            return Err(Error::Misaligned {
                what: "device range (the page-aligned export leaves the allocation)",
                value: dptr,
                align: a,
            });
        }
        let _cur = rt.make_current(mem)?;
        let fd = rt.export_dmabuf(start, end - start)?;
        let d = shared_device(dev.dev_path.clone())?;
        let m = FgdsMapping::new(d, fd.as_raw_fd(), 0, end - start)?;
        Ok((m, (dptr - start) as usize))
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (buffers are never empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Kind of memory.
    pub fn kind(&self) -> BufferKind {
        match &self.mem {
            Memory::HostOwned { .. } | Memory::HostBounced { .. } => BufferKind::Host,
            Memory::HostUser { .. } => BufferKind::HostUser,
            Memory::Fgds(_) => BufferKind::Fgds,
            Memory::Gpu { rt, .. } => match rt.kind() {
                gpu::Kind::Cuda => BufferKind::Cuda,
                gpu::Kind::Hip => BufferKind::Hip,
            },
        }
    }

    /// Whether I/O to this buffer can go peer to peer (an fgds mapping).
    pub fn is_p2p(&self) -> bool {
        matches!(
            &self.mem,
            Memory::Fgds(_) | Memory::Gpu { p2p: Some(_), .. }
        )
    }

    /// For GPU memory without an fgds mapping: why.
    pub fn p2p_unavailable_reason(&self) -> Option<&str> {
        match &self.mem {
            Memory::Gpu { no_p2p_reason, .. } => no_p2p_reason.as_deref(),
            Memory::HostBounced { .. } => Some("bounce path asked for"),
            _ => None,
        }
    }

    /// For GPU memory without an fgds mapping (or host memory that
    /// bounces): why, as a [`FallbackCause`].
    pub fn p2p_unavailable_cause(&self) -> Option<FallbackCause> {
        match &self.mem {
            Memory::Gpu { no_p2p_cause, .. } => *no_p2p_cause,
            Memory::HostBounced { .. } => Some(FallbackCause::Asked),
            _ => None,
        }
    }

    /// The address callers use to name the buffer: host pointer, mapping
    /// address, or device pointer.
    pub fn base_addr(&self) -> u64 {
        match &self.mem {
            Memory::HostOwned { ptr, .. }
            | Memory::HostUser { ptr }
            | Memory::HostBounced { ptr, .. } => *ptr as u64,
            Memory::Fgds(m) => m.map as u64,
            Memory::Gpu { dptr, .. } => *dptr,
        }
    }

    /// The mmap cookie of the fgds registration, if any.
    pub fn cookie(&self) -> Option<u64> {
        match &self.mem {
            Memory::Fgds(m)
            | Memory::Gpu {
                p2p: Some((m, _)), ..
            } => Some(m.cookie),
            _ => None,
        }
    }

    /// CPU address valid for read(2)/write(2) (host memory or the fgds
    /// mapping), if there is one.
    pub(crate) fn io_ptr(&self) -> Option<*mut u8> {
        match &self.mem {
            Memory::HostOwned { ptr, .. } | Memory::HostUser { ptr } => Some(*ptr),
            Memory::Fgds(m) => Some(m.map),
            Memory::Gpu {
                p2p: Some((m, delta)),
                ..
            } => {
                // SAFETY: delta < one page lies inside the mapping.
                Some(unsafe { m.map.add(*delta) })
            }
            Memory::Gpu { p2p: None, .. } | Memory::HostBounced { .. } => None,
        }
    }

    /// The host address of memory the engine bounces through host buffers
    /// without a GPU ([`Buffer::alloc_host_bounced`]).
    fn bounced_ptr(&self) -> Option<*mut u8> {
        match &self.mem {
            Memory::HostBounced { ptr, .. } => Some(*ptr),
            _ => self.io_ptr(),
        }
    }

    /// The GPU runtime of GPU memory.
    pub(crate) fn gpu_runtime(&self) -> Option<Arc<Runtime>> {
        match &self.mem {
            Memory::Gpu { rt, .. } => Some(rt.clone()),
            _ => None,
        }
    }

    /// What the runtime says about GPU memory (`None` for other memory).
    pub(crate) fn device_memory(&self) -> Option<&DeviceMemory> {
        match &self.mem {
            Memory::Gpu { mem, .. } => Some(mem),
            _ => None,
        }
    }

    /// Whether it is plain host memory (buffered I/O may target it directly).
    pub(crate) fn is_host(&self) -> bool {
        matches!(
            &self.mem,
            Memory::HostOwned { .. } | Memory::HostUser { .. }
        )
    }

    pub(crate) fn check_range(&self, what: &'static str, off: u64, size: u64) -> Result<()> {
        if off.checked_add(size).is_none_or(|e| e > self.len as u64) {
            return Err(Error::OutOfBounds {
                what,
                offset: off,
                size,
                len: self.len as u64,
            });
        }
        Ok(())
    }

    /// Copies `src` into the buffer at `off`.
    pub fn write_bytes(&self, off: usize, src: &[u8]) -> Result<()> {
        self.check_range("buffer", off as u64, src.len() as u64)?;
        match &self.mem {
            Memory::Gpu { dptr, rt, mem, .. } => {
                let _cur = rt.make_current(mem)?;
                // SAFETY: range checked above; src is a valid slice.
                unsafe { rt.htod(dptr + off as u64, src.as_ptr(), src.len()) }
            }
            _ => {
                let p = self
                    .bounced_ptr()
                    .ok_or_else(|| Error::InvalidArgument("no CPU mapping".into()))?;
                // SAFETY: range checked; the buffer owns (or was promised) the memory.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p.add(off), src.len()) };
                Ok(())
            }
        }
    }

    /// Copies `src` into the buffer at `off` as [`Buffer::write_bytes`]
    /// does, but for GPU memory only queues the copy on the calling
    /// thread's copy stream: the returned [`QueuedCopy`] must be waited for
    /// before `src` is reused or freed. `None`: the copy is done.
    ///
    /// # Safety
    /// `src` must be pinned host memory (a [`Staging`] from
    /// [`Buffer::staging`]) that stays valid until the copy was waited for.
    pub(crate) unsafe fn write_bytes_queued(
        &self,
        off: usize,
        src: &[u8],
    ) -> Result<Option<QueuedCopy>> {
        self.check_range("buffer", off as u64, src.len() as u64)?;
        match &self.mem {
            Memory::Gpu { dptr, rt, mem, .. } => {
                let _cur = rt.make_current(mem)?;
                // SAFETY: range checked above; the caller keeps src alive.
                let s = unsafe { rt.htod_queue_held(dptr + off as u64, src.as_ptr(), src.len()) }?;
                Ok(s.map(|(stream, held)| QueuedCopy {
                    rt: rt.clone(),
                    ctx: mem.ctx,
                    stream,
                    _held: held,
                }))
            }
            _ => self.write_bytes(off, src).map(|()| None),
        }
    }

    /// Copies `dst.len()` bytes at `off` out of the buffer.
    pub fn read_bytes_into(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range("buffer", off as u64, dst.len() as u64)?;
        match &self.mem {
            Memory::Gpu { dptr, rt, mem, .. } => {
                let _cur = rt.make_current(mem)?;
                // SAFETY: range checked above; dst is a valid slice.
                unsafe { rt.dtoh(dst.as_mut_ptr(), dptr + off as u64, dst.len()) }
            }
            _ => {
                let p = self
                    .bounced_ptr()
                    .ok_or_else(|| Error::InvalidArgument("no CPU mapping".into()))?;
                // SAFETY: range checked; the buffer owns (or was promised) the memory.
                unsafe { std::ptr::copy_nonoverlapping(p.add(off), dst.as_mut_ptr(), dst.len()) };
                Ok(())
            }
        }
    }

    /// Returns a copy of `len` bytes at `off`.
    pub fn read_bytes(&self, off: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read_bytes_into(off, &mut v)?;
        Ok(v)
    }

    /// Allocates a host staging buffer suited to this buffer (pinned for GPU
    /// memory when the runtime can, page aligned otherwise).
    pub(crate) fn staging(&self, len: usize) -> Result<Staging> {
        if let Memory::Gpu { rt, mem, .. } = &self.mem {
            let _cur = rt.make_current(mem)?;
            if let Some(s) = pinned_cached(rt, len) {
                return Ok(s);
            }
            if let Ok(p) = rt.host_alloc(len) {
                return Ok(Staging {
                    ptr: p,
                    len,
                    owner: StagingOwner::Pinned(rt.clone()),
                });
            }
        }
        let layout = Layout::from_size_align(len.max(1), page_size())
            .map_err(|_| Error::InvalidArgument("bad staging size".into()))?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(Error::os("allocate bounce buffer", libc::ENOMEM));
        }
        Ok(Staging {
            ptr,
            len,
            owner: StagingOwner::Heap(layout),
        })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Memory::HostOwned { ptr, layout } | Memory::HostBounced { ptr, layout } = &self.mem {
            // SAFETY: allocated in alloc_host with this layout.
            unsafe { std::alloc::dealloc(*ptr, *layout) };
        }
    }
}

/// A copy into GPU memory queued on a thread's copy stream
/// ([`Buffer::write_bytes_queued`]).
pub(crate) struct QueuedCopy {
    pub rt: Arc<Runtime>,
    /// The memory's context (0: none to make current).
    pub ctx: usize,
    pub stream: usize,
    /// The stream's generation: a shutdown does not destroy the stream
    /// before the copy was waited for.
    pub _held: Arc<crate::gpu::CopyStreams>,
}

impl QueuedCopy {
    /// Waits for the copy (and whatever else is queued on its stream);
    /// with `sleep`, sleeping rather than spinning
    /// ([`Runtime::copy_stream_sync`]).
    pub fn wait(&self, sleep: bool) -> Result<()> {
        let _cur = match self.ctx {
            0 => None,
            ctx => Some(self.rt.enter_context(ctx)?),
        };
        // SAFETY: the stream came from htod_queue on this thread, and its
        // context is current.
        unsafe { self.rt.copy_stream_sync(self.stream, sleep) }
    }

    /// Whether it is the same stream as `other`'s.
    pub fn same_stream(&self, other: &QueuedCopy) -> bool {
        self.stream == other.stream && self.ctx == other.ctx && Arc::ptr_eq(&self.rt, &other.rt)
    }
}

pub(crate) enum StagingOwner {
    Heap(Layout),
    Pinned(Arc<Runtime>),
}

/// An aligned host bounce buffer.
pub(crate) struct Staging {
    pub ptr: *mut u8,
    pub len: usize,
    owner: StagingOwner,
}

/// Pinned bounce buffers no request uses, kept for the next: pinning is slow, and freeing
/// pinned memory waits for the whole GPU, which would also wait for a stream held by
/// stream-ordered I/O ([`crate::stream`]) until that I/O is done. The cache holds at most what
/// was in use at once.
struct PinnedFree {
    rt: Arc<Runtime>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: pinned host memory owned by the cache, usable from any thread.
unsafe impl Send for PinnedFree {}

fn pinned_cache() -> &'static Mutex<Vec<PinnedFree>> {
    static CACHE: OnceLock<Mutex<Vec<PinnedFree>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(Vec::new()))
}

/// The smallest cached pinned buffer of `rt` of at least `len` bytes.
fn pinned_cached(rt: &Arc<Runtime>, len: usize) -> Option<Staging> {
    let mut c = pinned_cache().lock().unwrap_or_else(|p| p.into_inner());
    let i = c
        .iter()
        .enumerate()
        .filter(|(_, f)| Arc::ptr_eq(&f.rt, rt) && f.len >= len)
        .min_by_key(|(_, f)| f.len)
        .map(|(i, _)| i)?;
    let f = c.swap_remove(i);
    Some(Staging {
        ptr: f.ptr,
        len: f.len,
        owner: StagingOwner::Pinned(f.rt),
    })
}

impl Drop for Staging {
    fn drop(&mut self) {
        match &self.owner {
            // SAFETY: allocated with this layout in Buffer::staging.
            StagingOwner::Heap(l) => unsafe { std::alloc::dealloc(self.ptr, *l) },
            StagingOwner::Pinned(rt) => pinned_cache()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(PinnedFree {
                    rt: rt.clone(),
                    ptr: self.ptr,
                    len: self.len,
                }),
        }
    }
}
