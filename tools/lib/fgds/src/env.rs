//! Configuration from the environment: the `FGDS_*` variables, read once
//! per process, the first time a default [`Config`] or the
//! I/O threads are needed (as KvikIO reads `KVIKIO_*`). The one settings
//! module of fgds: the library, `libcufile` (`tools/lib/cufile`), the
//! Python bindings and the `fgds` tool all read the variables here, with
//! the same names, values and error messages. Sizes take the spellings
//! [`parse_size`] does (`1048576`, `1M`, `1MiB`, `1MB`), booleans those of
//! [`parse_bool`] (`1/0/true/false/yes/no/on/off`, any case); an empty
//! value means the default.
//!
//! They set defaults: what a caller passes explicitly (a `Config` field, a
//! Python keyword, a non-zero field of the C `struct fgds_config`) wins;
//! for the C flags, a flag that is not set means "the default", so
//! `FGDS_STRICT=1` and `FGDS_IO_URING=0` also apply to C callers that pass
//! flags of 0. A value that cannot be parsed is an error when a file is
//! opened ([`Env::check`]), never silently ignored; `fgds check` shows the
//! configuration in force.

use crate::config::{
    BounceRead, Config, DEFAULT_BOUNCE_CHUNK_SIZE, DEFAULT_BOUNCE_SPLIT_SIZE, DEFAULT_CHUNK_SIZE,
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
        meaning: "a boolean; 1: refuse every bounce (`Config::strict`): a misaligned request and an impossible direct path are errors (libcufile: as `allow_compat_mode` false)",
    },
    Var {
        name: "FGDS_CHUNK_SIZE",
        default: "1M",
        meaning: "bytes a large request is split into on the direct path and into host memory (`Config::chunk_size`): a size, a multiple of 4096",
    },
    Var {
        name: "FGDS_BOUNCE_CHUNK_SIZE",
        default: "4M",
        meaning: "bytes per piece of the bounce path, a read into a pinned bounce buffer and its copy to the GPU or the reverse (`Config::bounce_chunk_size`): a size, a multiple of 4096",
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
        meaning: "bytes of a call each of its threads takes at a time (`Config::split_size`): a size, a multiple of 4096; smaller calls run on the calling thread alone",
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
        meaning: "a boolean; 0: pread/pwrite/preadv/pwritev instead of io_uring (`Config::use_io_uring`); alias `FGDS_NO_IO_URING` (inverted)",
    },
    Var {
        name: "FGDS_DIRECT",
        default: "1",
        meaning: "a boolean; 0: never O_DIRECT, every request through the page cache or a bounce buffer (`Config::disable_direct`; libcufile: as `force_compat_mode` true); alias `FGDS_NO_DIRECT` (inverted)",
    },
    Var {
        name: "FGDS_DEVICE_CACHE_SIZE",
        default: "128M",
        meaning: "bytes of GPU memory per GPU the staging pool may hold for I/O on GPU memory the caller never registered (cuFile's `max_device_cache_size_kb`; libcufile: that key of cufile.json): a size, a multiple of `FGDS_PER_BUFFER_CACHE_SIZE`; 0: no pool",
    },
    Var {
        name: "FGDS_PER_BUFFER_CACHE_SIZE",
        default: "1M",
        meaning: "bytes of one staging buffer of that pool, the most a staged request moves per piece (cuFile's `per_buffer_cache_size_kb`): a size, a multiple of 4096 up to 2 GiB - 4 KiB",
    },
    Var {
        name: "FGDS_REG_CACHE_SIZE",
        default: "4G",
        meaning: "bytes of registrations the library keeps for I/O on GPU memory the caller never registered (at most 64; one not used for 5 s makes room, least recently used first; while none can, a miss goes to the staging pool): a size, a multiple of 4096; 0: no cache",
    },
    Var {
        name: "FGDS_REG_CACHE_WINDOW",
        default: "64M",
        meaning: "the most bytes one registration of that cache covers: an allocation up to this size is registered whole, a larger one in windows of this size (from its start) as requests reach them: a size, a multiple of 4096",
    },
    Var {
        name: "FGDS_REG_CACHE_MIN",
        default: "1M",
        meaning: "requests on GPU memory the caller never registered of at least this many bytes use the registration cache, smaller ones the staging pool: a size",
    },
    Var {
        name: "FGDS_TORCH_HOST",
        default: "0",
        meaning: "a boolean; 1: `fgds.torch`'s `load_storage`/`save_storage` also take CPU storages (torch.cuda.gds's raise RuntimeError for them, and so do fgds.torch's without it)",
    },
    Var {
        name: "FGDS_LOG",
        default: "info",
        meaning: "what libcufile says on stderr: off (or 0, none), info (1: the path chosen and each handle's first fallback), debug (2: every failed call too)",
    },
    Var {
        name: "FGDS_CUFILE_VERSION",
        default: "1.20",
        meaning: "the cuFile version libcufile presents, 1.15 to 1.20 (or 1150 to 1200): what `cuFileGetVersion` says and the layout of the statistics it writes (1.18 and older: `CUfileStatsLevel1_t` without the 1.19 vectored counters)",
    },
];

