//! `fgds check`: why P2P I/O can or cannot work.
//!
//! It answers without the module too: every GPU on the PCI bus with its
//! driver and what that driver exports, the running kernel's configuration
//! (what fgds needs), the `FGDS_*` configuration in force, the file's
//! block device, and one next step per problem. Exit status: 0 P2P I/O can
//! work for at least one GPU, 1 only the bounce-buffer fallback can, 2 the
//! check itself failed (a missing or unreadable file, a bad `FGDS_*`
//! value).

use crate::gpumem::{GpuMem, Spec};
use fgds::{Config, FileHandle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit status: P2P I/O can work for at least one GPU.
pub const EXIT_P2P: u8 = 0;
/// Exit status: only the bounce-buffer fallback can work.
pub const EXIT_FALLBACK: u8 = 1;
/// Exit status: the check could not be made (missing file, bad FGDS_*).
pub const EXIT_ERROR: u8 = 2;

/// Something that keeps P2P I/O from working, and what to do about it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Problem {
    pub(crate) what: String,
    pub(crate) next: String,
}

pub(crate) fn problem(what: impl Into<String>, next: impl Into<String>) -> Problem {
    Problem {
        what: what.into(),
        next: next.into(),
    }
}

#[derive(Default, serde::Serialize)]
pub(crate) struct Report {
    /// "p2p", "fallback" or "error".
    pub(crate) verdict: &'static str,
    pub(crate) exit_code: u8,
    pub(crate) p2p_possible: bool,
    pub(crate) module_loaded: bool,
    pub(crate) kernel: KernelReport,
    config: ConfigReport,
    /// Every GPU on the PCI bus (and every device an fgds node serves).
    pub(crate) pci_gpus: Vec<PciGpu>,
    /// The fgds nodes.
    pub(crate) gpus: Vec<GpuReport>,
    pub(crate) file: Option<FileReport>,
    /// The 4 KiB probe reads into GPU memory (one per GPU memory tried).
    pub(crate) probes: Vec<Probe>,
    pub(crate) problems: Vec<Problem>,
    /// Why the check failed (verdict "error").
    pub(crate) errors: Vec<String>,
    #[serde(skip)]
    iommus: Vec<String>,
    #[serde(skip)]
    iommu_groups: usize,
}

#[derive(serde::Serialize)]
pub(crate) struct GpuReport {
    pub(crate) node: String,
    pub(crate) pci_address: Option<String>,
    pub(crate) iommu_group_type: Option<String>,
    pub(crate) problems: Vec<Problem>,
    pub(crate) path_to_storage: Option<String>,
    pub(crate) p2p_possible: bool,
}

#[derive(Default, serde::Serialize)]
pub(crate) struct FileReport {
    pub(crate) path: PathBuf,
    pub(crate) block_device: Option<String>,
    pub(crate) device_kind: Option<String>,
    pub(crate) pci_device: Option<PathBuf>,
    pub(crate) o_direct: bool,
    pub(crate) dio_mem_align: u64,
    pub(crate) dio_offset_align: u64,
    pub(crate) problems: Vec<Problem>,
    /// The file cannot be checked (missing, unreadable).
    pub(crate) error: Option<String>,
}

/// A real 4 KiB `O_DIRECT` read from the file into registered GPU memory:
/// the kernel's own answer to "can this device DMA into this GPU".
#[derive(Default, serde::Serialize)]
pub(crate) struct Probe {
    /// The GPU memory used, in words.
    pub(crate) memory: String,
    /// Its PCI address, where known.
    pub(crate) pci_address: Option<String>,
    /// Whether the read was issued (registration and open succeeded).
    pub(crate) ran: bool,
    /// Why it was not issued.
    pub(crate) not_run: Option<String>,
    /// The read returned 4096 and the bytes are the file's.
    pub(crate) ok: bool,
    /// The errno of a failed read.
    pub(crate) errno: Option<i32>,
    pub(crate) errno_name: Option<String>,
    pub(crate) error: Option<String>,
    /// The bytes read back through the CPU path equal a host O_DIRECT
    /// read of the same 4 KiB (None: not compared).
    pub(crate) data_matches: Option<bool>,
    /// The exporter of the dma-buf the probe registered (its `exp_name`).
    pub(crate) exporter: Option<String>,
}

