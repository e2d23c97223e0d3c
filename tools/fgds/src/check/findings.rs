//! What `fgds check` finds: the report's types (its JSON, as printed with
//! --json), one problem with its next step, and the report as text.

use std::path::PathBuf;

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
    pub(super) config: ConfigReport,
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
    pub(super) iommus: Vec<String>,
    #[serde(skip)]
    pub(super) iommu_groups: usize,
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
    pub(super) config_source: Option<String>,
    pub(super) options: Vec<KernelOption>,
    /// `pci_p2pdma_memremap` (the fgds P2PDMA core change) in the running
    /// kernel, from /proc/kallsyms; None if it could not be read.
    pub(super) p2pdma_core_change: Option<bool>,
}

#[derive(serde::Serialize)]
pub(super) struct KernelOption {
    pub(super) name: &'static str,
    /// "y", "m", or None (not set / not known).
    pub(super) value: Option<String>,
    pub(super) ok: Option<bool>,
}

#[derive(Default, serde::Serialize)]
pub(super) struct ConfigReport {
    pub(super) vars: Vec<ConfigVar>,
    pub(super) errors: Vec<String>,
}

#[derive(serde::Serialize)]
pub(super) struct ConfigVar {
    pub(super) name: &'static str,
    /// The value in force.
    pub(super) value: String,
    pub(super) set: bool,
    /// The variable's value as set.
    pub(super) given: Option<String>,
    pub(super) default: &'static str,
    pub(super) meaning: &'static str,
}

fn print_problems(indent: &str, ps: &[Problem]) {
    for p in ps {
        println!("{indent}problem: {}", p.what);
        println!("{indent}  next: {}", p.next);
    }
}

pub(super) fn print_text(rep: &Report) {
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
