//! KvikIO's cuFile sources compile against fgds's `include/cufile.h`:
//! the headers of the `libkvikio-cu12` wheel that use cuFile (its shim,
//! driver, config, file handle, batch and stream code, error macros with
//! `CUFILE_ERRSTR`/`cufileop_status_error`), with every cuFile API KvikIO
//! can use switched on, and CUDA's own `cuda.h` (the
//! `nvidia-cuda-runtime-cu12` wheel). Both are downloaded by
//! `tests/nvidia_headers.py --extract` into `target/` (about 7 MB, once),
//! never committed; `FGDS_KVIKIO_HEADERS=DIR` takes them from
//! DIR/<package>==<version>/ instead.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const KVIKIO: &str = "libkvikio-cu12==26.10.0";
const CUDA: &str = "nvidia-cuda-runtime-cu12==12.9.79";

fn fetch(dest: &Path, spec: &str, prefix: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvidia_headers.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("--extract")
        .arg(dest)
        .args([spec, prefix])
        .output()
        .expect("python3 (for pip download)");
    common::assert_success(
        &out,
        &format!("downloading {spec} failed (no PyPI? set FGDS_KVIKIO_HEADERS=DIR)"),
    );
}

#[test]
fn kvikio_compiles_against_fgds_cufile_h() {
    let dest = match std::env::var_os("FGDS_KVIKIO_HEADERS") {
        Some(d) => PathBuf::from(d),
        None => {
            let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/kvikio-headers");
            fetch(&d, KVIKIO, "libkvikio/include/");
            fetch(&d, CUDA, "nvidia/cuda_runtime/include/");
            d
        }
    };
    let kv = dest.join(KVIKIO).join("libkvikio/include");
    let cuda = dest.join(CUDA).join("nvidia/cuda_runtime/include");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("kvikio.cpp");
    let mut c = String::new();
    for h in [
        "kvikio/shim/cufile.hpp",
        "kvikio/error.hpp",
        "kvikio/cufile/driver.hpp",
        "kvikio/cufile/config.hpp",
        "kvikio/file_handle.hpp",
        "kvikio/batch.hpp",
        "kvikio/stream.hpp",
        "kvikio/buffer.hpp",
    ] {
        assert!(kv.join(h).is_file(), "{}: not in {KVIKIO}", h);
        c.push_str(&format!("#include <{h}>\n"));
    }
    c.push_str("int main() { return 0; }\n");
    std::fs::write(&src, c).unwrap();
    let out = Command::new("g++")
        .args([
            "-std=c++17",
            "-fsyntax-only",
            "-DKVIKIO_CUFILE_FOUND",
            "-DKVIKIO_CUFILE_BATCH_API_FOUND",
            "-DKVIKIO_CUFILE_STREAM_API_FOUND",
            "-DKVIKIO_CUFILE_VERSION_API_FOUND",
        ])
        .arg("-I")
        .arg(&cuda)
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
        .arg("-I")
        .arg(&kv)
        .arg(&src)
        .output()
        .expect("g++ (apt-get install g++)");
    common::assert_success(
        &out,
        "KvikIO's headers do not compile against fgds's cufile.h",
    );
}
