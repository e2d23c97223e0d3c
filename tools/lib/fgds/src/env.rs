//! Configuration from the environment: the `FGDS_*` variables, read once
//! per process, the first time a default [`Config`](crate::Config) or the
//! I/O threads are needed (as KvikIO reads `KVIKIO_*`).
//!
//! They set defaults: what a caller passes explicitly (a `Config` field, a
//! Python keyword, a non-zero field of the C `struct fgds_config`) wins;
//! for the C flags, a flag that is not set means "the default", so
//! `FGDS_STRICT=1` and `FGDS_IO_URING=0` also apply to C callers that pass
//! flags of 0. A value that cannot be parsed is an error when a file is
//! opened ([`Env::check`]), never silently ignored; `fgds check` shows the
//! configuration in force.

use crate::engine::{
    BounceRead, DEFAULT_BOUNCE_CHUNK_SIZE, DEFAULT_BOUNCE_SPLIT_SIZE, DEFAULT_CHUNK_SIZE,
    DEFAULT_QUEUE_DEPTH, DEFAULT_SPLIT_SIZE, MAX_RW_COUNT,
};
use crate::error::{Error, Result};
use std::sync::OnceLock;

/// One `FGDS_*` variable: its name, its default and what it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Var {
    /// The variable's name.
    pub name: &'static str,
    /// Its default, as it would be written.
    pub default: &'static str,
    /// What it sets and which values it takes.
    pub meaning: &'static str,
}

/// Every variable the library reads (the README's table prints it).
pub const VARS: &[Var] = &[
    Var {
        name: "FGDS_STRICT",
        default: "0",
        meaning: "1: refuse every bounce (`Config::strict`): a misaligned request and an impossible direct path are errors",
    },
    Var {
        name: "FGDS_CHUNK_SIZE",
        default: "1M",
        meaning: "bytes a large request is split into on the direct path and into host memory (`Config::chunk_size`): a multiple of 4096, suffixes K, M, G",
    },
    Var {
        name: "FGDS_BOUNCE_CHUNK_SIZE",
        default: "4M",
        meaning: "bytes per piece of the bounce path, a read into a pinned bounce buffer and its copy to the GPU or the reverse (`Config::bounce_chunk_size`): a multiple of 4096, suffixes K, M, G",
    },
    Var {
        name: "FGDS_QUEUE_DEPTH",
        default: "16",
        meaning: "requests in flight per thread of a call (`Config::queue_depth`), 1 to 4096",
    },
    Var {
        name: "FGDS_THREADS",
        default: "CPUs, 4 to 16",
        meaning: "I/O threads for async, batch and stream-ordered requests, 1 to 256",
    },
    Var {
        name: "FGDS_PARALLEL",
        default: "FGDS_THREADS",
        meaning: "most threads one call runs on (`Config::parallel`): the caller plus I/O threads, 1 to 256; 1: the calling thread only",
    },
    Var {
        name: "FGDS_SPLIT_SIZE",
        default: "16M",
        meaning: "bytes of a call each of its threads takes at a time (`Config::split_size`): a multiple of 4096, suffixes K, M, G; smaller calls run on the calling thread alone",
    },
    Var {
        name: "FGDS_BOUNCE_SPLIT_SIZE",
        default: "8M",
        meaning: "`FGDS_SPLIT_SIZE` for a call mostly through the bounce path (`Config::bounce_split_size`)",
    },
    Var {
        name: "FGDS_BOUNCE_READ",
        default: "auto",
        meaning: "how bounced reads (GPU memory without P2P) reach the bounce buffers (`Config::bounce_read`): auto (O_DIRECT unless cachestat(2) finds most of the range in the page cache), direct, buffered",
    },
    Var {
        name: "FGDS_IO_URING",
        default: "1",
        meaning: "0: pread/pwrite/preadv/pwritev instead of io_uring (`Config::use_io_uring`)",
    },
];

/// The configuration the environment gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    /// `FGDS_STRICT`.
    pub strict: bool,
    /// `FGDS_CHUNK_SIZE`.
    pub chunk_size: usize,
    /// `FGDS_BOUNCE_CHUNK_SIZE`.
    pub bounce_chunk_size: usize,
    /// `FGDS_QUEUE_DEPTH`.
    pub queue_depth: u32,
    /// `FGDS_THREADS`.
    pub threads: usize,
    /// `FGDS_IO_URING`.
    pub use_io_uring: bool,
    /// `FGDS_PARALLEL` (default: `threads`).
    pub parallel: u32,
    /// `FGDS_SPLIT_SIZE`.
    pub split_size: usize,
    /// `FGDS_BOUNCE_SPLIT_SIZE`.
    pub bounce_split_size: usize,
    /// `FGDS_BOUNCE_READ`.
    pub bounce_read: BounceRead,
    /// The variables that are set, with their values, in [`VARS`] order.
    pub set: Vec<(&'static str, String)>,
    /// One message per variable whose value is wrong (its default is used
    /// in the fields above, and [`Env::check`] fails).
    pub errors: Vec<String>,
}

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .clamp(4, 16)
}

