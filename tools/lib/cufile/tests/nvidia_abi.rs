//! fgds's `include/cufile.h` against NVIDIA's `cufile.h` of each cuFile
//! release on PyPI (the `nvidia-cufile` wheels ship it;
//! `tests/nvidia_headers.py` downloads it into `target/`, since NVIDIA's
//! header may not be committed). For every version:
//!
//! - every function NVIDIA's header declares is declared by fgds's, and
//!   fgds's prototype, compiled after NVIDIA's header, does not conflict
//!   with NVIDIA's (the C compiler checks return and argument types);
//! - every enumerator and integer `#define` NVIDIA's header has, fgds's has
//!   with the same value;
//! - every struct NVIDIA's header defines, fgds's defines with the same
//!   size, and every member (nested ones by their path) at the same offset
//!   with the same size, the statistics with the layout of that version
//!   (`-DFGDS_CUFILE_VERSION=1000 * major + 10 * minor`);
//! - and the library exports every function NVIDIA's header declares.
//!
//! Values are what gcc computes (`sizeof`, `offsetof`, the enumerators) in
//! two programs, one built with each header: nothing is read from the text
//! but names.
//!
//! `FGDS_NVIDIA_CUFILE_HEADERS=DIR` takes the headers from DIR/<version>/
//! instead (a machine without PyPI); a version missing there is an error.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The newest release of each cuFile minor version on PyPI's `nvidia-cufile`.
const VERSIONS: &[&str] = &[
    "1.15.1.6",
    "1.16.1.26",
    "1.17.1.22",
    "1.18.1.6",
    "1.19.1.55",
    "1.20.0.107",
];

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// DIR/<version>/cufile.h for every version, downloaded once.
fn headers() -> PathBuf {
    if let Some(d) = std::env::var_os("FGDS_NVIDIA_CUFILE_HEADERS") {
        return PathBuf::from(d);
    }
    let dest = manifest().join("../../target/nvidia-cufile-headers");
    let out = Command::new("python3")
        .arg(manifest().join("tests/nvidia_headers.py"))
        .arg(&dest)
        .args(VERSIONS)
        .output()
        .expect("python3 (for pip download of NVIDIA's cufile.h)");
    common::assert_success(
        &out,
        "downloading NVIDIA's cufile.h failed (no PyPI? set FGDS_NVIDIA_CUFILE_HEADERS=DIR \
         with DIR/<version>/cufile.h)",
    );
    dest
}

/// The text without comments, with continued lines joined.
fn strip(src: &str) -> String {
    let src = src.replace("\\\n", " ");
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            i = src[i + 2..].find("*/").map_or(b.len(), |j| i + 2 + j + 2);
            out.push(' ');
        } else if b[i..].starts_with(b"//") {
            i = src[i..].find('\n').map_or(b.len(), |j| i + j);
        } else if b[i] == b'"' {
            let end = src[i + 1..].find('"').map_or(b.len(), |j| i + 1 + j + 1);
            out.push_str(&src[i..end]);
            i = end;
        } else {
            let c = src[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The text without preprocessor lines.
fn code(stripped: &str) -> String {
    stripped
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str, i: usize) -> &str {
    let end = s[i..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(s.len(), |j| i + j);
    &s[i..end]
}

/// Identifiers (whole words) of `s`, with their positions.
fn idents(s: &str) -> Vec<(usize, &str)> {
    let b = s.as_bytes();
    let mut v = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if (b[i].is_ascii_alphabetic() || b[i] == b'_')
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let id = ident_at(s, i);
            v.push((i, id));
            i += id.len();
        } else {
            i += 1;
        }
    }
    v
}

/// Functions a header declares: `cuFile...(` and `cufile...(` outside the
/// preprocessor.
fn functions(stripped: &str) -> BTreeSet<String> {
    let c = code(stripped);
    idents(&c)
        .into_iter()
        .filter(|(i, id)| {
            (id.starts_with("cuFile") || id.starts_with("cufile"))
                && c[i + id.len()..].trim_start().starts_with('(')
        })
        .map(|(_, id)| id.to_string())
        .collect()
}

/// The matching `}` of the `{` at `open`.
fn close_of(s: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces");
}

/// Splits at `sep` outside braces, brackets and parentheses.
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut v = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                v.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    v.push(&s[start..]);
    v
}

/// The name a declarator declares: `x`, `x[4]`, `*x`, `(*x)(void *)`.
fn declarator_name(d: &str) -> Option<String> {
    let d = d.split(':').next()?.trim();
    if let Some(p) = d.find("(*") {
        let rest = &d[p + 2..];
        return Some(ident_at(rest.trim_start(), 0).to_string()).filter(|s| !s.is_empty());
    }
    let d = d.split('[').next()?.trim_end();
    idents(d).last().map(|(_, id)| id.to_string())
}

