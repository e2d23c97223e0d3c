//! The probe: a real 4 KiB O_DIRECT read of the file into registered GPU
//! memory, the kernel's own answer to whether P2P DMA works, and the next
//! step when it fails.

use super::findings::{problem, Probe, Problem};
use crate::gpumem::{GpuMem, Spec};
use std::path::Path;

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

pub(super) fn probe_problem(p: &Probe) -> Problem {
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
