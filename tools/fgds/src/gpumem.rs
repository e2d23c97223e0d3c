//! GPU memory for `fgds check`'s probe and `fgds validate`: allocated
//! through the vendor runtime the library loads (CUDA, HIP), or a dma-buf
//! the user names (`--dmabuf`):
//!
//! - `vfio:BDF[,bar=N][,offset=SIZE][,size=SIZE]`: a BAR of a device bound
//!   to vfio-pci. fgds opens its group (no-IOMMU or type1), exports ranges
//!   of the BAR as dma-bufs (`VFIO_DEVICE_FEATURE_DMA_BUF`) and reads and
//!   writes the BAR through vfio's own mapping of it, a path independent of
//!   fgds. Default BAR: the largest memory BAR; offset 0; size: the BAR's.
//! - `fd:N,size=SIZE[,offset=SIZE]`: a dma-buf the caller passed as file
//!   descriptor N (any exporter). There is no independent CPU path to it:
//!   data are read back through the fgds mapping (CPU loads of the BAR),
//!   which the report says.
//!
//! SIZE is bytes with an optional K, M, G suffix (powers of 1024).

use fgds::gpu::{Kind, Runtime};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// What `--dmabuf` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// A BAR of a vfio-pci device.
    Vfio {
        bdf: String,
        bar: Option<u32>,
        offset: u64,
        size: Option<u64>,
    },
    /// An inherited dma-buf file descriptor.
    Fd { fd: RawFd, offset: u64, size: u64 },
}

/// A bad `--dmabuf` value.
pub fn parse_spec(s: &str) -> Result<Spec, String> {
    let (kind, rest) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected vfio:BDF[,bar=N][,offset=SIZE][,size=SIZE] or fd:N,size=SIZE[,offset=SIZE]"))?;
    let mut parts = rest.split(',');
    let head = parts.next().unwrap_or_default().to_string();
    let (mut bar, mut offset, mut size) = (None, 0u64, None);
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: {p:?} is not KEY=VALUE"))?;
        match k {
            "bar" if kind == "vfio" => {
                bar = Some(
                    v.parse::<u32>()
                        .ok()
                        .filter(|b| *b <= 5)
                        .ok_or_else(|| format!("{s:?}: bar={v} is not 0..5"))?,
                )
            }
            "offset" => offset = crate::parse_size(v).map_err(|e| format!("{s:?}: offset: {e}"))?,
            "size" => size = Some(crate::parse_size(v).map_err(|e| format!("{s:?}: size: {e}"))?),
            _ => return Err(format!("{s:?}: unknown key {k:?} for {kind}:")),
        }
    }
    if offset % 4096 != 0 || size.is_some_and(|z| z == 0 || z % 4096 != 0) {
        return Err(format!(
            "{s:?}: offset and size must be multiples of 4096 (size non-zero)"
        ));
    }
    match kind {
        "vfio" => {
            let b = head.as_bytes();
            if !(b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.') {
                return Err(format!(
                    "{s:?}: {head:?} is not a PCI address like 0000:04:00.0"
                ));
            }
            Ok(Spec::Vfio {
                bdf: head.to_lowercase(),
                bar,
                offset,
                size,
            })
        }
        "fd" => {
            let fd = head
                .parse::<RawFd>()
                .ok()
                .filter(|f| *f >= 0)
                .ok_or_else(|| format!("{s:?}: {head:?} is not a file descriptor number"))?;
            let size = size.ok_or_else(|| format!("{s:?}: fd: needs size=SIZE"))?;
            Ok(Spec::Fd { fd, offset, size })
        }
        _ => Err(format!("{s:?}: unknown kind {kind:?} (vfio or fd)")),
    }
}

/// A PCI address as sysfs names it (`0000:01:00.0`): drivers give the
/// domain in 8 digits (`00000000:01:00.0`) at times.
pub fn sysfs_bdf(a: &str) -> String {
    let a = a.to_lowercase();
    match a.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => match u32::from_str_radix(dom, 16) {
            Ok(d) => format!("{d:04x}:{rest}"),
            Err(_) => a,
        },
        _ => a,
    }
}

