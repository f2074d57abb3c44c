//! strata-rt configuration: the TOML schema, its defaults, validation and `STRATA_*` environment
//! overrides.
//!
//! # The file
//!
//! One TOML file, one `[section]` per concern: [`model`](ModelConfig), [`server`](ServerConfig),
//! [`devices`](DevicesConfig), [`batching`](BatchingConfig), [`kv`](KvConfig),
//! [`experts`](ExpertsConfig), [`io`](IoConfig), [`memory`](MemoryConfig),
//! [`speculative`](SpeculativeConfig), [`metrics`](MetricsConfig) and [`log`](LogConfig). Only
//! `model.path` is required; every other key has a default. `config/examples/prod.toml` lists every
//! key with what it does, its unit and its default; `config/examples/dev.toml` runs the default
//! model on the CPU.
//!
//! Relative paths (`model.path`, `experts.profile`, `log.timing_log`) resolve against the **current
//! working directory** of the process, not the config file's folder: the README's commands run
//! from the repository root with `models/...`.
//!
//! # Environment overrides
//!
//! `STRATA_<SECTION>__<KEY>=<value>` (two underscores between section and key, names
//! case-insensitive) replaces one key, e.g. `STRATA_SERVER__LISTEN=0.0.0.0:9000`,
//! `STRATA_KV__MAX_CONTEXT=8192`, `STRATA_SERVER__API_KEY=...`. The value is read as a TOML value
//! when it is one (`8192`, `true`, `0.5`, `"text"`), else taken as a string (`0.0.0.0:9000`,
//! `cuda:0`); a string key given something that reads as another type (`STRATA_MODEL__NAME=123`)
//! gets the plain text. Overrides win over the file.
//!
//! Every other `STRATA_*` variable is refused, so a typo cannot silently do nothing, except those
//! in [`ENV_ALLOWLIST`]: `STRATA_CONFIG` (the config path, read by the binary), `STRATA_LOG` (a
//! log filter that replaces `log.level`, read by the binary) and `STRATA_CPU_WIDE_TILES` (a
//! kernel switch for measurements), and the developers' measurement switches in
//! [`ENV_DEVELOPER_KNOBS`].
//!
//! # Errors
//!
//! Unknown keys, wrong types and impossible values are refused with a [`ConfigError`] whose
//! [`Problem`]s name the dotted key (`kv.block_size`), the file and the 1-based line, or the
//! environment variable the value came from:
//!
//! ```text
//! invalid configuration: prod.toml:31: `kv.block_size`: must be a power of two from 1 to 256, got 24
//! ```
//!
//! # Use
//!
//! ```
//! use strata_config::{Config, DeviceSpec};
//! let text = "[model]\npath = \"models/m.gguf\"\n[devices]\ndecode = \"vulkan:0\"\n";
//! let env = [("STRATA_KV__MAX_CONTEXT".to_owned(), "8192".to_owned())];
//! let cfg = Config::from_toml_str(text, "example.toml", &env).unwrap();
//! assert_eq!(cfg.devices.decode, DeviceSpec::Vulkan(0));
//! assert_eq!(cfg.kv.max_context, 8192);
//! assert_eq!(cfg.server.listen.to_string(), "127.0.0.1:8080");
//! ```

#![warn(missing_docs)]

mod device;
mod env;
mod error;
mod schema;
mod spans;
mod validate;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use device::{DeviceSpec, ParseDeviceError, DEVICE_FORMS};
pub use env::{ENV_ALLOWLIST, ENV_DEVELOPER_KNOBS, ENV_PREFIX};
pub use error::{ConfigError, Location, Problem};
pub use schema::{
    BatchingConfig, Config, CpuProducts, DevicesConfig, ExpertCache, ExpertsConfig, IoConfig, KvConfig, KvDtype,
    KvResidence, LogConfig, LogFormat, MemoryConfig, MetricsConfig, ModelConfig, Secret,
    ServerConfig, SpeculativeConfig,
};

use env::Override;
use spans::{Lines, SpanMap};

