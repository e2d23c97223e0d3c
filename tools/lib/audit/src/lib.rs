//! `libfgds_audit.so`: the `LD_AUDIT` module of `fgds run`, so that every
//! way a program loads cuFile gets fgds's `libcufile.so`.
//!
//! The dynamic loader asks an audit module's `la_objsearch` about every
//! library it is about to look for, before it looks: a `DT_NEEDED` entry,
//! a `dlopen` by name (`libcufile.so.0`, `libcufile.so`, found through
//! `RPATH`, `LD_LIBRARY_PATH`, `RUNPATH` or the cache) and a `dlopen` by
//! absolute path (the `nvidia-cufile` wheel's copy, which KvikIO and torch
//! can find) alike. For a name whose last component is `libcufile.so` or
//! `libcufile.so.<digits and dots>` this module answers with the path in
//! `$FGDS_RUN_CUFILE` (set by `fgds run`); every other name passes
//! unchanged. The loader then finds the library already loaded by
//! `LD_PRELOAD` (the same file) and hands that one out, so NVIDIA's copy is
//! never mapped.
//!
//! Why an audit module rather than only `LD_PRELOAD` and `LD_LIBRARY_PATH`:
//! those reach names that the loader matches against a loaded library's
//! soname (`libcufile.so.0`) or looks up in the library path, but not a
//! `dlopen` by absolute path (which maps a second copy, NVIDIA's), nor a
//! search that an `RPATH` decides first. `la_objsearch` sees all of them,
//! is part of the loader's stable interface (glibc's `rtld-audit(7)`,
//! version 1 and later) and needs nothing but an environment variable.
//! glibc ignores `LD_AUDIT` (as `LD_PRELOAD`) for set-user-ID programs.

use std::ffi::{c_char, c_uint, CStr};

/// The variable `fgds run` sets to fgds's `libcufile.so`.
pub const VAR: &CStr = c"FGDS_RUN_CUFILE";

/// Whether `name` (a path or a bare file name) names a libcufile:
/// `libcufile.so` or `libcufile.so.` followed by digits and dots.
pub fn is_cufile(name: &[u8]) -> bool {
    let base = match name.iter().rposition(|&c| c == b'/') {
        Some(i) => &name[i + 1..],
        None => name,
    };
    match base.strip_prefix(b"libcufile.so") {
        Some([]) => true,
        Some([b'.', rest @ ..]) => {
            !rest.is_empty() && rest.iter().all(|c| c.is_ascii_digit() || *c == b'.')
        }
        _ => false,
    }
}

/// The loader's handshake: this module speaks the loader's own version of
/// the interface (it uses only `la_objsearch`, present in every version).
#[no_mangle]
pub extern "C" fn la_version(version: c_uint) -> c_uint {
    version
}

/// Called before the loader looks for `name`: fgds's `libcufile.so` for a
/// libcufile, `name` itself for anything else (or when `$FGDS_RUN_CUFILE`
/// is not set).
///
/// # Safety
///
/// `name` is a NUL-terminated string, as the loader passes.
#[no_mangle]
pub unsafe extern "C" fn la_objsearch(
    name: *const c_char,
    _cookie: *mut usize,
    _flag: c_uint,
) -> *mut c_char {
    if name.is_null() {
        return name.cast_mut();
    }
    // SAFETY: the loader passes a NUL-terminated string.
    let n = unsafe { CStr::from_ptr(name) };
    if !is_cufile(n.to_bytes()) {
        return name.cast_mut();
    }
    // SAFETY: getenv reads the environment; its string lives as long as the
    // process leaves the variable alone (the loader copies what it uses).
    let to = unsafe { libc::getenv(VAR.as_ptr()) };
    if to.is_null() || unsafe { *to } == 0 {
        name.cast_mut()
    } else {
        to
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_libcufile() {
        for n in [
            "libcufile.so",
            "libcufile.so.0",
            "libcufile.so.1.17.0",
            "/usr/local/cuda/lib64/libcufile.so.0",
            "/venv/lib/python3.12/site-packages/nvidia/cufile/lib/libcufile.so.0",
        ] {
            assert!(is_cufile(n.as_bytes()), "{n}");
        }
        for n in [
            "libcufile_rdma.so.1",
            "libcufile.so.",
            "libcufile.so.0x",
            "libcufile.so.bak",
            "libcufile.a",
            "/lib/libcufile.so/libc.so.6",
            "libcufile",
            "mylibcufile.so",
            "libc.so.6",
            "",
        ] {
            assert!(!is_cufile(n.as_bytes()), "{n}");
        }
    }
}
