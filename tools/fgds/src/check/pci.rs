//! GPUs on the PCI bus as sysfs shows them: class, driver, BARs, IOMMU
//! group, and what each driver exports that fgds can register (the
//! exporter table of Documentation/misc-devices/fgds.rst).

use super::findings::PciGpu;
use std::path::{Path, PathBuf};

fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// The last PCI function on a sysfs device path.
pub(super) fn pci_of(path: &Path) -> Option<PathBuf> {
    let mut best = None;
    let mut cur = PathBuf::new();
    for c in path.components() {
        cur.push(c);
        if is_bdf(&c.as_os_str().to_string_lossy()) {
            best = Some(cur.clone());
        }
    }
    best
}

pub(super) fn iommu_type(pci: &Path) -> Option<String> {
    std::fs::read_to_string(pci.join("iommu_group/type"))
        .ok()
        .map(|s| s.trim().to_string())
}

pub(super) fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Whether the running kernel has the function `sym` (built in, or in a
/// loaded module), by `/proc/kallsyms`; None when that cannot be read.
fn kernel_has_symbol(sym: &str) -> Option<bool> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    if text.is_empty() {
        return None;
    }
    Some(
        text.lines()
            .any(|l| l.split_whitespace().nth(2) == Some(sym)),
    )
}

/// What a GPU driver exports that fgds can register, as the exporter table
/// (Documentation/misc-devices/fgds.rst, "Exporters") says: whether P2P
/// can run, the table's row, and what it takes. `has` tells whether the
/// running kernel has a function (the get_phys() of a driver this series
/// patches).
fn dmabuf_of(
    driver: Option<&str>,
    has: &dyn Fn(&str) -> Option<bool>,
) -> (&'static str, &'static str, String) {
    // amdgpu and xe: P2P with the patch of this series, EOPNOTSUPP without.
    let patched = |name: &str, sym: &str, patch: &str| {
        match has(sym) {
        Some(true) => (
            "yes",
            "amdgpu, xe + provider at probe and get_phys()",
            format!("{name} describes VRAM dma-bufs by their physical ranges ({patch}): buffers in CPU-visible VRAM register for P2P; others get EOPNOTSUPP and the bounce path"),
        ),
        Some(false) => (
            "no",
            "amdgpu, xe (7.2): no get_phys()",
            format!("{name} exports VRAM dma-bufs without get_phys(): registration fails with EOPNOTSUPP and the library uses its bounce path; P2P needs {patch}"),
        ),
        None => (
            "maybe",
            "amdgpu, xe: unknown",
            format!("{name} exports VRAM dma-bufs; whether this kernel has its get_phys() ({patch}) is unknown: /proc/kallsyms cannot be read"),
        ),
    }
    };
    match driver {
        None => (
            "no",
            "no driver",
            "no driver is bound: nothing exports its memory".into(),
        ),
        Some("vfio-pci") => (
            "yes",
            "vfio-pci",
            "vfio-pci exports BAR ranges as dma-bufs (VFIO_DEVICE_FEATURE_DMA_BUF) and describes them by their physical ranges (get_phys()): P2P".into(),
        ),
        Some("test_p2p_dmabuf") => (
            "yes",
            "test exporter",
            "lib/test_p2p_dmabuf.c, the test exporter: the outcome depends on each buffer's export pattern".into(),
        ),
        Some("amdgpu") => patched("amdgpu", "amdgpu_dma_buf_get_phys", "patches/0004"),
        Some("xe") => patched("xe", "xe_dma_buf_get_phys", "patches/0005"),
        Some("nvidia") => match has("dma_buf_phys_of_mapping") {
            Some(true) => (
                "maybe",
                "NVIDIA open module",
                "nvidia exports device memory as dma-bufs through CUDA (cuMemGetHandleForAddressRange) without get_phys(); fgds registers them over nvidia-uvm's own P2PDMA pages of BAR1, which it makes only with the open module 595 or later and a static, uncached BAR1 (NVreg_RegistryDwords=\"RMForceStaticBar1=1;RmForceDisableIomapWC=1\"): then /sys/bus/pci/devices/<gpu>/p2pmem/size equals BAR1 once a CUDA context touched the GPU, and /dev/fgdsN appears; otherwise EOPNOTSUPP and the bounce path".into(),
            ),
            Some(false) => (
                "no",
                "NVIDIA open module",
                "nvidia exports device memory as dma-bufs through CUDA (cuMemGetHandleForAddressRange) without get_phys(), and this kernel lacks fgds's dma-buf core change (dma_buf_phys_of_mapping) that finds nvidia-uvm's P2PDMA pages behind them: registration fails with EOPNOTSUPP and the library uses its bounce path".into(),
            ),
            None => (
                "maybe",
                "NVIDIA open module",
                "nvidia exports device memory as dma-bufs without get_phys(); whether this kernel can find nvidia-uvm's P2PDMA pages behind them (dma_buf_phys_of_mapping) is unknown: /proc/kallsyms cannot be read".into(),
            ),
        },
        Some("virtio-pci") => (
            "no",
            "virtio-gpu VRAM blob",
            "virtio-gpu exports VRAM blobs without get_phys(): registration fails with EOPNOTSUPP and the library uses its bounce path".into(),
        ),
        Some("nouveau") | Some("radeon") => (
            "no",
            "no P2P export",
            "this driver does not export VRAM dma-bufs to peer-to-peer importers".into(),
        ),
        Some(d) => (
            "unknown",
            "untried",
            format!("fgds has not been tried with the {d} driver: registration tells (EOPNOTSUPP without get_phys())"),
        ),
    }
}