/// Why GPU memory could not be had.
#[derive(Debug, thiserror::Error)]
pub enum MemError {
    #[error("{0}")]
    Fgds(#[from] fgds::Error),
    #[error("{what}: {source}")]
    Os {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

fn os(what: impl Into<String>) -> MemError {
    MemError::Os {
        what: what.into(),
        source: std::io::Error::last_os_error(),
    }
}

// linux/vfio.h
const VFIO_TYPE: u32 = b';' as u32;
const VFIO_BASE: u32 = 100;
const fn vfio_io(n: u32) -> libc::c_ulong {
    ((VFIO_TYPE << 8) | (VFIO_BASE + n)) as libc::c_ulong
}
const VFIO_SET_IOMMU: libc::c_ulong = vfio_io(2);
const VFIO_GROUP_SET_CONTAINER: libc::c_ulong = vfio_io(4);
const VFIO_GROUP_GET_DEVICE_FD: libc::c_ulong = vfio_io(6);
const VFIO_DEVICE_GET_REGION_INFO: libc::c_ulong = vfio_io(8);
const VFIO_DEVICE_FEATURE: libc::c_ulong = vfio_io(17);
const VFIO_DEVICE_FEATURE_GET: u32 = 1 << 16;
const VFIO_DEVICE_FEATURE_DMA_BUF: u32 = 11;
const VFIO_TYPE1V2_IOMMU: libc::c_ulong = 3;
const VFIO_NOIOMMU_IOMMU: libc::c_ulong = 8;

#[repr(C)]
#[derive(Default)]
struct RegionInfo {
    argsz: u32,
    flags: u32,
    index: u32,
    cap_offset: u32,
    size: u64,
    offset: u64,
}

#[repr(C, packed)]
struct DmaBufReq {
    argsz: u32,
    flags: u32,
    region_index: u32,
    open_flags: u32,
    db_flags: u32,
    nr_ranges: u32,
    offset: u64,
    length: u64,
}

// linux/vfio.h's layouts (gcc: sizeof(struct vfio_region_info) is 32, the
// packed feature + dma_buf + one range 40).
const _: () = assert!(std::mem::size_of::<RegionInfo>() == 32);
const _: () = assert!(std::mem::size_of::<DmaBufReq>() == 40);

/// An open vfio-pci device and vfio's CPU mapping of one BAR range.
pub struct Vfio {
    // Dropped in this order: the device, its group, the container.
    device: OwnedFd,
    _group: OwnedFd,
    _container: OwnedFd,
    bar: u32,
    /// Offset of the used range in the BAR.
    offset: u64,
    map: *mut u8,
    len: usize,
    noiommu: bool,
}

impl Drop for Vfio {
    fn drop(&mut self) {
        // SAFETY: map/len are the mapping made in open().
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.len) };
    }
}

fn open_rw(path: &str) -> Result<OwnedFd, MemError> {
    let c = std::ffi::CString::new(path).map_err(|_| MemError::Other("NUL in path".into()))?;
    // A group has one opener at a time; the previous one may be a process
    // whose io_uring workers still hold its files for a moment.
    for _ in 0..50 {
        // SAFETY: c is a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd >= 0 {
            // SAFETY: fd was just opened.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EBUSY) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Err(os(format!("open {path}")))
}

impl Vfio {
    fn open(bdf: &str, bar: Option<u32>, offset: u64, size: Option<u64>) -> Result<Vfio, MemError> {
        let sys = format!("/sys/bus/pci/devices/{bdf}");
        let group = std::fs::read_link(format!("{sys}/iommu_group")).map_err(|e| MemError::Os {
            what: format!("{sys}/iommu_group (is {bdf} bound to vfio-pci?)"),
            source: e,
        })?;
        let group = group
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let drv = std::fs::read_link(format!("{sys}/driver"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        if drv.as_deref() != Some("vfio-pci") {
            return Err(MemError::Other(format!(
                "{bdf} is bound to {}, not vfio-pci: bind it (echo VENDOR DEVICE > /sys/bus/pci/drivers/vfio-pci/new_id)",
                drv.as_deref().unwrap_or("no driver")
            )));
        }
        let noiommu_path = format!("/dev/vfio/noiommu-{group}");
        let noiommu = std::path::Path::new(&noiommu_path).exists();
        let container = open_rw("/dev/vfio/vfio")?;
        let g = open_rw(&if noiommu {
            noiommu_path
        } else {
            format!("/dev/vfio/{group}")
        })?;
        let cfd = container.as_raw_fd();
        // SAFETY: VFIO_GROUP_SET_CONTAINER takes a pointer to an int fd.
        if unsafe { libc::ioctl(g.as_raw_fd(), VFIO_GROUP_SET_CONTAINER, &cfd) } < 0 {
            return Err(os("VFIO_GROUP_SET_CONTAINER"));
        }
        let t = if noiommu {
            VFIO_NOIOMMU_IOMMU
        } else {
            VFIO_TYPE1V2_IOMMU
        };
        // SAFETY: VFIO_SET_IOMMU takes the type by value.
        if unsafe { libc::ioctl(cfd, VFIO_SET_IOMMU, t) } < 0 {
            return Err(os("VFIO_SET_IOMMU"));
        }
        let name = std::ffi::CString::new(bdf).map_err(|_| MemError::Other("bad BDF".into()))?;
        // SAFETY: takes a C string.
        let dfd = unsafe { libc::ioctl(g.as_raw_fd(), VFIO_GROUP_GET_DEVICE_FD, name.as_ptr()) };
        if dfd < 0 {
            return Err(os("VFIO_GROUP_GET_DEVICE_FD"));
        }
        // SAFETY: dfd is a new fd.
        let device = unsafe { OwnedFd::from_raw_fd(dfd) };
        let info = |index: u32| -> Option<RegionInfo> {
            let mut r = RegionInfo {
                argsz: std::mem::size_of::<RegionInfo>() as u32,
                index,
                ..Default::default()
            };
            // SAFETY: r is a valid vfio_region_info.
            (unsafe { libc::ioctl(dfd, VFIO_DEVICE_GET_REGION_INFO, &mut r) } == 0).then_some(r)
        };
        let bar = match bar {
            Some(b) => b,
            None => (0..6)
                .filter_map(|i| info(i).map(|r| (i, r.size)))
                .max_by_key(|(_, s)| *s)
                .map(|(i, _)| i)
                .ok_or_else(|| MemError::Other(format!("{bdf} has no BAR")))?,
        };
        let r = info(bar).ok_or_else(|| os(format!("VFIO_DEVICE_GET_REGION_INFO(BAR{bar})")))?;
        let size = size.unwrap_or(r.size.saturating_sub(offset));
        if size == 0 || offset.checked_add(size).is_none_or(|e| e > r.size) {
            return Err(MemError::Other(format!(
                "{bdf} BAR{bar} has {} bytes: offset {offset} + size {size} does not fit",
                r.size
            )));
        }
        let len = size as usize;
        // SAFETY: mapping the BAR region of the device fd at its region offset.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                dfd,
                (r.offset + offset) as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(os(format!("mmap of {bdf} BAR{bar} through vfio")));
        }
        Ok(Vfio {
            _container: container,
            _group: g,
            device,
            bar,
            offset,
            map: map as *mut u8,
            len,
            noiommu,
        })
    }

    fn dmabuf(&self, off: u64, len: u64) -> Result<OwnedFd, MemError> {
        let mut req = DmaBufReq {
            argsz: std::mem::size_of::<DmaBufReq>() as u32,
            flags: VFIO_DEVICE_FEATURE_GET | VFIO_DEVICE_FEATURE_DMA_BUF,
            region_index: self.bar,
            open_flags: (libc::O_RDWR | libc::O_CLOEXEC) as u32,
            db_flags: 0,
            nr_ranges: 1,
            offset: self.offset + off,
            length: len,
        };
        // SAFETY: req is the packed vfio_device_feature + dma_buf + one range.
        let fd = unsafe { libc::ioctl(self.device.as_raw_fd(), VFIO_DEVICE_FEATURE, &mut req) };
        if fd < 0 {
            return Err(os("VFIO_DEVICE_FEATURE_DMA_BUF"));
        }
        // SAFETY: a new dma-buf fd.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

enum Backend {
    Runtime { rt: Arc<Runtime>, dptr: u64 },
    Vfio(Vfio),
    Fd { fd: RawFd, offset: u64 },
}

/// GPU memory of `len` bytes, its dma-bufs and a CPU path to its bytes.
pub struct GpuMem {
    /// "cuda", "hip", "vfio" or "dmabuf-fd".
    pub source: &'static str,
    /// In words.
    pub description: String,
    /// PCI address of the GPU, where known.
    pub pci_address: Option<String>,
    pub len: u64,
    /// How bytes are read back and written by the CPU, in words.
    pub cpu_path: String,
    /// Whether the CPU path is independent of fgds (vendor runtime, vfio).
    pub independent_readback: bool,
    /// Offset of byte 0 in the BAR (vfio), for a host-side check.
    pub bar_offset: Option<u64>,
    pub bar: Option<u32>,
    backend: Backend,
}

// SAFETY: the vfio mapping is only accessed by copies.
unsafe impl Send for GpuMem {}
// SAFETY: as above.
unsafe impl Sync for GpuMem {}

/// A dma-buf covering a range of a [`GpuMem`]: register `size` bytes at
/// `offset` of `fd`.
pub struct DmaBuf {
    owned: Option<OwnedFd>,
    raw: RawFd,
    pub offset: u64,
}

impl DmaBuf {
    pub fn fd(&self) -> RawFd {
        self.owned
            .as_ref()
            .map(|f| f.as_raw_fd())
            .unwrap_or(self.raw)
    }
}

impl GpuMem {
    /// `len` bytes on CUDA device `ordinal` (or HIP, where CUDA is absent).
    pub fn alloc_runtime(ordinal: i32, len: u64) -> Result<GpuMem, MemError> {
        let rt = match Runtime::cuda() {
            Ok(rt) => rt,
            Err(e) => Runtime::hip().map_err(|h| {
                MemError::Other(format!(
                    "no GPU runtime: CUDA: {e}; HIP: {h} (name GPU memory with --dmabuf)"
                ))
            })?,
        };
        rt.use_device(ordinal)?;
        let a = fgds::gpu::export_align();
        let len = len.div_ceil(a) * a;
        let dptr = rt.mem_alloc(len as usize)?;
        let mem = rt.describe(dptr)?;
        let source = match rt.kind() {
            Kind::Cuda => "cuda",
            Kind::Hip => "hip",
        };
        Ok(GpuMem {
            source,
            description: format!(
                "{} device {ordinal} ({}), {} at {dptr:#x}",
                source.to_uppercase(),
                mem.pci_address
                    .as_deref()
                    .map(sysfs_bdf)
                    .as_deref()
                    .unwrap_or("?"),
                crate::human(len)
            ),
            pci_address: mem.pci_address.as_deref().map(sysfs_bdf),
            len,
            cpu_path: format!(
                "{} memcpy (device to host, host to device)",
                source.to_uppercase()
            ),
            independent_readback: true,
            bar_offset: None,
            bar: None,
            backend: Backend::Runtime { rt, dptr },
        })
    }

    /// What `--dmabuf` names; `min_len` bytes are needed.
    pub fn from_spec(spec: &Spec, min_len: u64) -> Result<GpuMem, MemError> {
        match spec {
            Spec::Vfio {
                bdf,
                bar,
                offset,
                size,
            } => {
                let size = size.or(Some(min_len)).map(|s| s.max(min_len));
                let v = Vfio::open(bdf, *bar, *offset, size)?;
                let len = v.len as u64;
                Ok(GpuMem {
                    source: "vfio",
                    description: format!(
                        "vfio-pci {bdf} BAR{} [{:#x}, {:#x}) ({}, {})",
                        v.bar,
                        v.offset,
                        v.offset + len,
                        crate::human(len),
                        if v.noiommu { "no-IOMMU" } else { "type1 IOMMU" }
                    ),
                    pci_address: Some(bdf.clone()),
                    len,
                    cpu_path: format!("vfio-pci's mapping of BAR{}", v.bar),
                    independent_readback: true,
                    bar_offset: Some(v.offset),
                    bar: Some(v.bar),
                    backend: Backend::Vfio(v),
                })
            }
            Spec::Fd { fd, offset, size } => {
                if *size < min_len {
                    return Err(MemError::Other(format!(
                        "the dma-buf range is {} bytes; {} are needed",
                        size, min_len
                    )));
                }
                // SAFETY: F_GETFD has no memory-safety preconditions.
                if unsafe { libc::fcntl(*fd, libc::F_GETFD) } < 0 {
                    return Err(os(format!("dma-buf fd {fd}")));
                }
                Ok(GpuMem {
                    source: "dmabuf-fd",
                    description: format!(
                        "dma-buf fd {fd} [{offset:#x}, {:#x})",
                        offset + size
                    ),
                    pci_address: None,
                    len: *size,
                    cpu_path: "CPU loads and stores through the fgds mapping (no independent path: same memory, not peer to peer)".into(),
                    independent_readback: false,
                    bar_offset: None,
                    bar: None,
                    backend: Backend::Fd {
                        fd: *fd,
                        offset: *offset,
                    },
                })
            }
        }
    }

    /// A dma-buf of `[off, off + len)`.
    pub fn dmabuf(&self, off: u64, len: u64) -> Result<DmaBuf, MemError> {
        if off.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(MemError::Other(format!(
                "range {off}+{len} outside {} bytes of GPU memory",
                self.len
            )));
        }
        match &self.backend {
            Backend::Runtime { rt, dptr } => {
                let fd = rt.export_dmabuf(dptr + off, len)?;
                Ok(DmaBuf {
                    raw: fd.as_raw_fd(),
                    owned: Some(fd),
                    offset: 0,
                })
            }
            Backend::Vfio(v) => {
                let fd = v.dmabuf(off, len)?;
                Ok(DmaBuf {
                    raw: fd.as_raw_fd(),
                    owned: Some(fd),
                    offset: 0,
                })
            }
            Backend::Fd { fd, offset } => Ok(DmaBuf {
                owned: None,
                raw: *fd,
                offset: offset + off,
            }),
        }
    }

    /// Writes `src` at `off` through the CPU path; `None` when there is no
    /// path but the fgds mapping (the caller uses it then).
    pub fn write(&self, off: u64, src: &[u8]) -> Option<Result<(), MemError>> {
        if off + src.len() as u64 > self.len {
            return Some(Err(MemError::Other("write outside the GPU memory".into())));
        }
        match &self.backend {
            // SAFETY: range checked; src is a valid slice.
            Backend::Runtime { rt, dptr } => Some(
                unsafe { rt.htod(dptr + off, src.as_ptr(), src.len()) }.map_err(MemError::from),
            ),
            Backend::Vfio(v) => {
                // SAFETY: range checked against the mapping's length.
                unsafe {
                    std::ptr::copy_nonoverlapping(src.as_ptr(), v.map.add(off as usize), src.len())
                };
                Some(Ok(()))
            }
            Backend::Fd { .. } => None,
        }
    }

    /// Reads `dst.len()` bytes at `off` through the CPU path (`None` as for write).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Option<Result<(), MemError>> {
        if off + dst.len() as u64 > self.len {
            return Some(Err(MemError::Other("read outside the GPU memory".into())));
        }
        match &self.backend {
            // SAFETY: range checked; dst is a valid slice.
            Backend::Runtime { rt, dptr } => Some(
                unsafe { rt.dtoh(dst.as_mut_ptr(), dptr + off, dst.len()) }.map_err(MemError::from),
            ),
            Backend::Vfio(v) => {
                // SAFETY: range checked against the mapping's length.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        v.map.add(off as usize),
                        dst.as_mut_ptr(),
                        dst.len(),
                    )
                };
                Some(Ok(()))
            }
            Backend::Fd { .. } => None,
        }
    }

    /// The runtime and device pointer of runtime memory.
    pub fn runtime(&self) -> Option<(Arc<Runtime>, u64)> {
        match &self.backend {
            Backend::Runtime { rt, dptr } => Some((rt.clone(), *dptr)),
            _ => None,
        }
    }
}

impl Drop for GpuMem {
    fn drop(&mut self) {
        if let Backend::Runtime { rt, dptr } = &self.backend {
            let _ = rt.mem_free(*dptr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdfs() {
        assert_eq!(sysfs_bdf("00000000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(sysfs_bdf("0000:04:00.0"), "0000:04:00.0");
    }

    #[test]
    fn specs() {
        assert_eq!(
            parse_spec("vfio:0000:04:00.0,bar=2,offset=64M,size=96M"),
            Ok(Spec::Vfio {
                bdf: "0000:04:00.0".into(),
                bar: Some(2),
                offset: 64 << 20,
                size: Some(96 << 20)
            })
        );
        assert_eq!(
            parse_spec("vfio:0000:0A:00.0"),
            Ok(Spec::Vfio {
                bdf: "0000:0a:00.0".into(),
                bar: None,
                offset: 0,
                size: None
            })
        );
        assert_eq!(
            parse_spec("fd:7,size=2M"),
            Ok(Spec::Fd {
                fd: 7,
                offset: 0,
                size: 2 << 20
            })
        );
        for bad in [
            "vfio",
            "vfio:04:00.0",
            "vfio:0000:04:00.0,bar=6",
            "vfio:0000:04:00.0,offset=100",
            "vfio:0000:04:00.0,colour=red",
            "fd:7",
            "fd:x,size=4K",
            "fd:3,bar=1,size=4K",
            "cuda:0",
        ] {
            assert!(parse_spec(bad).is_err(), "{bad}");
        }
    }
}
