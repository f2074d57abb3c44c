//! `STRATA_*` environment overrides.

use std::collections::BTreeMap;

use crate::error::{Location, Problem};
use crate::schema::Secret;

/// Keys whose values are never shown in errors.
const SECRET_KEYS: &[&str] = &["server.api_key"];

/// The location of a variable, its value redacted when `dotted` is a secret key.
fn env_location(var: &str, dotted: &str, raw: &str) -> Location {
    let value = if SECRET_KEYS.contains(&dotted) {
        Secret::REDACTED
    } else {
        raw
    };
    Location::Env {
        var: var.to_owned(),
        value: value.to_owned(),
    }
}

/// The prefix of every variable this crate reads.
pub const ENV_PREFIX: &str = "STRATA_";

/// `STRATA_*` variables that are not config keys and are left alone: `STRATA_CONFIG` (the config
/// path, read by the binary), `STRATA_LOG` (a log filter that replaces `log.level`, read by the
/// binary) and `STRATA_CPU_WIDE_TILES` (`0` or `1`: the CPU's batched products in 256-bit or
/// 512-bit tiles, the same results either way; by default chosen for the CPU, read by the
/// kernels).
pub const ENV_ALLOWLIST: &[&str] = &["STRATA_CONFIG", "STRATA_LOG", "STRATA_CPU_WIDE_TILES"];

/// Developers' switches that the kernels and the engine read for measurements (README,
/// "Developer knobs"): other forms of a kernel, opt-in fusions, profiles. Accepted (the server
/// logs those set, since they change what runs) and left to the code that reads them, so that a
/// form can be measured through the server as through `bench`. Every `STRATA_` variable the code
/// reads is in this list or in [`ENV_ALLOWLIST`] (a test checks the sources).
pub const ENV_DEVELOPER_KNOBS: &[&str] = &[
    "STRATA_ATTENTION_GQA_FROM",
    "STRATA_ATTENTION_GQA_SPLITS",
    "STRATA_ATTENTION_SPLIT",
    "STRATA_BENCH_TOP_K",
    "STRATA_CPU_FUSE_ROWS",
    "STRATA_KV_POLL_US",
    "STRATA_MATVEC1_ROWS",
    "STRATA_MATVEC_LANES",
    "STRATA_MATVEC_LONE_128",
    "STRATA_MATVEC_ROWS",
    "STRATA_MATVEC_UNROLL",
    "STRATA_MATVEC_UNROLL_LONG",
    "STRATA_SHADER_DEFINES",
    "STRATA_SHADER_TIMELINE",
    "STRATA_SWIGLU_PAIRS",
    "STRATA_SWIGLU_SMALL_FIRST",
    "STRATA_SWIGLU_TAIL",
    "STRATA_VULKAN_ARGMAX",
    "STRATA_VULKAN_ATTENTION",
    "STRATA_VULKAN_CHAIN",
    "STRATA_VULKAN_CHAIN_GROUPS",
    "STRATA_VULKAN_EXACT",
    "STRATA_VULKAN_FUSE_ATTENTION",
    "STRATA_VULKAN_FUSE_COMBINE",
    "STRATA_VULKAN_FUSE_QKV",
    "STRATA_VULKAN_FUSE_SWIGLU",
    "STRATA_VULKAN_FUSE_SWIGLU_PRODUCT",
    "STRATA_VULKAN_GEMM",
    "STRATA_VULKAN_GREEDY_PIPELINE",
    "STRATA_VULKAN_GREEDY_STEPS",
    "STRATA_VULKAN_INT_DOT",
    "STRATA_VULKAN_NORM_EPILOGUE",
    "STRATA_VULKAN_TAGGED_ATTENTION",
    "STRATA_VULKAN_TAGGED_MERGE",
    "STRATA_VULKAN_TAGGED_NORM",
    "STRATA_VULKAN_TAGGED_NORM_SCALE",
    "STRATA_VULKAN_TAGGED_QUANT",
    "STRATA_VULKAN_NORM_PROLOGUE",
    "STRATA_VULKAN_PERSISTENT_FFN",
    "STRATA_VULKAN_PERSISTENT_GROUPS",
    "STRATA_VULKAN_PREFETCH_MB",
    "STRATA_VULKAN_PROFILE",
    "STRATA_VULKAN_READBACK",
    "STRATA_VULKAN_TIMELINE",
    "STRATA_VULKAN_TIMELINE_AT",
    "STRATA_VULKAN_TOP_K",
    "STRATA_VULKAN_WAIT",
    "STRATA_VULKAN_WAIT_FAULT",
    "STRATA_VULKAN_WAIT_TIMEOUT_MS",
];

/// One override: `STRATA_<SECTION>__<KEY>=<value>`.
#[derive(Debug, Clone)]
pub(crate) struct Override {
    /// The variable's name as given.
    pub var: String,
    /// The section, lower case.
    pub section: String,
    /// The key in the section, lower case.
    pub key: String,
    /// The value as given.
    pub raw: String,
    /// The value to set: `raw` read as a TOML value, or `raw` as a string.
    pub value: toml::Value,
}

impl Override {
    /// The dotted key.
    pub fn dotted(&self) -> String {
        format!("{}.{}", self.section, self.key)
    }

    /// Whether `value` was read as TOML into something else than a string (and so may be retried
    /// as the plain string when the key wants one).
    pub fn is_coercible(&self) -> bool {
        !matches!(self.value, toml::Value::String(_))
    }

