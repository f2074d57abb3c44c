//! The schema against its examples and docs, and the errors a user sees.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use strata_config::*;

const DEV: &str = include_str!("../examples/dev.toml");
const PROD: &str = include_str!("../examples/prod.toml");

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(text, "test.toml", &[])
}

fn parse_env(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_toml_str(text, "test.toml", &env(vars))
}

/// The one problem of an `Invalid` error.
fn one_problem(r: Result<Config, ConfigError>) -> Problem {
    match r {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => match e.problems() {
            [p] => p.clone(),
            _ => panic!("expected one problem, got: {e}"),
        },
    }
}

/// Asserts the problem names `key` at `test.toml:line`, and that the message shows all three.
fn assert_at(p: &Problem, key: &str, line: usize) {
    assert_eq!(p.key.as_deref(), Some(key), "{p}");
    assert_eq!(p.location.file(), Some("test.toml"), "{p}");
    assert_eq!(p.location.line(), Some(line), "{p}");
    let shown = p.to_string();
    assert!(
        shown.contains(&format!("test.toml:{line}")) && shown.contains(key),
        "{shown}"
    );
}

const MODEL: &str = "[model]\npath = \"m.gguf\"\n";

// ---------------------------------------------------------------------------------------------
// Examples and documentation

#[test]
fn dev_example_loads() {
    let c = Config::from_toml_str(DEV, "dev.toml", &[]).unwrap();
    assert_eq!(
        c.model.path,
        PathBuf::from("models/SmolLM2-135M-Instruct.Q4_1.gguf")
    );
    assert_eq!(c.model.served_name(), "SmolLM2-135M-Instruct.Q4_1");
    assert_eq!(c.devices.prefill, DeviceSpec::Cpu);
    assert_eq!(c.devices.decode, DeviceSpec::Cpu);
    assert_eq!(c.log.format, LogFormat::Text);
}

#[test]
fn prod_example_loads() {
    let c = Config::from_toml_str(PROD, "prod.toml", &[]).unwrap();
    assert_eq!(c.devices.prefill, DeviceSpec::Hip(0));
    assert_eq!(c.devices.decode, DeviceSpec::Vulkan(0));
    assert_eq!(c.model.served_name(), "qwen3-30b-a3b");
    assert_eq!(c.metrics.listen, Some("127.0.0.1:9090".parse().unwrap()));
    assert_eq!(c.server.api_key, None);
}

/// Keys of the example: `section.key` for every `key = ...` line and every commented-out
/// `#key = ...` line, with the comment block above it.
fn documented_keys(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut comment = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            comment.clear();
            continue;
        }
        let (body, commented_out) = match line.strip_prefix('#') {
            Some(rest) if !rest.starts_with([' ', '#']) && !rest.is_empty() => (rest, true),
            Some(rest) => {
                comment.push_str(rest.trim());
                comment.push(' ');
                continue;
            }
            None => (line, false),
        };
        let _ = commented_out;
        if let Some((key, _)) = body.split_once('=') {
            let key = key.trim();
            if key.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !key.is_empty() {
                out.push((format!("{section}.{key}"), std::mem::take(&mut comment)));
                continue;
            }
        }
        comment.clear();
    }
    out
}

#[test]
fn prod_example_mentions_every_key_once() {
    let documented = documented_keys(PROD);
    let in_file: BTreeSet<&str> = documented.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(in_file.len(), documented.len(), "a key is listed twice");
    let schema: BTreeSet<&str> = Config::keys().iter().map(String::as_str).collect();
    let missing: Vec<_> = schema.difference(&in_file).collect();
    let unknown: Vec<_> = in_file.difference(&schema).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "missing from prod.toml: {missing:?}; not in the schema: {unknown:?}"
    );
}

