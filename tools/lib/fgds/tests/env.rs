//! FGDS_* environment configuration, read once per process: this test
//! binary sets the variables before the library first reads them (one test
//! reads them, so that no other reads them first).

use fgds::capi::*;
use fgds::Config;

mod common;
use common::*;

#[test]
fn environment_sets_the_defaults() {
    // SAFETY: no other thread of this process runs yet (one test).
    unsafe {
        std::env::set_var("FGDS_STRICT", "1");
        std::env::set_var("FGDS_CHUNK_SIZE", "64K");
        std::env::set_var("FGDS_QUEUE_DEPTH", "3");
        std::env::set_var("FGDS_IO_URING", "0");
        std::env::set_var("FGDS_THREADS", "2");
    }
    let c = Config::default();
    assert_eq!((c.chunk_size, c.queue_depth), (64 << 10, 3));
    assert!(c.strict && !c.use_io_uring && !c.disable_direct);
    assert_eq!(fgds::env::env().threads, 2);
    // explicit fields win
    let mine = Config {
        strict: false,
        ..Config::default()
    };
    assert!(!mine.strict);

    // The C ABI with a NULL config and with zero fields gets the same.
    let d = tmpdir();
    let data = random_bytes(3 * 4096, 5);
    let p = file_with(&d, "f", &data);
    let cp = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let zero = fgds_config {
        size: std::mem::size_of::<fgds_config>() as u32,
        chunk_size: 0,
        queue_depth: 0,
        flags: 0,
        reserved: 0,
    };
    for cfg in [std::ptr::null(), &zero as *const fgds_config] {
        let h = unsafe { fgds_open(cp.as_ptr(), libc::O_RDONLY, 0, cfg) };
        assert!(h >= 0);
        let mut mem = vec![0u8; 4 * 4096];
        let base = mem.as_mut_ptr() as *mut std::ffi::c_void;
        assert_eq!(unsafe { fgds_buf_register_host(base, mem.len(), 0) }, 0);
        // strict: a misaligned file offset is refused, not bounced
        assert_eq!(fgds_read(h, base, 4096, 1, 0), -(libc::EINVAL as isize));
        assert_eq!(fgds_buf_deregister(base), 0);
        assert_eq!(fgds_close(h), 0);
    }
}

/// The README's FGDS_* table is `fgds::env::VARS`, row for row.
#[test]
fn readme_prints_the_environment() {
    let want: Vec<String> = fgds::env::VARS
        .iter()
        .map(|v| format!("| `{}` | {} | {} |", v.name, v.default, v.meaning))
        .collect();
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find("## Configuration by environment")
        .expect("README has ## Configuration by environment");
    let got: Vec<&str> = readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| variable"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(got, want, "README.md's FGDS_* table differs from env::VARS");
}
