mod common;
use common::*;
use fgds::{Batch, Config, Error, IoParams, IoTarget, Op, OwnedSegment, Status};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn async_read_and_write() {
    let d = tmpdir();
    let data = random_bytes(300_000, 31);
    let p = file_with(&d, "f", &data);
    let f = Arc::new(open_rw(&p, batch_config()));
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
    let (_d, data, f) = batch_file(1 << 20, 33);
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
    let f = Arc::new(open_rw(&p, batch_config()));
    let b = Arc::new(host(65536));
    assert!(Batch::new(0).is_err());
    let mut batch = Batch::new(2).unwrap();
    let mk = |cookie, size| plain_request(&f, &b, cookie, Op::Read, 0, 0, size);
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
    let ro = Arc::new(fgds::FileHandle::open(&p, libc::O_RDONLY, 0, batch_config()).unwrap());
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
        .map(|i| plain_request(&f, &b, i, Op::Read, 0, 0, 4 << 20))
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

/// Requests on the ring and on the I/O threads in one wait; a direct read
/// that comes back short (the end of the file) is finished by the engine.
#[test]
fn batch_ring_and_threads_together() {
    let len = 256 * 1024 + 1000;
    let (_d, data, f) = batch_file(len, 38);
    let b = Arc::new(host(1 << 20));
    let mut batch = Batch::new(128).unwrap();
    let mut params = Vec::new();
    for i in 0..60usize {
        // aligned 4 KiB: the ring
        params.push(block_request(&f, &b, Op::Read, i));
    }
    for i in 0..4usize {
        // unaligned and larger than a chunk: the engine on the I/O threads
        params.push(plain_request(
            &f,
            &b,
            100 + i as u64,
            Op::Read,
            (i * 3000 + 7) as u64,
            256 * 1024 + i * 100_000,
            70_000,
        ));
    }
    // 8 KiB at the last 4 KiB boundary: 1000 bytes are there.
    params.push(plain_request(
        &f,
        &b,
        200,
        Op::Read,
        256 * 1024,
        700 * 1024,
        8192,
    ));
    batch.submit(&params).unwrap();
    let mut ev = Vec::new();
    while ev.len() < params.len() {
        let got = batch.wait(params.len(), Some(Duration::from_secs(30)));
        assert!(got.iter().all(|e| e.status != Status::Timeout), "{got:?}");
        ev.extend(got);
    }
    ev.sort_by_key(|e| e.cookie);
    for e in &ev {
        let want = match e.cookie {
            0..=59 => 4096,
            100..=103 => 70_000,
            _ => 1000,
        };
        assert_eq!((e.status, e.result), (Status::Complete, want), "{e:?}");
    }
    assert_same(&b.read_bytes(0, 60 * 4096).unwrap(), &data[..60 * 4096]);
    for i in 0..4usize {
        let o = i * 3000 + 7;
        assert_same(
            &b.read_bytes(256 * 1024 + i * 100_000, 70_000).unwrap(),
            &data[o..o + 70_000],
        );
    }
    assert_same(
        &b.read_bytes(700 * 1024, 1000).unwrap(),
        &data[256 * 1024..],
    );
    assert_eq!(batch.in_flight(), 0);
}

/// A request on the ring that must move to an I/O thread (it came back
/// short at the end of the file) after the batch was cancelled ends
/// Canceled there: the cancel reaches it although it had no worker-thread
/// flag when cancel() ran.
#[test]
fn batch_ring_cancel_follows_to_the_engine() {
    let (_d, data, f) = batch_file(4096 + 1000, 40);
    let b = Arc::new(host(8192));
    // 8 KiB at offset 4096: aligned, one chunk, so on the ring; 1000
    // bytes are there.
    let short = plain_request(&f, &b, 7, Op::Read, 4096, 0, 8192);
    let mut batch = Batch::new(1).unwrap();
    batch.submit(std::slice::from_ref(&short)).unwrap();
    // Nothing has been reaped yet: the completion (short or ECANCELED) is
    // seen after cancel().
    assert_eq!(batch.cancel(), 1);
    let ev = batch.wait(1, Some(Duration::from_secs(30)));
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].cookie, ev[0].status, ev[0].result),
        (7, Status::Canceled, -i64::from(libc::ECANCELED))
    );
    // Not cancelled, the engine finishes it.
    batch.submit(std::slice::from_ref(&short)).unwrap();
    let ev = batch.wait(1, Some(Duration::from_secs(30)));
    assert_eq!((ev[0].status, ev[0].result), (Status::Complete, 1000));
    assert_same(&b.read_bytes(0, 1000).unwrap(), &data[4096..]);
}

/// Cancelling and dropping a batch with requests on its ring: each ends
/// Complete (with its bytes) or Canceled, and dropping waits for the rest.
#[test]
fn batch_ring_cancel_and_drop() {
    const N: usize = 2048;
    let (_d, data, f) = batch_file(N * 4096, 39);
    let b = Arc::new(host(N * 4096));
    let mut batch = Batch::new(N).unwrap();
    let params: Vec<IoParams> = (0..N).map(|i| block_request(&f, &b, Op::Read, i)).collect();
    batch.submit(&params).unwrap();
    batch.cancel();
    let mut ev = Vec::new();
    while batch.in_flight() > 0 {
        ev.extend(batch.wait(N, Some(Duration::from_secs(60))));
    }
    assert_eq!(ev.len(), N);
    for e in &ev {
        match e.status {
            Status::Complete => {
                assert_eq!(e.result, 4096);
                let o = e.cookie as usize * 4096;
                assert_same(&b.read_bytes(o, 4096).unwrap(), &data[o..o + 4096]);
            }
            Status::Canceled => assert_eq!(e.result, -i64::from(libc::ECANCELED)),
            _ => panic!("{e:?}"),
        }
    }
    // Dropped with everything in flight: returns once the kernel is done.
    let mut batch = Batch::new(N).unwrap();
    batch.submit(&params).unwrap();
    drop(batch);
    let mut again = Batch::new(1).unwrap();
    again.submit(&params[..1]).unwrap();
    let e = again.wait(1, Some(Duration::from_secs(30)));
    assert_eq!((e[0].status, e[0].result), (Status::Complete, 4096));
}
