//! `fgds validate` as a user runs it: its report parsed against the format
//! documented in tools/fgds/README.md ("Report format"), the Markdown against
//! the JSON, its exit codes, and that it leaves no file behind and never
//! overwrites one.

mod common;

use common::{fgds, no_fgds_nodes};
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

/// The JSON fields the README documents: `a.b`, `a[].b`.
fn documented_fields() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("tools/fgds/README.md");
    let start = readme
        .find("### Report format")
        .expect("README has a Report format section");
    let mut out = BTreeSet::new();
    for line in readme[start..].lines() {
        if line.starts_with("## ") {
            break;
        }
        let Some(first) = line.strip_prefix("| `") else {
            continue;
        };
        let col = format!("`{}", first.split(" |").next().unwrap_or_default());
        for name in col.split(", ") {
            let name = name.trim().trim_matches('`');
            if !name.is_empty() && !name.contains(' ') {
                out.insert(name.to_string());
            }
        }
    }
    assert!(out.len() > 30, "too few documented fields: {out:?}");
    out
}

/// Every field path of a JSON value.
fn fields(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                let p = match x {
                    Value::Array(_) => format!("{p}[]"),
                    _ => p,
                };
                out.insert(p.clone());
                fields(x, &p, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                fields(x, prefix, out);
            }
        }
        _ => {}
    }
}

/// The rows of the Markdown table under `## title`, as cells; the header
/// must be `header`, and every row as wide.
fn table(md: &str, title: &str, header: &[&str]) -> Vec<Vec<String>> {
    let start = md
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("no section {title}:\n{md}"));
    let cells = |l: &str| -> Vec<String> {
        l.trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().to_string())
            .collect()
    };
    let mut lines = md[start + title.len() + 5..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    assert_eq!(
        cells(lines.next().unwrap_or_default()),
        header,
        "{title} header"
    );
    assert_eq!(
        cells(lines.next().unwrap_or_default()),
        vec!["---"; header.len()],
        "{title} rule"
    );
    let rows: Vec<Vec<String>> = lines.map(cells).collect();
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{title}: {r:?}");
    }
    rows
}

fn label(gpu: &Value) -> String {
    gpu.as_u64()
        .map_or("host".to_string(), |i| format!("gpu{i}"))
}

#[test]
fn report_matches_its_documented_format() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let json_path = d.path().join("report.json");
    let work = d.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let out = fgds()
        .args([
            "validate",
            "--size",
            "2M",
            "--bench-size",
            "4M",
            "--seed",
            "77",
        ])
        .arg("--dir")
        .arg(&work)
        .arg("--json")
        .arg(&json_path)
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&out.stdout).into_owned();
    let r: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let code = out.status.code().unwrap();
    assert_eq!(Some(code as u64), r["exit_code"].as_u64(), "{md}");
    assert!((0..=3).contains(&code));
    if no_fgds_nodes() {
        assert_eq!(code, 1, "without the module P2P is blocked:\n{md}");
        assert_eq!(r["verdict"], "blocked");
        assert!(!r["blockers"].as_array().unwrap().is_empty());
        assert!(r["blockers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["why"].as_str().unwrap().contains("module is not loaded")));
    }
    assert_eq!(r["format"], "fgds-validate/1");
    assert_eq!(r["seed"], 77);

    check_report(&r, &md, code);
    for t in r["throughput"].as_array().unwrap() {
        assert_eq!(t["bytes"], 4 << 20, "{t}");
    }

    // Nothing left behind.
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);
}

