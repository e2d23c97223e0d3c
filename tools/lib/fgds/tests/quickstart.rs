// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The Rust quick start of the top README.md: a test program of its own
//! (`harness = false`: `cargo test` runs its main), which
//! tests/readme_quickstart.rs holds the README's block to.
use fgds::{Buffer, Config, FileHandle};

fn main() -> fgds::Result<()> {
    // A file system with O_DIRECT (not tmpfs on older kernels).
    let path = format!("/var/tmp/fgds-quickstart-{}.bin", std::process::id());
    let data: Vec<u8> = (0..8 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &data).map_err(|source| fgds::Error::Io {
        op: path.clone(),
        source,
    })?;

    let file = FileHandle::open(&path, libc::O_RDONLY, 0, Config::default())?;
    let buf = Buffer::alloc_host(data.len())?; // GPU memory: Buffer::from_cuda(dptr, len)
    let n = file.read(&buf, 0, data.len(), 0)?; // buffer offset, bytes, file offset
    let mut back = vec![0; n];
    buf.read_bytes_into(0, &mut back)?;
    assert!(n == data.len() && back == data);
    let st = file.stats();
    println!(
        "{n} bytes, {} direct, {} bounced",
        st.direct_bytes, st.bounce_bytes
    );
    std::fs::remove_file(&path).ok();
    Ok(())
}
