//! `fgds run`: the environment it gives a program, its exit status, and
//! that a program loading `libcufile.so.0` gets fgds's.

use std::path::PathBuf;
use std::process::Command;

/// The version fgds's libcufile says it is (`cuFileGetVersion`).
const CUFILE_VERSION: &str = "1200";

fn fgds() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fgds"))
}

/// A library the workspace built (`cargo test --workspace`): `deps/`, where
/// `cargo test` leaves it, before the profile folder, where an older one may lie.
fn built(name: &str) -> Option<PathBuf> {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_fgds"));
    let dir = exe.parent()?;
    [dir.join("deps").join(name), dir.join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

/// fgds's libcufile.so when the workspace built it.
fn built_lib() -> Option<PathBuf> {
    built("libcufile.so")
}

#[test]
fn run_sets_the_library_path_and_preload_and_passes_the_status() {
    let d = tempfile::tempdir().unwrap();
    let lib = d.path().join("libcufile.so");
    std::fs::write(&lib, b"").unwrap();
    let out = fgds()
        .args(["run", "--no-preload", "--no-audit", "--strict", "--lib"])
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
    // No audit module where it is looked for (a copy of fgds alone in a
    // folder): named, with the way out.
    let d = tempfile::tempdir().unwrap();
    let lib = d.path().join("libcufile.so");
    std::fs::write(&lib, b"").unwrap();
    let lone = d.path().join("bin");
    std::fs::create_dir(&lone).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_fgds"), lone.join("fgds")).unwrap();
    // `fgds run FLAGS --lib LIB -- true` with `cmd`: exit status 2, and
    // what it says on stderr.
    let refused = |mut cmd: Command, flags: &[&str]| {
        let out = cmd
            .arg("run")
            .args(flags)
            .arg("--lib")
            .arg(&lib)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = refused(Command::new(lone.join("fgds")), &[]);
    assert!(
        e.contains("libfgds_audit.so (fgds's LD_AUDIT module") && e.contains("--no-audit"),
        "{e}"
    );
    let e = refused(fgds(), &["--audit", "/nonexistent/a.so"]);
    assert!(e.contains("--audit /nonexistent/a.so: no such file"), "{e}");
}

/// A copy of `fgds` at `root/bin` with a stand-in library and audit module
/// in `root/private` (a layout of an install), and what `fgds run` then
/// names: the library its private folder links to and the audit module.
fn found_in_layout(root: &std::path::Path, bin: &str, private: &str) -> Vec<String> {
    let bin = root.join(bin);
    let private = root.join(private);
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&private).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_fgds"), bin.join("fgds")).unwrap();
    for f in ["libcufile.so", "libfgds_audit.so"] {
        std::fs::write(private.join(f), b"").unwrap();
    }
    // The stand-ins are empty: no preload, and the loader ignores (and
    // says on stderr) an audit module it cannot load.
    let out = Command::new(bin.join("fgds"))
        .args(["run", "--no-preload", "--", "sh", "-c"])
        .arg("readlink \"${LD_LIBRARY_PATH%%:*}/libcufile.so.0\"; printf '%s\\n' \"$LD_AUDIT\"")
        .env_remove("FGDS_CUFILE_LIB")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_AUDIT")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn run_finds_the_wheels_private_folder() {
    // pip's layouts of the wheel: <prefix>/bin/fgds and the package's
    // fgds/_native in a venv or --prefix (lib, lib64, Debian's
    // dist-packages, local/lib) and with --target (DIR/bin, DIR/fgds).
    for private in [
        "lib/python3.11/site-packages/fgds/_native",
        "lib64/python3.12/site-packages/fgds/_native",
        "lib/python3/dist-packages/fgds/_native",
        "local/lib/python3.11/dist-packages/fgds/_native",
        "fgds/_native",
    ] {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let want = ["libcufile.so", "libfgds_audit.so"]
            .map(|f| root.join(private).join(f).to_str().unwrap().to_string());
        assert_eq!(found_in_layout(&root, "bin", private), want, "{private}");
    }
    // Two Pythons' packages: the newest one's.
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let old = root.join("lib/python3.9/site-packages/fgds/_native");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("libcufile.so"), b"").unwrap();
    let new = "lib/python3.12/site-packages/fgds/_native";
    let got = found_in_layout(&root, "bin", new);
    assert_eq!(
        got[0],
        root.join(new).join("libcufile.so").to_str().unwrap()
    );
    // Nothing of it in <prefix>/lib: where fgds looks is said, and what to do.
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_fgds"), bin.join("fgds")).unwrap();
    let out = Command::new(bin.join("fgds"))
        .args(["run", "--", "true"])
        .env_remove("FGDS_CUFILE_LIB")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("fgds's libcufile.so is not where")
            && e.contains("/lib/python*/site-packages/fgds/_native")
            && e.contains("pip install tools/python")
            && e.contains("--lib PATH"),
        "{e}"
    );
}

