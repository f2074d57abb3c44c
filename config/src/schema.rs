//! The sections of the config file, their keys and their defaults.
//!
//! Every section but `[model]` may be left out; every key but `model.path` has a default. The
//! documented example `config/examples/prod.toml` lists every key with its unit and default, and a
//! test keeps it in step with this file.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::DeviceSpec;

/// The whole configuration: one field per `[section]` of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[model]`: which model to serve. Required.
    pub model: ModelConfig,
    /// `[server]`: the HTTP front end and its admission limits.
    #[serde(default)]
    pub server: ServerConfig,
    /// `[devices]`: which device prefills and which decodes.
    #[serde(default)]
    pub devices: DevicesConfig,
    /// `[batching]`: how work is cut into steps.
    #[serde(default)]
    pub batching: BatchingConfig,
    /// `[kv]`: the shared KV cache arena.
    #[serde(default)]
    pub kv: KvConfig,
    /// `[experts]`: tiers of a mixture-of-experts model's experts.
    #[serde(default)]
    pub experts: ExpertsConfig,
    /// `[io]`: the SSD reader pool.
    #[serde(default)]
    pub io: IoConfig,
    /// `[memory]`: memory left alone for others.
    #[serde(default)]
    pub memory: MemoryConfig,
    /// `[speculative]`: speculative decoding.
    #[serde(default)]
    pub speculative: SpeculativeConfig,
    /// `[metrics]`: the Prometheus endpoint.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// `[log]`: logs and the per-request timing log.
    #[serde(default)]
    pub log: LogConfig,
}

// ---------------------------------------------------------------------------------------------
// [model]

/// `[model]`: the model to serve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// `path`: the GGUF file. Required. A relative path resolves against the **current working
    /// directory** of the process (not the config file's folder), so `models/x.gguf` works when the
    /// server is started from the repository root.
    pub path: PathBuf,
    /// `name`: the model name the OpenAI API serves (`/v1/models`, the `model` field of requests and
    /// replies). Default: unset, meaning the file stem of `path` (see [`ModelConfig::served_name`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `threads`: CPU threads for compute on the `cpu` device. Default `0` = all available cores
    /// (see [`ModelConfig::compute_threads`]).
    #[serde(default)]
    pub threads: usize,
}

impl ModelConfig {
    /// A `[model]` section for `path` with every other key at its default.
    pub fn new(path: PathBuf) -> Self {
        ModelConfig {
            path,
            name: None,
            threads: 0,
        }
    }

    /// The served model name: `name` if set, else the file stem of `path` (`"model"` if it has none).
    pub fn served_name(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => self
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "model".to_owned()),
        }
    }

    /// CPU compute threads with `0` resolved: all cores the process may use (at least 1).
    pub fn compute_threads(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// [server]

/// `[server]`: the OpenAI-compatible HTTP front end and its admission limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// `listen`: address and port the HTTP API binds, `"IP:PORT"` (`"[::]:8080"` for IPv6;
    /// `"localhost:PORT"` means `127.0.0.1`). Default `"127.0.0.1:8080"` (local only; use
    /// `"0.0.0.0:8080"` to serve the network).
    #[serde(with = "addr")]
    pub listen: SocketAddr,
    /// `max_queued_requests`: requests that may wait for a free slot; one more is answered
    /// `429 Too Many Requests`. `0` = no waiting room: refuse whenever all slots are busy.
    /// Default `64`.
    pub max_queued_requests: usize,
    /// `max_running_requests`: requests admitted at once (tokenizing, prefilling or decoding).
    /// `0` = `batching.max_seqs`; may not exceed it, since every running request holds a sequence.
    /// Default `0`.
    pub max_running_requests: usize,
    /// `request_timeout_s`: seconds a request may take from arrival to its last token before it is
    /// cancelled (its KV cells are freed). `0` = no limit. Default `600`.
    pub request_timeout_s: u64,
    /// `shutdown_grace_s`: after SIGINT/SIGTERM, seconds in-flight requests may take to finish.
    /// The server stops accepting at once; a stream still running when the grace ends gets an
    /// error event ("the server is shutting down") and its `[DONE]`, so every client sees a
    /// complete response. Default `30`.
    pub shutdown_grace_s: u64,
    /// `max_body_bytes`: largest accepted request body, in bytes; larger gets `413`.
    /// Default `16777216` (16 MiB).
    pub max_body_bytes: u64,
    /// `max_tokens_default`: tokens generated when a request gives no `max_tokens`. `0` = until a
    /// stop condition or the end of the context (OpenAI's behaviour). Default `0`.
    pub max_tokens_default: usize,
    /// `api_key`: when set, every API request must carry `Authorization: Bearer <key>` (`/metrics`
    /// and `/health` excepted). Default: unset (no authentication). Prefer setting it through
    /// `STRATA_SERVER__API_KEY` to keeping it in a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<Secret>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080),
            max_queued_requests: 64,
            max_running_requests: 0,
            request_timeout_s: 600,
            shutdown_grace_s: 30,
            max_body_bytes: 16 * 1024 * 1024,
            max_tokens_default: 0,
            api_key: None,
        }
    }
}

