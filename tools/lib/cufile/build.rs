//! Gives the shared library cuFile's soname, so that a program linked
//! against (or `dlopen`ing) `libcufile.so.0` finds this one.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcufile.so.0");
}
