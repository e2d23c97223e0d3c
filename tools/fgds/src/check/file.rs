//! The file (or block device) `fgds check` is given: its block device,
//! that device's PCI function, O_DIRECT and its alignment, and what keeps
//! P2P from it.

use super::findings::{problem, FileReport};
use super::pci::pci_of;
use fgds::{Config, FileHandle};
use std::path::{Path, PathBuf};

pub(super) fn file_report(path: &Path) -> FileReport {
    let mut r = FileReport {
        path: path.to_path_buf(),
        ..Default::default()
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            r.error = Some(format!("cannot stat {}: {e}", path.display()));
            return r;
        }
    };
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let link = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
    match std::fs::canonicalize(&link) {
        Err(_) => {
            r.block_device = Some(format!("{maj}:{min}"));
            r.device_kind = Some("none".into());
            r.problems.push(problem(
                format!("the file system is not on a block device ({maj}:{min} has no /sys/dev/block entry: tmpfs, network or virtual file system): no P2P DMA"),
                "put the file on a file system on an NVMe namespace (ext4, xfs)",
            ));
        }
        Ok(mut sys) => {
            // a partition: its parent is the disk
            if sys.join("partition").exists() {
                if let Some(p) = sys.parent() {
                    sys = p.to_path_buf();
                }
            }
            let name = sys
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            r.block_device = Some(name.clone());
            let s = sys.to_string_lossy();
            let kind = if name.starts_with("md") {
                "md (software RAID)"
            } else if name.starts_with("dm-") {
                "device-mapper"
            } else if name.starts_with("loop") {
                "loop"
            } else if s.contains("/virtio") {
                "virtio"
            } else if name.starts_with("nvme") {
                "nvme"
            } else if s.contains("/virtual/") {
                "virtual"
            } else {
                "other"
            };
            r.device_kind = Some(kind.into());
            if kind != "nvme" {
                r.problems.push(problem(
                    format!("block device {name} is {kind}: fgds P2P needs an NVMe namespace directly on PCIe (md/dm/loop/virtio/virtual devices cannot do P2P DMA)"),
                    "put the file on a file system directly on an NVMe namespace",
                ));
            }
            r.pci_device = pci_of(&sys);
            if r.pci_device.is_none() && kind == "nvme" {
                r.problems.push(problem(
                    format!("{name} is not below a PCI device (NVMe over fabrics?)"),
                    "use a local PCIe NVMe",
                ));
            }
        }
    }
    if meta.is_dir() {
        // The device of a directory is that of the files made in it;
        // O_DIRECT is a property of a file.
        return r;
    }
    match FileHandle::open(path, libc::O_RDONLY, 0, Config::default()) {
        Ok(f) => {
            r.o_direct = f.is_direct();
            let (m, o) = f.dio_alignment();
            r.dio_mem_align = m;
            r.dio_offset_align = o;
            if let Some(why) = f.no_direct_reason() {
                r.problems.push(problem(
                    why,
                    "use a file system that supports O_DIRECT (ext4, xfs)",
                ));
            }
        }
        Err(e) => r.error = Some(format!("cannot open {}: {e}", path.display())),
    }
    r
}