/// Member paths of a struct or union body.
fn members(body: &str, prefix: &str, out: &mut Vec<String>) {
    for decl in split_top(body, ';') {
        let decl = decl.trim();
        if decl.is_empty() {
            continue;
        }
        if let Some(open) = decl.find('{') {
            let close = close_of(decl, open);
            let after = decl[close + 1..].trim();
            let inner = &decl[open + 1..close];
            if after.is_empty() {
                members(inner, prefix, out);
            } else {
                for d in split_top(after, ',') {
                    if let Some(n) = declarator_name(d) {
                        let p = format!("{prefix}{n}");
                        out.push(p.clone());
                        members(inner, &format!("{p}."), out);
                    }
                }
            }
            continue;
        }
        for d in split_top(decl, ',') {
            if let Some(n) = declarator_name(d) {
                out.push(format!("{prefix}{n}"));
            }
        }
    }
}

/// What a header defines: struct (typedef name or `struct tag`) -> member
/// paths; enumerators; integer macros.
#[derive(Default)]
struct Defs {
    structs: BTreeMap<String, Vec<String>>,
    enumerators: BTreeSet<String>,
    macros: BTreeSet<String>,
}

fn defs(stripped: &str) -> Defs {
    let mut d = Defs::default();
    for l in stripped.lines() {
        let t = l.trim_start();
        let Some(rest) = t.strip_prefix('#') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix("define") else {
            continue;
        };
        let rest = rest.trim_start();
        let name = ident_at(rest, 0);
        let value = rest[name.len()..].trim();
        // object-like, integer-valued macros of cuFile's names
        if !name.is_empty()
            && !rest[name.len()..].starts_with('(')
            && !value.is_empty()
            && !value.contains('"')
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && (name.starts_with("CU_FILE") || name.starts_with("CUFILE"))
            && name != "CUFILEOP_STATUS_ENTRIES"
        {
            d.macros.insert(name.to_string());
        }
        // the X-macro of CUfileOpError: CUFILE_OP(code, NAME, text)
        if name == "CUFILEOP_STATUS_ENTRIES" {
            for (i, id) in idents(value) {
                if id == "CUFILE_OP" {
                    if let Some(n) = split_top(&value[i + id.len()..], ',').get(1) {
                        d.enumerators.insert(n.trim().to_string());
                    }
                }
            }
        }
    }
    let c = code(stripped);
    for (i, id) in idents(&c) {
        if id != "struct" && id != "enum" {
            continue;
        }
        let rest = &c[i + id.len()..];
        let Some(open) = rest.find('{') else { continue };
        let head = rest[..open].trim();
        if !head
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        {
            continue; // a use (struct x *p), not a definition
        }
        let close = close_of(rest, open);
        let body = &rest[open + 1..close];
        if id == "enum" {
            for item in split_top(body, ',') {
                let n = ident_at(item.trim(), 0);
                if !n.is_empty() && n != "CUFILEOP_STATUS_ENTRIES" {
                    d.enumerators.insert(n.to_string());
                }
            }
            continue;
        }
        // nested definitions are members of their parent
        let before = c[..i].trim_end();
        if !before.is_empty() && !before.ends_with(';') && !before.ends_with('}') {
            if !before.ends_with("typedef") {
                continue;
            }
            let outer_open = before.rfind('{');
            let outer_close = before.rfind('}');
            if outer_open.is_some() && outer_open > outer_close {
                continue;
            }
        }
        let after = &rest[close + 1..];
        let tail = after[..after.find(';').unwrap_or(after.len())].trim();
        let name = if !tail.is_empty() && before.ends_with("typedef") {
            tail.to_string()
        } else if !head.is_empty() {
            format!("struct {head}")
        } else {
            continue;
        };
        let mut m = Vec::new();
        members(body, "", &mut m);
        d.structs.insert(name, m);
    }
    d
}

/// Runs a C program that prints one line per check, built with a header.
fn values(
    dir: &Path,
    name: &str,
    include: &str,
    cflags: &[&str],
    checks: &[String],
) -> Vec<String> {
    let src = dir.join(format!("{name}.c"));
    let mut c = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"{include}\"\nint main(void)\n{{\n"
    );
    for k in checks {
        c.push_str(&format!(
            "\tprintf(\"%s %lld\\n\", \"{k}\", (long long)({k}));\n"
        ));
    }
    c.push_str("\treturn 0;\n}\n");
    std::fs::write(&src, c).unwrap();
    let bin = dir.join(name);
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-w", "-I"])
        .arg(dir.join("stub"))
        .args(cflags)
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .expect("gcc (apt-get install gcc)");
    common::assert_success(&out, &format!("{name}: gcc failed"));
    let out = Command::new(&bin).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// The library's exported functions.