/// A display, 3D or accelerator function on the PCI bus, as fgds counts
/// GPUs (Documentation/misc-devices/fgds.rst, "Devices").
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PciGpu {
    pub address: String,
    pub vendor: String,
    pub device: String,
    pub class: String,
    /// The bound driver, if any.
    pub driver: Option<String>,
    /// The fgds node that serves it.
    pub fgds_node: Option<String>,
    /// Largest memory BAR, bytes.
    pub largest_bar: u64,
    pub iommu_group_type: Option<String>,
    /// Whether its driver exports dma-bufs fgds can register for P2P: "yes",
    /// "no", "maybe" (depends on the driver's version and setup) or
    /// "unknown".
    pub dmabuf_export: &'static str,
    /// The row of the exporter table (Documentation/misc-devices/fgds.rst,
    /// "Exporters") that applies to its driver.
    pub exporter: &'static str,
    /// What its driver exports, in words.
    pub dmabuf_note: String,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`, where libcuda knows the GPU.
    pub cuda_dmabuf_supported: Option<bool>,
}

#[derive(Default, serde::Serialize)]
pub(crate) struct KernelReport {
    pub(crate) release: String,
    /// Where the configuration was read from.
    config_source: Option<String>,
    options: Vec<KernelOption>,
    /// `pci_p2pdma_memremap` (the fgds P2PDMA core change) in the running
    /// kernel, from /proc/kallsyms; None if it could not be read.
    p2pdma_core_change: Option<bool>,
}

#[derive(serde::Serialize)]
struct KernelOption {
    name: &'static str,
    /// "y", "m", or None (not set / not known).
    value: Option<String>,
    ok: Option<bool>,
}

#[derive(Default, serde::Serialize)]
struct ConfigReport {
    vars: Vec<ConfigVar>,
    errors: Vec<String>,
}

#[derive(serde::Serialize)]
struct ConfigVar {
    name: &'static str,
    /// The value in force.
    value: String,
    set: bool,
    /// The variable's value as set.
    given: Option<String>,
    default: &'static str,
    meaning: &'static str,
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

fn iommu_type(pci: &Path) -> Option<String> {
    std::fs::read_to_string(pci.join("iommu_group/type"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn read_trim(p: &Path) -> Option<String> {
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

/// The kernel options fgds needs, and the values that satisfy each.
const NEEDED: &[(&str, &[&str])] = &[
    ("CONFIG_PCI_P2PDMA", &["y"]),
    ("CONFIG_ZONE_DEVICE", &["y"]),
    ("CONFIG_DMA_SHARED_BUFFER", &["y"]),
    ("CONFIG_RUST", &["y"]),
    ("CONFIG_FGDS", &["y", "m"]),
];

/// `CONFIG_X=v` lines of a kernel configuration; `# CONFIG_X is not set`
/// gives no entry.
pub fn parse_kconfig(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once('=')?;
            k.starts_with("CONFIG_")
                .then(|| (k.to_string(), v.trim_matches('"').to_string()))
        })
        .collect()
}

/// The running kernel's configuration: /boot/config-RELEASE, else
/// /proc/config.gz (through gzip).
fn running_kconfig(release: &str) -> Option<(String, String)> {
    let boot = format!("/boot/config-{release}");
    if let Ok(t) = std::fs::read_to_string(&boot) {
        return Some((boot, t));
    }
    let gz = "/proc/config.gz";
    if Path::new(gz).exists() {
        let out = std::process::Command::new("gzip")
            .args(["-dc", gz])
            .stdin(std::process::Stdio::null())
            .output()
            .ok()?;
        if out.status.success() {
            return Some((gz.into(), String::from_utf8_lossy(&out.stdout).into_owned()));
        }
    }
    None
}