/// A secret string (the API key). [`Debug`](fmt::Debug) and [`Serialize`] write
/// [`Secret::REDACTED`] instead of the value, so neither logs nor `--print-config` leak it; read
/// the value with [`Secret::expose`].
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// What is written in place of the value.
    pub const REDACTED: &'static str = "<redacted>";

    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(Self::REDACTED)
    }
}

// ---------------------------------------------------------------------------------------------
// [devices]

/// `[devices]`: which device runs each phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DevicesConfig {
    /// `prefill`: the device that prefills prompts of at least `prefill_min_tokens` tokens.
    /// Default `"auto"`.
    pub prefill: DeviceSpec,
    /// `decode`: the device that decodes (and prefills short prompts). Default `"auto"`.
    pub decode: DeviceSpec,
    /// `prefill_min_tokens`: prompts shorter than this (in tokens, after prefix reuse) are prefilled
    /// on the decode device: the split does not pay for them. Default `1024`.
    pub prefill_min_tokens: usize,
    /// `vulkan_exact`: Vulkan computes the CPU device's (llama.cpp's) logits bit for bit in
    /// decode steps, at about half the decode speed; the CPU then sums in ggml's order whatever
    /// `cpu_products` says. Default `false`.
    pub vulkan_exact: bool,
    /// `cpu_products`: the order in which the CPU's Q4_0 / Q4_1 / Q8_0 products sum their terms.
    /// Default `"ggml"` (llama.cpp's logits, bit for bit).
    pub cpu_products: CpuProducts,
}

/// `devices.cpu_products`: how the CPU device sums the terms of its 32-block products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuProducts {
    /// Eight blocks a SIMD lane, weights repacked at load: the products do about a third fewer
    /// floating-point operations; attention's value product adds the positions in turn (no
    /// ggml partial sums). Results differ from llama.cpp's in the last bits, which on the
    /// default model moves top-1 agreement with llama.cpp to 96.8% (as any other summation
    /// order does). The products' order only on CPUs with AVX-512 VNNI; elsewhere as `ggml`.
    Interleaved,
    /// llama.cpp's order: the CPU device's logits are llama.cpp's, bit for bit.
    Ggml,
}

