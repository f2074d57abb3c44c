//! The metrics registry: every metric strata-rt exports, its HELP text, unit and buckets, the
//! Prometheus recorder behind `/metrics`, and the small helpers the rest of the code calls.
//!
//! Rules (Prometheus conventions): names start with `strata_`, carry their base unit
//! (`_seconds`, `_bytes`), counters end in `_total`, and labels are low-cardinality only
//! (device, phase, owner, reason, status; never a request id). Every name in [`ALL`] is described
//! at start-up, and `tests/metrics_registry.rs` checks that each one appears in a dashboard panel
//! and that every metric a dashboard or alert uses is in [`ALL`].
//!
//! Metrics of parts that do not exist yet (the prefill ring, the upload staging buffer, the
//! expert cache, the reader pool) are deliberately absent: they are registered with their code,
//! never exported as constants before it exists.
//!
//! Hot-path cost: the scheduler thread holds pre-registered handles ([`SchedulerMetrics`]), so a
//! step costs a few atomic operations; histogram samples are drained into buckets at scrape time
//! and by an upkeep thread every few seconds.

use std::time::Duration;

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use strata_kv::ArenaStats;

use crate::engine::StopReason;

// ---------------------------------------------------------------------------------------------
// Names

/// Requests queued and not yet admitted (gauge; the gateway signal).
pub const REQUESTS_WAITING: &str = "strata_requests_waiting";
/// Requests admitted and generating (gauge; the gateway signal).
pub const REQUESTS_RUNNING: &str = "strata_requests_running";
/// Requests that ended, by `reason` (counter).
pub const REQUESTS_FINISHED: &str = "strata_requests_finished_total";
/// Generation requests refused before admission, by `reason` (counter).
pub const REQUESTS_REJECTED: &str = "strata_requests_rejected_total";
/// HTTP error answers, by `status` (counter).
pub const HTTP_ERRORS: &str = "strata_http_errors_total";
/// Prompt tokens of accepted requests (counter).
pub const PROMPT_TOKENS: &str = "strata_prompt_tokens_total";
/// Tokens generated and sent (counter).
pub const GENERATED_TOKENS: &str = "strata_generated_tokens_total";
/// Sequences that looked up the prefix cache (counter).
pub const PREFIX_CACHE_QUERIES: &str = "strata_prefix_cache_queries_total";
/// Sequences that reused at least one cached block (counter).
pub const PREFIX_CACHE_HITS: &str = "strata_prefix_cache_hits_total";
/// Prompt tokens served from the prefix cache instead of being prefilled (counter).
pub const PREFIX_CACHE_REUSED_TOKENS: &str = "strata_prefix_cache_reused_tokens_total";
/// Reused prompt tokens that came by copying the cells of a full cached block (counter).
pub const PREFIX_CACHE_COPIED_TOKENS: &str = "strata_prefix_cache_copied_tokens_total";
/// Blocks that entered the prefix cache (counter).
pub const PREFIX_CACHE_INSERTED_BLOCKS: &str = "strata_prefix_cache_inserted_blocks_total";

/// Arrival at the scheduler to the first sampled token (histogram, seconds).
pub const TIME_TO_FIRST_TOKEN: &str = "strata_time_to_first_token_seconds";
/// Mean decode time per output token after the first, one sample per request (histogram).
pub const TIME_PER_OUTPUT_TOKEN: &str = "strata_time_per_output_token_seconds";
/// Arrival at the scheduler to the last token (histogram, seconds).
pub const E2E_REQUEST_LATENCY: &str = "strata_e2e_request_latency_seconds";
/// Time waiting for admission (histogram, seconds).
pub const REQUEST_QUEUE_TIME: &str = "strata_request_queue_time_seconds";
/// Admission to the end of prefill (histogram, seconds).
pub const REQUEST_PREFILL_TIME: &str = "strata_request_prefill_time_seconds";
/// End of prefill to the last token (histogram, seconds).
pub const REQUEST_DECODE_TIME: &str = "strata_request_decode_time_seconds";