/// cuFile's default `max_device_cache_size_kb` (128 MiB): the staging
/// pool's most bytes per GPU ([`crate::gpucache`]).
pub const DEFAULT_DEVICE_CACHE_SIZE: usize = 128 << 20;
/// cuFile's default `per_buffer_cache_size_kb` (1 MiB): one staging buffer.
pub const DEFAULT_PER_BUFFER_CACHE_SIZE: usize = 1 << 20;
/// The registration cache's most bytes ([`crate::gpucache`]).
pub const DEFAULT_REG_CACHE_SIZE: u64 = 4 << 30;
/// Requests of at least this many bytes use the registration cache
/// ([`crate::gpucache`] says how it was chosen).
pub const DEFAULT_REG_CACHE_MIN: usize = 1 << 20;
/// The most bytes one cached registration covers ([`crate::gpucache`]).
pub const DEFAULT_REG_CACHE_WINDOW: u64 = 64 << 20;

/// Oldest and newest cuFile version (`1000 * major + 10 * minor`) that
/// libcufile can present.
pub const CUFILE_VERSIONS: std::ops::RangeInclusive<u32> = 1150..=1200;

/// An older name of a boolean variable, kept working.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias {
    /// The old name.
    pub name: &'static str,
    /// The variable it sets.
    pub of: &'static str,
    /// Whether it means the opposite (`FGDS_NO_DIRECT=1` is `FGDS_DIRECT=0`).
    pub inverted: bool,
}

/// The aliases (libcufile's names before the settings were one module).
/// Setting an alias and its variable to opposite values is an error.
pub const ALIASES: &[Alias] = &[
    Alias {
        name: "FGDS_NO_IO_URING",
        of: "FGDS_IO_URING",
        inverted: true,
    },
    Alias {
        name: "FGDS_NO_DIRECT",
        of: "FGDS_DIRECT",
        inverted: true,
    },
];

/// How much libcufile says on stderr (`FGDS_LOG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Nothing.
    Off,
    /// The path chosen at start and the first fallback of each handle.
    Info,
    /// Also every failed call.
    Debug,
}

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
    /// `FGDS_IO_URING` (or not `FGDS_NO_IO_URING`).
    pub use_io_uring: bool,
    /// `FGDS_DIRECT` (or not `FGDS_NO_DIRECT`).
    pub direct: bool,
    /// `FGDS_LOG`.
    pub log: LogLevel,
    /// `FGDS_CUFILE_VERSION`, as `1000 * major + 10 * minor`.
    pub cufile_version: u32,
    /// `FGDS_PARALLEL` (default: `threads`).
    pub parallel: u32,
    /// `FGDS_SPLIT_SIZE`.
    pub split_size: usize,
    /// `FGDS_BOUNCE_SPLIT_SIZE`.
    pub bounce_split_size: usize,
    /// `FGDS_BOUNCE_READ`.
    pub bounce_read: BounceRead,
    /// `FGDS_DEVICE_CACHE_SIZE` (0: no staging pool).
    pub device_cache_size: usize,
    /// `FGDS_PER_BUFFER_CACHE_SIZE`.
    pub per_buffer_cache_size: usize,
    /// `FGDS_REG_CACHE_SIZE` (0: no registration cache).
    pub reg_cache_size: u64,
    /// `FGDS_REG_CACHE_MIN`.
    pub reg_cache_min: usize,
    /// `FGDS_REG_CACHE_WINDOW`.
    pub reg_cache_window: u64,
    /// The variables that are set (not empty), with their values, in
    /// [`VARS`] order, then the [`ALIASES`] set.
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

