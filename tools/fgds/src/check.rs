//! `fgds check`: why P2P I/O can or cannot work.

use fgds::{Config, FileHandle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Default, serde::Serialize)]
struct Report {
    module_loaded: bool,
    gpus: Vec<GpuReport>,
    file: Option<FileReport>,
    problems: Vec<String>,
    p2p_possible: bool,
}

#[derive(serde::Serialize)]
struct GpuReport {
    node: String,
    pci_address: Option<String>,
    iommu_group_type: Option<String>,
    problems: Vec<String>,
    path_to_storage: Option<String>,
    p2p_possible: bool,
}

#[derive(Default, serde::Serialize)]
struct FileReport {
    path: PathBuf,
    block_device: Option<String>,
    device_kind: Option<String>,
    pci_device: Option<PathBuf>,
    o_direct: bool,
    dio_mem_align: u64,
    dio_offset_align: u64,
    problems: Vec<String>,
}

fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// The last PCI function on a sysfs device path.
fn pci_of(path: &Path) -> Option<PathBuf> {
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

fn file_report(path: &Path) -> FileReport {
    let mut r = FileReport {
        path: path.to_path_buf(),
        ..Default::default()
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            r.problems
                .push(format!("cannot stat {}: {e}", path.display()));
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
            r.problems.push(format!(
                "the file system is not on a block device ({maj}:{min} has no /sys/dev/block entry: tmpfs, network or virtual file system): no P2P DMA"
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
                r.problems.push(format!(
                    "block device {name} is {kind}: fgds P2P needs an NVMe namespace directly on PCIe (md/dm/loop/virtio/virtual devices cannot do P2P DMA)"
                ));
            }
            r.pci_device = pci_of(&sys);
            if r.pci_device.is_none() && kind == "nvme" {
                r.problems.push(format!(
                    "{name} is not below a PCI device (NVMe over fabrics?)"
                ));
            }
        }
    }
    match FileHandle::open(path, libc::O_RDONLY, 0, Config::default()) {
        Ok(f) => {
            r.o_direct = f.is_direct();
            let (m, o) = f.dio_alignment();
            r.dio_mem_align = m;
            r.dio_offset_align = o;
            if let Some(why) = f.no_direct_reason() {
                r.problems.push(why.to_string());
            }
        }
        Err(e) => r
            .problems
            .push(format!("cannot open {}: {e}", path.display())),
    }
    r
}

fn iommu_type(pci: &Path) -> Option<String> {
    std::fs::read_to_string(pci.join("iommu_group/type"))
        .ok()
        .map(|s| s.trim().to_string())
}

pub fn run(file: Option<&Path>, json: bool) -> Result<ExitCode, fgds::Error> {
    let mut rep = Report {
        module_loaded: fgds::device::module_loaded(),
        ..Default::default()
    };
    let devs = fgds::list_devices()?;
    if devs.is_empty() {
        rep.problems.push(if rep.module_loaded {
            "the fgds module is loaded but no GPU is bound (no /sys/class/misc/fgds* node)".into()
        } else {
            "the fgds module is not loaded (no /sys/class/misc/fgds* node; try: modprobe fgds)"
                .into()
        });
    }
    let iommus: Vec<String> = std::fs::read_dir("/sys/class/iommu")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let groups = std::fs::read_dir("/sys/kernel/iommu_groups")
        .map(|rd| rd.count())
        .unwrap_or(0);
    rep.file = file.map(file_report);
    for d in &devs {
        let mut g = GpuReport {
            node: d.name.clone(),
            pci_address: d.pci_address.clone(),
            iommu_group_type: d.pci_sysfs.as_deref().and_then(iommu_type),
            problems: Vec::new(),
            path_to_storage: None,
            p2p_possible: false,
        };
        if !d.dev_path.exists() {
            g.problems
                .push(format!("{} does not exist (udev?)", d.dev_path.display()));
        }
        match g.iommu_group_type.as_deref() {
            Some(t) if t.starts_with("DMA") => g.problems.push(format!(
                "IOMMU is translating for this GPU (iommu_group type {t}): peer-to-peer requests are redirected to the root complex; boot with iommu=pt or set the group type to identity"
            )),
            Some(_) | None => {}
        }
        if let (Some(f), Some(gpu)) = (&rep.file, &d.pci_sysfs) {
            if let Some(nvme) = &f.pci_device {
                let common: PathBuf = gpu
                    .components()
                    .zip(nvme.components())
                    .take_while(|(a, b)| a == b)
                    .map(|(a, _)| a)
                    .collect();
                let below_switch = pci_of(&common).is_some();
                g.path_to_storage = Some(if below_switch {
                    format!("common upstream bridge {}", common.display())
                } else {
                    "through the root complex (works only on host bridges the kernel allow-lists for P2PDMA)".into()
                });
            }
        }
        g.p2p_possible =
            g.problems.is_empty() && rep.file.as_ref().is_none_or(|f| f.problems.is_empty());
        rep.gpus.push(g);
    }
    rep.p2p_possible = rep.gpus.iter().any(|g| g.p2p_possible);
    if json {
        println!("{}", serde_json::to_string_pretty(&rep).unwrap_or_default());
    } else {
        println!(
            "fgds module: {}",
            if rep.module_loaded {
                "loaded"
            } else {
                "not loaded"
            }
        );
        println!(
            "IOMMU: {} ({} groups)",
            if iommus.is_empty() {
                "none registered".to_string()
            } else {
                iommus.join(", ")
            },
            groups
        );
        if let Some(f) = &rep.file {
            println!("file {}:", f.path.display());
            println!(
                "  block device: {} ({})",
                f.block_device.as_deref().unwrap_or("?"),
                f.device_kind.as_deref().unwrap_or("?")
            );
            if let Some(p) = &f.pci_device {
                println!("  PCI device: {}", p.display());
            }
            println!(
                "  O_DIRECT: {} (memory alignment {}, offset alignment {})",
                if f.o_direct { "yes" } else { "no" },
                f.dio_mem_align,
                f.dio_offset_align
            );
            for p in &f.problems {
                println!("  problem: {p}");
            }
        }
        for g in &rep.gpus {
            println!(
                "GPU {} ({}): {}",
                g.node,
                g.pci_address.as_deref().unwrap_or("?"),
                if g.p2p_possible {
                    "P2P possible"
                } else {
                    "P2P NOT possible"
                }
            );
            if let Some(t) = &g.iommu_group_type {
                println!("  iommu group type: {t}");
            }
            if let Some(p) = &g.path_to_storage {
                println!("  path to storage: {p}");
            }
            for p in &g.problems {
                println!("  problem: {p}");
            }
        }
        for p in &rep.problems {
            println!("problem: {p}");
        }
        println!(
            "verdict: {}",
            if rep.p2p_possible {
                "P2P I/O can work"
            } else {
                "P2P I/O cannot work here; fgds falls back to bounce buffers (or fails in strict mode)"
            }
        );
    }
    Ok(if rep.p2p_possible {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
