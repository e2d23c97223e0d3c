//! The quick starts of the top README.md cannot rot: each block is a file
//! of the tree that a test runs, and this test holds the README to them.
//! Rust: `tests/quickstart.rs` (a test program, `harness = false`). Python:
//! the first run of `tools/python/README.md`, which `tests/test_readme.py`
//! runs. The others name what runs them (`make demo`,
//! `tools/python/tests/test_install.py`).

use std::path::Path;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    let p = Path::new(DIR).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The fenced blocks of language `lang` in `text` after the heading `from`.
fn blocks(text: &str, from: &str, lang: &str) -> Vec<String> {
    let start = text
        .find(from)
        .unwrap_or_else(|| panic!("no {from:?} section"));
    let sec = &text[start..];
    let end = sec[from.len()..]
        .find("\n## ")
        .map_or(sec.len(), |i| i + from.len());
    let mut out = Vec::new();
    let mut rest = &sec[..end];
    let open = format!("```{lang}\n");
    while let Some(i) = rest.find(&open) {
        let body = &rest[i + open.len()..];
        let j = body.find("```").expect("closed block");
        out.push(body[..j].to_string());
        rest = &body[j..];
    }
    out
}

#[test]
fn rust_quick_start_is_the_test_program() {
    let readme = read("../../../README.md");
    let rust = blocks(&readme, "## Quick start", "rust");
    assert_eq!(rust.len(), 1, "one Rust block in README.md's Quick start");
    assert!(
        read("tests/quickstart.rs").contains(&rust[0]),
        "README.md's Rust quick start differs from tests/quickstart.rs"
    );
}

#[test]
fn python_quick_start_is_the_tested_first_run() {
    let readme = read("../../../README.md");
    let py = blocks(&readme, "## Quick start", "python");
    let first = blocks(&read("../../python/README.md"), "## A first run", "python");
    assert_eq!(py.len(), 1, "one Python block in README.md's Quick start");
    assert_eq!(
        py[0], first[0],
        "README.md's Python quick start is not tools/python/README.md's first run"
    );
}