/// The options fgds needs as "NAME=value" ("NAME=?" where the
/// configuration is not readable).
pub(crate) fn kernel_options() -> Vec<String> {
    let mut ps = Vec::new();
    let k = kernel_report(&mut ps);
    k.options
        .iter()
        .map(|o| {
            let v = match (&k.config_source, &o.value) {
                (None, _) => "?",
                (Some(_), Some(v)) => v.as_str(),
                (Some(_), None) => "n",
            };
            format!("{}={v}", o.name)
        })
        .collect()
}

fn kernel_report(problems: &mut Vec<Problem>) -> KernelReport {
    let release = read_trim(Path::new("/proc/sys/kernel/osrelease")).unwrap_or_default();
    let mut k = KernelReport {
        release: release.clone(),
        ..Default::default()
    };
    let cfg = running_kconfig(&release);
    let opts = cfg.as_ref().map(|(_, t)| parse_kconfig(t));
    k.config_source = cfg.map(|(s, _)| s);
    for (name, good) in NEEDED {
        let value = opts
            .as_ref()
            .and_then(|o| o.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()));
        let ok = opts
            .as_ref()
            .map(|_| value.as_deref().is_some_and(|v| good.contains(&v)));
        if ok == Some(false) {
            problems.push(problem(
                format!(
                    "the running kernel ({release}) has {name}={}: fgds needs {}",
                    value.as_deref().unwrap_or("n"),
                    good.join(" or ")
                ),
                format!(
                    "boot a kernel built with {name}={} (make kernel builds one)",
                    good[0]
                ),
            ));
        }
        k.options.push(KernelOption { name, value, ok });
    }
    if opts.is_none() {
        problems.push(problem(
            format!("the running kernel's configuration is not readable (no /boot/config-{release}, no /proc/config.gz): CONFIG_PCI_P2PDMA and CONFIG_ZONE_DEVICE cannot be checked"),
            "install the kernel's config file in /boot, or build it with CONFIG_IKCONFIG_PROC",
        ));
    }
    k.p2pdma_core_change = std::fs::read_to_string("/proc/kallsyms")
        .ok()
        .map(|t| t.lines().any(|l| l.ends_with(" pci_p2pdma_memremap")));
    if k.p2pdma_core_change == Some(false) {
        problems.push(problem(
            "the running kernel lacks the fgds P2PDMA core change (no pci_p2pdma_memremap in /proc/kallsyms)",
            "boot a kernel with patches/0001-PCI-P2PDMA-let-dma-buf-importers-create-P2PDMA-pages.patch applied",
        ));
    }
    k
}

fn config_report() -> ConfigReport {
    let e = fgds::env::env();
    let value = |name: &str| -> String {
        match name {
            "FGDS_STRICT" => u8::from(e.strict).to_string(),
            "FGDS_CHUNK_SIZE" => e.chunk_size.to_string(),
            "FGDS_BOUNCE_CHUNK_SIZE" => e.bounce_chunk_size.to_string(),
            "FGDS_SPLIT_SIZE" => e.split_size.to_string(),
            "FGDS_BOUNCE_SPLIT_SIZE" => e.bounce_split_size.to_string(),
            "FGDS_QUEUE_DEPTH" => e.queue_depth.to_string(),
            "FGDS_THREADS" => e.threads.to_string(),
            "FGDS_IO_URING" => u8::from(e.use_io_uring).to_string(),
            "FGDS_DIRECT" => u8::from(e.direct).to_string(),
            "FGDS_PARALLEL" => e.parallel.to_string(),
            "FGDS_BOUNCE_READ" => format!("{:?}", e.bounce_read).to_ascii_lowercase(),
            "FGDS_LOG" => format!("{:?}", e.log).to_ascii_lowercase(),
            _ => String::new(),
        }
    };
    ConfigReport {
        vars: fgds::env::VARS
            .iter()
            .map(|v| ConfigVar {
                name: v.name,
                value: value(v.name),
                set: e.is_set(v.name),
                given: e
                    .set
                    .iter()
                    .find(|(n, _)| {
                        *n == v.name
                            || fgds::env::ALIASES
                                .iter()
                                .any(|a| a.name == *n && a.of == v.name)
                    })
                    .map(|(n, g)| {
                        if *n == v.name {
                            g.clone()
                        } else {
                            format!("{n}={g}")
                        }
                    }),
                default: v.default,
                meaning: v.meaning,
            })
            .collect(),
        errors: e.errors.clone(),
    }
}

