//! Builds `tests/cufile_test.c`, a program written against cuFile's API,
//! with gcc against `include/cufile.h`, links it to this crate's
//! `libcufile.so.0` and runs it on host memory in `/var/tmp` (O_DIRECT on
//! ext4), every byte checked by the program.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `libcufile.so` built with this test: `target/<profile>/deps/` (where
/// `cargo test` leaves it; `cargo build` copies it one folder up, where an
/// older one may lie).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    for dir in [deps, deps.parent().expect("profile directory")] {
        let p = dir.join("libcufile.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libcufile.so not found next to {}", deps.display());
}

struct Program {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    lib_dir: PathBuf,
    data: tempfile::TempDir,
}

fn build() -> Program {
    let dir = tempfile::tempdir().expect("tempdir");
    let lib_dir = dir.path().join("lib");
    std::fs::create_dir(&lib_dir).expect("mkdir");
    // Linked by cuFile's soname, as programs built against NVIDIA's library are.
    std::os::unix::fs::symlink(library(), lib_dir.join("libcufile.so.0")).expect("symlink");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = dir.path().join("cufile_test");
    let out = Command::new("gcc")
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(src.join("include"))
        .arg(src.join("tests/cufile_test.c"))
        .arg("-o")
        .arg(&bin)
        .arg(format!("-L{}", lib_dir.display()))
        .arg("-l:libcufile.so.0")
        .output()
        .expect("gcc (apt-get install gcc)");
    assert!(
        out.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = if Path::new("/var/tmp").is_dir() {
        "/var/tmp"
    } else {
        "/tmp"
    };
    let data = tempfile::Builder::new()
        .prefix("fgds-cufile-")
        .tempdir_in(base)
        .expect("data dir");
    Program {
        _dir: dir,
        bin,
        lib_dir,
        data,
    }
}

impl Program {
    fn run(&self, mode: &str, env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(&self.bin);
        c.arg(self.data.path()).arg(mode);
        c.env("LD_LIBRARY_PATH", &self.lib_dir);
        for k in [
            "FGDS_STRICT",
            "FGDS_NO_DIRECT",
            "FGDS_LOG",
            "CUFILE_ENV_PATH_JSON",
        ] {
            c.env_remove(k);
        }
        // No cufile.json of this machine.
        c.env("CUFILE_ENV_PATH_JSON", self.data.path().join("none.json"));
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("run cufile_test")
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn no_fgds_node() -> bool {
    !Path::new("/sys/class/misc/fgds0").exists()
}

#[test]
fn cufile_program_reads_writes_batches_and_errors() {
    let p = build();
    // An empty settings file is valid JSON with nothing in it: defaults.
    std::fs::write(p.data.path().join("none.json"), "{}").expect("write json");
    let o = p.run("main", &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("ok "), "{t}");
    let err = String::from_utf8_lossy(&o.stderr);
    if no_fgds_node() {
        // The fallback is visible: what runs, at start, and the first
        // bounce of the handle, with why.
        assert!(
            err.contains(
                "libcufile (fgds): bounce path (compat mode) for GPU memory: no fgds node"
            ),
            "{t}"
        );
    }
    assert!(err.contains("bounce path ("), "{t}");
    // FGDS_LOG=off silences it.
    let o = p.run("main", &[("FGDS_LOG", "off")]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
}

#[test]
fn strict_turns_the_fallback_into_an_error() {
    if !no_fgds_node() {
        return;
    }
    let p = build();
    std::fs::write(p.data.path().join("none.json"), "{}").expect("write json");
    let o = p.run("strict", &[("FGDS_STRICT", "1")]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("strict"), "{t}");
    // The same through cufile.json's key.
    std::fs::write(
        p.data.path().join("none.json"),
        r#"{ "properties": { "allow_compat_mode": false } }"#,
    )
    .expect("write json");
    let o = p.run("strict", &[]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn cufile_json_keys_change_behaviour() {
    let p = build();
    let json = p.data.path().join("cufile.json");
    std::fs::write(
        &json,
        r#"{
            // as in cuFile's own file, comments and keys fgds ignores
            "logging": { "level": "ERROR" },
            "properties": {
                "max_direct_io_size_kb": 256,
                "io_batchsize": 4,
                "force_compat_mode": true,
                "use_poll_mode": false
            }
        }"#,
    )
    .expect("write json");
    let o = p.run(
        "json",
        &[("CUFILE_ENV_PATH_JSON", json.to_str().expect("utf-8 path"))],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("settings from"),
        "{t}"
    );
    // A broken file is an error that names it.
    std::fs::write(&json, r#"{ "properties": { "io_batchsize": 0 } }"#).expect("write json");
    let o = p.run(
        "main",
        &[("CUFILE_ENV_PATH_JSON", json.to_str().expect("utf-8 path"))],
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cuFileDriverOpen"),
        "{t}"
    );
}

#[test]
fn parameter_api_stages_applies_and_refuses() {
    let p = build();
    std::fs::write(p.data.path().join("none.json"), "{}").expect("write json");
    let o = p.run("params", &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("ok "), "{t}");
}

#[test]
fn statistics_count_what_the_library_served() {
    let p = build();
    std::fs::write(
        p.data.path().join("none.json"),
        r#"{ "profile": { "cufile_stats": 2 } }"#,
    )
    .expect("write json");
    let o = p.run("stats", &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("ok "), "{t}");
}
