//! `include/fgds.h` is written by hand (cbindgen is not among the crates
//! this tree builds with offline, and the header's comments are its C
//! documentation); this test holds it to `src/capi.rs` and `src/capi/`: the same functions,
//! and, compiled by the system's C compiler, the same struct sizes, field
//! offsets and constants.

mod cdefs;

use fgds::capi::*;
use std::collections::BTreeSet;
use std::path::Path;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    let p = Path::new(DIR).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn idents_after(text: &str, marker: &str) -> BTreeSet<String> {
    text.match_indices(marker)
        .map(|(i, _)| {
            text[i + marker.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .collect()
}

#[test]
fn header_declares_every_function() {
    let rust: BTreeSet<String> = idents_after(
        &(read("src/capi.rs") + &read("src/capi/batch.rs")),
        "extern \"C\" fn ",
    )
    .into_iter()
    .filter(|n| n.starts_with("fgds_"))
    .collect();
    // C declarations: `fgds_name(` outside comments and macros
    let h = read("include/fgds.h");
    let c: BTreeSet<String> = h
        .lines()
        .map(str::trim_start)
        .filter(|l| !l.starts_with('*') && !l.starts_with("/*") && !l.starts_with('#'))
        .flat_map(|l| {
            idents_after(l, "fgds_")
                .into_iter()
                .filter(|n| l.contains(&format!("fgds_{n}(")))
                .map(|n| format!("fgds_{n}"))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(rust.len() >= 20, "{rust:?}");
    assert_eq!(
        rust, c,
        "src/capi.rs (with src/capi/) and include/fgds.h declare different functions"
    );
}

#[test]
fn header_layout_matches() {
    let (body, mut want) = c_layout! {
        fgds_config => fgds_config { size, flags, chunk_size, queue_depth, reserved }
        fgds_io_segment => fgds_io_segment { base, offset, size }
        fgds_stats => fgds_stats { direct_bytes, bounce_bytes, fallbacks, direct_ops, bounce_ops, read_bytes, write_bytes, errors }
        fgds_io_params => fgds_io_params { handle, opcode, cookie, file_offset, base, buf_offset, size, segments, nsegments }
        fgds_io_event => fgds_io_event { cookie, status, pad, result }
        fgds_fallbacks => fgds_fallbacks { busy, not_supported, no_device, misaligned, no_direct, asked, other }
        fgds_gpucache_counters => fgds_gpucache_counters { registrations, unregistrations, staged, cached, uncached, pool_buffers, cache_hits, cache_registrations, cache_stale, cache_evicted, cache_entries, cache_bytes, cache_full }
    };
    let (cbody, cwant) = c_consts!(
        FGDS_CONFIG_STRICT = FGDS_CONFIG_STRICT,
        FGDS_CONFIG_NO_IO_URING = FGDS_CONFIG_NO_IO_URING,
        FGDS_CONFIG_NO_DIRECT = FGDS_CONFIG_NO_DIRECT,
        FGDS_CONFIG_SIZE_VER0 = FGDS_CONFIG_SIZE_VER0,
        FGDS_VERSION = fgds_version(),
        FGDS_OP_READ = FGDS_OP_READ,
        FGDS_OP_WRITE = FGDS_OP_WRITE,
        FGDS_IOV_MAX = fgds::FGDS_IOV_MAX,
        FGDS_BATCH_IOV_MAX = fgds::FGDS_BATCH_IOV_MAX,
    );
    want += &cwant;
    let inc = format!("{DIR}/include");
    if let Some(got) = cdefs::run_c(&[&inc], &["\"fgds.h\""], &(body + &cbody)) {
        assert_eq!(got, want);
    }
}