    /// Where the value came from (a secret's value shown as [`Secret::REDACTED`]).
    pub fn location(&self) -> Location {
        env_location(&self.var, &self.dotted(), &self.raw)
    }
}

/// Reads `raw` as one TOML value (`8192`, `true`, `0.5`, `"x"`, `[1, 2]`), else as a plain string.
pub(crate) fn parse_value(raw: &str) -> toml::Value {
    if !raw.contains(['\n', '\r']) {
        if let Ok(mut t) = toml::from_str::<toml::Table>(&format!("v = {raw}")) {
            if t.len() == 1 {
                if let Some(v) = t.remove("v") {
                    return v;
                }
            }
        }
    }
    toml::Value::String(raw.to_owned())
}

/// Picks the overrides out of `env`, refusing malformed or unknown names. `keys` are the schema's
/// dotted keys. Variables without the `STRATA_` prefix are ignored.
pub(crate) fn collect(
    env: &[(String, String)],
    keys: &[String],
    problems: &mut Vec<Problem>,
) -> Vec<Override> {
    let mut by_key: BTreeMap<String, Override> = BTreeMap::new();
    let mut sorted: Vec<&(String, String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    sorted.sort();
    for (var, raw) in sorted {
        if ENV_ALLOWLIST.contains(&var.as_str()) || ENV_DEVELOPER_KNOBS.contains(&var.as_str()) {
            continue;
        }
        let rest = &var[ENV_PREFIX.len()..];
        let dotted_guess = rest.replacen("__", ".", 1).to_ascii_lowercase();
        let loc = env_location(var, &dotted_guess, raw);
        let Some((section, key)) = rest.split_once("__") else {
            let hint = match suggest(rest, keys) {
                Some(s) => format!("; did you mean {s}?"),
                None => String::new(),
            };
            problems.push(Problem {
                key: None,
                location: loc,
                message: format!(
                    "not a config override: overrides are named STRATA_<SECTION>__<KEY> (two underscores \
                     between section and key, like STRATA_KV__MAX_CONTEXT); the only other STRATA_ variables \
                     are {} and the developer knobs the README lists{hint}",
                    ENV_ALLOWLIST.join(" and ")
                ),
            });
            continue;
        };
        let (section, key) = (section.to_ascii_lowercase(), key.to_ascii_lowercase());
        let dotted = format!("{section}.{key}");
        if !keys.contains(&dotted) {
            let message = if keys.iter().any(|k| k.starts_with(&format!("{section}."))) {
                let in_section: Vec<&str> = keys
                    .iter()
                    .filter_map(|k| k.strip_prefix(&format!("{section}.")))
                    .collect();
                format!(
                    "unknown key `{key}` in section `[{section}]`; its keys are {}",
                    in_section.join(", ")
                )
            } else {
                let mut sections: Vec<&str> = keys
                    .iter()
                    .filter_map(|k| k.split_once('.').map(|s| s.0))
                    .collect();
                sections.dedup();
                format!(
                    "unknown section `[{section}]`; the sections are {}",
                    sections.join(", ")
                )
            };
            problems.push(Problem {
                key: Some(dotted),
                location: loc,
                message,
            });
            continue;
        }
        if let Some(prev) = by_key.get(&dotted) {
            problems.push(Problem {
                key: Some(dotted.clone()),
                location: loc,
                message: format!("set twice, also by {}", prev.var),
            });
            continue;
        }
        let value = parse_value(raw);
        by_key.insert(
            dotted,
            Override {
                var: var.clone(),
                section,
                key,
                raw: raw.clone(),
                value,
            },
        );
    }
    by_key.into_values().collect()
}

/// For `KV_MAX_CONTEXT`, the right name `STRATA_KV__MAX_CONTEXT`, if some split names a key.
fn suggest(rest: &str, keys: &[String]) -> Option<String> {
    let lower = rest.to_ascii_lowercase();
    lower.match_indices('_').find_map(|(i, _)| {
        let dotted = format!("{}.{}", &lower[..i], &lower[i + 1..]);
        keys.contains(&dotted)
            .then(|| format!("{ENV_PREFIX}{}__{}", &rest[..i], &rest[i + 1..]).to_ascii_uppercase())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(parse_value("8192"), toml::Value::Integer(8192));
        assert_eq!(parse_value("false"), toml::Value::Boolean(false));
        assert_eq!(parse_value("0.5"), toml::Value::Float(0.5));
        assert_eq!(
            parse_value("0.0.0.0:9000"),
            toml::Value::String("0.0.0.0:9000".into())
        );
        assert_eq!(
            parse_value("\"quoted\""),
            toml::Value::String("quoted".into())
        );
        assert_eq!(parse_value("cuda:0"), toml::Value::String("cuda:0".into()));
        assert_eq!(
            parse_value("1\nx = 2"),
            toml::Value::String("1\nx = 2".into())
        );
        assert_eq!(parse_value(""), toml::Value::String(String::new()));
    }

    #[test]
    fn suggestion() {
        let keys = vec!["kv.max_context".to_owned(), "server.listen".to_owned()];
        assert_eq!(
            suggest("KV_MAX_CONTEXT", &keys).as_deref(),
            Some("STRATA_KV__MAX_CONTEXT")
        );
        assert_eq!(
            suggest("SERVER_LISTEN", &keys).as_deref(),
            Some("STRATA_SERVER__LISTEN")
        );
        assert_eq!(suggest("FOO", &keys), None);
    }
}
