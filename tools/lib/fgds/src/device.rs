//! fgds device nodes: listing from sysfs, opening, buffer registration.

use crate::error::{Error, Result};
use crate::sys;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// `FGDS_IOCTL_REG_BUFFER` calls this process made that succeeded, and
/// `FGDS_IOCTL_UNREG_BUFFER` calls.
static REGISTRATIONS: AtomicU64 = AtomicU64::new(0);
static UNREGISTRATIONS: AtomicU64 = AtomicU64::new(0);

/// How many registrations (`FGDS_IOCTL_REG_BUFFER` that succeeded) and
/// unregistrations this process made through the library, on every node:
/// what a test or benchmark counts to see that I/O on memory the caller
/// never registered costs no registration per call.
pub fn registration_counts() -> (u64, u64) {
    (
        REGISTRATIONS.load(Ordering::Relaxed),
        UNREGISTRATIONS.load(Ordering::Relaxed),
    )
}

/// Default sysfs directory of misc devices.
pub const SYSFS_MISC: &str = "/sys/class/misc";

/// One BAR of a PCI device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bar {
    /// BAR index (0..=5).
    pub index: u32,
    /// Bus address of the start.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// Resource flags from sysfs.
    pub flags: u64,
}

/// An fgds node as described by sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Node name, e.g. `fgds0`.
    pub name: String,
    /// `/dev/<name>`.
    pub dev_path: PathBuf,
    /// PCI address (BDF) of the GPU, e.g. `0000:41:00.0`.
    pub pci_address: Option<String>,
    /// Resolved sysfs path of the GPU's PCI device.
    pub pci_sysfs: Option<PathBuf>,
    /// Non-empty memory BARs of the GPU.
    pub bars: Vec<Bar>,
    /// PCI vendor id.
    pub vendor: Option<u16>,
    /// PCI device id.
    pub device: Option<u16>,
}

fn read_hex_u16(path: &Path) -> Option<u16> {
    let s = std::fs::read_to_string(path).ok()?;
    u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// Parses a PCI `resource` file: one "start end flags" line per resource,
/// the first six being BARs. Empty BARs are skipped.
pub fn parse_resource(text: &str) -> Vec<Bar> {
    let mut bars = Vec::new();
    for (i, line) in text.lines().take(6).enumerate() {
        let v: Vec<u64> = line
            .split_whitespace()
            .filter_map(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok())
            .collect();
        if v.len() == 3 && v[1] > v[0] {
            bars.push(Bar {
                index: i as u32,
                start: v[0],
                size: v[1] - v[0] + 1,
                flags: v[2],
            });
        }
    }
    bars
}

/// `IORESOURCE_MEM`: a memory BAR in a PCI `resource` line's flags.
const IORESOURCE_MEM: u64 = 0x200;

/// The size of the largest memory BAR of PCI function `pci` (`0000:01:00.0`)
/// as sysfs lists it, whatever driver it has.
pub fn largest_bar_of(pci: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/sys/bus/pci/devices/{pci}/resource")).ok()?;
    parse_resource(&text)
        .iter()
        .filter(|b| b.flags & IORESOURCE_MEM != 0)
        .map(|b| b.size)
        .max()
}

/// Lists the fgds nodes under `sysfs_misc` (normally [`SYSFS_MISC`]), sorted
/// by name. An empty list means the module is not loaded or no GPU was bound.
pub fn list_devices_in(sysfs_misc: &Path) -> Result<Vec<DeviceInfo>> {
    let rd = match std::fs::read_dir(sysfs_misc) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(Error::Io {
                op: format!("read {}", sysfs_misc.display()),
                source: e,
            })
        }
    };
    let mut out = Vec::new();
    for ent in rd.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        let Some(num) = name.strip_prefix("fgds") else {
            continue;
        };
        if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // The node's device is the auxiliary device of the BAR's offer
        // (`pci_p2pdma.bar.<id>`), a child of the GPU's PCI device.
        let devlink = ent.path().join("device");
        let pci_sysfs = std::fs::canonicalize(&devlink).ok().map(|p| {
            let offer = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("pci_p2pdma.bar."));
            match (offer, p.parent()) {
                (true, Some(pci)) => pci.to_path_buf(),
                _ => p,
            }
        });
        let pci_address = pci_sysfs
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        let (bars, vendor, device) = match &pci_sysfs {
            Some(p) => (
                std::fs::read_to_string(p.join("resource"))
                    .map(|t| parse_resource(&t))
                    .unwrap_or_default(),
                read_hex_u16(&p.join("vendor")),
                read_hex_u16(&p.join("device")),
            ),
            None => (Vec::new(), None, None),
        };
        out.push(DeviceInfo {
            dev_path: PathBuf::from("/dev").join(&name),
            name,
            pci_address,
            pci_sysfs,
            bars,
            vendor,
            device,
        });
    }
    out.sort_by_key(|d| {
        d.name
            .trim_start_matches("fgds")
            .parse::<u64>()
            .unwrap_or(u64::MAX)
    });
    Ok(out)
}