/// Parses `4096`, `64K`, `1M`, `1MiB`, `2G`.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let mul: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

impl Env {
    /// The configuration from a lookup of variables (`std::env::var` for
    /// the process; a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Env {
        let mut e = Env {
            strict: false,
            chunk_size: DEFAULT_CHUNK_SIZE,
            bounce_chunk_size: DEFAULT_BOUNCE_CHUNK_SIZE,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            threads: default_threads(),
            use_io_uring: true,
            parallel: 0,
            split_size: DEFAULT_SPLIT_SIZE,
            bounce_split_size: DEFAULT_BOUNCE_SPLIT_SIZE,
            bounce_read: BounceRead::Auto,
            set: Vec::new(),
            errors: Vec::new(),
        };
        for v in VARS {
            let Some(val) = get(v.name) else { continue };
            e.set.push((v.name, val.clone()));
            let bad = |want: &str| format!("{}={val:?}: {want} (default {})", v.name, v.default);
            let r = match v.name {
                "FGDS_STRICT" => parse_bool(&val)
                    .map(|b| e.strict = b)
                    .ok_or_else(|| bad("not 0 or 1")),
                "FGDS_IO_URING" => parse_bool(&val)
                    .map(|b| e.use_io_uring = b)
                    .ok_or_else(|| bad("not 0 or 1")),
                "FGDS_CHUNK_SIZE" => match parse_size(&val) {
                    Some(n) if n > 0 && n % 4096 == 0 && n <= MAX_RW_COUNT as u64 => {
                        e.chunk_size = n as usize;
                        Ok(())
                    }
                    _ => Err(bad(
                        "not a non-zero multiple of 4096 up to 2 GiB - 4 KiB (suffixes K, M, G)",
                    )),
                },
                "FGDS_BOUNCE_CHUNK_SIZE" => match parse_size(&val) {
                    Some(n) if n > 0 && n % 4096 == 0 && n <= MAX_RW_COUNT as u64 => {
                        e.bounce_chunk_size = n as usize;
                        Ok(())
                    }
                    _ => Err(bad(
                        "not a non-zero multiple of 4096 up to 2 GiB - 4 KiB (suffixes K, M, G)",
                    )),
                },
                "FGDS_QUEUE_DEPTH" => match val.trim().parse::<u32>() {
                    Ok(n @ 1..=4096) => {
                        e.queue_depth = n;
                        Ok(())
                    }
                    _ => Err(bad("not a number from 1 to 4096")),
                },
                "FGDS_THREADS" => match val.trim().parse::<usize>() {
                    Ok(n @ 1..=256) => {
                        e.threads = n;
                        Ok(())
                    }
                    _ => Err(bad("not a number from 1 to 256")),
                },
                "FGDS_PARALLEL" => match val.trim().parse::<u32>() {
                    Ok(n @ 1..=256) => {
                        e.parallel = n;
                        Ok(())
                    }
                    _ => Err(bad("not a number from 1 to 256")),
                },
                "FGDS_SPLIT_SIZE" => match parse_size(&val) {
                    Some(n) if n > 0 && n % 4096 == 0 && n <= usize::MAX as u64 => {
                        e.split_size = n as usize;
                        Ok(())
                    }
                    _ => Err(bad("not a non-zero multiple of 4096 (suffixes K, M, G)")),
                },
                "FGDS_BOUNCE_SPLIT_SIZE" => match parse_size(&val) {
                    Some(n) if n > 0 && n % 4096 == 0 && n <= usize::MAX as u64 => {
                        e.bounce_split_size = n as usize;
                        Ok(())
                    }
                    _ => Err(bad("not a non-zero multiple of 4096 (suffixes K, M, G)")),
                },
                "FGDS_BOUNCE_READ" => match val.trim().to_ascii_lowercase().as_str() {
                    "auto" => Ok(BounceRead::Auto),
                    "direct" => Ok(BounceRead::Direct),
                    "buffered" => Ok(BounceRead::Buffered),
                    _ => Err(bad("not auto, direct or buffered")),
                }
                .map(|b| e.bounce_read = b),
                _ => Ok(()),
            };
            if let Err(m) = r {
                e.errors.push(m);
            }
        }
        if e.parallel == 0 {
            e.parallel = e.threads as u32;
        }
        e
    }

    /// An error naming every variable whose value is wrong.
    pub fn check(&self) -> Result<()> {
        if self.errors.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "environment: {}; fix or unset it (fgds check shows the configuration)",
            self.errors.join("; ")
        )))
    }
}