/// Checks a report against the documented format, and its Markdown against its JSON.
fn check_report(r: &Value, md: &str, code: i32) {
    // Every field is documented, and every top-level one is there.
    let doc = documented_fields();
    let mut got = BTreeSet::new();
    fields(r, "", &mut got);
    let undocumented: Vec<_> = got.difference(&doc).collect();
    assert!(undocumented.is_empty(), "undocumented: {undocumented:?}");
    for top in doc.iter().filter(|f| !f.contains('.')) {
        assert!(got.contains(top), "documented {top} missing from {got:?}");
    }

    // The Markdown says what the JSON says.
    assert!(md.starts_with("# fgds validate report\n"), "{md}");
    assert!(md.contains("\n- format: fgds-validate/1\n"));
    assert!(md.contains(&format!(
        "\n- verdict: **{}** (exit {code})\n",
        r["verdict"].as_str().unwrap()
    )));
    assert!(md.contains(&format!("\n- seed: {}\n", r["seed"])));
    for g in r["gpus"].as_array().unwrap() {
        let head = format!(
            "\n## gpu{}: {}\n\n- source: {}\n",
            g["index"],
            g["description"].as_str().unwrap(),
            g["source"].as_str().unwrap()
        );
        assert!(md.contains(&head), "no {head:?} in\n{md}");
        assert!(md.contains(&format!("\n- probe: {}\n", g["probe"].as_str().unwrap())));
        assert!(md.contains(&format!(
            "\n- check: {} (exit {})\n",
            g["check_verdict"].as_str().unwrap(),
            g["check_exit_code"]
        )));
        for p in g["problems"].as_array().unwrap() {
            assert!(md.contains(&format!(
                "\n- problem: {} (next: {})\n",
                p["what"].as_str().unwrap(),
                p["next"].as_str().unwrap()
            )));
        }
    }
    let steps = table(md, "Steps", &["gpu", "step", "status", "detail"]);
    let js = r["steps"].as_array().unwrap();
    assert_eq!(steps.len(), js.len(), "{md}");
    for (row, s) in steps.iter().zip(js) {
        assert_eq!(row[0], label(&s["gpu"]));
        assert_eq!(row[1], s["name"].as_str().unwrap());
        assert_eq!(row[2], s["status"].as_str().unwrap());
    }
    assert_eq!(steps[0][1], "seeded write");
    assert_eq!(steps[0][2], "pass");
    let rows = table(
        md,
        "Throughput",
        &[
            "memory",
            "path",
            "op",
            "request",
            "in flight",
            "bytes",
            "seconds",
            "MiB/s",
            "vs host",
            "note",
        ],
    );
    let jt = r["throughput"].as_array().unwrap();
    assert_eq!(rows.len(), jt.len(), "{md}");
    for (row, t) in rows.iter().zip(jt) {
        assert_eq!(row[0], label(&t["gpu"]));
        assert_eq!(row[1], t["path"].as_str().unwrap());
        assert_eq!(row[2], t["op"].as_str().unwrap());
        assert_eq!(row[5], t["bytes"].to_string());
        assert_eq!(
            row[7].parse::<f64>().ok(),
            t["mib_per_s"].as_f64(),
            "{row:?}"
        );
        assert_eq!(row[6].parse::<f64>().ok(), t["seconds"].as_f64(), "{row:?}");
        assert!(t["mib_per_s"].as_f64().unwrap() > 0.0);
    }
    // The host ceiling of every read path is measured, whatever else ran.
    for p in ["pread", "preadv", "io_uring", "engine"] {
        assert!(
            jt.iter().any(|t| t["gpu"].is_null() && t["path"] == p),
            "no host {p} row"
        );
    }
    let blockers = r["blockers"].as_array().unwrap();
    if blockers.is_empty() {
        assert!(!md.contains("\n## Blockers\n"));
    } else {
        let sec = &md[md.find("\n## Blockers\n").unwrap()..];
        let n = sec.lines().filter(|l| l.starts_with("- ")).count();
        assert!(n >= blockers.len(), "{sec}");
        for b in blockers {
            assert!(sec.contains(b["why"].as_str().unwrap()));
        }
    }
}

/// The H200 machine's report (tools/fgds/examples/h200), made by
/// examples/gpu-validate.sh: a GPU section, the bounce and KvikIO rows.
#[test]
fn committed_gpu_machine_report_parses() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/h200");
    let md = std::fs::read_to_string(format!("{dir}/validate.md")).unwrap();
    let md = md.split("\nexit ").next().unwrap_or_default().to_string() + "\n";
    let r: Value =
        serde_json::from_slice(&std::fs::read(format!("{dir}/validate.json")).unwrap()).unwrap();
    assert_eq!(r["exit_code"], 1);
    assert_eq!(r["gpus"][0]["source"], "cuda");
    assert!(md.contains("\n## gpu0: CUDA device 0 "), "{md}");
    assert!(r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["name"] == "bounce read and write" && s["status"] == "pass"));
    check_report(&r, &md, 1);
}

