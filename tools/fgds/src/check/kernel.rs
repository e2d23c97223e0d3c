//! The running kernel's configuration (the options fgds needs, the P2PDMA
//! core change) and the `FGDS_*` configuration in force.

use super::findings::{problem, ConfigReport, ConfigVar, KernelOption, KernelReport, Problem};
use super::pci::read_trim;
use std::path::Path;

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

pub(super) fn kernel_report(problems: &mut Vec<Problem>) -> KernelReport {
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

pub(super) fn config_report() -> ConfigReport {
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
}