/// Blocks in the KV arena (gauge).
pub const KV_ARENA_BLOCKS: &str = "strata_kv_arena_blocks";
/// KV blocks by `owner`: free, prefill, decode, cached_shared, cached_idle (gauge; sums to the total).
pub const KV_BLOCKS: &str = "strata_kv_blocks";
/// KV-cache usage from 0 to 1 (gauge; the gateway signal).
pub const KV_CACHE_USAGE_RATIO: &str = "strata_kv_cache_usage_ratio";
/// Bytes of the KV arena allocation (gauge).
pub const KV_ARENA_BYTES: &str = "strata_kv_arena_bytes";
/// Cached-prefix blocks evicted (counter).
pub const KV_EVICTIONS: &str = "strata_kv_evictions_total";
/// Sequences handed from the prefill owner to the decode owner (counter).
pub const KV_HANDOFFS: &str = "strata_kv_handoffs_total";
/// Always 1, labelled `block_size` and `num_blocks` (gauge; what inference gateways read).
pub const CACHE_CONFIG_INFO: &str = "strata_cache_config_info";

/// Duration of one batched device step, by `device` and `phase` (histogram, seconds).
pub const STEP_DURATION: &str = "strata_step_duration_seconds";
/// Sequences in one step (histogram).
pub const STEP_BATCH_SIZE: &str = "strata_step_batch_size";
/// Tokens computed in one step (histogram).
pub const STEP_TOKENS: &str = "strata_step_tokens";
/// Tokens decoded in greedy runs: a lone greedy request's steps, each submitted before the host
/// read the token before it (counter; `batching.greedy_run_tokens`).
pub const GREEDY_RUN_TOKENS: &str = "strata_greedy_run_tokens_total";

/// Always 1, labelled with the version, git revision, model and devices (gauge).
pub const BUILD_INFO: &str = "strata_build_info";
/// Resident set size of the process (gauge, bytes).
pub const PROCESS_RESIDENT_MEMORY: &str = "strata_process_resident_memory_bytes";
/// Open file descriptors of the process (gauge).
pub const PROCESS_OPEN_FDS: &str = "strata_process_open_fds";

/// What kind of metric a name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One exported metric: its name, kind, unit and HELP text.
#[derive(Clone, Copy, Debug)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<Unit>,
    pub help: &'static str,
}

const fn def(name: &'static str, kind: Kind, unit: Option<Unit>, help: &'static str) -> MetricDef {
    MetricDef { name, kind, unit, help }
}