#[test]
fn prod_example_states_each_default_correctly() {
    let defaults = toml::Value::try_from(Config::default_with_model(PathBuf::from("x"))).unwrap();
    for (key, comment) in documented_keys(PROD) {
        let (section, name) = key.split_once('.').unwrap();
        let actual = defaults.get(section).and_then(|s| s.get(name));
        if key == "model.path" {
            assert!(comment.contains("Required."), "{key}: {comment}");
            continue;
        }
        assert!(!comment.is_empty(), "{key} has no comment");
        if comment.contains("Default: unset") {
            assert_eq!(actual, None, "{key} is documented unset");
            continue;
        }
        let doc = comment
            .split_once("Default: `")
            .and_then(|(_, rest)| rest.split_once('`'))
            .map(|(v, _)| v)
            .unwrap_or_else(|| panic!("{key}: no \"Default: `...`\" in {comment:?}"));
        let doc: toml::Table = toml::from_str(&format!("v = {doc}")).unwrap();
        assert_eq!(Some(&doc["v"]), actual, "{key}: documented default differs");
        assert!(
            comment.contains("Unit:")
                || matches!(
                    actual,
                    Some(toml::Value::Boolean(_)) | Some(toml::Value::String(_))
                ),
            "{key}: a number without a unit"
        );
    }
}

