//! The report of a process for `fgds run`: its [`stats`](crate::stats)
//! and the [`gpucache`](crate::gpucache)'s counters on one line, appended
//! to the file [`RUN_REPORT_VAR`] names at exit, and [`RunReport`], their
//! sum, which `fgds run` prints. The top of the library: it reads both
//! modules below it, and neither reads it.

use crate::stats::{fallbacks, totals, FallbackCause};

/// The variable `fgds run` sets to a file of its own: a process whose
/// libcufile (or Python package) ends appends its [`report_line`] to it,
/// and `fgds run` prints the [`RunReport`] of them all when the program
/// has exited.
pub const RUN_REPORT_VAR: &str = "FGDS_RUN_REPORT";

/// The first word of a [`report_line`].
const REPORT_TAG: &str = "fgds-report-v1";

/// What this process did, on one line for `fgds run` ([`RunReport`]):
/// `source` (`libcufile`, `python`), [`totals`], [`fallbacks`] and the
/// staging pool's and registration cache's counters, as `key=value` words.
pub fn report_line(source: &str) -> String {
    let t = totals();
    let f = fallbacks();
    let c = crate::gpucache::counters();
    let mut w = vec![
        REPORT_TAG.to_string(),
        format!("source={}", source.replace(char::is_whitespace, "_")),
        format!("pid={}", std::process::id()),
        format!("direct_bytes={}", t.direct_bytes),
        format!("bounce_bytes={}", t.bounce_bytes),
        format!("fallbacks={}", t.fallbacks),
        format!("errors={}", t.errors),
        format!("staged={}", c.staged),
        format!("cached={}", c.cached),
        format!("uncached={}", c.uncached),
        format!("bounced={}", c.bounced),
        format!("pool_failures={}", c.pool_failures),
    ];
    for cause in FallbackCause::ALL {
        w.push(format!("calls.{cause}={}", f.calls.get(cause)));
        w.push(format!(
            "registrations.{cause}={}",
            f.registrations.get(cause)
        ));
    }
    w.join(" ")
}

/// Appends [`report_line`] to the file [`RUN_REPORT_VAR`] names, if it is
/// set (under `fgds run`); one `write` of one line, so that processes
/// ending together do not mix their lines.
pub fn write_run_report(source: &str) {
    use std::io::Write;
    let Some(path) = std::env::var_os(RUN_REPORT_VAR).filter(|p| !p.is_empty()) else {
        return;
    };
    let line = format!("{}\n", report_line(source));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// The reports of the processes of one `fgds run`, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Reports read (processes, or copies of the library in one).
    pub reports: u64,
    /// Each `key=value` of the lines, summed by key.
    pub sums: std::collections::BTreeMap<String, u64>,
}

impl RunReport {
    /// Sums the report lines of `text` (other lines are passed over).
    pub fn parse(text: &str) -> RunReport {
        let mut r = RunReport::default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some(REPORT_TAG) {
                continue;
            }
            r.reports += 1;
            for (k, v) in words.filter_map(|w| w.split_once('=')) {
                if k == "pid" {
                    continue;
                }
                if let Ok(n) = v.parse::<u64>() {
                    *r.sums.entry(k.to_string()).or_default() += n;
                }
            }
        }
        r
    }

    /// The sum of `key` (0 when absent).
    pub fn get(&self, key: &str) -> u64 {
        self.sums.get(key).copied().unwrap_or(0)
    }

    /// The counts of `prefix.<cause>` by cause.
    fn causes(&self, prefix: &str) -> Vec<(FallbackCause, u64)> {
        FallbackCause::ALL
            .iter()
            .map(|c| (*c, self.get(&format!("{prefix}.{c}"))))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// The summary `fgds run` prints on stderr: the bytes peer to peer and
    /// bounced, then every fallback by cause with what to do; `None` when
    /// no report was read.
    pub fn summary(&self) -> Option<String> {
        if self.reports == 0 {
            return None;
        }
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let list = |v: &[(FallbackCause, u64)]| {
            v.iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut out = vec![format!(
            "fgds run: summary of {} report(s): {:.1} MiB direct (peer to peer for GPU memory), \
             {:.1} MiB bounced through host memory; unregistered GPU memory: {} staged, {} \
             cached, {} uncached, {} bounced; {} staging buffer(s) could not be made; {} \
             error(s)",
            self.reports,
            mib(self.get("direct_bytes")),
            mib(self.get("bounce_bytes")),
            self.get("staged"),
            self.get("cached"),
            self.get("uncached"),
            self.get("bounced"),
            self.get("pool_failures"),
            self.get("errors"),
        )];
        let calls = self.causes("calls");
        let regs = self.causes("registrations");
        if calls.is_empty() && regs.is_empty() {
            out.push("fgds run: no fallback to the bounce path".into());
        } else {
            if !regs.is_empty() {
                out.push(format!(
                    "fgds run: GPU registrations that bounce: {}",
                    list(&regs)
                ));
            }
            if !calls.is_empty() {
                out.push(format!(
                    "fgds run: calls that fell back to the bounce path: {} ({} in all)",
                    list(&calls),
                    self.get("fallbacks")
                ));
            }
            let mut seen = Vec::new();
            for (c, _) in regs.iter().chain(&calls) {
                if !seen.contains(c) {
                    seen.push(*c);
                    out.push(format!("fgds run:   {c}: {}", c.hint()));
                }
            }
        }
        Some(out.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_reports_add_up_and_say_each_cause() {
        let line = report_line("libcufile test");
        assert!(line.starts_with("fgds-report-v1 source=libcufile_test pid="));
        let two = format!(
            "noise\n{}\n{}\n",
            "fgds-report-v1 source=libcufile pid=1 direct_bytes=1048576 bounce_bytes=0 \
             fallbacks=2 calls.busy=2 registrations.busy=1",
            "fgds-report-v1 source=python pid=2 direct_bytes=1048576 bounce_bytes=4096 \
             fallbacks=1 calls.no_direct=1 pool_failures=1 bad=x"
        );
        let r = RunReport::parse(&two);
        assert_eq!(r.reports, 2);
        assert_eq!(r.get("direct_bytes"), 2 << 20);
        assert_eq!(r.get("fallbacks"), 3);
        assert_eq!(r.get("pid"), 0);
        let s = r.summary().unwrap_or_default();
        assert!(s.contains("summary of 2 report(s): 2.0 MiB direct"), "{s}");
        assert!(s.contains("GPU registrations that bounce: busy 1"), "{s}");
        assert!(
            s.contains("calls that fell back to the bounce path: busy 2, no_direct 1 (3 in all)"),
            "{s}"
        );
        assert!(s.contains("1 staging buffer(s) could not be made"), "{s}");
        assert!(s.contains(FallbackCause::Busy.hint()), "{s}");
        assert!(s.contains(FallbackCause::NoDirect.hint()), "{s}");
        assert_eq!(RunReport::parse("nothing\n").summary(), None);
        let quiet = RunReport::parse(&line).summary().unwrap_or_default();
        assert!(quiet.contains("summary of 1 report(s)"), "{quiet}");
    }
}
