//! Checks of values that parse but cannot work.

use crate::schema::Secret;
use crate::Config;

/// One impossible value. `keys` are the keys involved, the one to blame first: the first of them
/// that the user set (in the file or the environment) is named in the error.
pub(crate) struct Violation {
    pub keys: Vec<&'static str>,
    pub message: String,
}

/// Every impossible value of `c`, in key order.
pub(crate) fn check(c: &Config) -> Vec<Violation> {
    let mut v = Vec::new();
    let mut bad = |keys: &[&'static str], message: String| {
        v.push(Violation {
            keys: keys.to_vec(),
            message,
        });
    };

    // [model]
    if c.model.path.as_os_str().is_empty() {
        bad(&["model.path"], "must name a GGUF file".into());
    }
    if let Some(name) = &c.model.name {
        if name.trim().is_empty() {
            bad(
                &["model.name"],
                "must not be empty; leave it out to use the file stem".into(),
            );
        }
    }
    if c.model.threads > 4096 {
        bad(
            &["model.threads"],
            format!(
                "{} threads is more than 4096; use 0 for all cores",
                c.model.threads
            ),
        );
    }

    // [server]
    if c.server.max_running_requests > c.batching.max_seqs {
        bad(
            &["server.max_running_requests", "batching.max_seqs"],
            format!(
                "server.max_running_requests ({}) exceeds batching.max_seqs ({}): every running request \
                 holds a sequence (0 means batching.max_seqs)",
                c.server.max_running_requests, c.batching.max_seqs
            ),
        );
    }
    if c.server.max_body_bytes == 0 {
        bad(&["server.max_body_bytes"], "must be at least 1 byte".into());
    }
    if let Some(key) = &c.server.api_key {
        if key.expose().is_empty() {
            bad(
                &["server.api_key"],
                "must not be empty; leave it out to disable authentication".into(),
            );
        } else if key.expose() == Secret::REDACTED {
            bad(
                &["server.api_key"],
                format!(
                    "is the placeholder {:?} that --print-config writes; set the real key \
                     (STRATA_SERVER__API_KEY keeps it out of files)",
                    Secret::REDACTED
                ),
            );
        }
    }

    // [batching]
    let b = &c.batching;
    for (key, val) in [
        ("batching.prefill_chunk", b.prefill_chunk),
        ("batching.ubatch", b.ubatch),
        ("batching.max_seqs", b.max_seqs),
    ] {
        if val == 0 {
            bad(&[key], "must be at least 1".into());
        }
    }
    if b.greedy_run_tokens > MAX_GREEDY_RUN_TOKENS {
        bad(
            &["batching.greedy_run_tokens"],
            format!(
                "must be at most {MAX_GREEDY_RUN_TOKENS} (0 turns greedy runs off), got {}: a run reserves its KV cells at once",
                b.greedy_run_tokens
            ),
        );
    }
    if b.ubatch > b.prefill_chunk && b.prefill_chunk > 0 {
        bad(
            &["batching.ubatch", "batching.prefill_chunk"],
            format!(
                "batching.ubatch ({}) exceeds batching.prefill_chunk ({}): a micro-batch is part of a chunk",
                b.ubatch, b.prefill_chunk
            ),
        );
    }

    // [kv]
    let kv = &c.kv;
    if !kv.block_size.is_power_of_two() || kv.block_size > 256 {
        bad(
            &["kv.block_size"],
            format!(
                "must be a power of two from 1 to 256, got {}",
                kv.block_size
            ),
        );
    }
    if kv.cells != 0 && kv.max_context != 0 && kv.cells < kv.max_context {
        bad(
            &["kv.cells", "kv.max_context"],
            format!(
                "kv.cells ({}) is less than kv.max_context ({}): one full-length sequence would not fit \
                 (0 means auto)",
                kv.cells, kv.max_context
            ),
        );
    }

    // [experts]
    let e = &c.experts;
    if !e.mmap && !e.resident_cpu {
        bad(
            &["experts.resident_cpu", "experts.mmap"],
            "experts.mmap and experts.resident_cpu are both false: experts not on the device would live \
             nowhere; turn one on"
                .into(),
        );
    }
    if let Some(p) = &e.profile {
        if p.as_os_str().is_empty() {
            bad(
                &["experts.profile"],
                "must not be empty; leave it out for no profile".into(),
            );
        }
    }
    if !(0.0..=1.0).contains(&e.pcie_frac) {
        bad(
            &["experts.pcie_frac"],
            format!("must be from 0.0 to 1.0, got {}", e.pcie_frac),
        );
    }

    // [io]
    if c.io.threads == 0 || c.io.threads > 256 {
        bad(
            &["io.threads"],
            format!("must be from 1 to 256, got {}", c.io.threads),
        );
    }

    // [speculative]
    if c.speculative.n > 64 {
        bad(
            &["speculative.n"],
            format!("must be from 0 (off) to 64, got {}", c.speculative.n),
        );
    }
    if !(0.0..=1.0).contains(&c.speculative.min_p) {
        bad(
            &["speculative.min_p"],
            format!("must be from 0.0 to 1.0, got {}", c.speculative.min_p),
        );
    }

    // [metrics]
    let m = &c.metrics;
    if !m.path.starts_with('/')
        || m.path.contains(char::is_whitespace)
        || m.path.contains(['?', '#'])
    {
        bad(
            &["metrics.path"],
            format!("must be a URL path starting with '/', got {:?}", m.path),
        );
    } else if m.listen.is_none()
        && (m.path == "/" || m.path == "/v1" || m.path.starts_with("/v1/") || m.path == "/health")
    {
        bad(
            &["metrics.path"],
            format!("{:?} is taken by the API on server.listen; choose another path or set metrics.listen", m.path),
        );
    }
    if let Some(l) = m.listen {
        if l == c.server.listen && l.port() != 0 {
            bad(
                &["metrics.listen", "server.listen"],
                format!("metrics.listen is server.listen ({l}); leave metrics.listen out to serve metrics there"),
            );
        }
    }

    // [log]
    if let Err(msg) = check_log_filter(&c.log.level) {
        bad(&["log.level"], msg);
    }
    if let Some(p) = &c.log.timing_log {
        if p.as_os_str().is_empty() {
            bad(
                &["log.timing_log"],
                "must not be empty; leave it out for no timing log".into(),
            );
        }
    }

    v
}