#[test]
fn defaults_are_the_documented_values() {
    let c = Config::default_with_model(PathBuf::from("models/x.gguf"));
    assert_eq!(c.model.threads, 0);
    assert_eq!(c.model.served_name(), "x");
    assert_eq!(
        c.server.listen,
        "127.0.0.1:8080".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(c.server.max_queued_requests, 64);
    assert_eq!(c.max_running_requests(), 16);
    assert_eq!(c.server.request_timeout_s, 600);
    assert_eq!(c.server.max_body_bytes, 16 << 20);
    assert_eq!(c.server.api_key, None);
    assert_eq!(c.devices.prefill, DeviceSpec::Auto);
    assert_eq!(c.devices.decode, DeviceSpec::Auto);
    assert_eq!(c.devices.prefill_min_tokens, 1024);
    assert_eq!(
        (
            c.batching.prefill_chunk,
            c.batching.ubatch,
            c.batching.max_seqs
        ),
        (8192, 512, 16)
    );
    assert_eq!(
        (c.kv.max_context, c.kv.cells, c.kv.block_size),
        (4096, 0, 16)
    );
    assert_eq!(
        (c.kv.dtype, c.kv.resident),
        (KvDtype::F16, KvResidence::Device)
    );
    assert!(c.experts.mmap && c.experts.resident_cpu);
    assert_eq!(
        (c.experts.cache, c.experts.adapt_every, c.experts.pcie_frac),
        (ExpertCache::Auto, 512, 0.25)
    );
    assert_eq!(c.experts.profile, None);
    assert_eq!((c.io.threads, c.io.direct), (4, true));
    assert_eq!(
        (c.memory.vram_reserve_mib, c.memory.host_headroom_mib),
        (512, 2048)
    );
    assert_eq!((c.speculative.n, c.speculative.min_p), (0, 0.75));
    assert!(c.metrics.enabled);
    assert_eq!(
        (c.metrics.listen, c.metrics.path.as_str()),
        (None, "/metrics")
    );
    assert_eq!(
        (c.log.level.as_str(), c.log.format, c.log.timing_log.clone()),
        ("info", LogFormat::Text, None)
    );
}

#[test]
fn model_alone_gives_the_defaults() {
    let c = parse(MODEL).unwrap();
    assert_eq!(c, Config::default_with_model(PathBuf::from("m.gguf")));
}

/// `--model X` without a config file: the defaults, the path as given (quotes and backslashes
/// too), and the environment's overrides, which used to be ignored there.
#[test]
fn model_flag_alone_takes_the_environment() {
    let path = PathBuf::from(r#"models/a "quoted" \ name.gguf"#);
    assert_eq!(Config::with_model(&path, &[]).unwrap(), Config::default_with_model(path.clone()));
    // A device's developer switch (no `__`) is not a config override and is left alone.
    let env = vec![
        ("STRATA_DEVICES__CPU_PRODUCTS".to_string(), "interleaved".to_string()),
        ("STRATA_MODEL__THREADS".to_string(), "3".to_string()),
        ("STRATA_VULKAN_EXACT".to_string(), "1".to_string()),
    ];
    let c = Config::with_model(&path, &env).unwrap();
    assert_eq!((c.devices.cpu_products, c.model.threads, c.model.path.clone()), (CpuProducts::Interleaved, 3, path.clone()));
    let bad = vec![("STRATA_MODEL__THREADS".to_string(), "many".to_string())];
    let err = Config::with_model(&path, &bad).unwrap_err().to_string();
    assert!(err.contains("STRATA_MODEL__THREADS"), "{err}");
}

#[test]
fn effective_config_round_trips() {
    for text in [DEV, PROD] {
        let c = parse(text).unwrap();
        let printed = c.to_toml_string();
        assert_eq!(parse(&printed).unwrap(), c, "{printed}");
    }
}

#[test]
fn api_key_is_redacted_and_the_placeholder_refused() {
    let c = parse_env(MODEL, &[("STRATA_SERVER__API_KEY", "s3cret")]).unwrap();
    assert_eq!(
        c.server.api_key.as_ref().map(Secret::expose),
        Some("s3cret")
    );
    let printed = c.to_toml_string();
    assert!(
        !printed.contains("s3cret") && printed.contains(Secret::REDACTED),
        "{printed}"
    );
    assert!(!format!("{c:?}").contains("s3cret"));
    let p = one_problem(parse(&printed));
    assert_eq!(p.key.as_deref(), Some("server.api_key"));
    // An error about the key read from the environment does not show its value.
    let e = parse_env(
        MODEL,
        &[
            ("STRATA_SERVER__API_KEY", "s3cret"),
            ("STRATA_server__api_key", "s3cret"),
        ],
    )
    .unwrap_err();
    assert!(!e.to_string().contains("s3cret"), "{e}");
}

#[test]
fn expert_cache_auto_or_mib() {
    let c = parse(&format!("{MODEL}[experts]\ncache = 8192\n")).unwrap();
    assert_eq!(c.experts.cache, ExpertCache::Mib(8192));
    let c = parse(&format!("{MODEL}[experts]\ncache = \"auto\"\n")).unwrap();
    assert_eq!(c.experts.cache, ExpertCache::Auto);
    let p = one_problem(parse(&format!("{MODEL}[experts]\ncache = \"lots\"\n")));
    assert_at(&p, "experts.cache", 4);
    assert!(
        p.message.contains("\"auto\"") && p.message.contains("\"lots\""),
        "{p}"
    );
    let p = one_problem(parse(&format!("{MODEL}[experts]\ncache = -1\n")));
    assert_at(&p, "experts.cache", 4);
}

#[test]
fn resolved_values() {
    let c = parse(&format!(
        "{MODEL}[kv]\nmax_context = 0\ncells = 5000\nblock_size = 64\n"
    ))
    .unwrap();
    assert_eq!(c.kv.context_len(8192), 8192);
    assert_eq!(c.kv.cells_wanted(8192, 16), 5056);
    let c = parse(MODEL).unwrap();
    assert_eq!(c.kv.cells_wanted(8192, c.batching.max_seqs), 4096 * 16);
    assert!(c.model.compute_threads() >= 1);
}

#[test]
fn other_key_spellings() {
    let c = parse(
        "model = { path = \"a.gguf\" }\nkv.dtype = \"int8\"\nserver.listen = \"localhost:9000\"\n",
    )
    .unwrap();
    assert_eq!(c.kv.dtype, KvDtype::Int8);
    assert_eq!(
        c.server.listen,
        "127.0.0.1:9000".parse::<SocketAddr>().unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// Errors from the file

#[test]
fn unknown_key_names_key_file_line() {
    let p = one_problem(parse(&format!(
        "{MODEL}\n[kv]\nblock_size = 16\nmax_ctx = 8192\n"
    )));
    assert_at(&p, "kv.max_ctx", 6);
    assert!(
        p.message.contains("max_context"),
        "lists the valid keys: {p}"
    );
}

#[test]
fn unknown_section_names_it() {
    let p = one_problem(parse(&format!("{MODEL}[cache]\nsize = 1\n")));
    assert_at(&p, "cache", 3);
}

#[test]
fn wrong_type_names_key_file_line() {
    let p = one_problem(parse(&format!("{MODEL}[batching]\nubatch = \"big\"\n")));
    assert_at(&p, "batching.ubatch", 4);
    assert!(
        p.message.contains("invalid type") && p.message.contains("non-negative integer"),
        "{p}"
    );
    let p = one_problem(parse(&format!("{MODEL}[io]\ndirect = \"yes\"\n")));
    assert_at(&p, "io.direct", 4);
    let p = one_problem(parse(&format!("kv = 5\n{MODEL}")));
    assert_at(&p, "kv", 1);
}

#[test]
fn negative_size_is_refused() {
    let p = one_problem(parse(&format!("{MODEL}[kv]\nmax_context = -1\n")));
    assert_at(&p, "kv.max_context", 4);
}

#[test]
fn bad_value_names_key_file_line() {
    let p = one_problem(parse(&format!(
        "{MODEL}[kv]\nmax_context = 8192\nblock_size = 24\n"
    )));
    assert_at(&p, "kv.block_size", 5);
    assert!(p.message.contains("power of two"), "{p}");
}

#[test]
fn bad_device_and_address_and_enum() {
    let p = one_problem(parse(&format!("{MODEL}[devices]\nprefill = \"gpu:0\"\n")));
    assert_at(&p, "devices.prefill", 4);
    assert!(p.message.contains("vulkan:N"), "{p}");
    let p = one_problem(parse(&format!("{MODEL}[server]\nlisten = \"8080\"\n")));
    assert_at(&p, "server.listen", 4);
    let p = one_problem(parse(&format!("{MODEL}[kv]\ndtype = \"f32\"\n")));
    assert_at(&p, "kv.dtype", 4);
    assert!(p.message.contains("int8"), "{p}");
}

#[test]
fn impossible_values() {
    let cases: &[(&str, &str)] = &[
        ("[batching]\nmax_seqs = 0", "batching.max_seqs"),
        ("[batching]\nprefill_chunk = 0", "batching.prefill_chunk"),
        ("[batching]\ngreedy_run_tokens = 5000", "batching.greedy_run_tokens"),
        ("[experts]\npcie_frac = 1.5", "experts.pcie_frac"),
        ("[experts]\npcie_frac = nan", "experts.pcie_frac"),
        ("[speculative]\nmin_p = -0.1", "speculative.min_p"),
        ("[speculative]\nn = 1000", "speculative.n"),
        ("[io]\nthreads = 0", "io.threads"),
        ("[kv]\nblock_size = 512", "kv.block_size"),
        ("[kv]\nblock_size = 0", "kv.block_size"),
        ("[metrics]\npath = \"metrics\"", "metrics.path"),
        ("[log]\nlevel = \"loud\"", "log.level"),
        ("[log]\nformat = \"xml\"", "log.format"),
        ("[model]\nname = \"\"", "model.name"),
        ("[server]\napi_key = \"\"", "server.api_key"),
        ("[server]\nmax_body_bytes = 0", "server.max_body_bytes"),
    ];
    for (snippet, key) in cases {
        let text = if snippet.starts_with("[model]") {
            format!("{}\npath = \"m.gguf\"\n", snippet)
        } else {
            format!("{MODEL}{snippet}\n")
        };
        let p = one_problem(parse(&text));
        assert_eq!(p.key.as_deref(), Some(*key), "{snippet}: {p}");
        assert!(p.location.line().is_some(), "{snippet}: {p}");
    }
}

#[test]
fn cross_key_checks_blame_the_key_that_was_set() {
    // ubatch is left at 512, prefill_chunk set below it: blame prefill_chunk.
    let p = one_problem(parse(&format!("{MODEL}[batching]\nprefill_chunk = 256\n")));
    assert_at(&p, "batching.prefill_chunk", 4);
    // Both set: blame ubatch.
    let p = one_problem(parse(&format!(
        "{MODEL}[batching]\nprefill_chunk = 256\nubatch = 1024\n"
    )));
    assert_at(&p, "batching.ubatch", 5);
    let p = one_problem(parse(&format!(
        "{MODEL}[kv]\nmax_context = 8192\ncells = 100\n"
    )));
    assert_at(&p, "kv.cells", 5);
    let p = one_problem(parse(&format!(
        "{MODEL}[experts]\nmmap = false\nresident_cpu = false\n"
    )));
    assert_at(&p, "experts.resident_cpu", 5);
    let p = one_problem(parse(&format!(
        "{MODEL}[server]\nmax_running_requests = 32\n"
    )));
    assert_at(&p, "server.max_running_requests", 4);
    let p = one_problem(parse(&format!(
        "{MODEL}[metrics]\nlisten = \"127.0.0.1:8080\"\n"
    )));
    assert_at(&p, "metrics.listen", 4);
}

#[test]
fn several_problems_are_reported_together() {
    let e = parse(&format!("{MODEL}[kv]\nblock_size = 3\n[io]\nthreads = 0\n")).unwrap_err();
    let keys: Vec<_> = e
        .problems()
        .iter()
        .filter_map(|p| p.key.as_deref())
        .collect();
    assert_eq!(keys, ["kv.block_size", "io.threads"]);
    let shown = e.to_string();
    assert!(
        shown.contains("test.toml:4") && shown.contains("test.toml:6"),
        "{shown}"
    );
}

#[test]
fn missing_model_path() {
    let p = one_problem(parse(
        "[server]\nlisten = \"127.0.0.1:1\"\n\n[model]\nname = \"x\"\n",
    ));
    assert_at(&p, "model.path", 4);
    let p = one_problem(parse("[server]\nlisten = \"127.0.0.1:1\"\n"));
    assert_eq!(p.key.as_deref(), Some("model"));
    assert_eq!(p.location.line(), None);
    assert_eq!(p.location.file(), Some("test.toml"));
}

#[test]
fn syntax_error_has_line_and_column() {
    match parse(&format!("{MODEL}[kv]\nmax_context = = 3\n")) {
        Err(ConfigError::Syntax {
            file, line, column, ..
        }) => {
            assert_eq!((file.as_str(), line), ("test.toml", 4));
            assert!(column > 1);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(&format!("{MODEL}[kv]\ncells = 1\ncells = 2\n")),
        Err(ConfigError::Syntax { line: 5, .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Environment overrides

#[test]
fn env_overrides_win_and_are_typed() {
    let c = parse_env(
        DEV,
        &[
            ("STRATA_SERVER__LISTEN", "0.0.0.0:9000"),
            ("STRATA_KV__MAX_CONTEXT", "8192"),
            ("STRATA_devices__decode", "vulkan:1"),
            ("STRATA_EXPERTS__MMAP", "false"),
            ("STRATA_EXPERTS__PCIE_FRAC", "0.5"),
            ("STRATA_EXPERTS__CACHE", "4096"),
            ("STRATA_LOG__LEVEL", "debug"),
            ("STRATA_CONFIG", "ignored.toml"),
            ("STRATA_LOG", "trace"),
            ("PATH", "/bin"),
        ],
    )
    .unwrap();
    assert_eq!(
        c.server.listen,
        "0.0.0.0:9000".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(c.kv.max_context, 8192);
    assert_eq!(c.devices.decode, DeviceSpec::Vulkan(1));
    assert!(!c.experts.mmap);
    assert_eq!(c.experts.pcie_frac, 0.5);
    assert_eq!(c.experts.cache, ExpertCache::Mib(4096));
    assert_eq!(c.log.level, "debug");
}

#[test]
fn env_text_for_string_keys() {
    let c = parse_env(
        MODEL,
        &[
            ("STRATA_MODEL__NAME", "123"),
            ("STRATA_SERVER__API_KEY", "true"),
        ],
    )
    .unwrap();
    assert_eq!(c.model.name.as_deref(), Some("123"));
    assert_eq!(c.server.api_key.as_ref().map(Secret::expose), Some("true"));
}

#[test]
fn env_can_supply_the_required_key() {
    let c = parse_env("", &[("STRATA_MODEL__PATH", "models/y.gguf")]).unwrap();
    assert_eq!(c.model.path, PathBuf::from("models/y.gguf"));
}

#[test]
fn bad_env_value_names_the_variable() {
    let p = one_problem(parse_env(MODEL, &[("STRATA_KV__MAX_CONTEXT", "8k")]));
    assert_eq!(p.key.as_deref(), Some("kv.max_context"));
    assert_eq!(p.location.env_var(), Some("STRATA_KV__MAX_CONTEXT"));
    assert!(
        p.to_string().contains("STRATA_KV__MAX_CONTEXT=\"8k\""),
        "{p}"
    );
    // A validation failure of an overridden key also names the variable, not the file line.
    let p = one_problem(parse_env(
        &format!("{MODEL}[kv]\nblock_size = 16\n"),
        &[("STRATA_KV__BLOCK_SIZE", "24")],
    ));
    assert_eq!(p.location.env_var(), Some("STRATA_KV__BLOCK_SIZE"));
    let p = one_problem(parse_env(MODEL, &[("STRATA_DEVICES__PREFILL", "tpu:0")]));
    assert_eq!(p.location.env_var(), Some("STRATA_DEVICES__PREFILL"));
}

#[test]
fn unknown_env_key_names_the_variable() {
    let p = one_problem(parse_env(MODEL, &[("STRATA_KV__MAX_CTX", "1")]));
    assert_eq!(p.key.as_deref(), Some("kv.max_ctx"));
    assert_eq!(p.location.env_var(), Some("STRATA_KV__MAX_CTX"));
    assert!(p.message.contains("max_context"), "{p}");
    let p = one_problem(parse_env(MODEL, &[("STRATA_GPU__LAYERS", "1")]));
    assert_eq!(p.location.env_var(), Some("STRATA_GPU__LAYERS"));
    assert!(p.message.contains("unknown section"), "{p}");
}

#[test]
fn env_without_double_underscore_is_refused_with_a_suggestion() {
    let p = one_problem(parse_env(MODEL, &[("STRATA_KV_MAX_CONTEXT", "1")]));
    assert_eq!(p.key, None);
    assert_eq!(p.location.env_var(), Some("STRATA_KV_MAX_CONTEXT"));
    assert!(p.message.contains("STRATA_KV__MAX_CONTEXT"), "{p}");
    let p = one_problem(parse_env(MODEL, &[("STRATA_DEBUG", "1")]));
    assert!(p.message.contains("STRATA_CONFIG"), "{p}");
}

#[test]
fn developer_knobs_are_accepted_and_near_misses_are_not() {
    let c = parse_env(
        MODEL,
        &[("STRATA_VULKAN_PROFILE", "steps"), ("STRATA_MATVEC_LANES", "64"), ("STRATA_VULKAN_TOP_K", "host")],
    );
    assert!(c.is_ok(), "{c:?}");
    // A typo of a knob is still refused.
    let p = one_problem(parse_env(MODEL, &[("STRATA_VULKAN_PROFIL", "1")]));
    assert_eq!(p.location.env_var(), Some("STRATA_VULKAN_PROFIL"));
    assert!(p.message.contains("developer knobs"), "{p}");
}

/// Every `STRATA_` variable the workspace's code names (outside its tests) is a config override
/// (`SECTION__KEY`), allowlisted or a developer knob: a knob the lists miss would make the server
/// refuse to start where `bench` takes it.
#[test]
fn every_strata_variable_the_code_reads_is_accepted() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut missing = BTreeSet::new();
    let mut seen = 0usize;
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["target", "tests", ".git", "fuzz", "node_modules"].contains(&name.as_str()) && !name.starts_with('.') {
                    stack.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for (at, _) in text.match_indices("\"STRATA_") {
                let rest = &text[at + 1..];
                let end = rest.find('"').unwrap_or(0);
                let var = &rest[..end];
                if var.len() <= "STRATA_".len() || var.contains("__") || !var.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') {
                    continue;
                }
                seen += 1;
                // (Set by actors/build.rs at build time, not read at run time.)
                if var != "STRATA_GIT_REVISION" && !ENV_ALLOWLIST.contains(&var) && !ENV_DEVELOPER_KNOBS.contains(&var) {
                    missing.insert(format!("{var} ({})", path.strip_prefix(&root).unwrap_or(&path).display()));
                }
            }
        }
    }
    assert!(seen > 20, "the scan found the knobs ({seen} names): it reads the sources");
    assert!(missing.is_empty(), "STRATA_ variables the code reads that the server would refuse: {missing:?}");
}

#[test]
fn env_override_of_a_non_table_section() {
    let p = one_problem(parse_env(
        &format!("kv = 3\n{MODEL}"),
        &[("STRATA_KV__CELLS", "1")],
    ));
    assert_at(&p, "kv", 1);
}

// ---------------------------------------------------------------------------------------------
// Config::load

#[test]
fn load_reads_the_file_and_checks_the_model_exists() {
    let dir = std::env::temp_dir().join(format!("strata-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("m.gguf");
    std::fs::write(&model, b"GGUF").unwrap();
    let cfg = dir.join("ok.toml");
    std::fs::write(
        &cfg,
        format!("[model]\npath = {:?}\n", model.display().to_string()),
    )
    .unwrap();
    assert_eq!(Config::load(&cfg).unwrap().model.path, model);

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "# x\n[model]\npath = \"no/such/model.gguf\"\n").unwrap();
    let e = Config::load(&bad).unwrap_err();
    let p = &e.problems()[0];
    assert_eq!(p.key.as_deref(), Some("model.path"));
    assert_eq!(p.location.line(), Some(3));
    assert_eq!(p.location.file(), Some(bad.display().to_string().as_str()));
    assert!(p.message.contains("current directory"), "{p}");

    assert!(matches!(
        Config::load(&dir.join("absent.toml")),
        Err(ConfigError::Read { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