/// The process's configuration, read from the environment the first time.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| Env::from_lookup(|k| std::env::var(k).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Env {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Env::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let e = with(&[]);
        assert!(!e.strict && e.use_io_uring);
        assert_eq!((e.chunk_size, e.queue_depth), (1 << 20, 16));
        assert!((4..=16).contains(&e.threads));
        assert_eq!(e.parallel as usize, e.threads);
        assert_eq!(e.split_size, DEFAULT_SPLIT_SIZE);
        assert_eq!(e.bounce_chunk_size, DEFAULT_BOUNCE_CHUNK_SIZE);
        assert_eq!(e.bounce_read, BounceRead::Auto);
        assert!(e.set.is_empty() && e.check().is_ok());
        // the table's defaults are the code's
        let d = |n: &str| VARS.iter().find(|v| v.name == n).map(|v| v.default);
        let size = |n: &str| d(n).and_then(parse_size).map(|v| v as usize);
        assert_eq!(size("FGDS_CHUNK_SIZE"), Some(DEFAULT_CHUNK_SIZE));
        assert_eq!(
            size("FGDS_BOUNCE_CHUNK_SIZE"),
            Some(DEFAULT_BOUNCE_CHUNK_SIZE)
        );
        assert_eq!(size("FGDS_SPLIT_SIZE"), Some(DEFAULT_SPLIT_SIZE));
        assert_eq!(
            size("FGDS_BOUNCE_SPLIT_SIZE"),
            Some(DEFAULT_BOUNCE_SPLIT_SIZE)
        );
    }

    #[test]
    fn values() {
        let e = with(&[
            ("FGDS_STRICT", "1"),
            ("FGDS_CHUNK_SIZE", "256K"),
            ("FGDS_QUEUE_DEPTH", "64"),
            ("FGDS_THREADS", "2"),
            ("FGDS_IO_URING", "off"),
            ("FGDS_PARALLEL", "3"),
            ("FGDS_SPLIT_SIZE", "64M"),
            ("FGDS_BOUNCE_READ", "Direct"),
            ("FGDS_BOUNCE_CHUNK_SIZE", "2M"),
            ("FGDS_BOUNCE_SPLIT_SIZE", "32M"),
        ]);
        assert!(e.strict && !e.use_io_uring);
        assert_eq!(
            (e.bounce_chunk_size, e.bounce_split_size),
            (2 << 20, 32 << 20)
        );
        assert_eq!(e.bounce_read, BounceRead::Direct);
        assert_eq!((e.chunk_size, e.queue_depth, e.threads), (256 << 10, 64, 2));
        assert_eq!((e.parallel, e.split_size), (3, 64 << 20));
        assert_eq!(e.set.len(), 10);
        let b = with(&[("FGDS_BOUNCE_READ", "buffered")]);
        assert_eq!(b.bounce_read, BounceRead::Buffered);
        assert!(e.check().is_ok());
    }

    #[test]
    fn bad_values_are_named() {
        let e = with(&[
            ("FGDS_CHUNK_SIZE", "1000"),
            ("FGDS_QUEUE_DEPTH", "0"),
            ("FGDS_STRICT", "maybe"),
            ("FGDS_THREADS", "x"),
            ("FGDS_PARALLEL", "0"),
            ("FGDS_SPLIT_SIZE", "5000"),
            ("FGDS_BOUNCE_READ", "sometimes"),
            ("FGDS_BOUNCE_CHUNK_SIZE", "0"),
            ("FGDS_BOUNCE_SPLIT_SIZE", "12K3"),
        ]);
        assert_eq!(e.chunk_size, 1 << 20, "the default stays");
        assert_eq!(
            e.bounce_chunk_size, DEFAULT_BOUNCE_CHUNK_SIZE,
            "the default stays"
        );
        assert_eq!(e.bounce_read, BounceRead::Auto, "the default stays");
        assert_eq!(e.errors.len(), 9);
        let m = e.check().unwrap_err().to_string();
        for n in [
            "FGDS_CHUNK_SIZE=\"1000\"",
            "FGDS_QUEUE_DEPTH=\"0\"",
            "FGDS_STRICT=\"maybe\"",
            "FGDS_THREADS=\"x\"",
            "FGDS_PARALLEL=\"0\"",
            "FGDS_SPLIT_SIZE=\"5000\"",
            "FGDS_BOUNCE_READ=\"sometimes\"",
            "FGDS_BOUNCE_CHUNK_SIZE=\"0\"",
            "FGDS_BOUNCE_SPLIT_SIZE=\"12K3\"",
        ] {
            assert!(m.contains(n), "{m}");
        }
    }
}
