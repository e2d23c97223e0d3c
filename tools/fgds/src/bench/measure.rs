//! What a run measures and how it is shown: CPU time and context switches,
//! one engine's totals over its rounds, the rows of the report and the
//! table printed without --json.

use super::workload::{Geometry, Mem, Pattern, Rw};
use crate::human;
use std::path::PathBuf;

#[derive(serde::Serialize)]
pub(super) struct Result1 {
    pub(super) engine: String,
    /// Bytes per request the device sees.
    pub(super) request_size: u64,
    /// Requests in flight (at most).
    pub(super) in_flight: u64,
    pub(super) bytes: u64,
    pub(super) seconds: f64,
    pub(super) mib_per_s: f64,
    /// Requests of `request_size` per second.
    pub(super) iops: f64,
    pub(super) avg_latency_us: f64,
    pub(super) cpu_user_s: f64,
    pub(super) cpu_sys_s: f64,
    pub(super) cpu_seconds: f64,
    pub(super) cpu_s_per_gib: f64,
    /// Context switches of the run (fio: of its job).
    pub(super) ctx_switches: u64,
    /// fio only: CPU of the whole fio process tree (setup included).
    pub(super) cpu_seconds_process: Option<f64>,
    /// Rounds (--repeat) added up in this row.
    pub(super) runs: u32,
    /// MiB/s of each round, in the order they ran.
    pub(super) samples_mib_per_s: Vec<f64>,
    /// Library only: requests submitted (direct + bounce).
    pub(super) requests: Option<u64>,
    pub(super) direct_bytes: Option<u64>,
    pub(super) bounce_bytes: Option<u64>,
    pub(super) fallbacks: Option<u64>,
}

#[derive(serde::Serialize)]
pub(super) struct Report {
    pub(super) file: PathBuf,
    pub(super) file_size: u64,
    pub(super) rw: Rw,
    pub(super) pattern: Pattern,
    pub(super) block_size: u64,
    pub(super) queue_depth: u32,
    pub(super) chunk_size: u64,
    pub(super) threads: usize,
    pub(super) total: u64,
    pub(super) mem: Mem,
    pub(super) io_uring: bool,
    /// Bytes per request of every row (R).
    pub(super) request_size: u64,
    /// Requests in flight of every row (Q).
    pub(super) in_flight: u64,
    pub(super) results: Vec<Result1>,
}

/// CPU time of this process (or its waited-for children).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cpu {
    pub(super) user: f64,
    pub(super) sys: f64,
    /// Context switches, voluntary and involuntary.
    pub(super) ctx: u64,
}

