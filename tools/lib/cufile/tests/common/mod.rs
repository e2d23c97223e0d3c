//! What the integration tests share: the verdict on a tool they run (gcc,
//! g++, the header download).

use std::process::Output;

/// Panics with `what` and the tool's stderr unless its process succeeded.
pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
