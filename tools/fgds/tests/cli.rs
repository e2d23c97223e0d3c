mod common;

use common::{fgds, no_fgds_nodes};
use std::process::Output;

/// `fgds ARGS`, run to its end.
fn run(args: &[&str]) -> Output {
    fgds().args(args).output().unwrap()
}

/// The run succeeded; else its stderr is the failure.
fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn list_without_module() {
    let out = run(&["list"]);
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    if !std::path::Path::new("/sys/module/fgds").exists() {
        assert!(s.contains("the fgds module is not loaded"), "{s}");
    }
    let out = run(&["list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["devices"].is_array());
}

#[test]
fn check_temp_file() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("f");
    std::fs::write(&p, vec![1u8; 8192]).unwrap();
    let out = run(&["check", p.to_str().unwrap()]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("O_DIRECT: yes"), "{s}");
    assert!(s.contains("verdict:"), "{s}");
    if no_fgds_nodes() {
        assert_eq!(out.status.code(), Some(1));
        assert!(s.contains("P2P I/O cannot work"), "{s}");
    }
    let out = run(&["check", "--json", p.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["file"]["o_direct"], true);
    assert!(v["file"]["block_device"].is_string());
    // tmpfs is not a block device
    let t = tempfile::tempdir_in("/dev/shm").unwrap();
    let q = t.path().join("g");
    std::fs::write(&q, b"x").unwrap();
    let out = run(&["check", q.to_str().unwrap()]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("not on a block device"), "{s}");
}

/// The JSON a run printed; it must have succeeded (else its stderr, after
/// `what`, is the failure).
fn json_of(out: &Output, what: &str) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The bare io_uring loop (`--uring`) runs next to the Batch API, reading
/// and writing, and each moves the bytes asked for.
#[test]
fn bench_uring_loop_next_to_batch() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("u");
    for rw in ["read", "write"] {
        let out = run(&[
            "bench",
            "-f",
            p.to_str().unwrap(),
            "--rw",
            rw,
            "--pattern",
            "rand",
            "--file-size",
            "4M",
            "-s",
            "1M",
            "-b",
            "4K",
            "--chunk",
            "4K",
            "-q",
            "1",
            "-t",
            "4",
            "--batch",
            "--uring",
            "--repeat",
            "2",
            "--json",
        ]);
        let v = json_of(&out, rw);
        assert_eq!(v["in_flight"], 4, "{rw}");
        let r = v["results"].as_array().unwrap();
        let names: Vec<_> = r.iter().map(|x| x["engine"].as_str().unwrap()).collect();
        assert_eq!(names, ["fgds", "fgds-batch", "io_uring-loop"], "{rw}");
        for x in r {
            // two rounds of 1 MiB each
            assert_eq!(x["bytes"], 2 << 20, "{rw} {}", x["engine"]);
            assert_eq!(x["runs"], 2, "{rw} {}", x["engine"]);
        }
    }
}

#[test]
fn bench_small_with_baseline_json() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("b");
    let out = run(&[
        "bench",
        "-f",
        p.to_str().unwrap(),
        "-s",
        "8M",
        "-b",
        "256K",
        "-t",
        "2",
        "--baseline",
        "--json",
        "--chunk",
        "64K",
        "-q",
        "4",
    ]);
    let v = json_of(&out, "bench --baseline");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["engine"], "fgds");
    assert_eq!(r[0]["bytes"], 8 << 20);
    assert_eq!(r[0]["direct_bytes"], 8 << 20);
    assert_eq!(r[1]["engine"], "pread-pool");
    assert_eq!(r[1]["bytes"], 8 << 20);
    let out = run(&[
        "bench",
        "-f",
        p.to_str().unwrap(),
        "--mem",
        "cuda",
        "-s",
        "1M",
    ]);
    if !out.status.success() {
        // no GPU/CUDA on the host: the error must say so
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("CUDA"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A file of the user's: bytes that are not the benchmark's fill pattern.
fn users_file(p: &std::path::Path, len: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(p, &data).unwrap();
    data
}

fn bench(p: &std::path::Path, extra: &[&str]) -> Output {
    let mut args = vec!["bench", "-f", p.to_str().unwrap(), "-b", "1M", "--json"];
    args.extend_from_slice(extra);
    run(&args)
}

/// Issue 19: `fgds bench --rw read -s 32M` on an existing 10 MiB file of the
/// user's rewrote it from byte 8388609 and grew it to 32 MiB. It must stop
/// before it starts, name --overwrite, and leave the file as it was; with
/// --overwrite it may grow the file but keeps every byte already there.
#[test]
fn bench_read_does_not_grow_a_users_file() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("users.bin");
    let data = users_file(&p, 10 << 20);
    let out = bench(&p, &["--rw", "read", "-s", "32M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--overwrite"), "{err}");
    assert!(err.contains("not created by fgds bench"), "{err}");
    assert!(out.stdout.is_empty(), "nothing ran");
    assert_eq!(std::fs::read(&p).unwrap(), data, "the file was changed");

    let out = bench(&p, &["--rw", "read", "-s", "32M", "--overwrite"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("--overwrite: will grow it"), "{err}");
    let now = std::fs::read(&p).unwrap();
    assert_eq!(now.len(), 32 << 20);
    assert!(
        now[..data.len()] == data[..],
        "bytes already there were rewritten"
    );
}

/// A read run on a user's file that is large enough only reads it; a write
/// run on it is refused without --overwrite.
#[test]
fn bench_write_does_not_overwrite_a_users_file() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("users.bin");
    let data = users_file(&p, 4 << 20);
    let out = bench(&p, &["--rw", "read", "-s", "4M"]);
    assert_ok(&out);
    assert_eq!(std::fs::read(&p).unwrap(), data);
    let out = bench(&p, &["--rw", "write", "-s", "4M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--overwrite") && err.contains("overwrite its first"),
        "{err}"
    );
    assert_eq!(std::fs::read(&p).unwrap(), data, "the file was changed");
    let out = bench(&p, &["--rw", "write", "-s", "4M", "--overwrite"]);
    assert_ok(&out);
    assert_ne!(std::fs::read(&p).unwrap(), data);
}

/// A file fgds bench created is its own: later runs grow and write it
/// without --overwrite, and the first run says it creates it.
#[test]
fn bench_grows_and_writes_its_own_file() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("own.bin");
    let out = bench(&p, &["--rw", "read", "-s", "2M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("creating it"), "{err}");
    let first = std::fs::read(&p).unwrap();
    assert_eq!(first.len(), 2 << 20);
    let out = bench(&p, &["--rw", "read", "-s", "12M"]);
    assert_ok(&out);
    let grown = std::fs::read(&p).unwrap();
    assert_eq!(grown.len(), 12 << 20);
    assert!(grown[..first.len()] == first[..]);
    // the fill is position-dependent, whatever the run that wrote it
    let fresh = d.path().join("fresh.bin");
    let out = bench(&fresh, &["--rw", "read", "-s", "12M"]);
    assert!(out.status.success());
    assert!(
        std::fs::read(&fresh).unwrap() == grown,
        "grown file differs from a fresh fill"
    );
    let out = bench(&p, &["--rw", "write", "-s", "2M"]);
    assert_ok(&out);
}

/// An error of the tool ends with the hint of the library's one table of
/// error text (`fgds::error::ERRNOS`).
#[test]
fn errors_end_with_the_library_hint() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("no-such-dir").join("f");
    let out = bench(&p, &["-s", "1M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let want = format!("fgds: hint: {}\n", fgds::error::hint(libc::ENOENT));
    assert!(err.ends_with(&want), "{err}");
}

/// `fgds check`'s exit status: 1 when only the fallback can work (no fgds
/// node here), 2 when the check fails: a missing file is not "no P2P".
#[test]
fn check_exit_codes_and_json() {
    let no_nodes = no_fgds_nodes();
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("f");
    std::fs::write(&p, vec![1u8; 8192]).unwrap();
    let out = run(&["check", "--json", p.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if no_nodes {
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(v["verdict"], "fallback");
    }
    assert!(v["pci_gpus"].is_array());
    let opts = v["kernel"]["options"].as_array().unwrap();
    for name in ["CONFIG_PCI_P2PDMA", "CONFIG_ZONE_DEVICE", "CONFIG_FGDS"] {
        assert!(opts.iter().any(|o| o["name"] == name), "{name}");
    }
    for pr in v["problems"].as_array().unwrap() {
        assert!(pr["what"].is_string() && pr["next"].is_string(), "{pr}");
    }

    let missing = d.path().join("missing");
    let out = run(&["check", "--json", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "error");
    assert!(v["file"]["error"]
        .as_str()
        .unwrap()
        .contains("No such file"));
    let out = run(&["check", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("verdict: the check failed"));
}

/// The FGDS_* configuration: shown by `fgds check`, and a bad value is a
/// clear error naming the variable, in check and wherever a file is opened.
#[test]
fn fgds_environment() {
    let out = fgds()
        .args(["check", "--json"])
        .env("FGDS_CHUNK_SIZE", "256K")
        .env("FGDS_STRICT", "1")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let vars = v["config"]["vars"].as_array().unwrap();
    let var = |n: &str| vars.iter().find(|x| x["name"] == n).unwrap().clone();
    assert_eq!(var("FGDS_CHUNK_SIZE")["value"], "262144");
    assert_eq!(var("FGDS_CHUNK_SIZE")["given"], "256K");
    assert_eq!(var("FGDS_STRICT")["value"], "1");
    assert_eq!(var("FGDS_QUEUE_DEPTH")["set"], false);
    assert_eq!(var("FGDS_QUEUE_DEPTH")["value"], "16");
    for n in ["FGDS_THREADS", "FGDS_IO_URING"] {
        assert!(var(n)["default"].is_string(), "{n}");
    }
    let out = fgds()
        .args(["check"])
        .env("FGDS_QUEUE_DEPTH", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("error: FGDS_QUEUE_DEPTH=\"0\""), "{s}");
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = fgds()
        .args([
            "bench",
            "-f",
            d.path().join("b").to_str().unwrap(),
            "-s",
            "1M",
        ])
        .env("FGDS_THREADS", "many")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("FGDS_THREADS=\"many\""), "{e}");
}