/// Every metric strata-rt exports.
pub const ALL: &[MetricDef] = &[
    def(REQUESTS_WAITING, Kind::Gauge, Some(Unit::Count), "Requests queued for admission (updated on every submission and admission)."),
    def(REQUESTS_RUNNING, Kind::Gauge, Some(Unit::Count), "Requests admitted and generating (updated on every admission and step)."),
    def(REQUESTS_FINISHED, Kind::Counter, Some(Unit::Count), "Requests that ended, by reason: stop, length, cancelled (client went away), error."),
    def(REQUESTS_REJECTED, Kind::Counter, Some(Unit::Count), "Generation requests refused before admission, by reason: queue_full, invalid, too_large, unavailable."),
    def(HTTP_ERRORS, Kind::Counter, Some(Unit::Count), "HTTP error answers, by status code."),
    def(PROMPT_TOKENS, Kind::Counter, Some(Unit::Count), "Prompt tokens of accepted generation requests."),
    def(GENERATED_TOKENS, Kind::Counter, Some(Unit::Count), "Tokens generated and sent to clients."),
    def(PREFIX_CACHE_QUERIES, Kind::Counter, Some(Unit::Count), "Sequences that looked up the prefix cache."),
    def(PREFIX_CACHE_HITS, Kind::Counter, Some(Unit::Count), "Sequences that reused at least one cached prefix block."),
    def(PREFIX_CACHE_REUSED_TOKENS, Kind::Counter, Some(Unit::Count), "Prompt tokens served from the prefix cache instead of prefilled."),
    def(PREFIX_CACHE_COPIED_TOKENS, Kind::Counter, Some(Unit::Count), "Reused prompt tokens that came by copying the cells of a full cached block into the request's own block (part of the reused tokens)."),
    def(PREFIX_CACHE_INSERTED_BLOCKS, Kind::Counter, Some(Unit::Count), "KV blocks that entered the prefix cache."),
    def(TIME_TO_FIRST_TOKEN, Kind::Histogram, Some(Unit::Seconds), "Arrival at the scheduler to the first sampled token (queue plus prefill)."),
    def(TIME_PER_OUTPUT_TOKEN, Kind::Histogram, Some(Unit::Seconds), "Mean decode time per output token after the first; one sample per finished request."),
    def(E2E_REQUEST_LATENCY, Kind::Histogram, Some(Unit::Seconds), "Arrival at the scheduler to the last token of a finished request."),
    def(REQUEST_QUEUE_TIME, Kind::Histogram, Some(Unit::Seconds), "Time a request waited for admission."),
    def(REQUEST_PREFILL_TIME, Kind::Histogram, Some(Unit::Seconds), "Admission to the end of prefill of a finished request."),
    def(REQUEST_DECODE_TIME, Kind::Histogram, Some(Unit::Seconds), "End of prefill to the last token of a finished request."),
    def(KV_ARENA_BLOCKS, Kind::Gauge, Some(Unit::Count), "Blocks in the KV arena."),
    def(KV_BLOCKS, Kind::Gauge, Some(Unit::Count), "KV blocks by owner: free, prefill, decode, cached_shared (prefix blocks in use), cached_idle (evictable)."),
    def(KV_CACHE_USAGE_RATIO, Kind::Gauge, None, "KV-cache usage from 0 to 1: blocks neither free nor evictable over all blocks."),
    def(KV_ARENA_BYTES, Kind::Gauge, Some(Unit::Bytes), "Bytes of the KV arena allocation."),
    def(KV_EVICTIONS, Kind::Counter, Some(Unit::Count), "Cached prefix blocks evicted to make room."),
    def(KV_HANDOFFS, Kind::Counter, Some(Unit::Count), "Sequences whose KV blocks were handed from the prefill owner to the decode owner."),
    def(CACHE_CONFIG_INFO, Kind::Gauge, None, "Always 1; the KV cache configuration in the labels block_size and num_blocks."),
    def(STEP_DURATION, Kind::Histogram, Some(Unit::Seconds), "Duration of one batched device step, by device and phase (prefill, decode, mixed)."),
    def(STEP_BATCH_SIZE, Kind::Histogram, Some(Unit::Count), "Sequences in one batched step."),
    def(STEP_TOKENS, Kind::Histogram, Some(Unit::Count), "Tokens computed in one batched step (prompt chunks plus one per decoding sequence)."),
    def(GREEDY_RUN_TOKENS, Kind::Counter, Some(Unit::Count), "Tokens decoded in greedy runs: a lone greedy request's decode steps, each submitted before the host read the token before it (each also counts as a step of one token)."),
    def(BUILD_INFO, Kind::Gauge, None, "Always 1; version, git revision, model and devices in the labels."),
    def(PROCESS_RESIDENT_MEMORY, Kind::Gauge, Some(Unit::Bytes), "Resident set size of the strata-rt process (read at scrape time)."),
    def(PROCESS_OPEN_FDS, Kind::Gauge, Some(Unit::Count), "Open file descriptors of the strata-rt process (read at scrape time)."),
];

/// Latency buckets in seconds: resolve a 7B model's few-millisecond decode steps on a GPU and a
/// 135M model's tens of milliseconds on a CPU, up to a minute-long request.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0,
];
/// Sequences per step.
pub const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
/// Tokens per step.
pub const TOKEN_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0];

/// Finish reasons, in the order of [`SchedulerMetrics`]' counters.
const FINISH_REASONS: [&str; 4] = ["stop", "length", "cancelled", "error"];
/// Rejection reasons (see [`request_rejected`]).
const REJECT_REASONS: [&str; 4] = ["queue_full", "invalid", "too_large", "unavailable"];
/// Step phases.
const PHASES: [&str; 3] = ["prefill", "decode", "mixed"];

/// How often histogram samples are drained when nobody scrapes (bounds their memory).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------
// Installation

/// Installs the global recorder with the buckets above, describes every metric, creates the
/// labelled series that should read 0 before anything happens, and starts the upkeep thread.
/// `None` when a recorder is already installed (tests start several servers in one process) or
/// the builder refuses the configuration (logged).
pub fn install() -> Option<PrometheusHandle> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(STEP_BATCH_SIZE.into()), BATCH_BUCKETS))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(STEP_TOKENS.into()), TOKEN_BUCKETS));
    let handle = match builder.and_then(|b| b.install_recorder()) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: no recorder installed");
            return None;
        }
    };
    describe_all();
    for reason in FINISH_REASONS {
        counter!(REQUESTS_FINISHED, "reason" => reason).absolute(0);
    }
    for reason in REJECT_REASONS {
        counter!(REQUESTS_REJECTED, "reason" => reason).absolute(0);
    }
    for name in [PROMPT_TOKENS, GENERATED_TOKENS] {
        counter!(name).absolute(0);
    }
    gauge!(REQUESTS_WAITING).set(0.0);
    gauge!(REQUESTS_RUNNING).set(0.0);
    refresh_process();
    let upkeep = handle.clone();
    let spawned = std::thread::Builder::new().name("strata-metrics".into()).spawn(move || loop {
        std::thread::sleep(UPKEEP_INTERVAL);
        upkeep.run_upkeep();
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "metrics: no upkeep thread; histogram samples drain only when scraped");
    }
    Some(handle)
}