fn print_problems(indent: &str, ps: &[Problem]) {
    for p in ps {
        println!("{indent}problem: {}", p.what);
        println!("{indent}  next: {}", p.next);
    }
}

fn print_text(rep: &Report) {
    let (iommus, groups) = (&rep.iommus, rep.iommu_groups);
    println!(
        "fgds module: {}",
        if rep.module_loaded {
            "loaded"
        } else {
            "not loaded"
        }
    );
    let k = &rep.kernel;
    println!(
        "kernel {}: {}",
        k.release,
        match &k.config_source {
            None => "configuration not readable".to_string(),
            Some(src) =>
                k.options
                    .iter()
                    .map(|o| format!("{}={}", o.name, o.value.as_deref().unwrap_or("n")))
                    .collect::<Vec<_>>()
                    .join(" ")
                    + &format!(" (from {src})"),
        }
    );
    println!(
        "  fgds P2PDMA core change (pci_p2pdma_memremap): {}",
        match k.p2pdma_core_change {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown (/proc/kallsyms not readable)",
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
    println!("configuration (FGDS_*):");
    for v in &rep.config.vars {
        match &v.given {
            Some(g) => println!("  {}={} (set: {g:?})", v.name, v.value),
            None => println!("  {}={} (default)", v.name, v.value),
        }
    }
    for e in &rep.config.errors {
        println!("  error: {e}");
    }
    if rep.pci_gpus.is_empty() {
        println!("PCI GPUs: none (no display, 3D or accelerator function on the PCI bus)");
    }
    for g in &rep.pci_gpus {
        println!(
            "PCI GPU {} [{}:{}] class {}: driver {}, fgds node {}",
            g.address,
            g.vendor.trim_start_matches("0x"),
            g.device.trim_start_matches("0x"),
            g.class,
            g.driver.as_deref().unwrap_or("none"),
            g.fgds_node.as_deref().unwrap_or("none")
        );
        println!(
            "  dma-buf export for P2P: {} [{}] ({})",
            g.dmabuf_export, g.exporter, g.dmabuf_note
        );
        if let Some(v) = g.cuda_dmabuf_supported {
            println!("  CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: {}", u8::from(v));
        }
    }
    if let Some(f) = &rep.file {
        println!("file {}:", f.path.display());
        if let Some(e) = &f.error {
            println!("  error: {e}");
        } else {
            println!(
                "  block device: {} ({})",
                f.block_device.as_deref().unwrap_or("?"),
                f.device_kind.as_deref().unwrap_or("?")
            );
            if let Some(p) = &f.pci_device {
                println!("  PCI device: {}", p.display());
            }
            if f.path.is_dir() {
                println!("  O_DIRECT: not checked (a directory: give a file in it)");
            } else {
                println!(
                    "  O_DIRECT: {} (memory alignment {}, offset alignment {})",
                    if f.o_direct { "yes" } else { "no" },
                    f.dio_mem_align,
                    f.dio_offset_align
                );
            }
        }
        print_problems("  ", &f.problems);
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
        print_problems("  ", &g.problems);
    }
    for p in &rep.probes {
        match (&p.not_run, p.ok) {
            (Some(why), _) => println!(
                "probe (4 KiB O_DIRECT read into {}): not run: {why}",
                p.memory
            ),
            (None, true) => println!(
                "probe (4 KiB O_DIRECT read into {}): ok, the bytes are the file's",
                p.memory
            ),
            (None, false) => println!(
                "probe (4 KiB O_DIRECT read into {}): FAILED: {}",
                p.memory,
                p.error.as_deref().unwrap_or("?")
            ),
        }
    }
    print_problems("", &rep.problems);
    for e in &rep.errors {
        println!("error: {e}");
    }
    println!(
        "verdict: {}",
        match rep.verdict {
            "p2p" => "P2P I/O can work (exit 0)",
            "fallback" =>
                "P2P I/O cannot work here; fgds falls back to bounce buffers, or fails in strict mode (exit 1)",
            _ => "the check failed (exit 2)",
        }
    );
}

/// Which GPU memory the 4 KiB probe reads into.
pub(crate) enum ProbeMem<'a> {
    /// None: decide by the topology rule only.
    Off,
    /// CUDA/HIP memory on every GPU an fgds node serves, where the runtime loads.
    Auto,
    /// What `--dmabuf` names.
    Spec(&'a Spec),
    /// Memory the caller holds (`fgds validate`), at this offset (64 KiB).
    Given(&'a GpuMem, u64),
}

/// The exporter of dma-buf `fd` (`exp_name` in `/proc/self/fdinfo`).
fn exp_name(fd: std::os::fd::RawFd) -> Option<String> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("exp_name:"))
        .map(|v| v.trim().to_string())
}

/// Size of the probe's registration (the read is 4 KiB of it).
pub(crate) const PROBE_REG: u64 = 64 * 1024;
const PROBE_LEN: usize = 4096;

fn errno_name(e: i32) -> String {
    fgds::error::ERRNOS
        .iter()
        .find(|x| x.errno == e)
        .map(|x| x.name.to_string())
        .unwrap_or_else(|| format!("errno {e}"))
}

/// Reads 4 KiB at offset 0 of `file` with O_DIRECT into `[off, off + 64 KiB)` of `mem`.
pub(crate) fn probe(file: &Path, mem: &GpuMem, off: u64) -> Probe {
    let mut p = Probe {
        memory: mem.description.clone(),
        pci_address: mem.pci_address.clone(),
        ..Default::default()
    };
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    match std::fs::metadata(file) {
        Ok(m) if m.is_file() && m.len() < PROBE_LEN as u64 => {
            p.not_run = Some(format!(
                "the file has {} bytes: the probe reads 4096",
                m.len()
            ));
            return p;
        }
        Ok(m) if !(m.is_file() || m.file_type().is_block_device()) => {
            p.not_run = Some("not a regular file or block device".into());
            return p;
        }
        Err(e) => {
            p.not_run = Some(format!("cannot stat: {e}"));
            return p;
        }
        Ok(_) => {}
    }
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(file)
    {
        Ok(f) => f,
        Err(e) => {
            p.not_run = Some(format!("open with O_DIRECT: {e}"));
            return p;
        }
    };
    let db = match mem.dmabuf(off, PROBE_REG) {
        Ok(d) => d,
        Err(e) => {
            p.not_run = Some(format!("export a dma-buf: {e}"));
            return p;
        }
    };
    p.exporter = exp_name(db.fd());
    let buf = match fgds::Buffer::register_dmabuf(None, db.fd(), db.offset, PROBE_REG) {
        Ok(b) => b,
        Err(e) => {
            p.not_run = Some(format!("register the dma-buf on an fgds node: {e}"));
            return p;
        }
    };
    // Clear the target, so that stale bytes cannot pass for the file's.
    let zero = vec![0u8; PROBE_LEN];
    match mem.write(off, &zero) {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            p.not_run = Some(format!("clear the GPU memory: {e}"));
            return p;
        }
        None => {
            if let Err(e) = buf.write_bytes(0, &zero) {
                p.not_run = Some(format!("clear the GPU memory: {e}"));
                return p;
            }
        }
    }
    p.ran = true;
    use std::os::fd::AsRawFd;
    // SAFETY: the mapping has PROBE_REG >= PROBE_LEN bytes.
    let n = unsafe {
        libc::pread(
            f.as_raw_fd(),
            buf.base_addr() as *mut libc::c_void,
            PROBE_LEN,
            0,
        )
    };
    if n != PROBE_LEN as isize {
        let e = if n < 0 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        } else {
            0
        };
        p.errno = (e != 0).then_some(e);
        p.errno_name = p.errno.map(errno_name);
        p.error = Some(if n < 0 {
            format!(
                "pread of 4096 bytes into GPU memory: {}",
                std::io::Error::from_raw_os_error(e)
            )
        } else {
            format!("pread of 4096 bytes into GPU memory returned {n}")
        });
        return p;
    }
    // The same 4 KiB into host memory, and the GPU's bytes through the CPU path.
    let host = match fgds::Buffer::alloc_host(PROBE_LEN) {
        Ok(b) => b,
        Err(e) => {
            p.error = Some(format!("host buffer: {e}"));
            return p;
        }
    };
    // SAFETY: host has PROBE_LEN bytes.
    let h = unsafe {
        libc::pread(
            f.as_raw_fd(),
            host.base_addr() as *mut libc::c_void,
            PROBE_LEN,
            0,
        )
    };
    let mut got = vec![0u8; PROBE_LEN];
    let rb = match mem.read(off, &mut got) {
        Some(r) => r.map_err(|e| e.to_string()),
        None => buf.read_bytes_into(0, &mut got).map_err(|e| e.to_string()),
    };
    match (h == PROBE_LEN as isize, rb, host.read_bytes(0, PROBE_LEN)) {
        (true, Ok(()), Ok(want)) => {
            p.data_matches = Some(want == got);
            p.ok = want == got;
            if !p.ok {
                p.error = Some("the bytes in GPU memory differ from the file's".into());
            }
        }
        (false, _, _) => p.error = Some("the host O_DIRECT read of the same 4 KiB failed".into()),
        (_, Err(e), _) | (_, _, Err(fgds::Error::InvalidArgument(e))) => {
            p.error = Some(format!("read back: {e}"))
        }
        (_, _, Err(e)) => p.error = Some(format!("read back: {e}")),
    }
    p
}