impl Default for DevicesConfig {
    fn default() -> Self {
        DevicesConfig {
            prefill: DeviceSpec::Auto,
            decode: DeviceSpec::Auto,
            prefill_min_tokens: 1024,
            vulkan_exact: false,
            cpu_products: CpuProducts::Ggml,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// [batching]

/// `[batching]`: how prompts and sequences are cut into device steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchingConfig {
    /// `prefill_chunk`: most prompt tokens one request prefills before decode steps of other
    /// requests get a turn, in tokens. Default `8192`.
    pub prefill_chunk: usize,
    /// `ubatch`: tokens in one device call of prefill (the micro-batch); at most `prefill_chunk`.
    /// Default `512`.
    pub ubatch: usize,
    /// `max_seqs`: sequences decoded together in one step (the decode batch). Default `16`.
    pub max_seqs: usize,
    /// `parallel_sampling_min_logits`: logits in a step (sequences x vocabulary) from which their
    /// copy out of the device and each sequence's sampling run on several threads. Default
    /// `524288` (a GPU's steps of 4 or more sequences of a 152k vocabulary; none of the default
    /// model's steps of up to 10 sequences).
    pub parallel_sampling_min_logits: usize,
    /// `greedy_run_tokens`: while one greedy request without logprobs runs alone and nothing
    /// waits, its decode steps go in runs of up to this many tokens, each step submitted before
    /// the host has read the token of the step before (a GPU then never waits for the host
    /// between tokens). A request arriving, a stop or a cancellation ends a run after the steps
    /// already submitted, whose tokens are dropped: one more on the CPU, up to seven on Vulkan
    /// (two submissions of up to four steps, `STRATA_VULKAN_GREEDY_STEPS`). 0 turns runs off.
    /// Default `32`.
    pub greedy_run_tokens: usize,
}

impl Default for BatchingConfig {
    fn default() -> Self {
        BatchingConfig {
            prefill_chunk: 8192,
            ubatch: 512,
            max_seqs: 16,
            parallel_sampling_min_logits: 1 << 19,
            greedy_run_tokens: 32,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// [kv]

/// `[kv]`: the one KV cache arena shared by the prefill and decode devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvConfig {
    /// `max_context`: most tokens (prompt + generated) of one sequence. `0` = the model's trained
    /// context length. Default `4096`.
    pub max_context: usize,
    /// `cells`: KV cells in the arena, all sequences together (one cell holds one position of one
    /// sequence). `0` = auto: `max_context × batching.max_seqs`, lowered at start-up to what fits in
    /// memory but never below `max_context`. A set value is rounded up to a multiple of
    /// `block_size` and must be at least `max_context`. Default `0`.
    pub cells: usize,
    /// `block_size`: cells per block, the unit of allocation and of prefix reuse. A power of two,
    /// 1 to 256. Default `16`.
    pub block_size: usize,
    /// `dtype`: element type of K and V: `"f16"` or `"int8"` (half the memory, slight loss).
    /// Default `"f16"`.
    pub dtype: KvDtype,
    /// `resident`: where the arena lives: `"device"` (memory of the prefill device, imported
    /// zero-copy by the decode device: fastest) or `"host"` (page-aligned host memory imported by
    /// both: frees device memory, roughly halves decode speed on a discrete GPU). With the `cpu`
    /// device it is host memory either way. Default `"device"`.
    pub resident: KvResidence,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            max_context: 4096,
            cells: 0,
            block_size: 16,
            dtype: KvDtype::F16,
            resident: KvResidence::Device,
        }
    }
}

impl KvConfig {
    /// The context length with `0` resolved against the model's trained context.
    pub fn context_len(&self, trained_context: usize) -> usize {
        if self.max_context == 0 {
            trained_context
        } else {
            self.max_context
        }
    }

    /// The most cells the arena is to have, before start-up fits it to memory: `cells` rounded up to
    /// a multiple of `block_size`, or when `0`, `context_len × max_seqs` (likewise rounded).
    pub fn cells_wanted(&self, trained_context: usize, max_seqs: usize) -> usize {
        let want = if self.cells == 0 {
            self.context_len(trained_context).saturating_mul(max_seqs)
        } else {
            self.cells
        };
        let bs = self.block_size.max(1);
        want.div_ceil(bs).saturating_mul(bs)
    }
}

/// `kv.dtype`: the element type of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    /// IEEE half precision, 2 bytes per element.
    F16,
    /// 8-bit integers with a scale per block, about 1 byte per element.
    Int8,
}

/// `kv.resident`: where the KV arena's memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvResidence {
    /// Device memory of the prefill device, exported to the decode device.
    Device,
    /// Page-aligned host memory, imported by the devices.
    Host,
}