/// Parses a size in bytes: a number with an optional unit, any case, with
/// or without `B`/`iB`: `1048576`, `64K`, `64KiB`, `1M`, `1MiB`, `1MB`,
/// `2G`, `1T` (all powers of 1024). `None` for anything else or an
/// overflow.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let mul: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    let num = num.trim();
    if num.is_empty() || !num.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// Parses a boolean: `1`, `true`, `yes`, `on` or `0`, `false`, `no`,
/// `off`, any case.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Parses a cuFile version: `1.19` or `1190` (`1000 * major + 10 *
/// minor`), within [`CUFILE_VERSIONS`].
pub fn parse_cufile_version(s: &str) -> Option<u32> {
    let s = s.trim();
    let v = match s.split_once('.') {
        Some((maj, min)) => {
            let (maj, min): (u32, u32) = (maj.parse().ok()?, min.parse().ok()?);
            (min < 100).then_some(())?;
            maj.checked_mul(1000)?.checked_add(min * 10)?
        }
        None => s.parse().ok()?,
    };
    (CUFILE_VERSIONS.contains(&v) && v % 10 == 0).then_some(v)
}

/// What a size must be, for messages.
const SIZE_SPELLING: &str = "a size in bytes: 1048576, 1M, 1MiB";
/// What a boolean must be, for messages.
const BOOL_SPELLING: &str = "not a boolean (1/0, true/false, yes/no, on/off)";

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
            direct: true,
            log: LogLevel::Info,
            cufile_version: *CUFILE_VERSIONS.end(),
            parallel: 0,
            split_size: DEFAULT_SPLIT_SIZE,
            bounce_split_size: DEFAULT_BOUNCE_SPLIT_SIZE,
            bounce_read: BounceRead::Auto,
            device_cache_size: DEFAULT_DEVICE_CACHE_SIZE,
            per_buffer_cache_size: DEFAULT_PER_BUFFER_CACHE_SIZE,
            reg_cache_size: DEFAULT_REG_CACHE_SIZE,
            reg_cache_min: DEFAULT_REG_CACHE_MIN,
            reg_cache_window: DEFAULT_REG_CACHE_WINDOW,
            set: Vec::new(),
            errors: Vec::new(),
        };
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        // The aliases first: the value each gives its variable.
        let mut aliased: Vec<(&'static str, bool, &'static str, String)> = Vec::new();
        let mut alias_set = Vec::new();
        for a in ALIASES {
            let Some(val) = get(a.name) else { continue };
            alias_set.push((a.name, val.clone()));
            match parse_bool(&val) {
                Some(b) => aliased.push((a.of, b != a.inverted, a.name, val)),
                None => e.errors.push(format!(
                    "{}={val:?}: {BOOL_SPELLING} (an alias of {}{})",
                    a.name,
                    if a.inverted { "the opposite of " } else { "" },
                    a.of
                )),
            }
        }
        for v in VARS {
            let alias = aliased.iter().find(|(of, ..)| *of == v.name);
            let val = match (get(v.name), alias) {
                (Some(val), Some((_, b, an, av))) => {
                    if parse_bool(&val).is_some_and(|x| x != *b) {
                        e.errors.push(format!(
                            "{}={val:?} and {an}={av:?} say the opposite; set one of them",
                            v.name
                        ));
                        continue;
                    }
                    e.set.push((v.name, val.clone()));
                    val
                }
                (Some(val), None) => {
                    e.set.push((v.name, val.clone()));
                    val
                }
                (None, Some((_, b, ..))) => if *b { "1" } else { "0" }.to_string(),
                (None, None) => continue,
            };
            let bad = |want: &str| format!("{}={val:?}: {want} (default {})", v.name, v.default);
            let size = |max: u64| match parse_size(&val) {
                Some(n) if n > 0 && n % 4096 == 0 && n <= max => Ok(n as usize),
                Some(_) => Err(bad(&format!(
                    "not a non-zero multiple of 4096{}",
                    if max < u64::MAX {
                        " up to 2 GiB - 4 KiB"
                    } else {
                        ""
                    }
                ))),
                None => Err(bad(&format!("not {SIZE_SPELLING}"))),
            };
            let max_rw = MAX_RW_COUNT as u64;
            let any = usize::MAX as u64;
            let r = match v.name {
                "FGDS_STRICT" => parse_bool(&val)
                    .map(|b| e.strict = b)
                    .ok_or_else(|| bad(BOOL_SPELLING)),
                // read by fgds.torch; checked here with the others
                "FGDS_TORCH_HOST" => parse_bool(&val)
                    .map(|_| ())
                    .ok_or_else(|| bad(BOOL_SPELLING)),
                "FGDS_IO_URING" => parse_bool(&val)
                    .map(|b| e.use_io_uring = b)
                    .ok_or_else(|| bad(BOOL_SPELLING)),
                "FGDS_DIRECT" => parse_bool(&val)
                    .map(|b| e.direct = b)
                    .ok_or_else(|| bad(BOOL_SPELLING)),
                "FGDS_LOG" => match val.trim().to_ascii_lowercase().as_str() {
                    "0" | "off" | "none" => Ok(LogLevel::Off),
                    "1" | "info" => Ok(LogLevel::Info),
                    "2" | "debug" => Ok(LogLevel::Debug),
                    _ => Err(bad("not off, info or debug (0, 1, 2)")),
                }
                .map(|l| e.log = l),
                "FGDS_CUFILE_VERSION" => parse_cufile_version(&val)
                    .map(|v| e.cufile_version = v)
                    .ok_or_else(|| bad("not a cuFile version from 1.15 to 1.20 (or 1150 to 1200)")),
                "FGDS_CHUNK_SIZE" => size(max_rw).map(|n| e.chunk_size = n),
                "FGDS_BOUNCE_CHUNK_SIZE" => size(max_rw).map(|n| e.bounce_chunk_size = n),
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
                "FGDS_SPLIT_SIZE" => size(any).map(|n| e.split_size = n),
                "FGDS_BOUNCE_SPLIT_SIZE" => size(any).map(|n| e.bounce_split_size = n),
                "FGDS_DEVICE_CACHE_SIZE" => match parse_size(&val) {
                    Some(0) => Ok(0),
                    _ => size(any),
                }
                .map(|n| e.device_cache_size = n),
                "FGDS_PER_BUFFER_CACHE_SIZE" => size(max_rw).map(|n| e.per_buffer_cache_size = n),
                "FGDS_REG_CACHE_SIZE" => match parse_size(&val) {
                    Some(0) => Ok(0),
                    _ => size(any),
                }
                .map(|n| e.reg_cache_size = n as u64),
                "FGDS_REG_CACHE_WINDOW" => size(any).map(|n| e.reg_cache_window = n as u64),
                "FGDS_REG_CACHE_MIN" => match parse_size(&val) {
                    Some(n) if n <= any => {
                        e.reg_cache_min = n as usize;
                        Ok(())
                    }
                    _ => Err(bad(&format!("not {SIZE_SPELLING}"))),
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
        if e.device_cache_size % e.per_buffer_cache_size != 0 {
            e.errors.push(format!(
                "FGDS_DEVICE_CACHE_SIZE={} is not a multiple of FGDS_PER_BUFFER_CACHE_SIZE={}",
                e.device_cache_size, e.per_buffer_cache_size
            ));
            e.device_cache_size = DEFAULT_DEVICE_CACHE_SIZE;
            e.per_buffer_cache_size = DEFAULT_PER_BUFFER_CACHE_SIZE;
        }
        e.set.extend(alias_set);
        if e.parallel == 0 {
            e.parallel = e.threads as u32;
        }
        e
    }

    /// Whether `name` (or an alias of it) is set.
    pub fn is_set(&self, name: &str) -> bool {
        self.set
            .iter()
            .any(|(n, _)| *n == name || ALIASES.iter().any(|a| a.name == *n && a.of == name))
    }

    /// Puts the values of the variables that are set into `c`, leaving the
    /// others: for libcufile, whose `cufile.json` comes between the
    /// defaults and the environment.
    pub fn apply_set(&self, c: &mut Config) {
        let set = |n: &str| self.is_set(n);
        if set("FGDS_STRICT") {
            c.strict = self.strict;
        }
        if set("FGDS_CHUNK_SIZE") {
            c.chunk_size = self.chunk_size;
        }
        if set("FGDS_BOUNCE_CHUNK_SIZE") {
            c.bounce_chunk_size = self.bounce_chunk_size;
        }
        if set("FGDS_QUEUE_DEPTH") {
            c.queue_depth = self.queue_depth;
        }
        if set("FGDS_PARALLEL") || set("FGDS_THREADS") {
            c.parallel = self.parallel;
        }
        if set("FGDS_SPLIT_SIZE") {
            c.split_size = self.split_size;
        }
        if set("FGDS_BOUNCE_SPLIT_SIZE") {
            c.bounce_split_size = self.bounce_split_size;
        }
        if set("FGDS_BOUNCE_READ") {
            c.bounce_read = self.bounce_read;
        }
        if set("FGDS_IO_URING") {
            c.use_io_uring = self.use_io_uring;
        }
        if set("FGDS_DIRECT") {
            c.disable_direct = !self.direct;
        }
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

impl Default for Config {
    /// The built-in defaults, or what the `FGDS_*` environment variables
    /// set.
    fn default() -> Self {
        let e = env();
        Config {
            chunk_size: e.chunk_size,
            bounce_chunk_size: e.bounce_chunk_size,
            queue_depth: e.queue_depth,
            strict: e.strict,
            use_io_uring: e.use_io_uring,
            disable_direct: !e.direct,
            parallel: e.parallel,
            split_size: e.split_size,
            bounce_split_size: e.bounce_split_size,
            bounce_read: e.bounce_read,
        }
    }
}

impl Config {
    /// Checks the values (and that the `FGDS_*` environment is valid).
    pub fn validate(&self) -> Result<()> {
        env().check()?;
        self.check_values()
    }
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

    #[test]
    fn every_size_and_boolean_spelling() {
        for (v, n) in [
            ("1048576", 1u64 << 20),
            ("1M", 1 << 20),
            ("1MiB", 1 << 20),
            ("1mb", 1 << 20),
            ("1 MiB", 1 << 20),
            ("64K", 64 << 10),
            ("64kib", 64 << 10),
            ("2G", 2 << 30),
            ("1T", 1 << 40),
            ("4096B", 4096),
        ] {
            assert_eq!(parse_size(v), Some(n), "{v}");
            if n <= MAX_RW_COUNT as u64 && n % 4096 == 0 {
                let e = with(&[("FGDS_CHUNK_SIZE", v)]);
                assert_eq!((e.chunk_size as u64, e.errors.len()), (n, 0), "{v}");
            }
        }
        for v in ["", "M", "1X", "-1M", "1.5M", "12K3", "0x10", "99999999999T"] {
            assert_eq!(parse_size(v), None, "{v}");
        }
        for (v, b) in [
            ("1", true),
            ("TRUE", true),
            ("Yes", true),
            ("on", true),
            ("0", false),
            ("False", false),
            ("NO", false),
            ("off", false),
        ] {
            assert_eq!(parse_bool(v), Some(b), "{v}");
            let e = with(&[("FGDS_STRICT", v), ("FGDS_DIRECT", v)]);
            assert_eq!((e.strict, e.direct, e.errors.len()), (b, b, 0), "{v}");
        }
        // Empty: the default, not an error.
        let e = with(&[("FGDS_STRICT", ""), ("FGDS_CHUNK_SIZE", " ")]);
        assert!(e.errors.is_empty() && e.set.is_empty() && !e.strict);
        let e = with(&[("FGDS_LOG", "DEBUG")]);
        assert_eq!(e.log, LogLevel::Debug);
        let e = with(&[("FGDS_LOG", "loud"), ("FGDS_CHUNK_SIZE", "1MiX")]);
        let m = e.check().unwrap_err().to_string();
        assert!(
            m.contains("FGDS_LOG=\"loud\": not off, info or debug"),
            "{m}"
        );
        assert!(
            m.contains("FGDS_CHUNK_SIZE=\"1MiX\": not a size in bytes: 1048576, 1M, 1MiB"),
            "{m}"
        );
    }

    #[test]
    fn aliases_and_their_conflicts() {
        let e = with(&[("FGDS_NO_IO_URING", "1"), ("FGDS_NO_DIRECT", "yes")]);
        assert!(!e.use_io_uring && !e.direct && e.errors.is_empty());
        assert!(e.is_set("FGDS_IO_URING") && e.is_set("FGDS_DIRECT"));
        assert_eq!(
            e.set,
            [
                ("FGDS_NO_IO_URING", "1".into()),
                ("FGDS_NO_DIRECT", "yes".into())
            ]
        );
        let mut c = crate::Config::default();
        e.apply_set(&mut c);
        assert!(!c.use_io_uring && c.disable_direct);
        // Agreeing: fine; opposite: an error naming both.
        let e = with(&[("FGDS_NO_DIRECT", "0"), ("FGDS_DIRECT", "1")]);
        assert!(e.direct && e.errors.is_empty());
        let e = with(&[("FGDS_NO_DIRECT", "1"), ("FGDS_DIRECT", "on")]);
        let m = e.check().unwrap_err().to_string();
        assert!(
            m.contains("FGDS_DIRECT=\"on\" and FGDS_NO_DIRECT=\"1\" say the opposite"),
            "{m}"
        );
        let e = with(&[("FGDS_NO_IO_URING", "sometimes")]);
        let m = e.check().unwrap_err().to_string();
        assert!(
            m.contains("FGDS_NO_IO_URING=\"sometimes\": not a boolean")
                && m.contains("the opposite of FGDS_IO_URING"),
            "{m}"
        );
    }

    #[test]
    fn cufile_versions() {
        for (v, n) in [
            ("1.20", Some(1200)),
            ("1190", Some(1190)),
            ("1.15", Some(1150)),
        ] {
            assert_eq!(parse_cufile_version(v), n, "{v}");
        }
        for v in ["1.14", "1.21", "1201", "2.0", "x", "1.", "1.1.9"] {
            assert_eq!(parse_cufile_version(v), None, "{v}");
        }
        assert_eq!(with(&[]).cufile_version, 1200);
        let e = with(&[("FGDS_CUFILE_VERSION", "1.17")]);
        assert_eq!(e.cufile_version, 1170);
        let e = with(&[("FGDS_CUFILE_VERSION", "12")]);
        assert!(e
            .check()
            .unwrap_err()
            .to_string()
            .contains("FGDS_CUFILE_VERSION=\"12\": not a cuFile version from 1.15 to 1.20"));
    }

    #[test]
    fn apply_set_leaves_what_is_not_set() {
        let mut c = crate::Config {
            chunk_size: 8192,
            queue_depth: 7,
            ..crate::Config::default()
        };
        with(&[("FGDS_QUEUE_DEPTH", "9")]).apply_set(&mut c);
        assert_eq!((c.chunk_size, c.queue_depth), (8192, 9));
    }
}
