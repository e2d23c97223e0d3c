//! `fgds run -- CMD`: runs a program with fgds's `libcufile.so` in place
//! of NVIDIA's cuFile, however the program loads it: by `LD_PRELOAD`, the
//! library path and the `LD_AUDIT` module `libfgds_audit.so`
//! (`tools/lib/audit`), which answers every search for `libcufile.so`,
//! `libcufile.so.0` or an absolute path to another libcufile with fgds's.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Arguments of `fgds run`.
#[derive(clap::Args)]
#[command(after_help = "\
The program gets LD_PRELOAD and LD_LIBRARY_PATH naming a private folder that holds \
libcufile.so.0 and libcufile.so, links to fgds's library, and LD_AUDIT naming \
libfgds_audit.so, which hands fgds's library to every load of a libcufile: linked, \
dlopen(\"libcufile.so.0\") (KvikIO, torch), dlopen(\"libcufile.so\") (cufile-python, \
LMCache) or dlopen of an absolute path (the nvidia-cufile wheel's copy). \
When the program has exited, a summary on stderr says what its processes that loaded \
fgds's libcufile did: bytes peer to peer and bounced, and every fallback to the bounce \
path by cause (EBUSY, EOPNOTSUPP, no fgds node, ...) with what to do. \
Examples:
  fgds run -- python train.py
  fgds run --strict -- ./my_cufile_program     # a bounce is an error (FGDS_STRICT=1)")]
pub struct RunArgs {
    /// fgds's libcufile.so [default: $FGDS_CUFILE_LIB, else libcufile.so next to this
    /// program, in the fgds wheel's private folder (fgds/_native in the Python package
    /// this program came with) or in ../lib]
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// fgds's LD_AUDIT module [default: libfgds_audit.so next to the library, else where
    /// the library is looked for]
    #[arg(long, value_name = "PATH", conflicts_with = "no_audit")]
    audit: Option<PathBuf>,
    /// No LD_PRELOAD (the library path and the audit module still apply)
    #[arg(long)]
    no_preload: bool,
    /// No LD_AUDIT: a dlopen by absolute path then loads that library, not fgds's
    #[arg(long)]
    no_audit: bool,
    /// Set FGDS_STRICT=1: where P2P cannot run, cuFile calls fail instead of bouncing
    #[arg(long)]
    strict: bool,
    /// The program and its arguments
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// Where the fgds wheel puts `libcufile.so` and the audit module: a folder
/// of the Python package (`tools/python/stage-native.sh`), private to
/// `fgds run` on purpose. No library path or `ld.so.conf` names it, so the
/// library reaches a program only through `fgds run` (or `--lib`,
/// `--audit`, `FGDS_CUFILE_LIB`); in `<prefix>/lib`, `ldconfig` would make it
/// the machine's `libcufile.so.0` for every program.
const PRIVATE: [&str; 2] = ["fgds", "_native"];

/// The folders this program, `exe`, looks in for fgds's library and audit
/// module, in order: its own folder (the cargo build tree,
/// `tools/target/release`); the wheel's private folder from the wheel's
/// `<prefix>/bin/fgds` (`pip install --target DIR`: `DIR/fgds/_native`; a
/// venv, `--prefix`, `--user` or a system install:
/// `lib/python*/site-packages/fgds/_native`, `lib64/...`, Debian's
/// `dist-packages` and `local/lib/...`); `../lib/fgds` (an install by hand,
/// `tools/fgds/install/README.md`: a folder `ldconfig` does not scan). Only the
/// private folders that exist are listed, newest Python first.
fn search_dirs(exe: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let Some(bin) = exe.parent() else {
        return dirs;
    };
    dirs.push(bin.to_path_buf());
    let prefix = bin.parent().unwrap_or(bin);
    let private = |base: PathBuf| PRIVATE.iter().fold(base, |p, c| p.join(c));
    let mut found = vec![private(prefix.to_path_buf())];
    for (lib, packages) in [
        ("lib", "site-packages"),
        ("lib", "dist-packages"),
        ("lib64", "site-packages"),
        ("lib64", "dist-packages"),
        ("local/lib", "dist-packages"),
    ] {
        let lib = prefix.join(lib);
        let Ok(rd) = std::fs::read_dir(&lib) else {
            continue;
        };
        let mut pys: Vec<OsString> = rd
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .filter(|n| n.as_bytes().starts_with(b"python"))
            .collect();
        pys.sort_by_key(|n| std::cmp::Reverse(version(n)));
        found.extend(pys.iter().map(|py| private(lib.join(py).join(packages))));
    }
    dirs.extend(found.into_iter().filter(|d| d.is_dir()));
    dirs.push(prefix.join("lib").join("fgds"));
    dirs
}

/// The numbers in a name, to rank `python3.12` above `python3.9`.
fn version(name: &OsStr) -> Vec<u32> {
    name.as_bytes()
        .split(|b| !b.is_ascii_digit())
        .filter_map(|d| std::str::from_utf8(d).ok()?.parse().ok())
        .collect()
}

/// The places [`search_dirs`] looks in, for an error message.
fn searched(exe: &Path) -> String {
    let Some(prefix) = exe.parent().and_then(Path::parent) else {
        return exe.display().to_string();
    };
    let p = prefix.display();
    let dir = PRIVATE.join("/");
    format!(
        "{}, {p}/{dir}, {p}/lib/python*/site-packages/{dir} (or lib64, dist-packages, \
         local/lib) or {p}/lib/fgds",
        exe.parent().unwrap_or(prefix).display()
    )
}

/// What to do when the library or the module is nowhere.
const INSTALL: &str = "install the fgds wheel (tools/python/stage-native.sh, then pip \
                       install tools/python) and run the fgds it installs, or build them (cd \
                       tools && cargo build --release -p fgds-cli -p fgds-cufile -p \
                       fgds-audit) and run tools/target/release/fgds";

fn current_exe() -> Result<PathBuf, fgds::Error> {
    std::env::current_exe().map_err(|source| fgds::Error::Io {
        op: "finding this program".into(),
        source,
    })
}

/// `p` where it is a file; else an error naming it as given (`what`:
/// `--lib `, `FGDS_CUFILE_LIB=`, `--audit `).
fn named_file(what: &str, p: &Path) -> Result<PathBuf, fgds::Error> {
    if p.is_file() {
        Ok(p.to_path_buf())
    } else {
        Err(fgds::Error::InvalidArgument(format!(
            "{what}{}: no such file",
            p.display()
        )))
    }
}

fn find_lib(arg: Option<&Path>) -> Result<PathBuf, fgds::Error> {
    if let Some(p) = arg {
        return named_file("--lib ", p);
    }
    if let Some(p) = std::env::var_os("FGDS_CUFILE_LIB") {
        let p = PathBuf::from(p);
        return named_file("FGDS_CUFILE_LIB=", &p);
    }
    let exe = current_exe()?;
    search_dirs(&exe)
        .into_iter()
        .map(|d| d.join("libcufile.so"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            fgds::Error::InvalidArgument(format!(
                "fgds's libcufile.so is not where {} looks for it ({}): {INSTALL}; or pass \
                 --lib PATH or set FGDS_CUFILE_LIB",
                exe.display(),
                searched(&exe)
            ))
        })
}

/// The audit module's file name.
const AUDIT: &str = "libfgds_audit.so";

/// The audit module: `--audit`, else next to the library (as given, then
/// where its links lead), else where the library is looked for
/// ([`search_dirs`]).
fn find_audit(arg: Option<&Path>, lib: &Path, canon: &Path) -> Result<PathBuf, fgds::Error> {
    if let Some(p) = arg {
        return named_file("--audit ", p);
    }
    let exe = current_exe()?;
    let mut dirs: Vec<PathBuf> = [lib, canon]
        .iter()
        .filter_map(|p| p.parent())
        .map(Path::to_path_buf)
        .collect();
    dirs.extend(search_dirs(&exe));
    dirs.iter()
        .map(|d| d.join(AUDIT))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            fgds::Error::InvalidArgument(format!(
                "{AUDIT} (fgds's LD_AUDIT module, built with libcufile.so) is not in {}; \
                 {INSTALL}; or pass --audit PATH, or --no-audit to run without it (a dlopen \
                 by absolute path then loads that library)",
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// `new` before the `:`-separated `old` of a path variable.
fn prepend(new: &Path, old: Option<OsString>, sep: &str) -> OsString {
    let mut v = OsString::from(new.as_os_str());
    if let Some(o) = old.filter(|o| !o.is_empty()) {
        v.push(sep);
        v.push(o);
    }
    v
}

/// A folder of our own under the temporary directory, removed on drop.
struct LibDir(PathBuf);

impl Drop for LibDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn io(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> fgds::Error {
    let op = op.into();
    move |source| fgds::Error::Io { op, source }
}

/// Prints on stderr what the program's processes that loaded fgds's
/// libcufile did (each appends a line to `report` as it exits,
/// [`fgds::report::write_run_report`]): bytes peer to peer and bounced,
/// and every fallback to the bounce path by cause, with what to do.
/// Nothing when no process reported (the program never loaded it).
fn summarize(report: &Path) {
    let Ok(text) = std::fs::read_to_string(report) else {
        return;
    };
    if let Some(s) = fgds::report::RunReport::parse(&text).summary() {
        eprintln!("{s}");
    }
}

/// Runs the program; its exit status is ours (128 + N for a signal).
pub fn run(a: RunArgs) -> Result<ExitCode, fgds::Error> {
    let given = find_lib(a.lib.as_deref())?;
    let lib = std::fs::canonicalize(&given).map_err(io(format!("{}", given.display())))?;
    let audit = if a.no_audit {
        None
    } else {
        let p = find_audit(a.audit.as_deref(), &given, &lib)?;
        Some(std::fs::canonicalize(&p).map_err(io(format!("{}", p.display())))?)
    };
    let dir = LibDir(std::env::temp_dir().join(format!("fgds-run-{}", std::process::id())));
    std::fs::create_dir(&dir.0).map_err(io(format!("creating {}", dir.0.display())))?;
    let so = dir.0.join("libcufile.so.0");
    for name in ["libcufile.so.0", "libcufile.so"] {
        let l = dir.0.join(name);
        std::os::unix::fs::symlink(&lib, &l).map_err(io(format!("linking {}", l.display())))?;
    }
    let (prog, args) = a
        .cmd
        .split_first()
        .ok_or_else(|| fgds::Error::InvalidArgument("no program given".into()))?;
    let mut c = Command::new(prog);
    c.args(args);
    c.env(
        "LD_LIBRARY_PATH",
        prepend(&dir.0, std::env::var_os("LD_LIBRARY_PATH"), ":"),
    );
    if !a.no_preload {
        c.env(
            "LD_PRELOAD",
            prepend(&so, std::env::var_os("LD_PRELOAD"), " "),
        );
    }
    if let Some(audit) = &audit {
        c.env(
            "LD_AUDIT",
            prepend(audit, std::env::var_os("LD_AUDIT"), ":"),
        );
        c.env(OsStr::from_bytes(fgds_audit::VAR.to_bytes()), &so);
    }
    if a.strict {
        c.env("FGDS_STRICT", "1");
    }
    let report = dir.0.join("report");
    c.env(fgds::report::RUN_REPORT_VAR, &report);
    let st = c.status().map_err(io(format!(
        "running {}",
        OsStr::new(prog).to_string_lossy()
    )))?;
    summarize(&report);
    use std::os::unix::process::ExitStatusExt;
    let code = st
        .code()
        .or_else(|| st.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}
