//! Mirror of the kernel UAPI in `include/uapi/linux/fgds.h`.
//!
//! Every structure is `#[repr(C)]` with the exact layout of the C header
//! (sizes are checked at compile time) and the ioctl numbers are computed the
//! way `_IOR`/`_IOW`/`_IOWR` compute them on Linux (asm-generic encoding).
//!
//! Written by hand rather than by bindgen, which this tree does not build
//! with (the library builds without clang or a kernel tree);
//! `tests/uapi.rs` compiles the header itself with the C compiler and
//! checks every size, offset, ioctl number and constant here against it.
//!
//! It also holds the host's page size (asked once) and the typed wrapper of
//! one system call the libc crate does not bind on every architecture:
//! `cachestat(2)` (Linux 6.5), which the bounce path asks how much of a
//! range the page cache holds.

/// Version of the interface this library was written against.
pub const FGDS_API_VERSION: u32 = 1;
/// `FGDS_IOCTL_QUERY_BUFFER` is implemented.
pub const FGDS_FEATURE_QUERY: u64 = 1 << 0;
/// Exporter revocation is honoured.
pub const FGDS_FEATURE_REVOKE: u64 = 1 << 1;
/// `fgds_buffer_info.state`: the exporter revoked the memory.
pub const FGDS_BUFFER_REVOKED: u32 = 1 << 0;
/// Ioctl "type" letter of the driver.
pub const FGDS_IOCTL_BASE: u32 = 0x88;

/// `struct fgds_version`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FgdsVersion {
    pub version: u32,
    pub pad: u32,
    pub features: u64,
    pub page_size: u64,
    pub max_size: u64,
}

/// `struct fgds_reg_buffer`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FgdsRegBuffer {
    pub dmabuf_fd: i32,
    pub flags: u32,
    pub offset: u64,
    pub size: u64,
    pub cookie: u64,
    pub reserved: [u64; 2],
}

/// `struct fgds_unreg_buffer`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FgdsUnregBuffer {
    pub cookie: u64,
    pub reserved: u64,
}

/// `struct fgds_buffer_info`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FgdsBufferInfo {
    pub cookie: u64,
    pub size: u64,
    pub bar_offset: u64,
    pub bar: u32,
    pub state: u32,
    pub reserved: [u64; 2],
}

const _: () = assert!(std::mem::size_of::<FgdsVersion>() == 32);
const _: () = assert!(std::mem::size_of::<FgdsRegBuffer>() == 48);
const _: () = assert!(std::mem::size_of::<FgdsUnregBuffer>() == 16);
const _: () = assert!(std::mem::size_of::<FgdsBufferInfo>() == 48);

const IOC_NRBITS: u32 = 8;
const IOC_TYPEBITS: u32 = 8;
const IOC_SIZEBITS: u32 = 14;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// `_IOC(dir, type, nr, size)` (asm-generic layout used by x86, arm64, riscv).
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    (dir << IOC_DIRSHIFT)
        | (ty << IOC_TYPESHIFT)
        | (nr << IOC_NRSHIFT)
        | ((size as u32) << IOC_SIZESHIFT)
}
/// `_IOR(type, nr, T)`.
pub const fn ior(ty: u32, nr: u32, size: usize) -> u32 {
    ioc(IOC_READ, ty, nr, size)
}
/// `_IOW(type, nr, T)`.
pub const fn iow(ty: u32, nr: u32, size: usize) -> u32 {
    ioc(IOC_WRITE, ty, nr, size)
}
/// `_IOWR(type, nr, T)`.
pub const fn iowr(ty: u32, nr: u32, size: usize) -> u32 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, size)
}

/// `FGDS_IOCTL_VERSION`.
pub const FGDS_IOCTL_VERSION: u32 = ior(FGDS_IOCTL_BASE, 0x00, std::mem::size_of::<FgdsVersion>());
/// `FGDS_IOCTL_REG_BUFFER`.
pub const FGDS_IOCTL_REG_BUFFER: u32 =
    iowr(FGDS_IOCTL_BASE, 0x01, std::mem::size_of::<FgdsRegBuffer>());
/// `FGDS_IOCTL_UNREG_BUFFER`.
pub const FGDS_IOCTL_UNREG_BUFFER: u32 = iow(
    FGDS_IOCTL_BASE,
    0x02,
    std::mem::size_of::<FgdsUnregBuffer>(),
);
/// `FGDS_IOCTL_QUERY_BUFFER`.
pub const FGDS_IOCTL_QUERY_BUFFER: u32 =
    iowr(FGDS_IOCTL_BASE, 0x03, std::mem::size_of::<FgdsBufferInfo>());

// ---------------------------------------------------------------- cachestat(2)

/// cachestat(2)'s number: 451 on every architecture (it came after the
/// system call tables were unified).
pub const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range` (`include/uapi/linux/mman.h`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CachestatRange {
    /// First byte.
    pub off: u64,
    /// Bytes (0: to the end of the file).
    pub len: u64,
}

/// `struct cachestat`: what cachestat(2) counts in a range, in pages.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cachestat {
    /// Pages in the page cache.
    pub nr_cache: u64,
    /// Of those, dirty.
    pub nr_dirty: u64,
    /// Of those, under writeback.
    pub nr_writeback: u64,
    /// Pages evicted.
    pub nr_evicted: u64,
    /// Pages evicted recently (would have stayed with more memory).
    pub nr_recently_evicted: u64,
}

const _: () = assert!(std::mem::size_of::<CachestatRange>() == 16);
const _: () = assert!(std::mem::size_of::<Cachestat>() == 40);

/// `cachestat(fd, {off, len}, &out, 0)`: the page cache's state of
/// `[off, off + len)` of the file open at `fd`. `ENOSYS` before Linux 6.5
/// (or under a seccomp filter that does not know it), `EOPNOTSUPP` on
/// hugetlbfs; the caller decides what to do without the answer.
pub fn cachestat(fd: std::os::fd::RawFd, off: u64, len: u64) -> std::io::Result<Cachestat> {
    let fd = u32::try_from(fd).map_err(|_| std::io::Error::from_raw_os_error(libc::EBADF))?;
    let range = CachestatRange { off, len };
    let mut out = Cachestat::default();
    // SAFETY: cachestat reads `range` and writes `out`, both live, correctly
    // laid out locals; flags must be 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd as libc::c_uint,
            &range as *const CachestatRange,
            &mut out as *mut Cachestat,
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(out)
}

/// The host's page size: the alignment of host allocations and of GPU
/// memory exports. Asked once: every request's alignment check needs it.
pub fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_linux_macros() {
        // Values computed by hand from _IOC: dir<<30 | size<<16 | 0x88<<8 | nr.
        assert_eq!(FGDS_IOCTL_VERSION, 0x8020_8800);
        assert_eq!(FGDS_IOCTL_REG_BUFFER, 0xc030_8801);
        assert_eq!(FGDS_IOCTL_UNREG_BUFFER, 0x4010_8802);
        assert_eq!(FGDS_IOCTL_QUERY_BUFFER, 0xc030_8803);
    }

    #[test]
    fn field_offsets() {
        assert_eq!(std::mem::offset_of!(FgdsRegBuffer, cookie), 24);
        assert_eq!(std::mem::offset_of!(FgdsBufferInfo, bar), 24);
        assert_eq!(std::mem::offset_of!(FgdsBufferInfo, state), 28);
        assert_eq!(std::mem::offset_of!(FgdsVersion, max_size), 24);
    }
}