fn exported() -> BTreeSet<String> {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let lib = [deps.join("libcufile.so"), deps.join("../libcufile.so")]
        .into_iter()
        .find(|p| p.exists())
        .expect("libcufile.so built with the tests");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(String::from))
        .collect()
}

#[test]
fn fgds_cufile_h_matches_nvidias_of_every_version() {
    let hdir = headers();
    let ours_path = manifest().join("include/cufile.h");
    let ours_s = strip(&std::fs::read_to_string(&ours_path).unwrap());
    let ours_fns = functions(&ours_s);
    let ours = defs(&ours_s);
    let lib = exported();
    let ours_code = code(&ours_s);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("stub")).unwrap();
    // cuda.h as NVIDIA's header needs it: CUresult and CUstream only.
    std::fs::write(
        dir.path().join("stub/cuda.h"),
        "#ifndef __cuda_cuda_h__\n#define __cuda_cuda_h__\n\
         typedef enum cudaError_enum { CUDA_SUCCESS = 0 } CUresult;\n\
         typedef struct CUstream_st *CUstream;\n#endif\n",
    )
    .unwrap();
    let mut problems = Vec::new();
    for v in VERSIONS {
        let nv_path = hdir.join(v).join("cufile.h");
        let nv_s = strip(
            &std::fs::read_to_string(&nv_path)
                .unwrap_or_else(|e| panic!("{}: {e}", nv_path.display())),
        );
        let mut parts = v.split('.');
        let (maj, min): (i32, i32) = (
            parts.next().unwrap().parse().unwrap(),
            parts.next().unwrap().parse().unwrap(),
        );
        let version_flag = format!("-DFGDS_CUFILE_VERSION={}", 1000 * maj + 10 * min);
        // Functions: declared, exported, and with NVIDIA's types.
        let fns = functions(&nv_s);
        for f in &fns {
            if !ours_fns.contains(f) {
                problems.push(format!("{v}: function {f} not declared by fgds's cufile.h"));
            }
            if f != "cufileop_status_error" && !lib.contains(f) {
                problems.push(format!("{v}: function {f} not exported by libcufile.so"));
            }
        }
        // fgds's prototypes after NVIDIA's header: a conflict is an error.
        let protos: Vec<&str> = split_top(&ours_code, ';')
            .into_iter()
            .filter(|d| {
                let d = d.trim();
                !d.contains('{')
                    && !d.starts_with("typedef")
                    && functions(d).iter().any(|f| fns.contains(f))
            })
            .collect();
        let src = dir.path().join(format!("protos-{v}.c"));
        std::fs::write(
            &src,
            format!(
                "#include \"{}\"\n{};\n",
                nv_path.display(),
                protos.join(";\n")
            ),
        )
        .unwrap();
        let out = Command::new("gcc")
            .args(["-std=gnu11", "-fsyntax-only", "-I"])
            .arg(dir.path().join("stub"))
            .arg(&src)
            .output()
            .expect("gcc");
        if !out.status.success() {
            problems.push(format!(
                "{v}: fgds's prototypes conflict with NVIDIA's:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // Enumerators, macros, structs: names, then values.
        let nv = defs(&nv_s);
        let mut checks = Vec::new();
        for e in nv.enumerators.iter().chain(&nv.macros) {
            if ours.enumerators.contains(e) || ours.macros.contains(e) {
                checks.push(e.clone());
            } else {
                problems.push(format!("{v}: {e} not defined by fgds's cufile.h"));
            }
        }
        for (s, fields) in &nv.structs {
            let Some(our_fields) = ours.structs.get(s) else {
                problems.push(format!("{v}: {s} not defined by fgds's cufile.h"));
                continue;
            };
            checks.push(format!("sizeof({s})"));
            for f in fields {
                if our_fields.contains(f) {
                    checks.push(format!("offsetof({s}, {f})"));
                    checks.push(format!("sizeof((({s} *)0)->{f})"));
                } else {
                    problems.push(format!("{v}: {s} has no member {f} in fgds's cufile.h"));
                }
            }
        }
        assert!(
            checks.len() > 300,
            "{v}: only {} checks: parsing failed",
            checks.len()
        );
        let theirs = values(
            dir.path(),
            &format!("nvidia-{v}"),
            nv_path.to_str().unwrap(),
            &[],
            &checks,
        );
        let mine = values(
            dir.path(),
            &format!("fgds-{v}"),
            ours_path.to_str().unwrap(),
            &[&version_flag],
            &checks,
        );
        for (t, m) in theirs.iter().zip(&mine) {
            if t != m {
                problems.push(format!("{v}: NVIDIA's {t}, fgds's {m}"));
            }
        }
        eprintln!(
            "{v}: {} functions, {} values compared",
            fns.len(),
            checks.len()
        );
    }
    assert!(
        problems.is_empty(),
        "{} differences:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