/// Builds `tests/dlopen_cufile.c` linked against a stand-in of NVIDIA's
/// `libcufile.so.0` (`tests/fake_cufile.c`) with an `RPATH` to it, as a
/// program built against NVIDIA's library: (the folder, the program, the
/// stand-in's folder).
fn dlopen_program() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let nv = d.path().join("nvidia");
    std::fs::create_dir(&nv).unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let cc = |args: &[&std::ffi::OsStr]| {
        let out = Command::new("cc")
            .args(["-O1", "-Wall", "-Werror"])
            .args(args)
            .output()
            .expect("cc (apt-get install gcc)");
        assert!(out.status.success(), "cc: {out:?}");
    };
    let fake = nv.join("libcufile.so.0");
    cc(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-Wl,-soname,libcufile.so.0".as_ref(),
        src.join("fake_cufile.c").as_os_str(),
        "-o".as_ref(),
        fake.as_os_str(),
    ]);
    std::os::unix::fs::symlink("libcufile.so.0", nv.join("libcufile.so")).unwrap();
    let prog = d.path().join("dlopen_cufile");
    let rpath = format!("-Wl,--disable-new-dtags,-rpath,{}", nv.display());
    let libdir = format!("-L{}", nv.display());
    cc(&[
        src.join("dlopen_cufile.c").as_os_str(),
        "-o".as_ref(),
        prog.as_os_str(),
        libdir.as_ref(),
        "-l:libcufile.so.0".as_ref(),
        rpath.as_ref(),
        "-ldl".as_ref(),
    ]);
    (d, prog, nv)
}

#[test]
fn every_way_of_loading_libcufile_gets_fgds() {
    let (Some(lib), Some(_)) = (built_lib(), built("libfgds_audit.so")) else {
        eprintln!("skipped: libcufile.so not built (run cargo test --workspace)");
        return;
    };
    let (_d, prog, nv) = dlopen_program();
    let abs = nv.join("libcufile.so.0");
    let abs = abs.to_str().unwrap();
    let ways = ["libcufile.so.0", "libcufile.so", abs];
    let lines = |out: std::process::Output| {
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    // Alone, every way finds the stand-in (else the test could not fail).
    let alone = lines(
        Command::new(&prog)
            .args(ways)
            .env_remove("LD_PRELOAD")
            .env_remove("LD_AUDIT")
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap(),
    );
    assert_eq!(
        alone,
        ["linked", ways[0], ways[1], ways[2]].map(|w| format!("{w} other 99999")),
        "without fgds run"
    );
    let fgds_version = {
        let out = fgds()
            .args(["run", "--lib"])
            .arg(&lib)
            .args(["--", "python3", "-c"])
            .arg(
                "import ctypes; v = ctypes.c_int(); \
                 ctypes.CDLL('libcufile.so.0').cuFileGetVersion(ctypes.byref(v)); print(v.value)",
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // `fgds run FLAGS --lib LIB -- PROG WAYS...`: what PROG prints.
    let run_prog = |flags: &[&str]| {
        lines(
            fgds()
                .arg("run")
                .args(flags)
                .arg("--lib")
                .arg(&lib)
                .arg("--")
                .arg(&prog)
                .args(ways)
                .env_remove("LD_PRELOAD")
                .env_remove("LD_AUDIT")
                .output()
                .unwrap(),
        )
    };
    for extra in [&[][..], &["--no-preload"][..]] {
        let got = run_prog(extra);
        assert_eq!(
            got,
            ["linked", ways[0], ways[1], ways[2]].map(|w| format!("{w} fgds {fgds_version}")),
            "fgds run {extra:?}"
        );
    }
    // Without the audit module, the RPATH and the absolute path reach the
    // stand-in: what the module is for.
    let got = run_prog(&["--no-audit"]);
    assert_eq!(
        got[..2],
        [
            format!("linked fgds {fgds_version}"),
            format!("libcufile.so.0 fgds {fgds_version}")
        ]
    );
    assert_eq!(
        got[2..],
        [
            "libcufile.so other 99999".to_string(),
            format!("{abs} other 99999")
        ]
    );
}

#[test]
fn a_program_loading_libcufile_gets_fgds() {
    let Some(lib) = built_lib() else {
        eprintln!("skipped: libcufile.so not built (run cargo test --workspace)");
        return;
    };
    // dlopen("libcufile.so.0"), as KvikIO does, and "libcufile.so", as
    // cufile-python does, by preload, audit module and library path.
    let code = "import ctypes\n\
                for n in ('libcufile.so.0', 'libcufile.so'):\n    \
                l = ctypes.CDLL(n); v = ctypes.c_int()\n    \
                r = l.cuFileGetVersion(ctypes.byref(v)); print(r, v.value)";
    for extra in [&[][..], &["--no-preload"][..], &["--no-audit"][..]] {
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
            format!("0 {CUFILE_VERSION}\n0 {CUFILE_VERSION}"),
            "{out:?}"
        );
    }
}

#[test]
fn run_prints_a_summary_of_what_libcufile_did() {
    let Some(lib) = built_lib() else {
        eprintln!("skipped: libcufile.so not built (cargo test --workspace builds it)");
        return;
    };
    let out = fgds()
        .args(["run", "--no-audit", "--lib"])
        .arg(&lib)
        .args(["--", "python3", "-c"])
        .arg("import ctypes; ctypes.CDLL('libcufile.so.0').cuFileDriverOpen()")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fgds run: summary of 1 report(s): 0.0 MiB direct")
            && err.contains("fgds run: no fallback to the bounce path"),
        "{err}"
    );
    // A program that never loads it: no summary.
    let out = fgds()
        .args(["run", "--no-audit", "--lib"])
        .arg(&lib)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("summary"),
        "{out:?}"
    );
}