/// The largest memory BAR in a sysfs `resource` file.
fn largest_bar(resource: &str) -> u64 {
    const IORESOURCE_MEM: u64 = 0x200;
    resource
        .lines()
        .take(6)
        .filter_map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .filter_map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok())
                .collect();
            match v[..] {
                [start, end, flags] if flags & IORESOURCE_MEM != 0 && end > start => {
                    Some(end - start + 1)
                }
                _ => None,
            }
        })
        .max()
        .unwrap_or(0)
}

/// Every display controller (class 0x03xx) or processing-accelerator
/// (0x1200) function below `root` (`/sys/bus/pci/devices`), as the driver
/// counts GPUs, and every device an fgds node serves (`served`: PCI
/// address -> node).
pub fn pci_gpus(root: &Path, served: &[(String, String)]) -> Vec<PciGpu> {
    let Ok(rd) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut v: Vec<PciGpu> = rd
        .flatten()
        .filter_map(|e| {
            let address = e.file_name().to_string_lossy().into_owned();
            let dir = e.path();
            let class = read_trim(&dir.join("class"))?;
            let c = u32::from_str_radix(class.trim_start_matches("0x"), 16).ok()?;
            let node = served
                .iter()
                .find(|(a, _)| *a == address)
                .map(|(_, n)| n.clone());
            if !(c >> 16 == 0x03 || c >> 8 == 0x1200) && node.is_none() {
                return None;
            }
            let driver = std::fs::read_link(dir.join("driver"))
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
            let (dmabuf_export, exporter, dmabuf_note) =
                dmabuf_of(driver.as_deref(), &kernel_has_symbol);
            Some(PciGpu {
                vendor: read_trim(&dir.join("vendor")).unwrap_or_default(),
                device: read_trim(&dir.join("device")).unwrap_or_default(),
                largest_bar: read_trim(&dir.join("resource"))
                    .map(|r| largest_bar(&r))
                    .unwrap_or(0),
                iommu_group_type: iommu_type(&dir),
                address,
                class,
                driver,
                fgds_node: node,
                dmabuf_export,
                exporter,
                dmabuf_note,
                cuda_dmabuf_supported: None,
            })
        })
        .collect();
    v.sort_by(|a, b| a.address.cmp(&b.address));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars() {
        let r = "0x00000000fe000000 0x00000000feffffff 0x0000000000040200\n\
                 0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                 0x000000e000000000 0x000000e01fffffff 0x000000000014220c\n\
                 0x000000000000c000 0x000000000000c07f 0x0000000000040101\n";
        assert_eq!(largest_bar(r), 512 << 20);
    }

    /// A sysfs tree of PCI functions: every GPU-class function is listed
    /// with its driver, others only when an fgds node serves them.
    /// Each driver lands in its row of the exporter table; amdgpu and xe by
    /// whether the kernel has their get_phys().
    #[test]
    fn exporter_rows() {
        let with = |_: &str| Some(true);
        let without = |_: &str| Some(false);
        let unknown = |_: &str| None;
        for d in ["amdgpu", "xe"] {
            assert_eq!(dmabuf_of(Some(d), &with).0, "yes");
            let (e, row, note) = dmabuf_of(Some(d), &without);
            assert_eq!((e, row), ("no", "amdgpu, xe (7.2): no get_phys()"));
            assert!(note.contains("EOPNOTSUPP") && note.contains("patches/00"));
            assert_eq!(dmabuf_of(Some(d), &unknown).0, "maybe");
        }
        assert_eq!(dmabuf_of(Some("vfio-pci"), &without).0, "yes");
        let (e, row, note) = dmabuf_of(Some("nvidia"), &with);
        assert_eq!((e, row), ("maybe", "NVIDIA open module"));
        assert!(note.contains("RMForceStaticBar1=1") && note.contains("p2pmem/size"));
        let (e, _, note) = dmabuf_of(Some("nvidia"), &without);
        assert_eq!(e, "no");
        assert!(note.contains("EOPNOTSUPP") && note.contains("dma_buf_phys_of_mapping"));
        assert_eq!(dmabuf_of(Some("nvidia"), &unknown).0, "maybe");
        assert_eq!(
            dmabuf_of(Some("virtio-pci"), &with).1,
            "virtio-gpu VRAM blob"
        );
        assert_eq!(dmabuf_of(None, &with).0, "no");
        assert_eq!(dmabuf_of(Some("i915"), &with).0, "unknown");
    }

    #[test]
    fn gpus_on_the_bus() {
        let d = tempfile::tempdir().unwrap();
        let drivers = d.path().join("drivers");
        for (addr, class, drv) in [
            ("0000:01:00.0", "0x030200", Some("nvidia")),
            ("0000:02:00.0", "0x030000", None),
            ("0000:03:00.0", "0x010802", Some("nvme")),
            ("0000:04:00.0", "0x050000", Some("vfio-pci")),
            ("0000:05:00.0", "0x120000", Some("amdgpu")),
            ("0000:06:00.0", "0x038000", Some("virtio-pci")),
        ] {
            let f = d.path().join(addr);
            std::fs::create_dir_all(&f).unwrap();
            std::fs::write(f.join("class"), format!("{class}\n")).unwrap();
            std::fs::write(f.join("vendor"), "0x10de\n").unwrap();
            std::fs::write(f.join("device"), "0x2330\n").unwrap();
            if let Some(drv) = drv {
                let t = drivers.join(drv);
                std::fs::create_dir_all(&t).unwrap();
                std::os::unix::fs::symlink(&t, f.join("driver")).unwrap();
            }
        }
        let g = pci_gpus(d.path(), &[("0000:04:00.0".into(), "fgds0".into())]);
        // Whether this machine's kernel has amdgpu's get_phys() decides its row.
        let amdgpu = dmabuf_of(Some("amdgpu"), &kernel_has_symbol).0;
        let got: Vec<_> = g
            .iter()
            .map(|g| (g.address.as_str(), g.driver.as_deref(), g.dmabuf_export))
            .collect();
        assert_eq!(
            got,
            [
                ("0000:01:00.0", Some("nvidia"), "no"),
                ("0000:02:00.0", None, "no"),
                ("0000:04:00.0", Some("vfio-pci"), "yes"),
                ("0000:05:00.0", Some("amdgpu"), amdgpu),
                ("0000:06:00.0", Some("virtio-pci"), "no"),
            ]
        );
        assert_eq!(g[2].fgds_node.as_deref(), Some("fgds0"));
    }
}
