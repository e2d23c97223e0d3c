//! `fgds run -- CMD`: runs a program with fgds's `libcufile.so.0` in place
//! of NVIDIA's cuFile, by `LD_PRELOAD` and the library path.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Arguments of `fgds run`.
#[derive(clap::Args)]
#[command(after_help = "\
The program gets LD_PRELOAD and LD_LIBRARY_PATH naming a private folder that holds \
libcufile.so.0, a link to fgds's library, so that its cuFile calls (direct, through \
torch.cuda.gds, KvikIO, ...) go to fgds, whether it links libcufile.so.0 or dlopens it. \
Examples:
  fgds run -- python train.py
  fgds run --strict -- ./my_cufile_program     # a bounce is an error (FGDS_STRICT=1)")]
pub struct RunArgs {
    /// fgds's libcufile.so [default: $FGDS_CUFILE_LIB, else libcufile.so next to this
    /// program or in ../lib]
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// Library path only, no LD_PRELOAD (programs that link or dlopen libcufile.so.0)
    #[arg(long)]
    no_preload: bool,
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
    let lib = find_lib(a.lib.as_deref())?;
    let lib = std::fs::canonicalize(&lib).map_err(io(format!("{}", lib.display())))?;
    let dir = LibDir(std::env::temp_dir().join(format!("fgds-run-{}", std::process::id())));
    std::fs::create_dir(&dir.0).map_err(io(format!("creating {}", dir.0.display())))?;
    let so = dir.0.join("libcufile.so.0");
    std::os::unix::fs::symlink(&lib, &so).map_err(io(format!("linking {}", so.display())))?;
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
