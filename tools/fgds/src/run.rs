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
Examples:
  fgds run -- python train.py
  fgds run --strict -- ./my_cufile_program     # a bounce is an error (FGDS_STRICT=1)")]
pub struct RunArgs {
    /// fgds's libcufile.so [default: $FGDS_CUFILE_LIB, else libcufile.so next to this
    /// program or in ../lib]
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// fgds's LD_AUDIT module [default: libfgds_audit.so next to the library, next to
    /// this program or in ../lib]
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

fn find_lib(arg: Option<&Path>) -> Result<PathBuf, fgds::Error> {
    if let Some(p) = arg {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(fgds::Error::InvalidArgument(format!(
                "--lib {}: no such file",
                p.display()
            )))
        };
    }
    if let Some(p) = std::env::var_os("FGDS_CUFILE_LIB") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(fgds::Error::InvalidArgument(format!(
                "FGDS_CUFILE_LIB={}: no such file",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().map_err(|source| fgds::Error::Io {
        op: "finding this program".into(),
        source,
    })?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    [dir.join("libcufile.so"), dir.join("../lib/libcufile.so")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            fgds::Error::InvalidArgument(format!(
                "fgds's libcufile.so is not next to {} (build it: cd tools && cargo build \
                 --release); pass --lib PATH or set FGDS_CUFILE_LIB",
                exe.display()
            ))
        })
}

/// The audit module's file name.
const AUDIT: &str = "libfgds_audit.so";

/// The audit module: `--audit`, else next to the library (as given, then
/// where its links lead), next to this program or in its `../lib`.
fn find_audit(arg: Option<&Path>, lib: &Path, canon: &Path) -> Result<PathBuf, fgds::Error> {
    if let Some(p) = arg {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(fgds::Error::InvalidArgument(format!(
                "--audit {}: no such file",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().map_err(|source| fgds::Error::Io {
        op: "finding this program".into(),
        source,
    })?;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for p in [lib, canon, exe.as_path()] {
        if let Some(d) = p.parent() {
            dirs.push(d.to_path_buf());
        }
    }
    if let Some(d) = exe.parent() {
        dirs.push(d.join("../lib"));
    }
    dirs.iter()
        .map(|d| d.join(AUDIT))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            fgds::Error::InvalidArgument(format!(
                "{AUDIT} (fgds's LD_AUDIT module, built with libcufile.so) is not in {}; \
                 pass --audit PATH, or --no-audit to run without it (a dlopen by \
                 absolute path then loads that library)",
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
    let st = c.status().map_err(io(format!(
        "running {}",
        OsStr::new(prog).to_string_lossy()
    )))?;
    use std::os::unix::process::ExitStatusExt;
    let code = st
        .code()
        .or_else(|| st.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}