/// Describes every metric in [`ALL`] (HELP and unit) to the installed recorder.
pub fn describe_all() {
    for m in ALL {
        match (m.kind, m.unit) {
            (Kind::Counter, Some(u)) => describe_counter!(m.name, u, m.help),
            (Kind::Counter, None) => describe_counter!(m.name, m.help),
            (Kind::Gauge, Some(u)) => describe_gauge!(m.name, u, m.help),
            (Kind::Gauge, None) => describe_gauge!(m.name, m.help),
            (Kind::Histogram, Some(u)) => describe_histogram!(m.name, u, m.help),
            (Kind::Histogram, None) => describe_histogram!(m.name, m.help),
        }
    }
}

/// The git revision the binary was built from (`unknown` outside a git checkout).
pub fn git_revision() -> &'static str {
    option_env!("STRATA_GIT_REVISION").filter(|s| !s.is_empty()).unwrap_or("unknown")
}

/// Sets `strata_build_info{version,git_revision,model,prefill_device,decode_device} 1`.
pub fn set_build_info(model: &str, prefill_device: &str, decode_device: &str) {
    gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "git_revision" => git_revision(),
        "model" => model.to_owned(),
        "prefill_device" => prefill_device.to_owned(),
        "decode_device" => decode_device.to_owned()
    )
    .set(1.0);
}

// ---------------------------------------------------------------------------------------------
// Helpers for the HTTP side

/// A request is entering the scheduler's queue (called by the submitting thread before it sends).
pub fn request_queued() {
    gauge!(REQUESTS_WAITING).increment(1.0);
}

/// The send after [`request_queued`] failed.
pub fn request_unqueued() {
    gauge!(REQUESTS_WAITING).decrement(1.0);
}

/// The prompt tokens of an accepted request.
pub fn prompt_tokens(n: usize) {
    counter!(PROMPT_TOKENS).increment(n as u64);
}

/// A generation request was refused before admission with HTTP `status`; counted by reason.
/// Statuses that are not refusals (500: a failure after admission, counted as finished) are
/// ignored.
pub fn request_rejected(status: u16) {
    let reason = match status {
        429 => "queue_full",
        413 => "too_large",
        503 => "unavailable",
        400..=499 => "invalid",
        _ => return,
    };
    counter!(REQUESTS_REJECTED, "reason" => reason).increment(1);
}

/// An HTTP error answer.
pub fn http_error(status: u16) {
    counter!(HTTP_ERRORS, "status" => status.to_string()).increment(1);
}

/// Reads the process gauges (resident memory, open fds) from `/proc/self`; called at scrape
/// time. On systems without `/proc` the gauges are left alone.
pub fn refresh_process() {
    if let Some(rss) = resident_bytes() {
        gauge!(PROCESS_RESIDENT_MEMORY).set(rss as f64);
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        // The directory handle itself is one of the entries.
        let n = dir.count().saturating_sub(1);
        gauge!(PROCESS_OPEN_FDS).set(n as f64);
    }
}

/// `VmRSS` of `/proc/self/status`, in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

// ---------------------------------------------------------------------------------------------
// The scheduler's handles

/// How a request ended, for `strata_requests_finished_total{reason}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
    /// The client went away.
    Cancelled,
    /// The server ended it with an error (timeout, device error, refused by the engine).
    Error,
}

impl Finish {
    /// From the scheduler's stop reason; `failed` when an error was sent to the client.
    pub fn new(stop: StopReason, failed: bool) -> Finish {
        match (stop, failed) {
            (_, true) => Finish::Error,
            (StopReason::Stop, _) => Finish::Stop,
            (StopReason::Length, _) => Finish::Length,
            (StopReason::Cancelled, _) => Finish::Cancelled,
        }
    }
}

/// Per-request durations reported when a request ends.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestTimes {
    /// Arrival to the last token.
    pub e2e: Duration,
    /// Admission to the end of prefill (`None`: prefill never finished).
    pub prefill: Option<Duration>,
    /// End of prefill to the last token (`None`: decode never started).
    pub decode: Option<Duration>,
    /// Tokens sampled (the first comes from prefill).
    pub generated: usize,
    /// Tokens sent to the client.
    pub emitted: usize,
}

