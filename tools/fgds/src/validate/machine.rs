//! What the report says about the machine: its CPU and memory, the kernel,
//! the file system under --dir, and each GPU as `fgds check` sees it.

use super::report::{Gpu, Kernel, Machine, Problem2};
use crate::check;
use crate::gpumem::GpuMem;
use std::os::fd::RawFd;
use std::path::Path;

pub(super) fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

pub(super) fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    Machine {
        hostname: read_trim("/proc/sys/kernel/hostname").unwrap_or_default(),
        cpu: cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default(),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        memory_bytes: std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |k| k * 1024),
    }
}

pub(super) fn fs_type(fd: RawFd) -> String {
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: st is writable.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return "unknown".into();
    }
    match st.f_type as u64 {
        0xef53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683e => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794c_7630 => "overlayfs".into(),
        0x6969 => "nfs".into(),
        0x0102_1997 => "9p".into(),
        0x2fc1_2fc1 => "zfs".into(),
        t => format!("f_type {t:#x}"),
    }
}

pub(super) fn gpu_info(index: usize, mem: &GpuMem, crep: &check::Report) -> Gpu {
    let pci = mem.pci_address.clone();
    let pg = crep
        .pci_gpus
        .iter()
        .find(|g| pci.as_deref() == Some(g.address.as_str()));
    let node = crep
        .gpus
        .iter()
        .find(|g| pci.is_some() && g.pci_address == pci);
    let probe = crep
        .probes
        .first()
        .map(|p| match (&p.not_run, p.ok) {
            (Some(w), _) => format!("not run: {w}"),
            (None, true) => "ok".into(),
            (None, false) => format!("failed: {}", p.error.as_deref().unwrap_or("?")),
        })
        .unwrap_or_else(|| "not run".into());
    let mut problems: Vec<Problem2> = crep
        .problems
        .iter()
        .chain(crep.file.iter().flat_map(|f| f.problems.iter()))
        .chain(node.iter().flat_map(|n| n.problems.iter()))
        .map(|p| Problem2 {
            what: p.what.clone(),
            next: p.next.clone(),
        })
        .collect();
    problems.dedup();
    Gpu {
        index,
        source: mem.source.into(),
        description: mem.description.clone(),
        model: pci.as_ref().and_then(|a| gpu_model(a)),
        pci_address: pci.clone(),
        vendor: pg.map(|g| g.vendor.clone()),
        device: pg.map(|g| g.device.clone()),
        driver: pg.and_then(|g| g.driver.clone()).or_else(|| {
            pci.as_ref().and_then(|a| {
                std::fs::read_link(format!("/sys/bus/pci/devices/{a}/driver"))
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            })
        }),
        fgds_node: node.map(|n| n.node.clone()),
        readback: mem.cpu_path.clone(),
        check_verdict: crep.verdict.into(),
        check_exit_code: crep.exit_code,
        pcie_path: node.and_then(|n| n.path_to_storage.clone()),
        probe,
        problems,
    }
}

/// The model name NVIDIA's driver gives (`Model: NVIDIA H200`).
fn gpu_model(pci: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/driver/nvidia/gpus/{pci}/information"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Model:").map(|m| m.trim().to_string()))
        .filter(|m| !m.is_empty())
}

pub(super) fn kernel() -> Kernel {
    let cfg = check::kernel_options();
    Kernel {
        release: read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
        version: read_trim("/proc/sys/kernel/version").unwrap_or_default(),
        module_loaded: fgds::device::module_loaded(),
        options: cfg,
    }
}