/// `--dmabuf fd:N` names memory by an inherited descriptor (here a memfd,
/// which no fgds node takes): the run is blocked, not failed, the probe says
/// why it did not run, and the report says the memory has no CPU path.
#[test]
fn dmabuf_by_descriptor_is_blocked_not_failed() {
    use std::os::fd::AsRawFd;
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let mfd = std::fs::File::from(memfd());
    mfd.set_len(32 << 20).unwrap();
    let raw = mfd.as_raw_fd();
    let mut cmd = fgds();
    cmd.args([
        "validate",
        "--size",
        "2M",
        "--bench-size",
        "2M",
        "--json",
        "-",
    ])
    .args(["--dmabuf", "fd:3,size=16M"])
    .arg("--dir")
    .arg(d.path());
    pass_as_fd3(&mut cmd, raw);
    let out = cmd.output().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{r:#}");
    assert_eq!(r["verdict"], "blocked");
    let g = &r["gpus"][0];
    assert_eq!(g["source"], "dmabuf-fd");
    assert!(
        g["probe"]
            .as_str()
            .unwrap()
            .starts_with("not run: register"),
        "{g}"
    );
    assert!(g["readback"]
        .as_str()
        .unwrap()
        .contains("no independent path"));
    let steps = r["steps"].as_array().unwrap();
    assert!(steps.iter().all(|s| s["status"] != "fail"), "{steps:?}");
    assert!(steps
        .iter()
        .any(|s| s["name"] == "throughput bounce" && s["status"] == "skipped"));
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);

    // fgds check with the same: not probed, with the reason.
    let mut cmd = fgds();
    let f = d.path().join("f");
    std::fs::write(&f, vec![7u8; 8192]).unwrap();
    cmd.args(["check", "--json", "--dmabuf", "fd:3,size=1M"])
        .arg(&f);
    pass_as_fd3(&mut cmd, raw);
    let out = cmd.output().unwrap();
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &c["probes"][0];
    assert_eq!(p["ran"], false, "{p}");
    assert!(p["not_run"].as_str().unwrap().contains("register"), "{p}");
    assert_ne!(out.status.code(), Some(0));
}

/// Gives the child `fd` as its descriptor 3 (for `--dmabuf fd:3,...`).
fn pass_as_fd3(cmd: &mut Command, fd: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: dup2 in the child before exec; async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn memfd() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"fgds-test".as_ptr(), 0) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a new descriptor owned here.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// A vfio device that is not there: check and validate say which step
/// failed and why, and are blocked rather than failed.
#[test]
fn a_missing_vfio_device_is_named() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = d.path().join("f");
    std::fs::write(&f, vec![7u8; 8192]).unwrap();
    let out = fgds()
        .args(["check", "--json", "--dmabuf", "vfio:0000:ff:1f.7"])
        .arg(&f)
        .output()
        .unwrap();
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    let why = c["probes"][0]["not_run"].as_str().unwrap();
    assert!(
        why.contains("0000:ff:1f.7") && why.contains("vfio-pci"),
        "{why}"
    );
    assert_eq!(out.status.code(), Some(1));
    let out = fgds()
        .args([
            "validate",
            "--json",
            "-",
            "--size",
            "2M",
            "--bench-size",
            "2M",
        ])
        .args(["--dmabuf", "vfio:0000:ff:1f.7"])
        .arg("--dir")
        .arg(d.path())
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{r:#}");
    assert!(r["blockers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["step"] == "allocate" && b["why"].as_str().unwrap().contains("0000:ff:1f.7")));
    let out = fgds()
        .args(["check", "--dmabuf", "vfio:04:00.0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a PCI address"));
}

#[test]
fn never_overwrites_and_says_why() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let keep = d.path().join("keep.json");
    std::fs::write(&keep, b"mine\n").unwrap();
    let out = fgds()
        .args(["validate", "--size", "2M", "--bench-size", "2M"])
        .arg("--dir")
        .arg(d.path())
        .arg("--json")
        .arg(&keep)
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{md}");
    assert_eq!(std::fs::read(&keep).unwrap(), b"mine\n");
    assert!(md.contains("- verdict: **error** (exit 2)"), "{md}");
    assert!(md.contains("never overwritten"), "{md}");
    // it refused before making any file
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);

    for args in [
        vec!["--size", "1M"],
        vec!["--bench-size", "3M"],
        vec!["--dir", "/nonexistent/fgds"],
    ] {
        let out = fgds()
            .args(["validate", "--json", "-"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["verdict"], "error", "{args:?}");
        assert!(!r["errors"].as_array().unwrap().is_empty());
    }
}
