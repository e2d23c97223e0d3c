//! Gives the shared library a soname, `libfgds.so.<major>`, so that
//! programs linked with `-lfgds` record the ABI they were built against.
//!
//! `rustc-link-arg`, not `rustc-link-arg-cdylib`: cargo passes a
//! dependency's cdylib link arguments on to every cdylib that depends on it
//! (rust-lang/cargo#9562), which would give libcufile.so and the Python
//! extension this soname. `rustc-link-arg` stays in this package; on its
//! test programs the soname is harmless.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo:rustc-link-arg=-Wl,-soname,libfgds.so.{major}");
}