// ---------------------------------------------------------------------------------------------
// [experts]

/// `[experts]`: where a mixture-of-experts model's experts live. Ignored for dense models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpertsConfig {
    /// `mmap`: map the GGUF file and read weights in place; the file is the last tier.
    /// `false` = read every expert into anonymous memory at start. Default `true`.
    pub mmap: bool,
    /// `resident_cpu`: keep a RAM copy of every expert that is not in the device cache (the RAM
    /// tier). `false` = those experts are read from the mapped file when needed. At least one of
    /// `mmap` and `resident_cpu` must be on. Default `true`.
    pub resident_cpu: bool,
    /// `profile`: a ranked expert profile (how often each expert is routed to) that chooses the
    /// experts of the device cache. Default: unset (experts ranked uniformly until `adapt_every`
    /// has observed enough routing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<PathBuf>,
    /// `cache`: device memory for the static expert cache: `"auto"` (what is left after weights,
    /// KV and `memory.vram_reserve_mib`) or a number of MiB (`0` = no experts on the device).
    /// Default `"auto"`.
    pub cache: ExpertCache,
    /// `adapt_every`: decode tokens between rounds of adaptive swaps (RAM <-> device).
    /// `0` = off. Default `512`.
    pub adapt_every: usize,
    /// `pcie_frac`: share of host-to-device bandwidth adaptive swaps may use, `0.0` to `1.0`.
    /// Default `0.25`.
    pub pcie_frac: f64,
}

impl Default for ExpertsConfig {
    fn default() -> Self {
        ExpertsConfig {
            mmap: true,
            resident_cpu: true,
            profile: None,
            cache: ExpertCache::Auto,
            adapt_every: 512,
            pcie_frac: 0.25,
        }
    }
}

/// `experts.cache`: the size of the device expert cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ExpertCache {
    /// All device memory left after weights, KV and the reserve. Written `"auto"`.
    #[default]
    Auto,
    /// This many MiB of device memory. Written as an integer.
    Mib(u64),
}