impl Config {
    /// Reads the config file at `path`, applies the process's `STRATA_*` overrides, validates, and
    /// checks that the files it names to read (`model.path`, `experts.profile`) exist.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let parsed = Parsed::new(&text, &path.display().to_string(), &Self::process_env())?;
        parsed.check_files()?;
        Ok(parsed.config)
    }

    /// Parses `text` (named `source_name` in errors) with the overrides in `env` (pairs of name and
    /// value; only `STRATA_*` names are looked at, so the whole environment may be passed) and
    /// validates the result. Touches neither the file system nor the process environment.
    pub fn from_toml_str(
        text: &str,
        source_name: &str,
        env: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        Parsed::new(text, source_name, env).map(|p| p.config)
    }

    /// The defaults with `model.path = path` and the overrides in `env` (pass
    /// [`Config::process_env`]), validated: what `strata-rt generate --model X` and `bench
    /// --model X` run without a config file. Only names of an override's shape
    /// (`STRATA_<SECTION>__<KEY>`) are looked at: the developer switches read by the devices
    /// (`STRATA_VULKAN_EXACT`, `STRATA_MATVEC_ROWS`, ...) are used with `bench --model` and are
    /// left to the code that reads them. A path that is not UTF-8 is taken lossily (the callers
    /// set the exact path afterwards).
    ///
    /// # Errors
    /// An override names no key, has a value of the wrong type, or makes the configuration
    /// invalid.
    pub fn with_model(path: &Path, env: &[(String, String)]) -> Result<Config, ConfigError> {
        let overrides: Vec<(String, String)> = env
            .iter()
            .filter(|(k, _)| k.strip_prefix(ENV_PREFIX).is_some_and(|rest| rest.contains("__")))
            .cloned()
            .collect();
        let quoted = toml::Value::String(path.to_string_lossy().into_owned()).to_string();
        Self::from_toml_str(&format!("[model]\npath = {quoted}\n"), "--model", &overrides)
    }

    /// The defaults with `model.path = path`, nothing else applied (see [`Config::with_model`]
    /// for the defaults with the environment's overrides).
    pub fn default_with_model(path: PathBuf) -> Config {
        Config {
            model: ModelConfig::new(path),
            server: ServerConfig::default(),
            devices: DevicesConfig::default(),
            batching: BatchingConfig::default(),
            kv: KvConfig::default(),
            experts: ExpertsConfig::default(),
            io: IoConfig::default(),
            memory: MemoryConfig::default(),
            speculative: SpeculativeConfig::default(),
            metrics: MetricsConfig::default(),
            log: LogConfig::default(),
        }
    }

    /// The effective configuration as TOML, for `--print-config`. Keys left unset (optional keys
    /// without a value) are absent; `server.api_key` is written as [`Secret::REDACTED`].
    pub fn to_toml_string(&self) -> String {
        toml::to_string(self)
            .unwrap_or_else(|e| format!("# cannot render the configuration: {e}\n"))
    }

    /// Every key of the schema, dotted (`kv.block_size`), sorted.
    pub fn keys() -> &'static [String] {
        static KEYS: OnceLock<Vec<String>> = OnceLock::new();
        KEYS.get_or_init(|| {
            let mut keys = Vec::new();
            if let Ok(toml::Value::Table(root)) = toml::Value::try_from(every_key_set()) {
                for (section, v) in &root {
                    if let toml::Value::Table(t) = v {
                        keys.extend(t.keys().map(|k| format!("{section}.{k}")));
                    }
                }
            }
            keys
        })
    }

    /// The process's `STRATA_*` variables (non-UTF-8 values converted lossily), for
    /// [`Config::from_toml_str`].
    pub fn process_env() -> Vec<(String, String)> {
        std::env::vars_os()
            .filter_map(|(k, v)| {
                let k = k.to_string_lossy().into_owned();
                k.starts_with(ENV_PREFIX)
                    .then(|| (k, v.to_string_lossy().into_owned()))
            })
            .collect()
    }

    /// `server.max_running_requests` with `0` resolved to `batching.max_seqs`.
    pub fn max_running_requests(&self) -> usize {
        if self.server.max_running_requests == 0 {
            self.batching.max_seqs
        } else {
            self.server.max_running_requests
        }
    }
}

