//! The report: its JSON types (format `fgds-validate/1`, fields in
//! tools/fgds/README.md), the run's context that adds steps, blockers and
//! throughput rows to it, and its Markdown form.

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Report {
    pub format: String,
    pub fgds_version: String,
    /// "p2p-verified", "blocked", "failed" or "error".
    pub verdict: String,
    pub exit_code: u8,
    pub seed: u64,
    pub machine: Machine,
    pub kernel: Kernel,
    pub storage: Storage,
    pub gpus: Vec<Gpu>,
    pub steps: Vec<Step>,
    pub throughput: Vec<Row>,
    pub blockers: Vec<Blocker>,
    /// Ranges of GPU memory holding known data when the run ended, for a
    /// check from outside (the VM's host checker): stream `seed` from `pos`.
    pub host_check: Vec<HostCheck>,
    pub errors: Vec<String>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Machine {
    pub hostname: String,
    pub cpu: String,
    pub cpus: usize,
    pub memory_bytes: u64,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Kernel {
    pub release: String,
    pub version: String,
    pub module_loaded: bool,
    /// CONFIG_PCI_P2PDMA, CONFIG_ZONE_DEVICE, CONFIG_FGDS as "NAME=value".
    pub options: Vec<String>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Storage {
    pub dir: String,
    pub filesystem: String,
    pub block_device: Option<String>,
    pub device_kind: Option<String>,
    pub model: Option<String>,
    pub pci_address: Option<String>,
    pub o_direct: bool,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Gpu {
    pub index: usize,
    /// "cuda", "hip", "vfio", "dmabuf-fd".
    pub source: String,
    pub description: String,
    /// The GPU's model, where its driver says (NVIDIA: /proc/driver/nvidia).
    pub model: Option<String>,
    pub pci_address: Option<String>,
    pub vendor: Option<String>,
    pub device: Option<String>,
    pub driver: Option<String>,
    pub fgds_node: Option<String>,
    /// How bytes are read back (the vendor runtime, vfio's BAR mapping).
    pub readback: String,
    /// `fgds check`'s verdict for the test file with this GPU's probe.
    pub check_verdict: String,
    pub check_exit_code: u8,
    /// The PCIe path between the file's device and this GPU, in words.
    pub pcie_path: Option<String>,
    /// "ok", "failed: ...", "not run: ...".
    pub probe: String,
    pub problems: Vec<Problem2>,
}

/// A problem `fgds check` found, with its next step.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Problem2 {
    pub what: String,
    pub next: String,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Step {
    /// Index into `gpus`, None for steps without GPU memory.
    pub gpu: Option<usize>,
    pub name: String,
    /// "pass", "fail", "blocked" or "skipped".
    pub status: String,
    pub detail: String,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Row {
    /// None: host memory.
    pub gpu: Option<usize>,
    /// "pread", "preadv", "io_uring", "engine", "engine-write", "bounce",
    /// "kvikio", "cufile-gdsio".
    pub path: String,
    /// "host" or "gpu".
    pub memory: String,
    /// "read" or "write".
    pub op: String,
    pub request_bytes: u64,
    pub in_flight: u32,
    pub bytes: u64,
    pub seconds: f64,
    pub mib_per_s: f64,
    /// mib_per_s over the same path's into host memory (the ceiling row
    /// for bounce, kvikio, cufile: host io_uring).
    pub vs_host: Option<f64>,
    /// What the row is, where the path alone does not say (KvikIO's mode).
    pub note: Option<String>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Blocker {
    pub gpu: Option<usize>,
    /// The step(s) that could not run.
    pub step: String,
    pub why: String,
    pub next: String,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct HostCheck {
    pub gpu: usize,
    pub what: String,
    /// Offset in the GPU memory used.
    pub gpu_offset: u64,
    /// The BAR (vfio) and the offset in it, where known.
    pub bar: Option<u32>,
    pub bar_offset: Option<u64>,
    pub len: u64,
    pub seed: u64,
    pub pos: u64,
}

// ---------------------------------------------------------------- the run

/// The report as the run builds it, with the sizes of the run.
pub(super) struct Ctx {
    pub(super) rep: Report,
    /// Bytes of each verified transfer (--size).
    pub(super) s: u64,
    /// Bytes of each throughput run (--bench-size).
    pub(super) bench_size: u64,
}

impl Ctx {
    pub(super) fn step(
        &mut self,
        gpu: Option<usize>,
        name: impl Into<String>,
        r: Result<String, String>,
    ) -> bool {
        let ok = r.is_ok();
        let (status, detail) = match r {
            Ok(d) => ("pass", d),
            Err(d) => ("fail", d),
        };
        self.rep.steps.push(Step {
            gpu,
            name: name.into(),
            status: status.into(),
            detail,
        });
        ok
    }

    /// A step that did not run here, and why.
    pub(super) fn skipped(&mut self, gpu: Option<usize>, name: &str, detail: impl Into<String>) {
        self.rep.steps.push(Step {
            gpu,
            name: name.into(),
            status: "skipped".into(),
            detail: detail.into(),
        });
    }

    pub(super) fn blocked(
        &mut self,
        gpu: Option<usize>,
        step: &str,
        why: impl Into<String>,
        next: impl Into<String>,
    ) {
        let why = why.into();
        self.rep.steps.push(Step {
            gpu,
            name: step.into(),
            status: "blocked".into(),
            detail: why.clone(),
        });
        self.rep.blockers.push(Blocker {
            gpu,
            step: step.into(),
            why,
            next: next.into(),
        });
    }

    pub(super) fn row(
        &mut self,
        gpu: Option<usize>,
        path: &str,
        op: &str,
        geo: (u64, u32),
        bytes: u64,
        secs: f64,
    ) {
        let mib = if secs > 0.0 {
            bytes as f64 / secs / (1 << 20) as f64
        } else {
            0.0
        };
        let memory = if gpu.is_some() { "gpu" } else { "host" };
        let base = match path {
            "bounce" | "kvikio" | "cufile-gdsio" => "io_uring",
            p => p,
        };
        let vs_host = gpu.and_then(|_| {
            self.rep
                .throughput
                .iter()
                .find(|r| r.gpu.is_none() && r.path == base && r.op == op)
                .filter(|r| r.mib_per_s > 0.0)
                .map(|r| (mib / r.mib_per_s * 100.0).round() / 100.0)
        });
        self.rep.throughput.push(Row {
            gpu,
            path: path.into(),
            memory: memory.into(),
            op: op.into(),
            request_bytes: geo.0,
            in_flight: geo.1,
            bytes,
            seconds: (secs * 1e4).round() / 1e4,
            mib_per_s: mib.round(),
            vs_host,
            note: None,
        });
    }
}

// ---------------------------------------------------------------- Markdown

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn gpu_label(g: Option<usize>) -> String {
    g.map_or("host".into(), |i| format!("gpu{i}"))
}

/// The Markdown report (format in tools/fgds/README.md).
pub fn markdown(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "# fgds validate report\n");
    let _ = writeln!(o, "- format: {}", r.format);
    let _ = writeln!(o, "- verdict: **{}** (exit {})", r.verdict, r.exit_code);
    let _ = writeln!(o, "- fgds: {}", r.fgds_version);
    let _ = writeln!(o, "- seed: {}", r.seed);
    let _ = writeln!(
        o,
        "- machine: {}, {}, {} CPUs, {}",
        r.machine.hostname,
        r.machine.cpu,
        r.machine.cpus,
        crate::human(r.machine.memory_bytes)
    );
    let _ = writeln!(
        o,
        "- kernel: {} ({}); fgds module {}",
        r.kernel.release,
        r.kernel.options.join(" "),
        if r.kernel.module_loaded {
            "loaded"
        } else {
            "not loaded"
        }
    );
    let st = &r.storage;
    let _ = writeln!(
        o,
        "- storage: {} on {} ({}), {}, PCI {}, O_DIRECT {}",
        st.dir,
        st.block_device.as_deref().unwrap_or("?"),
        st.device_kind.as_deref().unwrap_or("?"),
        st.filesystem,
        st.pci_address.as_deref().unwrap_or("none"),
        if st.o_direct { "yes" } else { "no" }
    );
    if let Some(m) = &st.model {
        let _ = writeln!(o, "- storage model: {m}");
    }
    for g in &r.gpus {
        let _ = writeln!(o, "\n## gpu{}: {}\n", g.index, g.description);
        let _ = writeln!(o, "- source: {}", g.source);
        if let Some(m) = &g.model {
            let _ = writeln!(o, "- model: {m}");
        }
        let _ = writeln!(
            o,
            "- PCI: {} [{}:{}], driver {}, fgds node {}",
            g.pci_address.as_deref().unwrap_or("?"),
            g.vendor.as_deref().unwrap_or("?"),
            g.device.as_deref().unwrap_or("?"),
            g.driver.as_deref().unwrap_or("none"),
            g.fgds_node.as_deref().unwrap_or("none")
        );
        let _ = writeln!(
            o,
            "- check: {} (exit {})",
            g.check_verdict, g.check_exit_code
        );
        let _ = writeln!(
            o,
            "- PCIe path: {}",
            g.pcie_path.as_deref().unwrap_or("unknown")
        );
        let _ = writeln!(o, "- probe: {}", g.probe);
        let _ = writeln!(o, "- read back through: {}", g.readback);
        for p in &g.problems {
            let _ = writeln!(o, "- problem: {} (next: {})", p.what, p.next);
        }
    }
    let _ = writeln!(o, "\n## Steps\n");
    let _ = writeln!(o, "| gpu | step | status | detail |");
    let _ = writeln!(o, "| --- | --- | --- | --- |");
    for s in &r.steps {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            gpu_label(s.gpu),
            cell(&s.name),
            s.status,
            cell(&s.detail)
        );
    }
    let _ = writeln!(o, "\n## Throughput\n");
    let _ = writeln!(
        o,
        "| memory | path | op | request | in flight | bytes | seconds | MiB/s | vs host | note |"
    );
    let _ = writeln!(
        o,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for t in &r.throughput {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            gpu_label(t.gpu),
            t.path,
            t.op,
            t.request_bytes,
            t.in_flight,
            t.bytes,
            t.seconds,
            t.mib_per_s,
            t.vs_host.map_or("-".into(), |v| format!("{v:.2}")),
            cell(t.note.as_deref().unwrap_or("-"))
        );
    }
    if !r.blockers.is_empty() {
        let _ = writeln!(o, "\n## Blockers\n");
        for b in &r.blockers {
            let _ = writeln!(
                o,
                "- {} {}: {} (next: {})",
                gpu_label(b.gpu),
                b.step,
                b.why,
                if b.next.is_empty() { "-" } else { &b.next }
            );
        }
    }
    if !r.errors.is_empty() {
        let _ = writeln!(o, "\n## Errors\n");
        for e in &r.errors {
            let _ = writeln!(o, "- {e}");
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::{EXIT_BLOCKED, FORMAT};

    /// A GPU's section, its rows and blockers, as README.md's format says.
    #[test]
    fn markdown_of_a_gpu() {
        let r = Report {
            format: FORMAT.into(),
            verdict: "blocked".into(),
            exit_code: EXIT_BLOCKED,
            gpus: vec![Gpu {
                source: "vfio".into(),
                description: "vfio-pci 0000:04:00.0 BAR2".into(),
                pci_address: Some("0000:04:00.0".into()),
                driver: Some("vfio-pci".into()),
                fgds_node: Some("fgds0".into()),
                probe: "failed: EINVAL".into(),
                problems: vec![Problem2 {
                    what: "the kernel refuses".into(),
                    next: "use one switch".into(),
                }],
                ..Default::default()
            }],
            steps: vec![Step {
                gpu: Some(0),
                name: "check".into(),
                status: "blocked".into(),
                detail: "a | b".into(),
            }],
            throughput: vec![Row {
                gpu: Some(0),
                path: "bounce".into(),
                memory: "gpu".into(),
                op: "read".into(),
                bytes: 4096,
                mib_per_s: 12.0,
                vs_host: Some(0.5),
                note: Some("x|y".into()),
                ..Default::default()
            }],
            blockers: vec![Blocker {
                gpu: Some(0),
                step: "p2p read".into(),
                why: "refused".into(),
                next: String::new(),
            }],
            ..Default::default()
        };
        let md = markdown(&r);
        assert!(
            md.contains("\n## gpu0: vfio-pci 0000:04:00.0 BAR2\n\n- source: vfio\n"),
            "{md}"
        );
        assert!(md.contains("- PCI: 0000:04:00.0 [?:?], driver vfio-pci, fgds node fgds0\n"));
        assert!(md.contains("- probe: failed: EINVAL\n"));
        assert!(md.contains("- problem: the kernel refuses (next: use one switch)\n"));
        assert!(
            md.contains("| gpu0 | check | blocked | a \\| b |\n"),
            "{md}"
        );
        assert!(
            md.contains("| gpu0 | bounce | read | 0 | 0 | 4096 | 0 | 12 | 0.50 | x\\|y |\n"),
            "{md}"
        );
        assert!(
            md.contains("\n## Blockers\n\n- gpu0 p2p read: refused (next: -)\n"),
            "{md}"
        );
        assert!(!md.contains("## Errors"));
    }
}
