//! Settings: `cufile.json` (the keys that change what fgds does) and the
//! `FGDS_*` environment variables, which win. The variables are libfgds's
//! own ([`fgds::env`]): the same names, values and messages here, in the
//! library and in Python.

use std::path::{Path, PathBuf};

/// How much the library says on stderr (`FGDS_LOG`).
pub use fgds::env::LogLevel;

/// What the library runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Configuration of every handle.
    pub fgds: fgds::Config,
    /// Most requests of one batch (`properties.io_batchsize`).
    pub max_batch: usize,
    /// Log level.
    pub log: LogLevel,
    /// The cuFile name of the level, when `CUFILE_PARAM_LOGGING_LEVEL` set one.
    pub log_name: Option<String>,
    /// Statistics level (`profile.cufile_stats`, 0: off).
    pub stats_level: u32,
    /// The `cufile.json` read, if any.
    pub json: Option<PathBuf>,
    /// The staging pool and registration cache for unregistered GPU memory
    /// (`properties.max_device_cache_size_kb`, `properties.per_buffer_cache_size_kb`).
    pub cache: fgds::gpucache::Settings,
}

/// The library's built-in sizes of the pool and the cache (cuFile's defaults).
pub fn default_cache() -> fgds::gpucache::Settings {
    use fgds::env::*;
    fgds::gpucache::Settings {
        device_cache_size: DEFAULT_DEVICE_CACHE_SIZE,
        per_buffer_size: DEFAULT_PER_BUFFER_CACHE_SIZE,
        reg_cache_size: DEFAULT_REG_CACHE_SIZE,
        reg_cache_min: DEFAULT_REG_CACHE_MIN,
        reg_cache_window: DEFAULT_REG_CACHE_WINDOW,
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            fgds: fgds::Config::default(),
            max_batch: DEFAULT_MAX_BATCH,
            log: LogLevel::Info,
            log_name: None,
            stats_level: 0,
            json: None,
            cache: default_cache(),
        }
    }
}

/// cuFile's default `properties.io_batchsize`.
pub const DEFAULT_MAX_BATCH: usize = 128;
/// Where cuFile looks when `CUFILE_ENV_PATH_JSON` is not set.
pub const DEFAULT_JSON: &str = "/etc/cufile.json";

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not JSON (after comments are removed).
    #[error("{path}: not valid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// `FGDS_*` variables with bad values ([`fgds::env::Env::check`]'s
    /// message, which names each).
    #[error("{0}")]
    Env(String),
    /// A key or variable with a value out of range or of the wrong type.
    #[error("{what}: {why}")]
    Value {
        /// `file: key` or the variable.
        what: String,
        /// What it must be.
        why: String,
    },
}