fn probe_problem(p: &Probe) -> Problem {
    let what = format!(
        "the 4 KiB probe read into {} failed: {}",
        p.memory,
        p.error.as_deref().unwrap_or("?")
    );
    let next = match p.errno {
        Some(libc::EINVAL) => "the block layer refused the P2P mapping (pci_p2pdma_map_type): put the NVMe and the GPU below one PCIe switch, or use a host bridge on the P2PDMA allow list, with ACS not redirecting",
        Some(libc::EREMOTEIO) => "the storage device cannot do P2P DMA (loop, virtio, dm; md or NVMe multipath over a member that cannot): use an NVMe namespace directly",
        Some(libc::EFAULT) => "the registration went away during the probe (revoked): try again",
        _ => "see the error; fgds check without --dmabuf decides by the topology rule",
    };
    problem(what, next)
}

/// What `fgds check` finds; `file` is checked and probed with `mem`.
pub(crate) fn report(file: Option<&Path>, mem: ProbeMem<'_>) -> Result<Report, fgds::Error> {
    let mut rep = Report {
        module_loaded: fgds::device::module_loaded(),
        ..Default::default()
    };
    let devs = fgds::list_devices()?;
    if devs.is_empty() {
        rep.problems.push(if rep.module_loaded {
            problem(
                "the fgds module is loaded but serves no GPU (no /sys/class/misc/fgds* node)",
                "check that the GPU's class is display/3D/accelerator with a memory BAR of 2 MiB or more, or name it: modprobe fgds ids=VENDOR:DEVICE",
            )
        } else {
            problem(
                "the fgds module is not loaded (no /sys/class/misc/fgds* node)",
                "modprobe fgds (on a kernel built with CONFIG_FGDS=m)",
            )
        });
    }
    rep.kernel = kernel_report(&mut rep.problems);
    rep.config = config_report();
    rep.errors.extend(rep.config.errors.iter().cloned());
    let served: Vec<(String, String)> = devs
        .iter()
        .filter_map(|d| d.pci_address.clone().map(|a| (a, d.name.clone())))
        .collect();
    rep.pci_gpus = pci_gpus(Path::new("/sys/bus/pci/devices"), &served);
    if rep
        .pci_gpus
        .iter()
        .any(|g| g.driver.as_deref() == Some("nvidia"))
    {
        // Where libcuda is present, it says whether each GPU exports dma-bufs.
        if let Ok(cuda) = fgds::gpu::cuda_dmabuf_support() {
            for g in &mut rep.pci_gpus {
                let a = g.address.to_lowercase();
                if let Some((_, v)) = cuda.iter().find(|(p, _)| *p == a) {
                    g.cuda_dmabuf_supported = *v;
                    match v {
                        Some(true) => {
                            g.dmabuf_note = format!(
                                "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 1: {}",
                                g.dmabuf_note
                            );
                        }
                        Some(false) => {
                            g.dmabuf_export = "no";
                            g.dmabuf_note = "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: this driver does not export its memory as dma-bufs (the open kernel modules do, on supported GPUs)".into();
                        }
                        None => {}
                    }
                }
            }
        }
    }
    for g in &rep.pci_gpus {
        if g.fgds_node.is_none() && rep.module_loaded {
            rep.problems.push(problem(
                format!("GPU {} has no fgds node", g.address),
                "check its memory BARs (fgds needs one of 2 MiB or more), or name it: modprobe fgds ids=VENDOR:DEVICE",
            ));
        }
        if g.dmabuf_export == "no" {
            rep.problems.push(problem(
                format!("GPU {}: {}", g.address, g.dmabuf_note),
                if g.driver.as_deref() == Some("nvidia") {
                    "the bounce path serves this GPU (nothing to change here for that); P2P through fgds needs nv-dmabuf.c to implement get_phys(), or bind vfio-pci to export a BAR"
                } else if g.exporter.starts_with("amdgpu, xe") {
                    "the bounce path serves this GPU; for P2P, run a kernel with the driver's get_phys() patch (patches/0004 amdgpu, patches/0005 xe)"
                } else {
                    "bind a driver that exports dma-bufs of GPU memory (the GPU vendor's, or vfio-pci for a BAR)"
                },
            ));
        }
    }
    let iommus: Vec<String> = std::fs::read_dir("/sys/class/iommu")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    rep.iommu_groups = std::fs::read_dir("/sys/kernel/iommu_groups")
        .map(|rd| rd.count())
        .unwrap_or(0);
    rep.iommus = iommus;
    rep.file = file.map(file_report);
    if let Some(e) = rep.file.as_ref().and_then(|f| f.error.clone()) {
        rep.errors.push(e);
    }
    let cpu = crate::p2p::Cpu::from_cpuinfo(
        &std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default(),
    );
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
            g.problems.push(problem(
                format!("{} does not exist", d.dev_path.display()),
                "check udev (the node is made from /sys/class/misc) or mknod it",
            ));
        }
        match g.iommu_group_type.as_deref() {
            Some(t) if t.starts_with("DMA") => g.problems.push(problem(
                format!("the IOMMU translates this GPU's DMA (iommu_group type {t}): peer-to-peer requests are redirected to the root complex"),
                "boot with iommu=pt, or set the group's type to identity",
            )),
            Some(_) | None => {}
        }
        if let (Some(f), Some(gpu)) = (&rep.file, &d.pci_sysfs) {
            if let Some(nvme) = &f.pci_device {
                // The block layer's own rule (pci_p2pdma_distance).
                g.path_to_storage = Some(match crate::p2p::decide(gpu, nvme, &cpu) {
                    crate::p2p::Verdict::BusAddr { via, distance } => format!(
                        "direct below the common upstream bridge {via} ({distance} hops), no ACS redirect"
                    ),
                    crate::p2p::Verdict::ThroughHostBridge { why, distance } => {
                        format!("through the root complex ({distance} hops): {why}")
                    }
                    crate::p2p::Verdict::NotSupported { why, next } => {
                        g.problems.push(problem(
                            format!("the kernel refuses P2P DMA between {} and this GPU: {why}", f.block_device.as_deref().unwrap_or("the NVMe")),
                            next,
                        ));
                        "refused by the kernel".into()
                    }
                    crate::p2p::Verdict::Unknown { why } => format!("unknown: {why}"),
                });
            }
        }
        g.p2p_possible = g.problems.is_empty()
            && rep
                .file
                .as_ref()
                .is_none_or(|f| f.problems.is_empty() && f.error.is_none());
        rep.gpus.push(g);
    }
    // The probe: the kernel's own answer, where GPU memory can be had.
    if let Some(path) = file.filter(|_| rep.file.as_ref().is_some_and(|f| f.error.is_none())) {
        match mem {
            ProbeMem::Off => {}
            ProbeMem::Given(m, off) => rep.probes.push(probe(path, m, off)),
            ProbeMem::Spec(spec) => match GpuMem::from_spec(spec, PROBE_REG) {
                Ok(m) => rep.probes.push(probe(path, &m, 0)),
                Err(e) => rep.probes.push(Probe {
                    memory: format!("{spec:?}"),
                    not_run: Some(format!("--dmabuf: {e}")),
                    ..Default::default()
                }),
            },
            ProbeMem::Auto => {
                if !devs.is_empty() {
                    if let Ok(cuda) = fgds::gpu::cuda_dmabuf_support() {
                        for (ordinal, (pci, _)) in cuda.iter().enumerate() {
                            if !devs
                                .iter()
                                .any(|d| d.pci_address.as_deref() == Some(pci.as_str()))
                            {
                                continue;
                            }
                            match GpuMem::alloc_runtime(ordinal as i32, PROBE_REG) {
                                Ok(m) => rep.probes.push(probe(path, &m, 0)),
                                Err(e) => rep.probes.push(Probe {
                                    memory: format!("CUDA device {ordinal} ({pci})"),
                                    pci_address: Some(pci.clone()),
                                    not_run: Some(format!("allocate: {e}")),
                                    ..Default::default()
                                }),
                            }
                        }
                    }
                }
            }
        }
    }
    for p in rep.probes.iter().filter(|p| p.ran) {
        let g = rep.gpus.iter_mut().find(|g| {
            p.pci_address.is_some() && g.pci_address.as_deref() == p.pci_address.as_deref()
        });
        match g {
            Some(g) => {
                if p.ok {
                    // The kernel moved the bytes: the rule's doubts do not apply.
                    g.p2p_possible = true;
                } else {
                    g.problems.push(probe_problem(p));
                    g.p2p_possible = false;
                }
            }
            None if !p.ok => rep.problems.push(probe_problem(p)),
            None => {}
        }
    }
    let unattached_ok = rep.probes.iter().any(|p| {
        p.ok && !rep
            .gpus
            .iter()
            .any(|g| p.pci_address.is_some() && g.pci_address == p.pci_address)
    });
    rep.p2p_possible =
        rep.errors.is_empty() && (unattached_ok || rep.gpus.iter().any(|g| g.p2p_possible));
    rep.verdict = if !rep.errors.is_empty() {
        "error"
    } else if rep.p2p_possible {
        "p2p"
    } else {
        "fallback"
    };
    rep.exit_code = match rep.verdict {
        "p2p" => EXIT_P2P,
        "fallback" => EXIT_FALLBACK,
        _ => EXIT_ERROR,
    };
    Ok(rep)
}

/// `fgds check [--json] [--dmabuf SPEC | --no-probe] [FILE]`.
pub fn run(
    file: Option<&Path>,
    json: bool,
    dmabuf: Option<&Spec>,
    no_probe: bool,
) -> Result<ExitCode, fgds::Error> {
    let mem = match (dmabuf, no_probe) {
        (_, true) => ProbeMem::Off,
        (Some(s), false) => ProbeMem::Spec(s),
        (None, false) => ProbeMem::Auto,
    };
    let rep = report(file, mem)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rep).unwrap_or_default());
    } else {
        print_text(&rep);
    }
    Ok(ExitCode::from(rep.exit_code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kconfig_lines() {
        let o = parse_kconfig(
            "# comment\nCONFIG_PCI_P2PDMA=y\n# CONFIG_ZONE_DEVICE is not set\nCONFIG_FGDS=m\nCONFIG_X=\"a b\"\n",
        );
        assert_eq!(
            o,
            [
                ("CONFIG_PCI_P2PDMA".to_string(), "y".to_string()),
                ("CONFIG_FGDS".into(), "m".into()),
                ("CONFIG_X".into(), "a b".into())
            ]
        );
    }

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