impl Cpu {
    pub(super) fn now(who: libc::c_int) -> Result<Cpu, fgds::Error> {
        // SAFETY: zeroed rusage is a valid out value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid `who` and out pointer.
        if unsafe { libc::getrusage(who, &mut ru) } < 0 {
            return Err(fgds::Error::Io {
                op: "getrusage".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Ok(Cpu {
            user: s(ru.ru_utime),
            sys: s(ru.ru_stime),
            ctx: (ru.ru_nvcsw + ru.ru_nivcsw).max(0) as u64,
        })
    }

    pub(super) fn since(self, before: Cpu) -> Cpu {
        Cpu {
            user: (self.user - before.user).max(0.0),
            sys: (self.sys - before.sys).max(0.0),
            ctx: self.ctx.saturating_sub(before.ctx),
        }
    }
}

/// What one engine run measured.
#[derive(Debug, Clone, Default)]
pub(super) struct Measured {
    pub(super) bytes: u64,
    pub(super) secs: f64,
    pub(super) lat_ns: u64,
    pub(super) lat_count: u64,
    pub(super) cpu: Cpu,
    /// The library's counters (fgds rows).
    pub(super) stats: Option<fgds::Stats>,
    /// fio: CPU seconds of the whole process tree.
    pub(super) cpu_process: Option<f64>,
}

impl Measured {
    pub(super) fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.secs.max(1e-9)
    }

    /// Adds another round of the same engine.
    pub(super) fn add(&mut self, o: &Measured) {
        self.bytes += o.bytes;
        self.secs += o.secs;
        self.lat_ns += o.lat_ns;
        self.lat_count += o.lat_count;
        self.cpu.user += o.cpu.user;
        self.cpu.sys += o.cpu.sys;
        self.cpu.ctx += o.cpu.ctx;
        self.stats = match (self.stats.take(), &o.stats) {
            (Some(mut a), Some(b)) => {
                a.direct_bytes += b.direct_bytes;
                a.bounce_bytes += b.bounce_bytes;
                a.fallbacks += b.fallbacks;
                a.direct_ops += b.direct_ops;
                a.bounce_ops += b.bounce_ops;
                Some(a)
            }
            (a, b) => a.or_else(|| b.clone()),
        };
        self.cpu_process = match (self.cpu_process, o.cpu_process) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

pub(super) fn summary(engine: &str, g: Geometry, m: Measured, samples: Vec<f64>) -> Result1 {
    let secs = m.secs.max(1e-9);
    let cpu = m.cpu.user + m.cpu.sys;
    let gib = m.bytes as f64 / (1u64 << 30) as f64;
    let st = m.stats;
    Result1 {
        engine: engine.into(),
        request_size: g.req,
        in_flight: g.inflight,
        bytes: m.bytes,
        seconds: m.secs,
        mib_per_s: m.bytes as f64 / (1 << 20) as f64 / secs,
        iops: m.bytes as f64 / g.req as f64 / secs,
        avg_latency_us: if m.lat_count > 0 {
            m.lat_ns as f64 / m.lat_count as f64 / 1000.0
        } else {
            0.0
        },
        cpu_user_s: m.cpu.user,
        cpu_sys_s: m.cpu.sys,
        cpu_seconds: cpu,
        cpu_s_per_gib: if gib > 0.0 { cpu / gib } else { 0.0 },
        ctx_switches: m.cpu.ctx,
        cpu_seconds_process: m.cpu_process,
        runs: samples.len() as u32,
        samples_mib_per_s: samples,
        requests: st.as_ref().map(|s| s.direct_ops + s.bounce_ops),
        direct_bytes: st.as_ref().map(|s| s.direct_bytes),
        bounce_bytes: st.as_ref().map(|s| s.bounce_bytes),
        fallbacks: st.as_ref().map(|s| s.fallbacks),
    }
}

pub(super) fn print_table(rep: &Report) {
    println!(
        "{:?} {:?} bs={} qd={} chunk={} threads={} total={} file={} mem={:?} | request {} x {} in flight",
        rep.rw,
        rep.pattern,
        human(rep.block_size),
        rep.queue_depth,
        human(rep.chunk_size),
        rep.threads,
        human(rep.total),
        human(rep.file_size),
        rep.mem,
        human(rep.request_size),
        rep.in_flight,
    );
    println!(
        "{:<13} {:>9} {:>10} {:>13} {:>10} {:>11} {:>8} {:>7} {:>9} {:>11} {:>11}",
        "engine",
        "in flight",
        "MiB/s",
        "rounds min-max",
        "IOPS",
        "avg lat us",
        "secs",
        "CPU s",
        "CPU s/GiB",
        "direct",
        "bounce"
    );
    for r in &rep.results {
        let lo = r
            .samples_mib_per_s
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let hi = r.samples_mib_per_s.iter().copied().fold(0.0, f64::max);
        println!(
            "{:<13} {:>9} {:>10.1} {:>13} {:>10.0} {:>11.1} {:>8.3} {:>7.3} {:>9.3} {:>11} {:>11}",
            r.engine,
            r.in_flight,
            r.mib_per_s,
            format!("{lo:.0}-{hi:.0}"),
            r.iops,
            r.avg_latency_us,
            r.seconds,
            r.cpu_seconds,
            r.cpu_s_per_gib,
            r.direct_bytes.map(human).unwrap_or_else(|| "-".into()),
            r.bounce_bytes.map(human).unwrap_or_else(|| "-".into()),
        );
    }
}
