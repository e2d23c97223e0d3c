//! C's view of a header: compile a program with the system's C compiler
//! that prints struct sizes, field offsets and constants, and compare with
//! Rust's (`c_layout!`, `c_consts!`, [`run_c`]).

/// `(C statements printing, Rust's expected output)` of the size and the
/// field offsets of each `C struct name => Rust type`.
#[macro_export]
macro_rules! c_layout {
    ($($c:ident => $t:ty { $($f:ident),* })*) => {{
        let mut c = String::new();
        let mut want = String::new();
        $(
            c += &format!("\tprintf(\"{0} %zu\\n\", sizeof(struct {0}));\n", stringify!($c));
            want += &format!("{} {}\n", stringify!($c), std::mem::size_of::<$t>());
            $(
                c += &format!(
                    "\tprintf(\"{0}.{1} %zu\\n\", offsetof(struct {0}, {1}));\n",
                    stringify!($c), stringify!($f)
                );
                want += &format!("{}.{} {}\n", stringify!($c), stringify!($f), std::mem::offset_of!($t, $f));
            )*
        )*
        (c, want)
    }};
}

/// `(C statements printing, Rust's expected output)` of constants: the C
/// macro `name` against the Rust expression.
#[macro_export]
macro_rules! c_consts {
    ($($n:ident = $v:expr),* $(,)?) => {{
        let mut c = String::new();
        let mut want = String::new();
        $(
            c += &format!("\tprintf(\"{0} %llu\\n\", (unsigned long long)({0}));\n", stringify!($n));
            want += &format!("{} {}\n", stringify!($n), $v as u64);
        )*
        (c, want)
    }};
}

/// Compiles `#include`s + `main { body }` with `$CC` (default `cc`,
/// `-Wall -Werror`, the include directories given) and returns its output;
/// `None` (and a note on stderr) when there is no C compiler.
pub fn run_c(includes: &[&str], headers: &[&str], body: &str) -> Option<String> {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("layout.c");
    let mut text = String::from("#include <stddef.h>\n#include <stdio.h>\n");
    for h in headers {
        text += &format!("#include {h}\n");
    }
    text += &format!("int main(void)\n{{\n{body}\treturn 0;\n}}\n");
    std::fs::write(&src, text).unwrap();
    let exe = d.path().join("layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = std::process::Command::new(&cc);
    for i in includes {
        cmd.arg(format!("-I{i}"));
    }
    let built = match cmd
        .args(["-Wall", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: no C compiler ({cc}); set CC");
            return None;
        }
        r => r.unwrap(),
    };
    assert!(
        built.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = std::process::Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}
