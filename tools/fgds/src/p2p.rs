//! Whether the block layer will let a storage device DMA to a GPU's BAR:
//! the kernel's own rule (`calc_map_type_and_dist()` in
//! drivers/pci/p2pdma.c, Linux 7.2), applied to sysfs.
//!
//! Two PCI functions below a common upstream bridge (one switch, one root
//! port) talk directly unless a port on the path redirects peer-to-peer
//! requests upstream (ACS P2P Request/Completion Redirect or Egress
//! Control). Otherwise the traffic goes through the root complex, which
//! the kernel allows only on AMD Zen CPUs and on host bridges of its allow
//! list; everywhere else O_DIRECT to the GPU's pages fails (EREMOTEIO).

use std::path::{Path, PathBuf};

/// What the kernel decides for a provider (GPU) and a client (NVMe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Direct, below the common upstream bridge `via`.
    BusAddr { via: String, distance: usize },
    /// Through the root complex, which the kernel allows (`why`).
    ThroughHostBridge { why: String, distance: usize },
    /// The kernel refuses: `why`, and what to do.
    NotSupported { why: String, next: String },
    /// Cannot be told from here (config space not readable: not root).
    Unknown { why: String },
}

/// The CPU, as `cpu_supports_p2pdma()` looks at it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpu {
    pub vendor: String,
    pub family: u32,
}