impl Serialize for ExpertCache {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ExpertCache::Auto => serializer.serialize_str("auto"),
            ExpertCache::Mib(n) => serializer.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for ExpertCache {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ExpertCache;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"auto\" or a non-negative integer number of MiB")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ExpertCache, E> {
                if v.trim().eq_ignore_ascii_case("auto") {
                    Ok(ExpertCache::Auto)
                } else {
                    Err(E::custom(format_args!(
                        "expected \"auto\" or an integer number of MiB (like 8192), got {v:?}"
                    )))
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ExpertCache, E> {
                Ok(ExpertCache::Mib(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ExpertCache, E> {
                u64::try_from(v).map(ExpertCache::Mib).map_err(|_| {
                    E::custom(format_args!(
                        "expected \"auto\" or a non-negative number of MiB, got {v}"
                    ))
                })
            }
        }
        deserializer.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------------------------
// [io]

/// `[io]`: the reader pool that reads rarely used tensors (per-layer embeddings, expert refills)
/// from SSD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IoConfig {
    /// `threads`: reader threads (each with its own io_uring, or plain `pread` where io_uring is
    /// unavailable), 1 to 256. Default `4`.
    pub threads: usize,
    /// `direct`: read with direct I/O (`O_DIRECT`), bypassing the page cache; falls back to
    /// buffered reads where the file system refuses it. Default `true`.
    pub direct: bool,
}

impl Default for IoConfig {
    fn default() -> Self {
        IoConfig {
            threads: 4,
            direct: true,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// [memory]

/// `[memory]`: memory strata-rt leaves for others when it sizes caches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// `vram_reserve_mib`: device memory left free on each device (drivers, display, other
    /// processes), in MiB. Default `512`.
    pub vram_reserve_mib: u64,
    /// `host_headroom_mib`: host memory left free (system RAM or the cgroup limit, whichever is
    /// lower), in MiB; the RAM expert tier and host KV shrink to respect it. Default `2048`.
    pub host_headroom_mib: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            vram_reserve_mib: 512,
            host_headroom_mib: 2048,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// [speculative]

/// `[speculative]`: speculative decoding (draft tokens verified in one batched step).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpeculativeConfig {
    /// `n`: most draft tokens proposed per decode step, 0 to 64. `0` = off. Default `0`.
    pub n: usize,
    /// `min_p`: drafting stops at a token whose draft probability is below this, `0.0` to `1.0`.
    /// Default `0.75`.
    pub min_p: f64,
}

impl Default for SpeculativeConfig {
    fn default() -> Self {
        SpeculativeConfig { n: 0, min_p: 0.75 }
    }
}

// ---------------------------------------------------------------------------------------------
// [metrics]

/// `[metrics]`: the Prometheus text endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `enabled`: record and serve metrics. Default `true`.
    pub enabled: bool,
    /// `listen`: a separate `"IP:PORT"` for the metrics endpoint (keeps it off the public API
    /// port). Default: unset, meaning served on `server.listen`.
    #[serde(with = "opt_addr", skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// `path`: the URL path of the endpoint; starts with `/`. Default `"/metrics"`.
    pub path: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            listen: None,
            path: "/metrics".to_owned(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// [log]

/// `[log]`: logging.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `level`: a level (`off`, `error`, `warn`, `info`, `debug`, `trace`) or a comma-separated
    /// filter of `level` and `target=level` parts, like `"info,strata_gpu=debug"`. The environment
    /// variable `STRATA_LOG`, when set, replaces it (the binary reads it). Default `"info"`.
    pub level: String,
    /// `format`: `"text"` (human-readable) or `"json"` (one JSON object a line). Default `"text"`.
    pub format: LogFormat,
    /// `timing_log`: a file to append one JSON line per finished request to (queue, prefill and
    /// decode times, tokens, prefix reuse). Default: unset (no timing log).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing_log: Option<PathBuf>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
            timing_log: None,
        }
    }
}

/// `log.format`: how log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

// ---------------------------------------------------------------------------------------------
// Socket addresses

/// Parses `"IP:PORT"`, `"[IPv6]:PORT"` or `"localhost:PORT"`.
pub(crate) fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(port) = s.strip_prefix("localhost:") {
        if let Ok(port) = port.parse::<u16>() {
            return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
        }
    }
    Err(format!(
        "expected an address like \"127.0.0.1:8080\", \"0.0.0.0:8080\" or \"[::]:8080\", got {s:?}"
    ))
}

struct AddrVisitor;

impl Visitor<'_> for AddrVisitor {
    type Value = SocketAddr;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an address like \"127.0.0.1:8080\"")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<SocketAddr, E> {
        parse_addr(v).map_err(E::custom)
    }
}

/// Serde for a [`SocketAddr`] written as a string.
mod addr {
    use super::*;

    pub fn serialize<S: Serializer>(a: &SocketAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(a)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        d.deserialize_str(AddrVisitor)
    }
}

/// Serde for an optional [`SocketAddr`] written as a string (absent = `None`).
mod opt_addr {
    use super::*;

    pub fn serialize<S: Serializer>(a: &Option<SocketAddr>, s: S) -> Result<S::Ok, S::Error> {
        match a {
            Some(a) => s.collect_str(a),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
        d.deserialize_str(AddrVisitor).map(Some)
    }
}