/// A config with every key set, optional ones included. Written without `..Default::default()` so
/// that a new field fails to compile here until it is listed (and so reaches [`Config::keys`] and
/// the example-coverage test).
fn every_key_set() -> Config {
    let d = Config::default_with_model(PathBuf::from("model.gguf"));
    Config {
        model: ModelConfig {
            path: d.model.path,
            name: Some("m".into()),
            threads: d.model.threads,
        },
        server: ServerConfig {
            listen: d.server.listen,
            max_queued_requests: d.server.max_queued_requests,
            max_running_requests: d.server.max_running_requests,
            request_timeout_s: d.server.request_timeout_s,
            shutdown_grace_s: d.server.shutdown_grace_s,
            max_body_bytes: d.server.max_body_bytes,
            max_tokens_default: d.server.max_tokens_default,
            api_key: Some(Secret::new("k")),
        },
        devices: DevicesConfig {
            prefill: d.devices.prefill,
            decode: d.devices.decode,
            prefill_min_tokens: d.devices.prefill_min_tokens,
            vulkan_exact: d.devices.vulkan_exact,
            cpu_products: d.devices.cpu_products,
        },
        batching: BatchingConfig {
            prefill_chunk: d.batching.prefill_chunk,
            ubatch: d.batching.ubatch,
            max_seqs: d.batching.max_seqs,
            parallel_sampling_min_logits: d.batching.parallel_sampling_min_logits,
            greedy_run_tokens: d.batching.greedy_run_tokens,
        },
        kv: KvConfig {
            max_context: d.kv.max_context,
            cells: d.kv.cells,
            block_size: d.kv.block_size,
            dtype: d.kv.dtype,
            resident: d.kv.resident,
        },
        experts: ExpertsConfig {
            mmap: d.experts.mmap,
            resident_cpu: d.experts.resident_cpu,
            profile: Some("p".into()),
            cache: d.experts.cache,
            adapt_every: d.experts.adapt_every,
            pcie_frac: d.experts.pcie_frac,
        },
        io: IoConfig {
            threads: d.io.threads,
            direct: d.io.direct,
        },
        memory: MemoryConfig {
            vram_reserve_mib: d.memory.vram_reserve_mib,
            host_headroom_mib: d.memory.host_headroom_mib,
        },
        speculative: SpeculativeConfig {
            n: d.speculative.n,
            min_p: d.speculative.min_p,
        },
        metrics: MetricsConfig {
            enabled: d.metrics.enabled,
            listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 9090))),
            path: d.metrics.path,
        },
        log: LogConfig {
            level: d.log.level,
            format: d.log.format,
            timing_log: Some("t".into()),
        },
    }
}

/// A parsed config with what is needed to say where each of its values came from.
struct Parsed {
    config: Config,
    file: String,
    spans: SpanMap,
    overrides: Vec<Override>,
}

impl Parsed {
    fn new(text: &str, file: &str, env: &[(String, String)]) -> Result<Parsed, ConfigError> {
        let lines = Lines::new(text);
        let syntax = |message: &str, span: Option<std::ops::Range<usize>>| {
            let (line, column) = lines.line_col(span.map(|s| s.start).unwrap_or(0));
            let message = message
                .trim()
                .lines()
                .map(str::trim)
                .collect::<Vec<_>>()
                .join("; ");
            ConfigError::Syntax {
                file: file.to_owned(),
                line,
                column,
                message,
            }
        };
        let doc = toml_edit::ImDocument::parse(text).map_err(|e| syntax(e.message(), e.span()))?;
        let spans = SpanMap::build(doc.as_table(), &lines);
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| syntax(e.message(), e.span()))?;

