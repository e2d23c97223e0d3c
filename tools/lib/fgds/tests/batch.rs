mod common;
use common::*;
use fgds::{Batch, Config, Error, IoParams, IoTarget, Op, OwnedSegment, Status};
use std::sync::Arc;
use std::time::Duration;

fn cfg() -> Config {
    Config {
        chunk_size: 64 * 1024,
        queue_depth: 8,
        ..Config::default()
    }
}

#[test]
fn async_read_and_write() {
    let d = tmpdir();
    let data = random_bytes(300_000, 31);
    let p = file_with(&d, "f", &data);
    let f = Arc::new(open_rw(&p, cfg()));
    let b = Arc::new(host(300_000));
    let h = f.read_async(b.clone(), 0, 300_000, 0).unwrap();
    assert_eq!(h.wait().unwrap(), 300_000);
    assert_same(&b.read_bytes(0, 300_000).unwrap(), &data);
    let src = random_bytes(5000, 32);
    let w = Arc::new(host(8192));
    w.write_bytes(1, &src).unwrap();
    let mut h = f.write_async(w.clone(), 1, 5000, 77).unwrap();
    let r = loop {
        if let Some(r) = h.poll() {
            break r;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(r.unwrap(), 5000);
    assert_same(&std::fs::read(&p).unwrap()[77..5077], &src);
    assert!(matches!(
        f.read_async(b, 299_999, 2, 0),
        Err(Error::OutOfBounds { .. })
    ));
}

#[test]
fn batch_mixed_plain_and_vectored() {
    let d = tmpdir();
    let data = random_bytes(1 << 20, 33);
    let p = file_with(&d, "f", &data);
    let f = Arc::new(open_rw(&p, cfg()));
    let b = Arc::new(host(1 << 20));
    let mut batch = Batch::new(8).unwrap();
    let mut params = Vec::new();
    for i in 0..4u64 {
        params.push(IoParams {
            cookie: 100 + i,
            file: f.clone(),
            op: Op::Read,
            file_off: i * 65536 + i,
            target: IoTarget::Plain {
                buffer: b.clone(),
                buf_off: (i as usize) * 65536,
                size: 60_000,
            },
        });
    }
    params.push(IoParams {
        cookie: 999,
        file: f.clone(),
        op: Op::Read,
        file_off: 512 * 1024,
        target: IoTarget::Vectored(vec![
            OwnedSegment {
                buffer: b.clone(),
                offset: 512 * 1024,
                size: 4096,
            },
            OwnedSegment {
                buffer: b.clone(),
                offset: 600 * 1024,
                size: 8192,
            },
        ]),
    });
    batch.submit(&params).unwrap();
    assert_eq!(batch.in_flight(), 5);
    let mut ev = batch.wait(5, Some(Duration::from_secs(30)));
    ev.sort_by_key(|e| e.cookie);
    assert_eq!(ev.len(), 5);
    for (i, e) in ev.iter().take(4).enumerate() {
        assert_eq!(
            (e.cookie, e.status, e.result),
            (100 + i as u64, Status::Complete, 60_000)
        );
        let off = i * 65536 + i;
        assert_same(
            &b.read_bytes(i * 65536, 60_000).unwrap(),
            &data[off..off + 60_000],
        );
    }
    assert_eq!(
        (ev[4].cookie, ev[4].status, ev[4].result),
        (999, Status::Complete, 12288)
    );
    assert_same(
        &b.read_bytes(512 * 1024, 4096).unwrap(),
        &data[512 * 1024..516 * 1024],
    );
    assert_same(
        &b.read_bytes(600 * 1024, 8192).unwrap(),
        &data[516 * 1024..524 * 1024],
    );
    assert_eq!(batch.in_flight(), 0);
    assert!(batch.poll().is_empty());
}

#[test]
fn batch_capacity_and_errors() {
    let d = tmpdir();
    let p = file_with(&d, "f", &random_bytes(65536, 34));
    let f = Arc::new(open_rw(&p, cfg()));
    let b = Arc::new(host(65536));
    assert!(Batch::new(0).is_err());
    let mut batch = Batch::new(2).unwrap();
    let mk = |cookie, size| IoParams {
        cookie,
        file: f.clone(),
        op: Op::Read,
        file_off: 0,
        target: IoTarget::Plain {
            buffer: b.clone(),
            buf_off: 0,
            size,
        },
    };
    match batch.submit(&[mk(1, 4096), mk(2, 4096), mk(3, 4096)]) {
        Err(
            e @ Error::BatchFull {
                capacity: 2,
                in_flight: 0,
                requested: 3,
            },
        ) => assert_eq!(e.errno(), libc::EAGAIN),
        o => panic!("{o:?}"),
    }
    assert_eq!(batch.in_flight(), 0, "all or nothing");
    match batch.submit(&[mk(1, 4096), mk(2, 1 << 20)]) {
        Err(Error::Segment { index: 1, .. }) => {}
        o => panic!("{o:?}"),
    }
    batch.submit(&[mk(1, 4096)]).unwrap();
    assert!(matches!(
        batch.submit(&[mk(2, 4096), mk(3, 4096)]),
        Err(Error::BatchFull { in_flight: 1, .. })
    ));
    let ev = batch.wait(1, None);
    assert_eq!(ev[0].status, Status::Complete);
    // too many segments in one batch element
    let segs: Vec<OwnedSegment> = (0..129)
        .map(|i| OwnedSegment {
            buffer: b.clone(),
            offset: i * 4,
            size: 4,
        })
        .collect();
    let v = IoParams {
        cookie: 5,
        file: f.clone(),
        op: Op::Read,
        file_off: 0,
        target: IoTarget::Vectored(segs),
    };
    assert!(matches!(
        batch.submit(&[v]),
        Err(Error::Segment { index: 0, .. })
    ));
    // failing request reports a negative errno
    let ro = Arc::new(fgds::FileHandle::open(&p, libc::O_RDONLY, 0, cfg()).unwrap());
    let w = IoParams {
        cookie: 6,
        file: ro,
        op: Op::Write,
        file_off: 0,
        target: IoTarget::Plain {
            buffer: b.clone(),
            buf_off: 0,
            size: 4096,
        },
    };
    batch.submit(&[w]).unwrap();
    let ev = batch.wait(1, Some(Duration::from_secs(30)));
    assert_eq!(
        (ev[0].cookie, ev[0].status, ev[0].result),
        (6, Status::Failed, -i64::from(libc::EBADF))
    );
}

#[test]
fn batch_cancel_and_timeout() {
    let d = tmpdir();
    let data = random_bytes(4 << 20, 35);
    let p = file_with(&d, "f", &data);
    // sync backend with 4 KiB chunks and qd 1: slow enough to cancel mid-way
    let f = Arc::new(open_rw(
        &p,
        Config {
            chunk_size: 4096,
            queue_depth: 1,
            use_io_uring: false,
            ..Config::default()
        },
    ));
    let b = Arc::new(host(4 << 20));
    let mut batch = Batch::new(64).unwrap();
    let params: Vec<IoParams> = (0..64u64)
        .map(|i| IoParams {
            cookie: i,
            file: f.clone(),
            op: Op::Read,
            file_off: 0,
            target: IoTarget::Plain {
                buffer: b.clone(),
                buf_off: 0,
                size: 4 << 20,
            },
        })
        .collect();
    batch.submit(&params).unwrap();
    let ev = batch.wait(64, Some(Duration::from_millis(1)));
    assert!(ev.iter().any(|e| e.status == Status::Timeout), "{ev:?}");
    let n = batch.cancel();
    assert!(n > 0);
    let mut all = Vec::new();
    while batch.in_flight() > 0 {
        all.extend(
            batch
                .wait(64, Some(Duration::from_secs(60)))
                .into_iter()
                .filter(|e| e.status != Status::Timeout),
        );
    }
    let canceled = all.iter().filter(|e| e.status == Status::Canceled).count();
    let complete = all.iter().filter(|e| e.status == Status::Complete).count();
    assert!(canceled > 0, "{all:?}");
    assert_eq!(canceled + complete + 64 - all.len(), 64);
    for e in all.iter().filter(|e| e.status == Status::Canceled) {
        assert_eq!(e.result, -i64::from(libc::ECANCELED));
    }
    for e in all.iter().filter(|e| e.status == Status::Complete) {
        assert_eq!(e.result, 4 << 20);
    }
    drop(batch);
}