/// Pre-registered handles the scheduler thread updates: each update is an atomic operation.
/// The gateway gauges (running, KV usage) are set after every admission and every step, and
/// nothing else changes them between steps, so they are as current as the scheduler itself;
/// `strata_requests_waiting` moves on every submission (HTTP side) and admission.
pub struct SchedulerMetrics {
    waiting: Gauge,
    running: Gauge,
    kv_usage: Gauge,
    kv_free: Gauge,
    kv_prefill: Gauge,
    kv_decode: Gauge,
    kv_cached_shared: Gauge,
    kv_cached_idle: Gauge,
    evictions: Counter,
    inserted_blocks: Counter,
    prefix_queries: Counter,
    prefix_hits: Counter,
    reused_tokens: Counter,
    copied_tokens: Counter,
    handoffs: Counter,
    generated: Counter,
    finished: [Counter; 4],
    ttft: Histogram,
    tpot: Histogram,
    e2e: Histogram,
    queue: Histogram,
    prefill: Histogram,
    decode: Histogram,
    /// By phase: prefill, decode, mixed.
    step: [Histogram; 3],
    batch: Histogram,
    step_tokens: Histogram,
    greedy_run_tokens: Counter,
}

impl SchedulerMetrics {
    /// Registers the scheduler's series and sets the static ones (arena size, cache config).
    /// Steps are labelled with `prefill_device` when they only prefill and `decode_device`
    /// otherwise.
    pub fn new(prefill_device: &str, decode_device: &str, arena: &ArenaStats, arena_bytes: u64) -> SchedulerMetrics {
        let kv = |owner: &'static str| gauge!(KV_BLOCKS, "owner" => owner);
        let step = |phase: &'static str| {
            let device = if phase == "prefill" { prefill_device } else { decode_device };
            histogram!(STEP_DURATION, "device" => device.to_owned(), "phase" => phase)
        };
        gauge!(KV_ARENA_BLOCKS).set(f64::from(arena.total_blocks));
        gauge!(KV_ARENA_BYTES).set(arena_bytes as f64);
        gauge!(CACHE_CONFIG_INFO, "block_size" => arena.block_size.to_string(), "num_blocks" => arena.total_blocks.to_string()).set(1.0);
        let m = SchedulerMetrics {
            waiting: gauge!(REQUESTS_WAITING),
            running: gauge!(REQUESTS_RUNNING),
            kv_usage: gauge!(KV_CACHE_USAGE_RATIO),
            kv_free: kv("free"),
            kv_prefill: kv("prefill"),
            kv_decode: kv("decode"),
            kv_cached_shared: kv("cached_shared"),
            kv_cached_idle: kv("cached_idle"),
            evictions: counter!(KV_EVICTIONS),
            inserted_blocks: counter!(PREFIX_CACHE_INSERTED_BLOCKS),
            prefix_queries: counter!(PREFIX_CACHE_QUERIES),
            prefix_hits: counter!(PREFIX_CACHE_HITS),
            reused_tokens: counter!(PREFIX_CACHE_REUSED_TOKENS),
            copied_tokens: counter!(PREFIX_CACHE_COPIED_TOKENS),
            handoffs: counter!(KV_HANDOFFS),
            generated: counter!(GENERATED_TOKENS),
            finished: FINISH_REASONS.map(|r| counter!(REQUESTS_FINISHED, "reason" => r)),
            ttft: histogram!(TIME_TO_FIRST_TOKEN),
            tpot: histogram!(TIME_PER_OUTPUT_TOKEN),
            e2e: histogram!(E2E_REQUEST_LATENCY),
            queue: histogram!(REQUEST_QUEUE_TIME),
            prefill: histogram!(REQUEST_PREFILL_TIME),
            decode: histogram!(REQUEST_DECODE_TIME),
            step: PHASES.map(step),
            batch: histogram!(STEP_BATCH_SIZE),
            step_tokens: histogram!(STEP_TOKENS),
            greedy_run_tokens: counter!(GREEDY_RUN_TOKENS),
        };
        m.handoffs.absolute(0);
        m.greedy_run_tokens.absolute(0);
        m.set_running(0);
        m.publish_kv(arena);
        m
    }

    /// Sets `strata_requests_running`.
    pub fn set_running(&self, running: usize) {
        self.running.set(running as f64);
    }

    /// Sets the KV arena series (and the gateway's usage ratio) from the arena's current stats.
    /// Cheap (atomic stores); meant to be called by whoever owns the arena after it changes.
    pub fn publish_kv(&self, arena: &ArenaStats) {
        let total = f64::from(arena.total_blocks.max(1));
        let used = (arena.total_blocks as usize).saturating_sub(arena.free_blocks + arena.evictable_blocks);
        self.kv_usage.set(used as f64 / total);
        self.kv_free.set(arena.free_blocks as f64);
        self.kv_prefill.set(arena.prefill_blocks as f64);
        self.kv_decode.set(arena.decode_blocks as f64);
        self.kv_cached_shared.set(arena.cached_in_use as f64);
        self.kv_cached_idle.set(arena.evictable_blocks as f64);
        self.evictions.absolute(arena.evictions);
        self.inserted_blocks.absolute(arena.cache_inserts);
        self.prefix_queries.absolute(arena.prefix_lookups);
        self.prefix_hits.absolute(arena.prefix_hits);
        self.reused_tokens.absolute(arena.reused_tokens);
        self.copied_tokens.absolute(arena.copied_tokens);
    }

    /// A request left the queue (admitted, cancelled while waiting, or refused at shutdown).
    pub fn dequeued(&self) {
        self.waiting.decrement(1.0);
    }

    /// A request was admitted after waiting `queued`.
    pub fn admitted(&self, queued: Duration) {
        self.queue.record(queued);
    }

    /// A request's first token was sampled `since_arrival` after it reached the scheduler.
    pub fn first_token(&self, since_arrival: Duration) {
        self.ttft.record(since_arrival);
    }

    /// `tokens` tokens were decoded in a greedy run (each also recorded as a step).
    pub fn greedy_run(&self, tokens: usize) {
        self.greedy_run_tokens.increment(tokens as u64);
    }

    /// A sequence's blocks moved from the prefill owner to the decode owner.
    pub fn handoff(&self) {
        self.handoffs.increment(1);
    }

    /// One batched step of `sequences` sequences (`decoding` of them decoding) and `tokens`
    /// tokens took `took`.
    pub fn step(&self, sequences: usize, decoding: usize, tokens: usize, took: Duration) {
        if sequences == 0 {
            return;
        }
        let phase = if decoding == 0 {
            0
        } else if decoding == sequences {
            1
        } else {
            2
        };
        self.step[phase].record(took);
        self.batch.record(sequences as f64);
        self.step_tokens.record(tokens as f64);
    }

    /// A request ended. Latency histograms take only requests that finished normally (stop,
    /// length); every ending counts in `strata_requests_finished_total`.
    pub fn finished(&self, how: Finish, t: &RequestTimes) {
        let i = match how {
            Finish::Stop => 0,
            Finish::Length => 1,
            Finish::Cancelled => 2,
            Finish::Error => 3,
        };
        self.finished[i].increment(1);
        self.generated.increment(t.emitted as u64);
        if matches!(how, Finish::Stop | Finish::Length) {
            self.e2e.record(t.e2e);
            if let Some(p) = t.prefill {
                self.prefill.record(p);
            }
            if let Some(d) = t.decode {
                self.decode.record(d);
                if t.generated >= 2 {
                    self.tpot.record(d.as_secs_f64() / (t.generated - 1) as f64);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_conventions() {
        let mut seen = std::collections::HashSet::new();
        for m in ALL {
            assert!(seen.insert(m.name), "{} is listed twice", m.name);
            assert!(m.name.starts_with("strata_"), "{}", m.name);
            assert!(m.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'), "{}", m.name);
            assert_eq!(m.kind == Kind::Counter, m.name.ends_with("_total"), "{}: only counters end in _total", m.name);
            if m.unit == Some(Unit::Seconds) {
                assert!(m.name.ends_with("_seconds"), "{}", m.name);
            }
            if m.unit == Some(Unit::Bytes) {
                assert!(m.name.ends_with("_bytes"), "{}", m.name);
            }
            assert!(m.help.len() > 10, "{} needs HELP text", m.name);
        }
        assert!(LATENCY_BUCKETS.windows(2).all(|w| w[0] < w[1]));
        assert!(LATENCY_BUCKETS[0] <= 0.001 && *LATENCY_BUCKETS.last().unwrap_or(&0.0) >= 60.0);
    }

    #[test]
    fn rejection_reasons() {
        // Only refusals count; a 500 is a failure after admission.
        for s in [400, 413, 429, 503] {
            request_rejected(s);
        }
        request_rejected(500);
    }
}
