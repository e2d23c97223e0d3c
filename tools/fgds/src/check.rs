//! `fgds check`: why P2P I/O can or cannot work.
//!
//! It answers without the module too: every GPU on the PCI bus with its
//! driver and what that driver exports, the running kernel's configuration
//! (what fgds needs), the `FGDS_*` configuration in force, the file's
//! block device, and one next step per problem. Exit status: 0 P2P I/O can
//! work for at least one GPU, 1 only the bounce-buffer fallback can, 2 the
//! check itself failed (a missing or unreadable file, a bad `FGDS_*`
//! value).
//!
//! This file gathers the report and decides the verdict; its parts are in
//! `check/`.

mod file;
mod findings;
mod kernel;
mod pci;
mod probe;

pub(crate) use findings::Report;
pub(crate) use kernel::kernel_options;
pub(crate) use probe::ProbeMem;

use crate::gpumem::{GpuMem, Spec};
use file::file_report;
use findings::{print_text, problem, GpuReport, Probe};
use kernel::{config_report, kernel_report};
use pci::{iommu_type, pci_gpus};
use probe::{probe, probe_problem, PROBE_REG};
use std::path::Path;
use std::process::ExitCode;

/// Exit status: P2P I/O can work for at least one GPU.
pub const EXIT_P2P: u8 = 0;
/// Exit status: only the bounce-buffer fallback can work.
pub const EXIT_FALLBACK: u8 = 1;
/// Exit status: the check could not be made (missing file, bad FGDS_*).
pub const EXIT_ERROR: u8 = 2;
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
