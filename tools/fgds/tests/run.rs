//! `fgds run`: the environment it gives a program, its exit status, and
//! that a program loading `libcufile.so.0` gets fgds's.

use std::path::PathBuf;
use std::process::Command;

fn fgds() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fgds"))
}

/// fgds's libcufile.so when the workspace built it (`cargo test --workspace`).
fn built_lib() -> Option<PathBuf> {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_fgds"));
    let dir = exe.parent()?;
    [dir.join("deps/libcufile.so"), dir.join("libcufile.so")]
        .into_iter()
        .find(|p| p.is_file())
}

#[test]
fn run_sets_the_library_path_and_preload_and_passes_the_status() {
    let d = tempfile::tempdir().unwrap();
    let lib = d.path().join("libcufile.so");
    std::fs::write(&lib, b"").unwrap();
    let out = fgds()
        .args(["run", "--no-preload", "--strict", "--lib"])
        .arg(&lib)
        .args([
            "--",
            "sh",
            "-c",
            "printf '%s|%s|%s' \"$LD_LIBRARY_PATH\" \"${LD_PRELOAD-unset}\" \"$FGDS_STRICT\"; \
             readlink \"${LD_LIBRARY_PATH%%:*}/libcufile.so.0\" >&2; exit 7",
        ])
        .env("LD_LIBRARY_PATH", "/old")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let s = String::from_utf8_lossy(&out.stdout);
    let parts: Vec<&str> = s.split('|').collect();
    assert_eq!(parts.len(), 3, "{s}");
    assert!(
        parts[0].contains("fgds-run-") && parts[0].ends_with(":/old"),
        "{s}"
    );
    assert_eq!(parts[1], "unset", "{s}");
    assert_eq!(parts[2], "1", "{s}");
    let target = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        target.trim(),
        std::fs::canonicalize(&lib).unwrap().to_str().unwrap()
    );
    // The private folder is gone afterwards.
    let dir = parts[0].split(':').next().unwrap();
    assert!(!std::path::Path::new(dir).exists(), "{dir} left behind");
}

#[test]
fn run_errors_are_clear() {
    let out = fgds()
        .args(["run", "--lib", "/nonexistent/libcufile.so", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("--lib /nonexistent/libcufile.so: no such file"),
        "{e}"
    );
    let out = fgds().args(["run"]).output().unwrap();
    assert!(!out.status.success());
}

#[test]
fn a_program_loading_libcufile_gets_fgds() {
    let Some(lib) = built_lib() else {
        eprintln!("skipped: libcufile.so not built (run cargo test --workspace)");
        return;
    };
    // dlopen("libcufile.so.0"), as KvikIO does, by preload and by library path.
    let code = "import ctypes; l = ctypes.CDLL('libcufile.so.0'); v = ctypes.c_int(); \
                r = l.cuFileGetVersion(ctypes.byref(v)); print(r, v.value)";
    for extra in [&[][..], &["--no-preload"][..]] {
        let out = fgds()
            .arg("run")
            .args(extra)
            .arg("--lib")
            .arg(&lib)
            .args(["--", "python3", "-c", code])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "0 1170",
            "{out:?}"
        );
    }
}
