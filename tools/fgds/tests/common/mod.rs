//! What the CLI's tests share: the binary under test and whether this
//! machine has an fgds node.

use std::process::Command;

/// The `fgds` binary the tests run.
pub fn fgds() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fgds"))
}

/// Whether no fgds node is here (so that only the fallback can work).
pub fn no_fgds_nodes() -> bool {
    std::fs::read_dir("/sys/class/misc")
        .map(|r| {
            r.flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with("fgds"))
        })
        .unwrap_or(true)
}
