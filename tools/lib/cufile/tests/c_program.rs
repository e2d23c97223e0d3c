//! Builds `tests/cufile_test.c`, a program written against cuFile's API,
//! with gcc against `include/cufile.h`, links it to this crate's
//! `libcufile.so.0` and runs it on host memory in `/var/tmp` (O_DIRECT on
//! ext4), every byte checked by the program.

mod common;

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
    build_with(&[])
}

/// The program built with extra C flags (`-DFGDS_CUFILE_VERSION=1180`).
fn build_with(cflags: &[&str]) -> Program {
    let dir = tempfile::tempdir().expect("tempdir");
    let lib_dir = dir.path().join("lib");
    std::fs::create_dir(&lib_dir).expect("mkdir");
    // Linked by cuFile's soname, as programs built against NVIDIA's library are.
    std::os::unix::fs::symlink(library(), lib_dir.join("libcufile.so.0")).expect("symlink");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = dir.path().join("cufile_test");
    let out = Command::new("gcc")
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror"])
        .args(cflags)
        .arg("-I")
        .arg(src.join("include"))
        .arg(src.join("tests/cufile_test.c"))
        .arg("-o")
        .arg(&bin)
        .arg(format!("-L{}", lib_dir.display()))
        .arg("-l:libcufile.so.0")
        .output()
        .expect("gcc (apt-get install gcc)");
    common::assert_success(&out, "gcc failed");
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
    /// Writes the settings file the program reads (`none.json`, which
    /// `CUFILE_ENV_PATH_JSON` names unless `run` is given another).
    fn settings(&self, json: &str) {
        std::fs::write(self.data.path().join("none.json"), json).expect("write json");
    }

    /// `run`, which must succeed with the program's `ok ` line.
    fn run_ok(&self, mode: &str, env: &[(&str, &str)]) -> Output {
        let o = self.run(mode, env);
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(String::from_utf8_lossy(&o.stdout).starts_with("ok "), "{t}");
        o
    }

    fn run(&self, mode: &str, env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(&self.bin);
        c.arg(self.data.path()).arg(mode);
        c.env("LD_LIBRARY_PATH", &self.lib_dir);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("FGDS_") || k == "CUFILE_ENV_PATH_JSON" {
                c.env_remove(k);
            }
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
    p.settings("{}");
    let o = p.run_ok("main", &[]);
    let t = text(&o);
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

/// cuFile 1.16 to 1.20's functions: cuFileReadv and cuFileWritev (every
/// byte checked), P2P flags, BAR size, topology, CUFILE_ERRSTR.
#[test]
fn cufile_1_20_functions() {
    let p = build();
    p.settings("{}");
    p.run_ok("v120", &[("FGDS_LOG", "off")]);
}

/// The library's settings module: its spellings work here too
/// (`FGDS_CHUNK_SIZE=1MiB` and `FGDS_STRICT=FALSE` used to fail every
/// call), and a bad value is its one message naming the variable.
#[test]
fn fgds_settings_are_the_librarys() {
    let p = build();
    p.settings("{}");
    let o = p.run(
        "main",
        &[
            ("FGDS_CHUNK_SIZE", "1MiB"),
            ("FGDS_STRICT", "FALSE"),
            ("FGDS_IO_URING", "off"),
            ("FGDS_LOG", "OFF"),
            ("FGDS_QUEUE_DEPTH", "8"),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    for (k, v, want) in [
        (
            "FGDS_CHUNK_SIZE",
            "1MiX",
            "FGDS_CHUNK_SIZE=\"1MiX\": not a size in bytes: 1048576, 1M, 1MiB",
        ),
        (
            "FGDS_STRICT",
            "maybe",
            "FGDS_STRICT=\"maybe\": not a boolean",
        ),
        ("FGDS_NO_DIRECT", "2", "FGDS_NO_DIRECT=\"2\": not a boolean"),
    ] {
        let o = p.run("main", &[(k, v)]);
        let t = text(&o);
        assert!(!o.status.success(), "{t}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(want), "{t}");
    }
}

#[test]
fn strict_turns_the_fallback_into_an_error() {
    if !no_fgds_node() {
        return;
    }
    let p = build();
    p.settings("{}");
    let o = p.run("strict", &[("FGDS_STRICT", "1")]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("strict"), "{t}");
    // The same through cufile.json's key.
    p.settings(r#"{ "properties": { "allow_compat_mode": false } }"#);
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
    p.settings("{}");
    p.run_ok("params", &[]);
}

#[test]
fn statistics_count_what_the_library_served() {
    let p = build();
    p.settings(r#"{ "profile": { "cufile_stats": 2 } }"#);
    p.run_ok("stats", &[]);
}

/// cuFile's soname, and not libfgds's (a dependency's cdylib link arguments
/// reach this library: rust-lang/cargo#9562).
#[test]
fn soname_is_cufiles() {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(library())
        .output()
        .expect("readelf (binutils)");
    let d = String::from_utf8_lossy(&out.stdout);
    assert!(d.contains("Library soname: [libcufile.so.0]"), "{d}");
}

/// A program built against cuFile 1.18's statistics layout
/// (`-DFGDS_CUFILE_VERSION=1180`) gets it with `FGDS_CUFILE_VERSION=1.18`:
/// nothing written past its 512-byte `CUfileStatsLevel1_t`, its counters
/// where it reads them; without the variable the library writes 1.20's 624
/// bytes (as NVIDIA's 1.20 library does), which the program sees.
#[test]
fn statistics_in_the_layout_of_the_version_presented() {
    let p = build_with(&["-DFGDS_CUFILE_VERSION=1180"]);
    p.settings(r#"{ "profile": { "cufile_stats": 2 } }"#);
    let v118 = [("FGDS_CUFILE_VERSION", "1.18"), ("FGDS_LOG", "off")];
    for mode in ["stats", "v120"] {
        let o = p.run(mode, &v118);
        assert!(o.status.success(), "{mode}: {}", text(&o));
    }
    let o = p.run("stats", &[("FGDS_LOG", "off")]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("cuFileGetStatsL1 wrote byte 512"), "{t}");
}