        let mut problems = Vec::new();
        let overrides = env::collect(env, Config::keys(), &mut problems);
        let mut parsed = Parsed {
            config: Config::default_with_model(PathBuf::new()),
            file: file.to_owned(),
            spans,
            overrides,
        };
        for o in &parsed.overrides {
            let section = table
                .entry(o.section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match section {
                toml::Value::Table(t) => {
                    t.insert(o.key.clone(), o.value.clone());
                }
                _ => problems.push(Problem {
                    key: Some(o.section.clone()),
                    location: parsed.locate(&o.section),
                    message: format!(
                        "must be a table `[{}]` for {} to override a key in it",
                        o.section, o.var
                    ),
                }),
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError::Invalid(problems));
        }

        parsed.config = parsed.deserialize(table)?;
        let mut problems: Vec<Problem> = validate::check(&parsed.config)
            .into_iter()
            .map(|v| {
                let key = v
                    .keys
                    .iter()
                    .find(|k| parsed.is_set(k))
                    .or(v.keys.first())
                    .copied()
                    .unwrap_or("");
                Problem {
                    key: Some(key.to_owned()),
                    location: parsed.locate(key),
                    message: v.message,
                }
            })
            .collect();
        // File order first (by line), then the environment.
        problems.sort_by_key(|p| match &p.location {
            Location::File { line, .. } => (0, line.unwrap_or(0)),
            Location::Env { .. } => (1, 0),
        });
        if problems.is_empty() {
            Ok(parsed)
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// Deserializes the merged table; an override that reads as a non-string where the key wants
    /// a string is retried as its plain text.
    fn deserialize(&self, mut table: toml::Table) -> Result<Config, ConfigError> {
        let mut coerced = HashSet::new();
        loop {
            let err = match serde_path_to_error::deserialize::<_, Config>(toml::Value::Table(
                table.clone(),
            )) {
                Ok(c) => return Ok(c),
                Err(e) => e,
            };
            let message = err.inner().message().to_owned();
            let key = error_key(&err.path().to_string(), &message);
            if let Some(o) = self.overrides.iter().find(|o| o.dotted() == key) {
                if o.is_coercible() && coerced.insert(key.clone()) {
                    if let Some(toml::Value::Table(t)) = table.get_mut(&o.section) {
                        t.insert(o.key.clone(), toml::Value::String(o.raw.clone()));
                        continue;
                    }
                }
            }
            return Err(ConfigError::Invalid(vec![Problem {
                location: self.locate(&key),
                message: friendly(&message, !key.contains('.')),
                key: Some(key),
            }]));
        }
    }

    /// Whether the user set `key` (in the file or the environment).
    fn is_set(&self, key: &str) -> bool {
        self.overrides.iter().any(|o| o.dotted() == key) || self.spans.contains(key)
    }

    /// Where the value of `key` came from: its override, else its line in the file (or that of
    /// its section when the key is not written).
    fn locate(&self, key: &str) -> Location {
        match self.overrides.iter().find(|o| o.dotted() == key) {
            Some(o) => o.location(),
            None => Location::File {
                file: self.file.clone(),
                line: self.spans.line_of(key),
            },
        }
    }

    /// Checks that the files the config names to read exist.
    fn check_files(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut check = |key: &str, path: &Path| {
            if !path.is_file() {
                let what = if path.exists() {
                    "is not a file"
                } else {
                    "no such file"
                };
                let cwd = match std::env::current_dir() {
                    Ok(d) if path.is_relative() => {
                        format!(
                            " (relative paths resolve against the current directory, {})",
                            d.display()
                        )
                    }
                    _ => String::new(),
                };
                problems.push(Problem {
                    key: Some(key.to_owned()),
                    location: self.locate(key),
                    message: format!("{what}: {}{cwd}", path.display()),
                });
            }
        };
        check("model.path", &self.config.model.path);
        if let Some(p) = &self.config.experts.profile {
            check("experts.profile", p);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }
}

/// The dotted key of a deserialization error: the path, completed with the field a
/// missing/unknown-field message names.
fn error_key(path: &str, message: &str) -> String {
    let path = if path == "." { "" } else { path };
    let field = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|p| message.strip_prefix(p))
        .and_then(|rest| rest.split('`').next());
    match field {
        Some(f) if path.rsplit('.').next() != Some(f) => {
            if path.is_empty() {
                f.to_owned()
            } else {
                format!("{path}.{f}")
            }
        }
        _ => path.to_owned(),
    }
}

/// Serde's messages in the words of a config file.
fn friendly(message: &str, top_level: bool) -> String {
    let mut m = message.trim().to_owned();
    for (from, to) in [
        ("expected usize", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected f64", "expected a number"),
    ] {
        m = m.replace(from, to);
    }
    if let Some(i) = m.find("expected struct ") {
        m.replace_range(i.., "expected a table");
    }
    if let Some(rest) = m.strip_prefix("missing field `") {
        if let Some(f) = rest.split('`').next() {
            m = if top_level {
                format!("required section `[{f}]` is missing")
            } else {
                format!("required key `{f}` is missing")
            };
        }
    }
    m
}
