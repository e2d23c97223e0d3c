use std::process::Command;

fn fgds() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fgds"))
}

#[test]
fn list_without_module() {
    let out = fgds().arg("list").output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    if !std::path::Path::new("/sys/module/fgds").exists() {
        assert!(s.contains("the fgds module is not loaded"), "{s}");
    }
    let out = fgds().args(["list", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["devices"].is_array());
}

#[test]
fn check_temp_file() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("f");
    std::fs::write(&p, vec![1u8; 8192]).unwrap();
    let out = fgds()
        .args(["check", p.to_str().unwrap()])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("O_DIRECT: yes"), "{s}");
    assert!(s.contains("verdict:"), "{s}");
    if std::fs::read_dir("/sys/class/misc")
        .map(|r| {
            r.flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with("fgds"))
        })
        .unwrap_or(true)
    {
        assert_eq!(out.status.code(), Some(1));
        assert!(s.contains("P2P I/O cannot work"), "{s}");
    }
    let out = fgds()
        .args(["check", "--json", p.to_str().unwrap()])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["file"]["o_direct"], true);
    assert!(v["file"]["block_device"].is_string());
    // tmpfs is not a block device
    let t = tempfile::tempdir_in("/dev/shm").unwrap();
    let q = t.path().join("g");
    std::fs::write(&q, b"x").unwrap();
    let out = fgds()
        .args(["check", q.to_str().unwrap()])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("not on a block device"), "{s}");
}

/// The bare io_uring loop (`--uring`) runs next to the Batch API, reading
/// and writing, and each moves the bytes asked for.
#[test]
fn bench_uring_loop_next_to_batch() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = d.path().join("u");
    for rw in ["read", "write"] {
        let out = fgds()
            .args([
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
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{rw}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
    let out = fgds()
        .args([
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
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["engine"], "fgds");
    assert_eq!(r[0]["bytes"], 8 << 20);
    assert_eq!(r[0]["direct_bytes"], 8 << 20);
    assert_eq!(r[1]["engine"], "pread-pool");
    assert_eq!(r[1]["bytes"], 8 << 20);
    let out = fgds()
        .args([
            "bench",
            "-f",
            p.to_str().unwrap(),
            "--mem",
            "cuda",
            "-s",
            "1M",
        ])
        .output()
        .unwrap();
    if !out.status.success() {
        // no GPU/CUDA on the host: the error must say so
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("CUDA"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
