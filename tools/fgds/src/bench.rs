//! `fgds bench`: a gdsio-like benchmark of the library's engine, optionally
//! side by side with the library's Batch API, a plain O_DIRECT
//! pread/pwrite thread pool and fio's io_uring engine, all at the same
//! request size and the same number of I/Os in flight.
//!
//! This file runs the engines and reports; its parts are in `bench/`.

mod engines;
mod file;
mod fio;
mod measure;
mod workload;

pub use file::BenchError;
pub(crate) use workload::parse_size;
pub use workload::BenchArgs;

use crate::human;
use engines::{run_baseline, run_batch, run_fgds, run_uring};
use file::prepare;
use fio::run_fio;
use measure::{print_table, summary, Measured, Report};
use std::process::ExitCode;
use workload::geometry;

pub fn run(a: BenchArgs) -> Result<ExitCode, BenchError> {
    if a.bs == 0 || a.chunk == 0 || a.threads == 0 || a.size < a.bs * a.threads as u64 {
        return Err(fgds::Error::InvalidArgument(
            "need bs > 0, chunk > 0, threads > 0 and size >= bs * threads".into(),
        )
        .into());
    }
    let g = geometry(&a);
    if g.span < a.bs || g.span < g.req {
        return Err(fgds::Error::InvalidArgument(format!(
            "--file-size {} is smaller than one call ({})",
            g.span, a.bs
        ))
        .into());
    }
    if a.prepare_only {
        prepare(&a, true)?;
        if !a.json {
            println!(
                "{}: ready, {}",
                a.file.display(),
                human(std::fs::metadata(&a.file).map(|m| m.len()).unwrap_or(0))
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    prepare(&a, false)?;
    type Runner = fn(&BenchArgs) -> Result<Measured, fgds::Error>;
    let mut engines: Vec<(&str, Runner)> = vec![("fgds", run_fgds)];
    if a.batch {
        engines.push(("fgds-batch", run_batch));
    }
    if a.baseline {
        engines.push(("pread-pool", run_baseline));
    }
    if a.uring {
        engines.push(("io_uring-loop", run_uring));
    }
    if a.fio {
        engines.push(("fio-io_uring", run_fio));
    }
    let n = engines.len();
    let mut acc: Vec<(Measured, Vec<f64>)> = vec![(Measured::default(), Vec::new()); n];
    for round in 0..a.repeat as usize {
        for k in 0..n {
            let i = (k + round) % n;
            let m = (engines[i].1)(&a)?;
            acc[i].1.push(m.mib_per_s());
            acc[i].0.add(&m);
        }
    }
    let results = engines
        .iter()
        .zip(acc)
        .map(|((name, _), (m, samples))| summary(name, g, m, samples))
        .collect();
    let rep = Report {
        file: a.file.clone(),
        file_size: g.span,
        rw: a.rw,
        pattern: a.pattern,
        block_size: a.bs,
        queue_depth: a.qd,
        chunk_size: a.chunk,
        threads: a.threads,
        total: a.size,
        mem: a.mem,
        io_uring: !a.no_io_uring,
        request_size: g.req,
        in_flight: g.inflight,
        results,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep).unwrap_or_default());
    } else {
        print_table(&rep);
    }
    Ok(ExitCode::SUCCESS)
}
