//! One table of error text (`fgds::error::ERRNOS`): the C ABI gives it,
//! every error of the library has an entry, every errno the driver
//! documents is in it with the driver's meaning, and the README prints it.

use fgds::capi::{fgds_strerror, fgds_strhint};
use fgds::error::{errno_info, hint, strerror, Error, ERRNOS};
use std::ffi::CStr;

fn c(p: *const std::ffi::c_char) -> String {
    // SAFETY: the C ABI returns static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[test]
fn c_abi_gives_the_table() {
    let mut seen = std::collections::HashSet::new();
    for e in ERRNOS {
        assert!(seen.insert(e.errno), "{} twice", e.name);
        assert!(!e.meaning.is_empty() && !e.hint.is_empty(), "{}", e.name);
        for code in [e.errno, -e.errno] {
            assert_eq!(c(fgds_strerror(code)), e.meaning, "{}", e.name);
            assert_eq!(c(fgds_strhint(code)), e.hint, "{}", e.name);
            assert_eq!(strerror(code), e.meaning);
            assert_eq!(hint(code), e.hint);
        }
    }
    assert_eq!(c(fgds_strerror(0)), "success");
    assert_eq!(c(fgds_strerror(-4242)), "unknown error");
}

#[test]
fn every_library_error_has_an_entry() {
    let io = |errno| Error::Io {
        op: "x".into(),
        source: std::io::Error::from_raw_os_error(errno),
    };
    let all = [
        io(libc::ENOENT),
        Error::InvalidArgument("x".into()),
        Error::OutOfBounds {
            what: "x",
            offset: 0,
            size: 1,
            len: 0,
        },
        Error::Misaligned {
            what: "x",
            value: 1,
            align: 4096,
        },
        Error::TooManySegments {
            count: 2000,
            max: 1024,
        },
        Error::NotRegistered { addr: 1, size: 1 },
        Error::AlreadyRegistered { addr: 1 },
        Error::NoDevice("x".into()),
        Error::ApiVersion {
            found: 2,
            expected: 1,
        },
        Error::P2pUnavailable { reason: "x".into() },
        Error::BatchFull {
            capacity: 1,
            in_flight: 1,
            requested: 1,
        },
        Error::Canceled,
        Error::Timeout,
        Error::RuntimeUnavailable {
            runtime: "CUDA",
            reason: "x".into(),
        },
        Error::Runtime {
            call: "cuInit",
            code: 1,
        },
        Error::BadHandle("x".into()),
    ];
    for e in &all {
        let info = errno_info(e.errno()).unwrap_or_else(|| panic!("no entry for {e:?}"));
        assert_eq!(e.hint(), info.hint);
    }
}

fn repo_file(rel: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The errnos of the driver's "Errors" table
/// (Documentation/misc-devices/fgds.rst) and of its I/O paragraph.
fn driver_errnos() -> Vec<String> {
    let doc = repo_file("../../../Documentation/misc-devices/fgds.rst");
    let start = doc.find("\nErrors\n------\n").expect("an Errors section");
    let sec = &doc[start..];
    let end = sec.find("\nLifetime rules").unwrap_or(sec.len());
    let is_errno = |w: &str| {
        w.len() > 2
            && w.starts_with('E')
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    };
    let mut v: Vec<String> = Vec::new();
    let mut add = |w: &str| {
        if is_errno(w) && !v.iter().any(|x| x == w) {
            v.push(w.to_string());
        }
    };
    for line in sec[..end].lines() {
        // the table's first column
        if let Some(w) = line.split_whitespace().next() {
            add(w);
        }
        // ``ERRNO`` in the text
        for (i, part) in line.split("``").enumerate() {
            if i % 2 == 1 {
                add(part);
            }
        }
    }
    v
}

/// Issue 19: the library said EBUSY is "pages already registered" and the
/// bindings "wait for the I/O in flight". Every errno the driver documents
/// has one entry, and the entry says what the driver means by it.
#[test]
fn driver_errnos_are_in_the_table() {
    let names = driver_errnos();
    assert!(names.len() >= 12, "{names:?}");
    for n in &names {
        assert!(
            ERRNOS.iter().any(|e| e.name == *n),
            "{n} (Documentation/misc-devices/fgds.rst) has no entry in ERRNOS"
        );
    }
    let meaning = |n: &str| {
        ERRNOS
            .iter()
            .find(|e| e.name == n)
            .map(|e| e.meaning)
            .unwrap_or_default()
    };
    assert!(meaning("EBUSY").contains("already registered"));
    assert!(meaning("EXDEV").contains("BAR"));
    assert!(meaning("EREMOTEIO").contains("cannot DMA"));
    assert!(meaning("ENXIO").contains("cookie"));
}

/// The README's "Errno meanings" table is ERRNOS, row for row.
#[test]
fn readme_prints_the_table() {
    let want: Vec<String> = ERRNOS
        .iter()
        .map(|e| format!("| `{}` | {} | {} |", e.name, e.meaning, e.hint))
        .collect();
    let readme = repo_file("README.md");
    let start = readme
        .find("### Errno meanings")
        .expect("README has ### Errno meanings");
    let got: Vec<&str> = readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| errno"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(
        got,
        want,
        "README.md's errno table differs from ERRNOS; it should read:\n{}",
        want.join("\n")
    );
}