/// `batching.greedy_run_tokens` at most: a run reserves its KV cells before it starts.
const MAX_GREEDY_RUN_TOKENS: usize = 4096;

const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// Accepts `level` and `target=level` parts separated by commas.
fn check_log_filter(filter: &str) -> Result<(), String> {
    let expected = || {
        format!(
            "expected a level ({}) or a filter like \"info,strata_gpu=debug\", got {filter:?}",
            LEVELS.join(", ")
        )
    };
    if filter.trim().is_empty() {
        return Err(expected());
    }
    for part in filter.split(',') {
        let part = part.trim();
        let level = match part.split_once('=') {
            Some((target, level)) => {
                let ok = !target.is_empty()
                    && target
                        .chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || "_:-.".contains(ch));
                if !ok {
                    return Err(expected());
                }
                level
            }
            None => part,
        };
        if !LEVELS.contains(&level.trim().to_ascii_lowercase().as_str()) {
            return Err(expected());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_filters() {
        assert!(check_log_filter("info").is_ok());
        assert!(check_log_filter("WARN").is_ok());
        assert!(check_log_filter("info,strata_gpu=debug,actix_web::x=off").is_ok());
        assert!(check_log_filter("infoo").is_err());
        assert!(check_log_filter("").is_err());
        assert!(check_log_filter("x=loud").is_err());
        assert!(check_log_filter("=info").is_err());
    }
}
