//! The C ABI reports what the Rust and Python APIs do: whether a buffer is
//! P2P, why it is not, and why a call fell back.

mod common;
use common::*;
use fgds::capi::*;
use std::ffi::{c_char, c_void, CStr, CString};

fn reason(f: impl Fn(*mut c_char, usize) -> isize) -> (isize, String) {
    let mut b = [0 as c_char; 256];
    let n = f(b.as_mut_ptr(), b.len());
    // SAFETY: the function NUL-terminates what it wrote.
    let s = unsafe { CStr::from_ptr(b.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    (n, s)
}

#[test]
fn buffer_p2p_and_fallback_reason() {
    let d = tmpdir();
    let data = random_bytes(1 << 20, 9);
    let p = file_with(&d, "f", &data);
    let cp = CString::new(p.to_str().unwrap()).unwrap();
    let mut mem = vec![0u8; (1 << 20) + 4096];
    let base = mem.as_mut_ptr() as *mut c_void;

    assert_eq!(fgds_buf_is_p2p(base), -libc::EFAULT);
    // SAFETY: mem outlives the registration.
    assert_eq!(unsafe { fgds_buf_register_host(base, mem.len(), 0) }, 0);
    assert_eq!(fgds_buf_is_p2p(base), 0, "host memory is not P2P");
    // SAFETY: b is 256 writable bytes.
    let (n, s) = reason(|b, l| unsafe { fgds_buf_p2p_reason(base, b, l) });
    assert_eq!((n, s.as_str()), (0, ""), "host memory has no reason");

    // a descriptor without O_DIRECT: every byte bounces, and it says why
    let cfg = fgds_config {
        size: std::mem::size_of::<fgds_config>() as u32,
        chunk_size: 0,
        queue_depth: 0,
        flags: FGDS_CONFIG_NO_DIRECT,
        reserved: 0,
    };
    // SAFETY: a NUL-terminated path and a valid config.
    let h = unsafe { fgds_open(cp.as_ptr(), libc::O_RDONLY, 0, &cfg) };
    assert!(h > 0);
    // SAFETY: as above.
    let (n, _) = reason(|b, l| unsafe { fgds_last_fallback_reason(h, b, l) });
    assert_eq!(n, 0, "no fallback yet");
    assert_eq!(fgds_read(h, base, 1 << 20, 0, 0), 1 << 20);
    let mut st = std::mem::MaybeUninit::<fgds_stats>::uninit();
    // SAFETY: st is writable.
    assert_eq!(unsafe { fgds_get_stats(h, st.as_mut_ptr()) }, 0);
    // SAFETY: initialised by fgds_get_stats.
    let st = unsafe { st.assume_init() };
    assert!(st.fallbacks > 0 && st.bounce_bytes == 1 << 20);
    // SAFETY: as above.
    let (n, s) = reason(|b, l| unsafe { fgds_last_fallback_reason(h, b, l) });
    assert!(n > 0 && s.len() == n as usize, "{n} {s:?}");
    // truncated as snprintf does: the full length back, len - 1 bytes kept
    let mut small = [0x55 as c_char; 8];
    // SAFETY: small is 8 writable bytes.
    let m = unsafe { fgds_last_fallback_reason(h, small.as_mut_ptr(), small.len()) };
    assert_eq!(m, n);
    // SAFETY: NUL-terminated at index 7.
    let t = unsafe { CStr::from_ptr(small.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(t, s[..7]);
    // SAFETY: NULL with length 0 only asks for the length.
    assert_eq!(
        unsafe { fgds_last_fallback_reason(h, std::ptr::null_mut(), 0) },
        n
    );
    // SAFETY: as above.
    let (n, _) = reason(|b, l| unsafe { fgds_last_fallback_reason(9999, b, l) });
    assert_eq!(n, -(libc::EBADF as isize));

    assert_eq!(fgds_close(h), 0);
    assert_eq!(fgds_buf_deregister(base), 0);
}

/// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` per GPU where libcuda is
/// present (fgds check shows it); without libcuda, a clear error.
#[test]
fn cuda_dmabuf_support_or_why_not() {
    match fgds::gpu::cuda_dmabuf_support() {
        Ok(devs) => {
            for (pci, _) in &devs {
                assert_eq!(pci.len(), 12, "{pci}");
                assert_eq!(pci, &pci.to_lowercase());
            }
        }
        Err(e) => {
            assert_eq!(e.errno(), libc::ENOSYS, "{e}");
            assert!(e.to_string().contains("CUDA"), "{e}");
        }
    }
}
