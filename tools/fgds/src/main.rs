//! `fgds`: list GPUs with fgds nodes, check whether P2P file I/O can work,
//! benchmark (gdsio-like), and run programs on fgds's cuFile library.

mod bench;
mod check;
mod gpumem;
mod p2p;
mod run;
mod validate;

pub(crate) use bench::parse_size;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "fgds", version, about = "fast GPU direct storage tool")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List GPUs that have an fgds node: PCI address, BAR sizes.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Explain whether P2P I/O from FILE's block device to each GPU can work:
    /// every GPU on the PCI bus with its driver, the kernel's configuration,
    /// the FGDS_* configuration, one next step per problem. Where GPU memory
    /// can be registered (CUDA/HIP on a GPU an fgds node serves, or
    /// --dmabuf), a real 4 KiB O_DIRECT read of FILE into it decides.
    /// Exit status 0 if P2P I/O can work for at least one GPU, 1 if only the
    /// bounce-buffer fallback can, 2 if the check failed (missing file, bad
    /// FGDS_* value).
    Check {
        /// A file (or block device) to check (default: only GPU/IOMMU checks).
        file: Option<std::path::PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Probe with this GPU memory: vfio:BDF[,bar=N][,offset=SIZE][,size=SIZE]
        /// (a BAR of a vfio-pci device) or fd:N,size=SIZE[,offset=SIZE] (a
        /// dma-buf passed as file descriptor N).
        #[arg(long, value_parser = gpumem::parse_spec, conflicts_with = "no_probe")]
        dmabuf: Option<gpumem::Spec>,
        /// Do not allocate GPU memory for the probe: decide by the topology rule.
        #[arg(long)]
        no_probe: bool,
    },
    /// Prove and measure fgds on this machine: check, P2P reads and writes
    /// verified byte for byte, teardown with I/O in flight, throughput
    /// against O_DIRECT into host memory and the bounce path. Prints a
    /// Markdown report (and JSON with --json). Exit status 0 P2P verified,
    /// 1 P2P blocked (what could run passed; the report says what blocked
    /// the rest), 2 error (bad arguments, unusable --dir), 3 a check failed.
    Validate(validate::ValidateArgs),
    /// Benchmark reads or writes (gdsio-like).
    Bench(bench::BenchArgs),
    /// Run a program with fgds's libcufile.so.0 in place of NVIDIA's cuFile.
    Run(run::RunArgs),
}

/// What stops a command.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Fgds(#[from] fgds::Error),
    #[error(transparent)]
    Bench(#[from] bench::BenchError),
}

impl CliError {
    /// What to do, from the library's table of error text (none for the
    /// errors whose message already says it).
    fn hint(&self) -> Option<&'static str> {
        match self {
            CliError::Fgds(e) | CliError::Bench(bench::BenchError::Fgds(e)) => Some(e.hint()),
            CliError::Bench(bench::BenchError::WouldWrite { .. }) => None,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r: Result<ExitCode, CliError> = match cli.cmd {
        Cmd::List { json } => list(json).map_err(CliError::from),
        Cmd::Check {
            file,
            json,
            dmabuf,
            no_probe,
        } => check::run(file.as_deref(), json, dmabuf.as_ref(), no_probe).map_err(CliError::from),
        Cmd::Validate(a) => Ok(validate::run(a)),
        Cmd::Bench(a) => bench::run(a).map_err(CliError::from),
        Cmd::Run(a) => run::run(a).map_err(CliError::from),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fgds: {e}");
            if let Some(h) = e.hint() {
                eprintln!("fgds: hint: {h}");
            }
            ExitCode::from(2)
        }
    }
}

pub(crate) fn human(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

fn list(json: bool) -> Result<ExitCode, fgds::Error> {
    let devs = fgds::list_devices()?;
    if json {
        let v: Vec<serde_json::Value> = devs
            .iter()
            .map(|d| {
                serde_json::json!({
                    "name": d.name,
                    "dev": d.dev_path,
                    "pci_address": d.pci_address,
                    "vendor": d.vendor.map(|v| format!("{v:04x}")),
                    "device": d.device.map(|v| format!("{v:04x}")),
                    "bars": d.bars.iter().map(|b| serde_json::json!({"index": b.index, "size": b.size, "start": b.start})).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"module_loaded": fgds::device::module_loaded(), "devices": v})
        );
        return Ok(ExitCode::SUCCESS);
    }
    if devs.is_empty() {
        if fgds::device::module_loaded() {
            println!("no fgds devices: the fgds module is loaded but no GPU is bound to it (no /sys/class/misc/fgds*)");
        } else {
            println!("no fgds devices: the fgds module is not loaded (try: modprobe fgds)");
        }
        return Ok(ExitCode::SUCCESS);
    }
    for d in &devs {
        let id = match (d.vendor, d.device) {
            (Some(v), Some(p)) => format!(" [{v:04x}:{p:04x}]"),
            _ => String::new(),
        };
        println!(
            "{}  {}  pci {}{}",
            d.name,
            d.dev_path.display(),
            d.pci_address.as_deref().unwrap_or("?"),
            id
        );
        for b in &d.bars {
            println!("    BAR{}: {} at {:#x}", b.index, human(b.size), b.start);
        }
    }
    Ok(ExitCode::SUCCESS)
}