/// Removes `//` and `/* */` comments outside strings (cuFile's own
/// `cufile.json` has them).
pub fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    let mut in_str = false;
    while let Some(c) = it.next() {
        if in_str {
            out.push(c);
            if c == '\\' {
                if let Some(n) = it.next() {
                    out.push(n);
                }
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match (c, it.peek()) {
            ('"', _) => {
                in_str = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in it.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                it.next();
                let mut prev = ' ';
                for n in it.by_ref() {
                    if prev == '*' && n == '/' {
                        break;
                    }
                    prev = n;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

fn key<'a>(v: &'a serde_json::Value, path: &[&str]) -> Option<&'a serde_json::Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn json_uint(
    v: &serde_json::Value,
    file: &Path,
    path: &[&str],
    min: u64,
    max: u64,
) -> Result<Option<u64>, ConfigError> {
    let Some(x) = key(v, path) else {
        return Ok(None);
    };
    match x.as_u64() {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(ConfigError::Value {
            what: format!("{}: {}", file.display(), path.join(".")),
            why: format!("must be an integer in {min}..={max}, is {x}"),
        }),
    }
}

fn json_bool(
    v: &serde_json::Value,
    file: &Path,
    path: &[&str],
) -> Result<Option<bool>, ConfigError> {
    let Some(x) = key(v, path) else {
        return Ok(None);
    };
    x.as_bool().map(Some).ok_or_else(|| ConfigError::Value {
        what: format!("{}: {}", file.display(), path.join(".")),
        why: format!("must be true or false, is {x}"),
    })
}

/// Applies the keys of a `cufile.json` (text) that change behaviour:
/// `properties.max_direct_io_size_kb` (largest chunk), `properties.io_batchsize`
/// (most requests per batch), `properties.allow_compat_mode` (false: strict),
/// `properties.force_compat_mode` (true: never O_DIRECT, everything
/// bounces), `execution.max_io_queue_depth` (most requests in flight per
/// call), `profile.cufile_stats` (statistics level, 0-3),
/// `properties.max_device_cache_size_kb` and `properties.per_buffer_cache_size_kb`
/// (the staging pool for GPU memory never registered, `fgds::gpucache`;
/// rounded to whole 4 KiB pages and whole staging buffers). The two limits
/// only lower fgds's values (`FGDS_CHUNK_SIZE` and `FGDS_QUEUE_DEPTH` set
/// them). Every other key is ignored.
pub fn apply_json(s: &mut Settings, file: &Path, text: &str) -> Result<(), ConfigError> {
    let v: serde_json::Value =
        serde_json::from_str(&strip_comments(text)).map_err(|source| ConfigError::Json {
            path: file.to_path_buf(),
            source,
        })?;
    if let Some(kb) = json_uint(
        &v,
        file,
        &["properties", "max_direct_io_size_kb"],
        4,
        (fgds::engine::MAX_RW_COUNT / 1024) as u64,
    )? {
        // cuFile's largest request: a cap on the chunk size (whole 4 KiB
        // pages). Not the chunk size itself: NVIDIA's default file says 16 MiB,
        // which the GPU machine measured at 0.7x the 1 MiB default (README).
        let cap = ((kb as usize * 1024) / 4096).max(1) * 4096;
        s.fgds.chunk_size = s.fgds.chunk_size.min(cap);
    }
    if let Some(n) = json_uint(&v, file, &["properties", "io_batchsize"], 1, 4096)? {
        s.max_batch = n as usize;
    }
    if let Some(b) = json_bool(&v, file, &["properties", "allow_compat_mode"])? {
        s.fgds.strict = !b;
    }
    if let Some(b) = json_bool(&v, file, &["properties", "force_compat_mode"])? {
        s.fgds.disable_direct = b;
    }
    if let Some(n) = json_uint(&v, file, &["execution", "max_io_queue_depth"], 1, 4096)? {
        // Also a cap (NVIDIA's default file says 128).
        s.fgds.queue_depth = s.fgds.queue_depth.min(n as u32);
    }
    if let Some(n) = json_uint(&v, file, &["execution", "max_io_threads"], 0, 128)? {
        // The threads one call runs on, capped (NVIDIA's default file: 4;
        // 0: the calling thread alone).
        s.fgds.parallel = s.fgds.parallel.min((n as u32).max(1));
    }
    let max_kb = (fgds::engine::MAX_RW_COUNT / 1024) as u64;
    if let Some(kb) = json_uint(
        &v,
        file,
        &["properties", "per_buffer_cache_size_kb"],
        4,
        max_kb,
    )? {
        s.cache.per_buffer_size = (kb as usize * 1024).div_ceil(4096) * 4096;
    }
    if let Some(kb) = json_uint(
        &v,
        file,
        &["properties", "max_device_cache_size_kb"],
        0,
        u32::MAX as u64,
    )? {
        // Whole staging buffers (cuFile rounds the same way).
        let pb = s.cache.per_buffer_size;
        s.cache.device_cache_size = (kb as usize * 1024) / pb * pb;
    }
    if let Some(n) = json_uint(&v, file, &["profile", "cufile_stats"], 0, 3)? {
        s.stats_level = n as u32;
    }
    s.json = Some(file.to_path_buf());
    Ok(())
}

/// Applies the `FGDS_*` variables that are set ([`fgds::env`]: every
/// variable of the library, `FGDS_LOG`, and the aliases `FGDS_NO_DIRECT`
/// and `FGDS_NO_IO_URING`) over what `cufile.json` set; a bad value is an
/// error naming the variable.
pub fn apply_env(s: &mut Settings, env: &fgds::env::Env) -> Result<(), ConfigError> {
    env.check().map_err(|e| match e {
        fgds::Error::InvalidArgument(m) => ConfigError::Env(m),
        e => ConfigError::Env(e.to_string()),
    })?;
    env.apply_set(&mut s.fgds);
    if env.is_set("FGDS_LOG") {
        s.log = env.log;
    }
    if env.is_set("FGDS_PER_BUFFER_CACHE_SIZE") {
        s.cache.per_buffer_size = env.per_buffer_cache_size;
    }
    if env.is_set("FGDS_DEVICE_CACHE_SIZE") {
        s.cache.device_cache_size = env.device_cache_size;
    }
    if env.is_set("FGDS_REG_CACHE_SIZE") {
        s.cache.reg_cache_size = env.reg_cache_size;
    }
    if env.is_set("FGDS_REG_CACHE_MIN") {
        s.cache.reg_cache_min = env.reg_cache_min;
    }
    if env.is_set("FGDS_REG_CACHE_WINDOW") {
        s.cache.reg_cache_window = env.reg_cache_window;
    }
    if s.cache.device_cache_size % s.cache.per_buffer_size != 0 {
        let pb = s.cache.per_buffer_size;
        s.cache.device_cache_size = s.cache.device_cache_size / pb * pb;
    }
    s.fgds.validate().map_err(|e| ConfigError::Value {
        what: "configuration".into(),
        why: e.to_string(),
    })
}

/// The settings of this process: `$CUFILE_ENV_PATH_JSON` (else
/// `/etc/cufile.json`, if it exists), then the environment.
pub fn load() -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
    let (path, must) = match std::env::var_os("CUFILE_ENV_PATH_JSON") {
        Some(p) => (PathBuf::from(p), true),
        None => (PathBuf::from(DEFAULT_JSON), false),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => apply_json(&mut s, &path, &text)?,
        Err(e) if !must && e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(ConfigError::Read { path, source }),
    }
    apply_env(&mut s, fgds::env::env())?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{
        // cuFile's own file has comments like these
        "logging": { "dir": "/var/log", "level": "ERROR" },
        "properties": {
            /* ignored: */ "use_poll_mode": false,
            "max_direct_io_size_kb": 258,
            "io_batchsize": 8,
            "allow_compat_mode": false,
            "force_compat_mode": true,
            "url": "http://x//y"
        },
        "execution": { "max_io_queue_depth": 8, "max_io_threads": 4 },
        "profile": { "cufile_stats": 3 }
    }"#;

    #[test]
    fn json_keys_that_change_behaviour_apply() {
        let mut s = Settings::default();
        apply_json(&mut s, Path::new("c.json"), SAMPLE).unwrap();
        assert_eq!(s.fgds.chunk_size, 256 * 1024); // 258 KiB rounded down to pages
        assert_eq!(s.max_batch, 8);
        assert!(s.fgds.strict && s.fgds.disable_direct);
        assert_eq!(s.fgds.queue_depth, 8);
        assert_eq!(s.stats_level, 3);
        // NVIDIA's defaults (16 MiB, 128) are above fgds's: no change.
        let mut s = Settings::default();
        let nv = r#"{"properties": {"max_direct_io_size_kb": 16384},
                     "execution": {"max_io_queue_depth": 128}}"#;
        apply_json(&mut s, Path::new("c.json"), nv).unwrap();
        assert_eq!(s.fgds, fgds::Config::default());
    }

    #[test]
    fn bad_json_and_values_are_named() {
        let mut s = Settings::default();
        let e = apply_json(&mut s, Path::new("c.json"), "{ \"properties\": ").unwrap_err();
        assert!(e.to_string().starts_with("c.json: not valid JSON"), "{e}");
        let e = apply_json(
            &mut s,
            Path::new("c.json"),
            r#"{"properties": {"io_batchsize": 0}}"#,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("properties.io_batchsize: must be"),
            "{e}"
        );
        let e = apply_json(
            &mut s,
            Path::new("c.json"),
            r#"{"properties": {"allow_compat_mode": "no"}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("must be true or false"), "{e}");
    }

    fn env(vars: &[(&str, &str)]) -> fgds::env::Env {
        fgds::env::Env::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn env_wins_and_is_checked() {
        let mut s = Settings::default();
        let nv = r#"{"properties": {"max_direct_io_size_kb": 256, "allow_compat_mode": true}}"#;
        apply_json(&mut s, Path::new("c.json"), nv).unwrap();
        assert_eq!(s.fgds.chunk_size, 256 << 10);
        let e = env(&[
            ("FGDS_STRICT", "TRUE"),
            ("FGDS_CHUNK_SIZE", "4MiB"),
            ("FGDS_LOG", "off"),
            ("FGDS_NO_IO_URING", "yes"),
        ]);
        apply_env(&mut s, &e).unwrap();
        assert!(s.fgds.strict && !s.fgds.use_io_uring);
        assert_eq!(s.fgds.chunk_size, 4 << 20);
        assert_eq!(s.log, LogLevel::Off);
        // What the environment does not set stays as the file said.
        let mut s = Settings::default();
        apply_json(&mut s, Path::new("c.json"), nv).unwrap();
        apply_env(&mut s, &env(&[("FGDS_QUEUE_DEPTH", "4")])).unwrap();
        assert_eq!((s.fgds.chunk_size, s.fgds.queue_depth), (256 << 10, 4));
        // The library's messages, naming the variable.
        let e = apply_env(&mut s, &env(&[("FGDS_CHUNK_SIZE", "1000")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("FGDS_CHUNK_SIZE=\"1000\": not a non-zero multiple of 4096"),
            "{e}"
        );
        let e = apply_env(&mut s, &env(&[("FGDS_STRICT", "maybe")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("FGDS_STRICT=\"maybe\": not a boolean"),
            "{e}"
        );
    }

    #[test]
    fn comments_inside_strings_stay() {
        assert_eq!(
            strip_comments(r#"{"a": "x//y/*z*/"} // c"#).trim(),
            r#"{"a": "x//y/*z*/"}"#
        );
    }
}
