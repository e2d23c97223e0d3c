//! `include/fgds.h` is written by hand (cbindgen is not among the crates
//! this tree builds with offline, and the header's comments are its C
//! documentation); this test holds it to `src/capi.rs`: the same functions,
//! and, compiled by the system's C compiler, the same struct sizes, field
//! offsets and constants.

use fgds::capi::*;
use std::collections::BTreeSet;
use std::mem::{offset_of, size_of};
use std::path::Path;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    let p = Path::new(DIR).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn idents_after(text: &str, marker: &str) -> BTreeSet<String> {
    text.match_indices(marker)
        .map(|(i, _)| {
            text[i + marker.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .collect()
}

#[test]
fn header_declares_every_function() {
    let rust: BTreeSet<String> = idents_after(&read("src/capi.rs"), "extern \"C\" fn ")
        .into_iter()
        .filter(|n| n.starts_with("fgds_"))
        .collect();
    // C declarations: `fgds_name(` outside comments and macros
    let h = read("include/fgds.h");
    let c: BTreeSet<String> = h
        .lines()
        .map(str::trim_start)
        .filter(|l| !l.starts_with('*') && !l.starts_with("/*") && !l.starts_with('#'))
        .flat_map(|l| {
            idents_after(l, "fgds_")
                .into_iter()
                .filter(|n| l.contains(&format!("fgds_{n}(")))
                .map(|n| format!("fgds_{n}"))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(rust.len() >= 20, "{rust:?}");
    assert_eq!(
        rust, c,
        "src/capi.rs and include/fgds.h declare different functions"
    );
}

macro_rules! layout {
    ($($t:ident { $($f:ident),* })*) => {{
        let mut c = String::new();
        let mut want = String::new();
        $(
            c += &format!("\tprintf(\"{} %zu\\n\", sizeof(struct {}));\n", stringify!($t), stringify!($t));
            want += &format!("{} {}\n", stringify!($t), size_of::<$t>());
            $(
                c += &format!(
                    "\tprintf(\"{}.{} %zu\\n\", offsetof(struct {}, {}));\n",
                    stringify!($t), stringify!($f), stringify!($t), stringify!($f)
                );
                want += &format!("{}.{} {}\n", stringify!($t), stringify!($f), offset_of!($t, $f));
            )*
        )*
        (c, want)
    }};
}

macro_rules! consts {
    ($($n:ident),*) => {{
        let mut c = String::new();
        let mut want = String::new();
        $(
            c += &format!("\tprintf(\"{} %lld\\n\", (long long){});\n", stringify!($n), stringify!($n));
            want += &format!("{} {}\n", stringify!($n), $n as i64);
        )*
        (c, want)
    }};
}

#[test]
fn header_layout_matches() {
    let (body, mut want) = layout! {
        fgds_config { chunk_size, queue_depth, flags }
        fgds_io_segment { base, offset, size }
        fgds_stats { direct_bytes, bounce_bytes, fallbacks, direct_ops, bounce_ops, read_bytes, write_bytes, errors }
        fgds_io_params { handle, opcode, cookie, file_offset, base, buf_offset, size, segments, nsegments }
        fgds_io_event { cookie, status, pad, result }
    };
    use fgds::{FGDS_BATCH_IOV_MAX, FGDS_IOV_MAX};
    let (cbody, cwant) = consts!(
        FGDS_CONFIG_STRICT,
        FGDS_CONFIG_NO_IO_URING,
        FGDS_CONFIG_NO_DIRECT,
        FGDS_OP_READ,
        FGDS_OP_WRITE,
        FGDS_IOV_MAX,
        FGDS_BATCH_IOV_MAX
    );
    want += &cwant;
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("layout.c");
    std::fs::write(
        &src,
        format!(
            "#include <stddef.h>\n#include <stdio.h>\n#include \"fgds.h\"\nint main(void)\n{{\n{body}{cbody}\treturn 0;\n}}\n"
        ),
    )
    .unwrap();
    let exe = d.path().join("layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(&cc)
        .arg(format!("-I{DIR}/include"))
        .arg("-Wall")
        .arg("-Werror")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output();
    let built = match built {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("header_layout_matches: skipped: no C compiler ({cc}); set CC");
            return;
        }
        r => r.unwrap(),
    };
    assert!(
        built.status.success(),
        "{cc} failed on fgds.h:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = std::process::Command::new(&exe).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
}
