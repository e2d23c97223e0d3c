//! Unit tests of the engine's planning: coarsening, packing, merging.

use super::plan::{plan, Mode, Piece};
use super::split::{coarsen, split_size};
use super::vectored::plan_segments;
use super::*;

#[test]
fn coarsen_joins_neighbours_within_aligned_stretches() {
    let m = 1u64 << 20;
    let staged = |off: u64, len: u64| Piece::new(off, 0, off as usize, len as usize, Mode::Staged);
    // 2 MiB..18 MiB in 4 MiB-aligned pieces: 2 MiB, then 4 MiB each
    let mut ps = vec![staged(2 * m, 2 * m)];
    ps.extend((1..4).map(|i| staged(i * 4 * m, 4 * m)));
    ps.push(staged(16 * m, 2 * m));
    let got: Vec<(u64, usize)> = coarsen(ps, 8 * m)
        .iter()
        .map(|p| (p.file_off, p.len))
        .collect();
    let mib = 1usize << 20;
    assert_eq!(
        got,
        vec![(2 * m, 6 * mib), (8 * m, 8 * mib), (16 * m, 2 * mib)]
    );
    // other modes, buffers and gaps stay apart
    let mut other = staged(4 * m, 4 * m);
    other.buf = 1;
    let direct = Piece::new(8 * m, 0, 8 << 20, 4 << 20, Mode::Direct);
    let ps = vec![staged(0, 4 * m), other, direct, staged(16 * m, 4 * m)];
    assert_eq!(coarsen(ps, 8 * m).len(), 4);
}

fn file(len: usize, cfg: Config) -> (tempfile::TempDir, FileHandle) {
    let d = tempfile::Builder::new()
        .prefix("fgds-test")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let p = d.path().join("f");
    std::fs::write(&p, vec![7u8; len]).expect("write");
    let f = FileHandle::open(&p, libc::O_RDONLY, 0, cfg).expect("open");
    (d, f)
}

/// Bytes of each piece of a plain call (the destinations of a merged one).
fn sizes(pieces: &[Piece]) -> Vec<usize> {
    pieces.iter().map(|p| p.len).collect()
}

#[test]
fn bounce_pieces_and_direct_requests_have_their_own_sizes() {
    let cfg = Config {
        chunk_size: 64 << 10,
        bounce_chunk_size: 256 << 10,
        ..Config::default()
    };
    let (_d, f) = file(1 << 20, cfg);
    let bounced = Buffer::alloc_host_bounced(1 << 20).expect("alloc");
    let host = Buffer::alloc_host(1 << 20).expect("alloc");
    let (p, why) = plan(&f, &bounced, 0, 0, 1 << 20, 0, None).expect("plan");
    assert!(why.is_some(), "bounced memory bounces");
    assert_eq!(sizes(&p), vec![256 << 10; 4]);
    assert!(p.iter().all(|p| p.mode == Mode::Staged));
    let (p, why) = plan(&f, &host, 0, 0, 1 << 20, 0, None).expect("plan");
    assert!(why.is_none(), "{why:?}");
    assert_eq!(sizes(&p), vec![64 << 10; 16]);
    assert!(p.iter().all(|p| p.mode == Mode::Direct));
    // a bounced piece ends on a bounce-chunk boundary of the file
    let (p, _) = plan(&f, &bounced, 0, 0, 300 << 10, 100 << 10, None).expect("plan");
    assert_eq!(sizes(&p), vec![156 << 10, 144 << 10]);
    // the defaults differ: 4 MiB pieces, 1 MiB requests
    let d = Config::default();
    assert_eq!(
        (d.bounce_chunk_size, d.chunk_size),
        (DEFAULT_BOUNCE_CHUNK_SIZE, DEFAULT_CHUNK_SIZE)
    );
    assert_ne!(DEFAULT_BOUNCE_CHUNK_SIZE, DEFAULT_CHUNK_SIZE);
}

#[test]
fn a_bounced_call_is_split_in_its_own_parts() {
    let cfg = Config {
        split_size: 16 << 20,
        bounce_split_size: 8 << 20,
        ..Config::default()
    };
    assert_eq!(split_size(&cfg, 0, 100), 16 << 20, "direct");
    assert_eq!(split_size(&cfg, 50, 100), 16 << 20, "half and half");
    assert_eq!(split_size(&cfg, 51, 100), 8 << 20, "mostly bounced");
    assert_eq!(split_size(&cfg, 100, 100), 8 << 20, "bounced");
    assert_ne!(DEFAULT_BOUNCE_SPLIT_SIZE, DEFAULT_SPLIT_SIZE);
}

#[test]
fn segments_side_by_side_in_one_buffer_are_one_copy() {
    let cfg = Config {
        bounce_chunk_size: 1 << 20,
        ..Config::default()
    };
    let (_d, f) = file(1 << 20, cfg);
    let one = Buffer::alloc_host_bounced(64 << 10).expect("alloc");
    let four: Vec<Buffer> = (0..4)
        .map(|_| Buffer::alloc_host_bounced(16 << 10).expect("alloc"))
        .collect();
    let q = 16 << 10;
    let side_by_side: Vec<Segment<'_>> = (0..4)
        .map(|i| Segment {
            buffer: &one,
            offset: i * q,
            size: q,
        })
        .collect();
    let (bufs, p, why) =
        plan_segments(&f, Op::Read, &side_by_side, 0, Some("test".into())).expect("plan");
    assert!(why.is_some());
    assert_eq!(bufs.len(), 1, "one buffer, once");
    assert_eq!(p.len(), 1, "one read");
    assert_eq!(
        p[0].more,
        vec![(0, 0, 64 << 10)],
        "one destination: one copy"
    );
    let apart: Vec<Segment<'_>> = four
        .iter()
        .map(|b| Segment {
            buffer: b,
            offset: 0,
            size: q,
        })
        .collect();
    let (bufs, p, _) = plan_segments(&f, Op::Read, &apart, 0, Some("test".into())).expect("plan");
    assert_eq!((bufs.len(), p.len()), (4, 1), "one read");
    let dests: Vec<usize> = p[0].more.iter().map(|d| d.0).collect();
    assert_eq!(dests, vec![0, 1, 2, 3], "a copy into each buffer");
    // one buffer, but not side by side: a copy per segment
    let gaps: Vec<Segment<'_>> = (0..2)
        .map(|i| Segment {
            buffer: &one,
            offset: i * 2 * q,
            size: q,
        })
        .collect();
    let (bufs, p, _) = plan_segments(&f, Op::Read, &gaps, 0, Some("test".into())).expect("plan");
    assert_eq!((bufs.len(), p.len()), (1, 1));
    assert_eq!(p[0].more, vec![(0, 0, q), (0, 2 * q, q)]);
}
