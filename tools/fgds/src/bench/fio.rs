//! fio's io_uring engine as a row of `fgds bench` (--fio): its command
//! line for the same workload, and what its JSON report says.

use super::measure::{Cpu, Measured};
use super::workload::{geometry, BenchArgs, Geometry, Pattern, Rw};

/// What fio's JSON report says about the job.
#[derive(Debug)]
struct FioOut {
    bytes: u64,
    runtime_s: f64,
    lat_ns: f64,
    cpu: Cpu,
}

fn fio_parse(stdout: &str, rw: Rw) -> Result<FioOut, String> {
    let start = stdout.find('{').ok_or("no JSON document in fio's output")?;
    let v: serde_json::Value =
        serde_json::from_str(&stdout[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let j = &v["jobs"][0];
    if j.is_null() {
        return Err("fio JSON has no jobs".into());
    }
    if let Some(e) = j["error"].as_i64().filter(|e| *e != 0) {
        return Err(format!("fio job error {e}"));
    }
    let sec = match rw {
        Rw::Read => &j["read"],
        Rw::Write => &j["write"],
    };
    let num = |v: &serde_json::Value, what: &str| {
        v.as_f64()
            .ok_or_else(|| format!("fio JSON lacks a number for {what}"))
    };
    let runtime_ms = num(&sec["runtime"], "runtime")?;
    let job_ms = num(&j["job_runtime"], "job_runtime")?;
    let usr = num(&j["usr_cpu"], "usr_cpu")?;
    let sys = num(&j["sys_cpu"], "sys_cpu")?;
    Ok(FioOut {
        bytes: sec["io_bytes"].as_u64().ok_or("fio JSON lacks io_bytes")?,
        runtime_s: runtime_ms / 1000.0,
        lat_ns: sec["lat_ns"]["mean"].as_f64().unwrap_or(0.0),
        cpu: Cpu {
            user: usr / 100.0 * job_ms / 1000.0,
            sys: sys / 100.0 * job_ms / 1000.0,
            ctx: j["ctx"].as_u64().unwrap_or(0),
        },
    })
}

fn fio_args(a: &BenchArgs, g: Geometry) -> Vec<String> {
    let rw = match (a.rw, a.pattern) {
        (Rw::Read, Pattern::Seq) => "read",
        (Rw::Read, Pattern::Rand) => "randread",
        (Rw::Write, Pattern::Seq) => "write",
        (Rw::Write, Pattern::Rand) => "randwrite",
    };
    // fio separates several file names with ':'.
    let name = a.file.to_string_lossy().replace(':', "\\:");
    vec![
        "--name=fgds-bench".into(),
        format!("--filename={name}"),
        "--ioengine=io_uring".into(),
        "--direct=1".into(),
        format!("--rw={rw}"),
        format!("--bs={}", g.req),
        format!("--iodepth={}", g.inflight),
        "--numjobs=1".into(),
        format!("--size={}", (g.span / g.req).max(1) * g.req),
        format!("--io_size={}", a.size / g.req * g.req),
        "--norandommap".into(),
        "--randrepeat=0".into(),
        "--output-format=json".into(),
    ]
}

pub(super) fn run_fio(a: &BenchArgs) -> Result<Measured, fgds::Error> {
    let g = geometry(a);
    let args = fio_args(a, g);
    let before = Cpu::now(libc::RUSAGE_CHILDREN)?;
    let out = std::process::Command::new("fio")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| fgds::Error::Io {
            op: if e.kind() == std::io::ErrorKind::NotFound {
                "--fio: fio is not on PATH; install it (as root) with `apt-get install fio`".into()
            } else {
                "--fio: cannot run fio".into()
            },
            source: e,
        })?;
    let whole = Cpu::now(libc::RUSAGE_CHILDREN)?.since(before);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let fail = |why: String| fgds::Error::Io {
        op: format!("fio {}", args.join(" ")),
        source: std::io::Error::other(format!("{why}; stderr: {}", stderr.trim())),
    };
    if !out.status.success() {
        return Err(fail(format!("{}", out.status)));
    }
    let f = fio_parse(&String::from_utf8_lossy(&out.stdout), a.rw).map_err(fail)?;
    Ok(Measured {
        bytes: f.bytes,
        secs: f.runtime_s,
        lat_ns: f.lat_ns as u64,
        lat_count: 1,
        cpu: f.cpu,
        stats: None,
        cpu_process: Some(whole.user + whole.sys),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::workload::args_of;

    #[test]
    fn fio_command_and_json() {
        let a = args_of(&[
            "--rw",
            "read",
            "--pattern",
            "rand",
            "-b",
            "4K",
            "-t",
            "8",
            "-q",
            "1",
            "-s",
            "64M",
            "--file-size",
            "4G",
        ]);
        let v = fio_args(&a, geometry(&a)).join(" ");
        for want in [
            "--rw=randread",
            "--bs=4096",
            "--iodepth=8",
            "--direct=1",
            "--ioengine=io_uring",
            "--size=4294967296",
            "--io_size=67108864",
        ] {
            assert!(v.contains(want), "{v}");
        }
        let out = r#"note: a warning line
{ "fio version": "fio-3.33",
  "jobs": [ { "jobname": "fgds-bench", "error": 0, "job_runtime": 2000, "ctx": 42,
      "usr_cpu": 5.0, "sys_cpu": 20.0,
      "read": { "io_bytes": 1073741824, "runtime": 2000, "iops": 128.0,
                "lat_ns": { "mean": 7000.0 } },
      "write": { "io_bytes": 0, "runtime": 0, "lat_ns": { "mean": 0.0 } } } ] }"#;
        let f = fio_parse(out, Rw::Read).unwrap();
        assert_eq!(f.bytes, 1 << 30);
        assert!((f.runtime_s - 2.0).abs() < 1e-9);
        assert!((f.cpu.user - 0.1).abs() < 1e-9);
        assert!((f.cpu.sys - 0.4).abs() < 1e-9);
        assert_eq!(f.cpu.ctx, 42);
        assert!(fio_parse("fio: no such option", Rw::Read).is_err());
        assert!(fio_parse(r#"{"jobs": []}"#, Rw::Read).is_err());
    }
}
