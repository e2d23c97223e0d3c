//! The batch's own ring, alone in this test program: nothing else here
//! starts the library's I/O threads, so their absence shows that the
//! requests went on the ring.
mod common;
use common::*;
use fgds::{Batch, IoParams, Op, Status};
use std::sync::Arc;
use std::time::Duration;

/// Names of this process's threads that are the library's I/O threads.
fn io_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|c| c.starts_with("fgds-io"))
        .collect()
}

/// Many 4 KiB O_DIRECT requests kept in flight the way fio does (submit,
/// wait for one, submit again): they go on the batch's own ring, every byte
/// lands where it should, and the statistics count them as direct.
#[test]
fn batch_small_direct_requests_stream() {
    let d = tmpdir();
    const N: usize = 1024;
    let data = random_bytes(N * 4096, 36);
    let p = file_with(&d, "f", &data);
    let f = Arc::new(open_rw(&p, batch_config()));
    assert!(f.is_direct(), "{:?}", f.no_direct_reason());
    let b = Arc::new(host(N * 4096));
    let mut batch = Batch::new(64).unwrap();
    // A permutation of the blocks, so neighbours in the file are not
    // neighbours in time.
    let order: Vec<usize> = (0..N).map(|i| (i * 389) % N).collect();
    let (mut next, mut done) = (0, 0);
    while done < N {
        let room = 64 - batch.in_flight();
        let params: Vec<IoParams> = order[next..(next + room).min(N)]
            .iter()
            .map(|&blk| block_request(&f, &b, Op::Read, blk))
            .collect();
        next += params.len();
        batch.submit(&params).unwrap();
        for e in batch.wait(1, Some(Duration::from_secs(30))) {
            assert_eq!((e.status, e.result), (Status::Complete, 4096), "{e:?}");
            done += 1;
        }
    }
    assert_same(&b.read_bytes(0, N * 4096).unwrap(), &data);
    let st = f.stats();
    assert_eq!(
        (st.direct_ops, st.direct_bytes),
        (N as u64, (N * 4096) as u64)
    );
    assert_eq!(
        (st.bounce_bytes, st.fallbacks, st.read_bytes),
        (0, 0, (N * 4096) as u64)
    );

    // The same blocks written back from a buffer of other bytes.
    let src = random_bytes(N * 4096, 37);
    let w = Arc::new(host(N * 4096));
    w.write_bytes(0, &src).unwrap();
    for part in order.chunks(64) {
        let params: Vec<IoParams> = part
            .iter()
            .map(|&blk| block_request(&f, &w, Op::Write, blk))
            .collect();
        batch.submit(&params).unwrap();
        let ev = batch.wait(64, Some(Duration::from_secs(30)));
        assert_eq!(ev.len(), 64);
        assert!(
            ev.iter()
                .all(|e| e.status == Status::Complete && e.result == 4096),
            "{ev:?}"
        );
    }
    assert_same(&std::fs::read(&p).unwrap(), &src);
    assert_eq!(f.stats().write_bytes, (N * 4096) as u64);
    assert_eq!(
        io_threads(),
        Vec::<String>::new(),
        "the requests ran on I/O threads"
    );
}
