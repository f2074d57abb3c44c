//! The per-request timing record: one unbuffered JSON line per completed request.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

/// What one completed request cost. Cancelled requests never get one.
#[derive(Clone, Debug, Serialize)]
pub struct TimingRecord {
    pub request_id: String,
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub reused_tokens: usize,
    pub prefill_ms: f64,
    pub generated_tokens: usize,
    pub decode_ms: f64,
    pub wall_ms: f64,
    pub queue_ms: f64,
    pub stop_reason: &'static str,
    pub prefill_device: String,
    pub decode_device: String,
}

impl TimingRecord {
    /// Prompt tokens computed per second of prefill.
    pub fn prefill_tokens_per_s(&self) -> f64 {
        rate(self.prompt_tokens - self.reused_tokens, self.prefill_ms)
    }

    /// Tokens generated per second of decode (the first comes from prefill).
    pub fn decode_tokens_per_s(&self) -> f64 {
        rate(self.generated_tokens.saturating_sub(1), self.decode_ms)
    }

    /// The JSON line (`{"timing": {...}}`).
    pub fn to_json_line(&self) -> String {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("prefill_tokens_per_s".into(), self.prefill_tokens_per_s().into());
            m.insert("decode_tokens_per_s".into(), self.decode_tokens_per_s().into());
        }
        serde_json::json!({ "timing": v }).to_string()
    }

    /// Writes the record to stderr and, when configured, appends it to `path`, each unbuffered.
    pub fn emit(&self, path: Option<&Path>) {
        let line = self.to_json_line();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
        if let Some(p) = path {
            let written = std::fs::OpenOptions::new().create(true).append(true).open(p).and_then(|mut f| {
                f.write_all(format!("{line}\n").as_bytes())?;
                f.flush()
            });
            if let Err(e) = written {
                tracing::warn!(path = %p.display(), error = %e, "could not write the timing log");
            }
        }
    }
}

fn rate(n: usize, ms: f64) -> f64 {
    if ms > 0.0 { n as f64 * 1000.0 / ms } else { 0.0 }
}