impl Cpu {
    /// The first CPU of `/proc/cpuinfo`.
    pub fn from_cpuinfo(text: &str) -> Cpu {
        let mut c = Cpu::default();
        for l in text.lines() {
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            match k.trim() {
                "vendor_id" if c.vendor.is_empty() => c.vendor = v.trim().to_string(),
                "cpu family" if c.family == 0 => c.family = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
        c
    }

    fn supports_p2pdma(&self) -> bool {
        self.vendor == "AuthenticAMD" && self.family >= 0x17
    }
}

const INTEL: u16 = 0x8086;
const GOOGLE: u16 = 0x1ae0;
/// `pci_p2pdma_whitelist[]`: vendor, device (None: any), needs the same host
/// bridge for both devices.
const ALLOW_LIST: &[(u16, Option<u16>, bool)] = &[
    (INTEL, Some(0x3c00), true),
    (INTEL, Some(0x3c01), true),
    (INTEL, Some(0x2f00), true),
    (INTEL, Some(0x2f01), true),
    (INTEL, Some(0x2030), false),
    (INTEL, Some(0x2031), false),
    (INTEL, Some(0x2032), false),
    (INTEL, Some(0x2033), false),
    (INTEL, Some(0x2020), false),
    (INTEL, Some(0x09a2), false),
    (INTEL, Some(0x0b25), false),
    (INTEL, Some(0x0cfe), false),
    (INTEL, Some(0x11fb), false),
    (INTEL, Some(0x1212), false),
    (INTEL, Some(0x1216), false),
    (INTEL, Some(0x4940), false),
    (INTEL, Some(0x4942), false),
    (INTEL, Some(0x4944), false),
    (INTEL, Some(0x4946), false),
    (INTEL, Some(0x4948), false),
    (GOOGLE, None, false),
];

fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The device and its upstream bridges (`pci_upstream_bridge()`), nearest
/// first: the PCI functions on its sysfs path.
fn chain(dev: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let mut cur = PathBuf::new();
    for c in dev.components() {
        cur.push(c);
        if is_bdf(&c.as_os_str().to_string_lossy()) {
            v.push(cur.clone());
        }
    }
    v.reverse();
    v
}

/// The host bridge directory (`pciDDDD:BB`) a device is below.
fn host_bridge(dev: &Path) -> Option<PathBuf> {
    let mut cur = PathBuf::new();
    for c in dev.components() {
        cur.push(c);
        if c.as_os_str().to_string_lossy().starts_with("pci") {
            return Some(cur);
        }
    }
    None
}

fn hex_file(p: &Path) -> Option<u32> {
    let s = std::fs::read_to_string(p).ok()?;
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// Whether a function redirects peer-to-peer traffic upstream
/// (`pci_bridge_has_acs_redir()`); None when its extended configuration
/// space cannot be read (sysfs gives it to root only).
fn acs_redirects(dev: &Path) -> Option<bool> {
    const EXT_CAP_ID_ACS: u32 = 0x0d;
    const ACS_CTRL: usize = 0x06;
    const REDIRECT: u16 = 0x0004 | 0x0008 | 0x0020; // RR | CR | EC
    let cfg = std::fs::read(dev.join("config")).ok()?;
    // sysfs gives 64 bytes to anyone but root; root gets all there is: 256
    // for a conventional PCI function (no extended space, so no ACS).
    if cfg.len() <= 64 {
        return None;
    }
    if cfg.len() < 0x104 {
        return Some(false);
    }
    let rd32 = |o: usize| -> Option<u32> {
        cfg.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut pos = 0x100usize;
    for _ in 0..(4096 / 8) {
        let h = rd32(pos)?;
        if h == 0 || h == u32::MAX {
            return Some(false);
        }
        if h & 0xffff == EXT_CAP_ID_ACS {
            let c = cfg.get(pos + ACS_CTRL..pos + ACS_CTRL + 2)?;
            return Some(u16::from_le_bytes([c[0], c[1]]) & REDIRECT != 0);
        }
        pos = (h >> 20) as usize & !3;
        if pos < 0x100 {
            return Some(false);
        }
    }
    Some(false)
}

/// `pci_host_bridge_dev()`: the first function on the host bridge's root
/// bus if it is 00.0 or a root port (a PCI bridge on the root bus).
fn host_bridge_dev(host: &Path) -> Option<PathBuf> {
    let mut devs: Vec<PathBuf> = std::fs::read_dir(host)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_bdf(&name(p)))
        .collect();
    devs.sort();
    let first = devs.into_iter().next()?;
    let is_root_port = hex_file(&first.join("class")).is_some_and(|c| c >> 8 == 0x0604);
    (name(&first).ends_with(":00.0") || is_root_port).then_some(first)
}

/// `__host_bridge_whitelist()`: Ok(vendor:device) when on the allow list.
fn allowed(host: &Path, same_host_bridge: bool) -> Result<String, String> {
    let Some(root) = host_bridge_dev(host) else {
        return Err(format!(
            "{} has no host bridge function to look up",
            name(host)
        ));
    };
    let vendor = hex_file(&root.join("vendor")).unwrap_or(0) as u16;
    let device = hex_file(&root.join("device")).unwrap_or(0) as u16;
    let id = format!("{vendor:04x}:{device:04x}");
    for (v, d, same) in ALLOW_LIST {
        if *v != vendor || d.is_some_and(|d| d != device) {
            continue;
        }
        if *same && !same_host_bridge {
            return Err(format!(
                "host bridge {id} is on the P2PDMA allow list only for devices below the same host bridge"
            ));
        }
        return Ok(id);
    }
    Err(format!(
        "host bridge {id} is not on the kernel's P2PDMA allow list"
    ))
}

/// The kernel's decision for DMA between `provider` and `client`, both
/// canonical sysfs paths of PCI functions (`/sys/devices/pci0000:00/...`).
pub fn decide(provider: &Path, client: &Path, cpu: &Cpu) -> Verdict {
    let ca = chain(provider);
    let cb = chain(client);
    let mut acs: Vec<String> = Vec::new();
    let mut unknown = false;
    let mut note = |p: &Path, acs: &mut Vec<String>| match acs_redirects(p) {
        Some(true) => acs.push(name(p)),
        Some(false) => {}
        None => unknown = true,
    };
    let mut common = None;
    for (da, a) in ca.iter().enumerate() {
        note(a, &mut acs);
        if let Some(db) = cb.iter().position(|b| b == a) {
            common = Some((a.clone(), da + db, db));
            break;
        }
    }
    let distance = match &common {
        Some((via, distance, db)) => {
            for b in &cb[..*db] {
                note(b, &mut acs);
            }
            if acs.is_empty() {
                if unknown {
                    return Verdict::Unknown {
                        why: format!(
                            "both are below {}, but whether a port on the path redirects peer-to-peer traffic (ACS) cannot be read without root",
                            name(via)
                        ),
                    };
                }
                return Verdict::BusAddr {
                    via: name(via),
                    distance: *distance,
                };
            }
            *distance
        }
        None => ca.len() + cb.len(),
    };
    if cpu.supports_p2pdma() {
        return Verdict::ThroughHostBridge {
            why: format!("AMD CPU family {:#x} (Zen or newer)", cpu.family),
            distance,
        };
    }
    let (ha, hb) = (host_bridge(provider), host_bridge(client));
    let r = match (&ha, &hb) {
        (Some(a), Some(b)) if a == b => allowed(a, true),
        (Some(a), Some(b)) => allowed(a, false).and_then(|x| allowed(b, false).map(|_| x)),
        _ => Err("the devices are not below a PCI host bridge".into()),
    };
    let path = if acs.is_empty() {
        "they share no upstream bridge (no common switch or root port)".to_string()
    } else {
        format!(
            "ACS redirects peer-to-peer traffic upstream at {}",
            acs.join(", ")
        )
    };
    match r {
        Ok(id) => Verdict::ThroughHostBridge {
            why: format!("{path}; host bridge {id} is on the P2PDMA allow list"),
            distance,
        },
        Err(e) => Verdict::NotSupported {
            why: format!("{path}, and {e}"),
            next: if acs.is_empty() {
                "put the NVMe and the GPU below one PCIe switch (or use a platform the kernel allows: AMD Zen, Intel Xeon Skylake-SP and later)".into()
            } else {
                format!(
                    "boot with pci=disable_acs_redir={} (or put both below a switch without ACS redirect)",
                    acs.join(";")
                )
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree(tempfile::TempDir);

    impl Tree {
        fn new() -> Tree {
            Tree(tempfile::tempdir().unwrap())
        }

        /// A function at `rel` (`pci0000:00/0000:00:01.0/...`).
        fn dev(
            &self,
            rel: &str,
            class: u32,
            vendor: u16,
            device: u16,
            acs: Option<u16>,
        ) -> PathBuf {
            let p = self.0.path().join(rel);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("class"), format!("{class:#08x}\n")).unwrap();
            std::fs::write(p.join("vendor"), format!("{vendor:#06x}\n")).unwrap();
            std::fs::write(p.join("device"), format!("{device:#06x}\n")).unwrap();
            let mut cfg = vec![0u8; 4096];
            if let Some(ctrl) = acs {
                cfg[0x100..0x104].copy_from_slice(&(0x0d_u32 | 1 << 16).to_le_bytes());
                cfg[0x106..0x108].copy_from_slice(&ctrl.to_le_bytes());
            }
            std::fs::write(p.join("config"), cfg).unwrap();
            p
        }

        /// An NVMe below root port 00:01.0 and a GPU below 00:02.0 (the
        /// ports themselves are the caller's): (NVMe, GPU).
        fn own_root_ports(&self) -> (PathBuf, PathBuf) {
            let nvme = self.dev(
                "pci0000:00/0000:00:01.0/0000:01:00.0",
                NVME,
                0x144d,
                0xa80a,
                None,
            );
            let gpu = self.dev(
                "pci0000:00/0000:00:02.0/0000:02:00.0",
                GPU,
                0x10de,
                0x2330,
                None,
            );
            (nvme, gpu)
        }
    }

    const BRIDGE: u32 = 0x060400;
    const NVME: u32 = 0x010802;
    const GPU: u32 = 0x030200;

    fn intel() -> Cpu {
        Cpu {
            vendor: "GenuineIntel".into(),
            family: 6,
        }
    }

    /// The test machine's layout: NVMe and GPU below one switch.
    fn switch(t: &Tree, acs_on_port: Option<u16>) -> (PathBuf, PathBuf) {
        t.dev("pci0000:00/0000:00:00.0", 0x060000, INTEL, 0x29c0, None);
        let up = "pci0000:00/0000:00:1c.0/0000:01:00.0";
        t.dev("pci0000:00/0000:00:1c.0", BRIDGE, INTEL, 0x7d40, None);
        t.dev(up, BRIDGE, 0x10b5, 0x8747, None);
        t.dev(
            &format!("{up}/0000:02:00.0"),
            BRIDGE,
            0x10b5,
            0x8747,
            acs_on_port,
        );
        t.dev(&format!("{up}/0000:02:01.0"), BRIDGE, 0x10b5, 0x8747, None);
        let nvme = t.dev(
            &format!("{up}/0000:02:00.0/0000:03:00.0"),
            NVME,
            0x1b36,
            0x0010,
            None,
        );
        let gpu = t.dev(
            &format!("{up}/0000:02:01.0/0000:04:00.0"),
            GPU,
            0x10de,
            0x2330,
            None,
        );
        (gpu, nvme)
    }

    #[test]
    fn below_one_switch_is_direct() {
        let t = Tree::new();
        let (gpu, nvme) = switch(&t, None);
        assert_eq!(
            decide(&gpu, &nvme, &intel()),
            Verdict::BusAddr {
                via: "0000:01:00.0".into(),
                distance: 4
            }
        );
    }

    #[test]
    fn acs_redirect_goes_through_the_host_bridge() {
        let t = Tree::new();
        let (gpu, nvme) = switch(&t, Some(0x0004));
        match decide(&gpu, &nvme, &intel()) {
            Verdict::NotSupported { why, next } => {
                assert!(why.contains("ACS") && why.contains("0000:02:00.0"), "{why}");
                assert!(
                    next.contains("pci=disable_acs_redir=0000:02:00.0"),
                    "{next}"
                );
            }
            v => panic!("{v:?}"),
        }
        // other ACS bits (source validation) do not redirect
        let t = Tree::new();
        let (gpu, nvme) = switch(&t, Some(0x0001));
        assert!(matches!(
            decide(&gpu, &nvme, &intel()),
            Verdict::BusAddr { .. }
        ));
    }

    /// Issue 19: an NVMe on a root port of its own and the GPU on another,
    /// on a host bridge that is not on the allow list: the kernel refuses,
    /// and so must fgds check (it said "P2P I/O can work").
    #[test]
    fn own_root_ports_need_an_allowed_host_bridge() {
        let t = Tree::new();
        t.dev("pci0000:00/0000:00:00.0", 0x060000, INTEL, 0x0d57, None);
        t.dev("pci0000:00/0000:00:01.0", BRIDGE, INTEL, 0x7d40, None);
        t.dev("pci0000:00/0000:00:02.0", BRIDGE, INTEL, 0x7d41, None);
        let (nvme, gpu) = t.own_root_ports();
        match decide(&gpu, &nvme, &intel()) {
            Verdict::NotSupported { why, next } => {
                assert!(why.contains("8086:0d57 is not on"), "{why}");
                assert!(next.contains("switch"), "{next}");
            }
            v => panic!("{v:?}"),
        }
        let zen = Cpu {
            vendor: "AuthenticAMD".into(),
            family: 0x19,
        };
        assert!(matches!(
            decide(&gpu, &nvme, &zen),
            Verdict::ThroughHostBridge { distance: 4, .. }
        ));
        // a Skylake-SP host bridge is on the allow list
        let t = Tree::new();
        t.dev("pci0000:00/0000:00:00.0", 0x060000, INTEL, 0x2020, None);
        let (nvme, gpu) = t.own_root_ports();
        t.dev("pci0000:00/0000:00:01.0", BRIDGE, INTEL, 0x2030, None);
        t.dev("pci0000:00/0000:00:02.0", BRIDGE, INTEL, 0x2031, None);
        match decide(&gpu, &nvme, &intel()) {
            Verdict::ThroughHostBridge { why, .. } => assert!(why.contains("8086:2020"), "{why}"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn conventional_function_has_no_acs() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("config"), [0u8; 256]).unwrap();
        assert_eq!(acs_redirects(d.path()), Some(false));
    }

    #[test]
    fn unreadable_config_space_is_unknown() {
        let t = Tree::new();
        let (gpu, nvme) = switch(&t, None);
        // what a user other than root reads: 64 bytes
        std::fs::write(gpu.join("config"), [0u8; 64]).unwrap();
        assert!(matches!(
            decide(&gpu, &nvme, &intel()),
            Verdict::Unknown { .. }
        ));
    }

    #[test]
    fn cpuinfo() {
        let c = Cpu::from_cpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n");
        assert!(c.supports_p2pdma());
        assert!(
            !Cpu::from_cpuinfo("vendor_id\t: GenuineIntel\ncpu family\t: 6\n").supports_p2pdma()
        );
    }
}