/// Lists the fgds nodes of this machine.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    list_devices_in(Path::new(SYSFS_MISC))
}

/// Whether the fgds module is loaded (`/sys/module/fgds` exists).
pub fn module_loaded() -> bool {
    Path::new("/sys/module/fgds").exists()
}

/// An open fgds node.
#[derive(Debug)]
pub struct Device {
    fd: OwnedFd,
    path: PathBuf,
    version: sys::FgdsVersion,
}

fn ioctl<T>(fd: RawFd, req: u32, arg: &mut T) -> std::result::Result<(), i32> {
    // SAFETY: `arg` points to a live #[repr(C)] value of the size encoded in `req`.
    let r = unsafe { libc::ioctl(fd, req as _, arg as *mut T) };
    if r < 0 {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(())
    }
}

impl Device {
    /// Opens a node (`/dev/fgdsN`) and checks its API version.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::InvalidArgument("device path contains NUL".into()))?;
        // SAFETY: c is a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if errno == libc::ENOENT || errno == libc::ENXIO || errno == libc::ENODEV {
                return Err(Error::NoDevice(format!(
                    "{}: {} (is the fgds module loaded?)",
                    path.display(),
                    std::io::Error::from_raw_os_error(errno)
                )));
            }
            return Err(Error::os(format!("open {}", path.display()), errno));
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut version = sys::FgdsVersion::default();
        ioctl(fd.as_raw_fd(), sys::FGDS_IOCTL_VERSION, &mut version)
            .map_err(|e| Error::os(format!("FGDS_IOCTL_VERSION on {}", path.display()), e))?;
        if version.version != sys::FGDS_API_VERSION {
            return Err(Error::ApiVersion {
                found: version.version,
                expected: sys::FGDS_API_VERSION,
            });
        }
        Ok(Device { fd, path, version })
    }

    /// Opens the first fgds node of the machine.
    pub fn open_first() -> Result<Self> {
        let devs = list_devices()?;
        let Some(d) = devs.first() else {
            return Err(Error::NoDevice(if module_loaded() {
                "the fgds module is loaded but no GPU is bound (no /sys/class/misc/fgds*)".into()
            } else {
                "the fgds module is not loaded (no /sys/class/misc/fgds*)".into()
            }));
        };
        Device::open(&d.dev_path)
    }

    /// Path of the node.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What FGDS_IOCTL_VERSION returned.
    pub fn version(&self) -> sys::FgdsVersion {
        self.version
    }

    /// FGDS_IOCTL_REG_BUFFER; returns the mmap cookie.
    pub fn register(&self, dmabuf_fd: RawFd, offset: u64, size: u64) -> Result<u64> {
        let mut arg = sys::FgdsRegBuffer {
            dmabuf_fd,
            offset,
            size,
            ..Default::default()
        };
        ioctl(self.fd.as_raw_fd(), sys::FGDS_IOCTL_REG_BUFFER, &mut arg).map_err(|e| {
            Error::os(
                format!("FGDS_IOCTL_REG_BUFFER on {}", self.path.display()),
                e,
            )
        })?;
        REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
        Ok(arg.cookie)
    }

    /// FGDS_IOCTL_UNREG_BUFFER.
    pub fn unregister(&self, cookie: u64) -> Result<()> {
        let mut arg = sys::FgdsUnregBuffer {
            cookie,
            reserved: 0,
        };
        UNREGISTRATIONS.fetch_add(1, Ordering::Relaxed);
        ioctl(self.fd.as_raw_fd(), sys::FGDS_IOCTL_UNREG_BUFFER, &mut arg)
            .map_err(|e| Error::os("FGDS_IOCTL_UNREG_BUFFER", e))
    }

    /// FGDS_IOCTL_QUERY_BUFFER.
    pub fn query(&self, cookie: u64) -> Result<sys::FgdsBufferInfo> {
        if self.version.features & sys::FGDS_FEATURE_QUERY == 0 {
            return Err(Error::os("FGDS_IOCTL_QUERY_BUFFER", libc::EOPNOTSUPP));
        }
        let mut arg = sys::FgdsBufferInfo {
            cookie,
            ..Default::default()
        };
        ioctl(self.fd.as_raw_fd(), sys::FGDS_IOCTL_QUERY_BUFFER, &mut arg)
            .map_err(|e| Error::os("FGDS_IOCTL_QUERY_BUFFER", e))?;
        Ok(arg)
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The node's descriptor: `mmap` of a cookie from [`Device::register`]
/// (the CLI's `validate` maps registrations itself to tear them down with
/// I/O in flight).
impl AsRawFd for Device {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
