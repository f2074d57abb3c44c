//! `strata-rt bench`: llama-bench-style prompt processing (`-p`) and generation (`-n`) figures,
//! with the decode speed also given as a share of the measured memory-bandwidth roofline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use strata_config::Config;
use strata_model::sampling::Rng;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// A model file (instead of the configuration's `model.path`).
    #[arg(long, short = 'm')]
    model: Option<PathBuf>,
    /// Prompt lengths to time (comma-separated), each from an empty cache.
    #[arg(short = 'p', long, value_delimiter = ',', default_value = "512")]
    prompt: Vec<usize>,
    /// Generation lengths to time (comma-separated), each from an empty cache.
    #[arg(short = 'n', long, value_delimiter = ',', default_value = "128")]
    gen: Vec<usize>,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 3)]
    reps: usize,
    /// Compute threads (0: the configuration's, or every core).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

struct Row {
    test: String,
    tokens: usize,
    rates: Vec<f64>,
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 { v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (mean, var.sqrt())
}

/// Host memory read bandwidth in bytes/s: every thread sums its share of a 512 MiB buffer.
fn measure_read_bandwidth(threads: usize) -> f64 {
    let words = (512usize << 20) / 8;
    let buf: Vec<u64> = (0..words as u64).collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
    let Ok(pool) = pool else { return 0.0 };
    let mut best = 0.0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let total: u64 = pool.broadcast(|ctx| {
            let (i, n) = (ctx.index(), ctx.num_threads());
            buf[words * i / n..words * (i + 1) / n].iter().fold(0u64, |a, &b| a.wrapping_add(b))
        }).into_iter().fold(0u64, |a, b| a.wrapping_add(b));
        std::hint::black_box(total);
        best = best.max((words * 8) as f64 / t.elapsed().as_secs_f64());
    }
    best
}

pub fn run(config_path: Option<&Path>, args: BenchArgs) -> Result<ExitCode> {
    let mut config = match (config_path, &args.model) {
        (Some(p), _) => Config::load(p)?,
        (None, Some(m)) => Config::default_with_model(m.clone()),
        (None, None) => anyhow::bail!("give --config FILE or --model FILE.gguf"),
    };
    if let Some(m) = &args.model {
        config.model.path = m.clone();
    }
    if args.threads > 0 {
        config.model.threads = args.threads;
    }
    let reps = args.reps.max(1);
    let model = super::load_model(&config.model.path)?;
    let longest = args.prompt.iter().chain(&args.gen).copied().max().unwrap_or(1) + 1;
    config.kv.max_context = longest.max(config.kv.max_context.min(longest));
    config.kv.cells = longest.div_ceil(config.kv.block_size) * config.kv.block_size;
    let mut engine = super::build_engine(&config, model.clone(), true)?;
    let threads = config.model.compute_threads();
    let vocab = model.hparams.vocab_size as u64;
    let mut rng = Rng::new(42);
    let mut random_tokens = |n: usize| (0..n).map(|_| (rng.next_u64() % vocab) as u32).collect::<Vec<_>>();
    // Warm-up: page the weights in and settle the threads.
    engine.bench(&random_tokens(8), 4).context("warm-up")?;
    let mut rows = Vec::new();
    for &p in &args.prompt {
        let mut rates = Vec::new();
        for _ in 0..reps {
            let (ms, _) = engine.bench(&random_tokens(p), 0)?;
            rates.push(p as f64 * 1000.0 / ms);
        }
        rows.push(Row { test: format!("pp{p}"), tokens: p, rates });
    }
    for &n in &args.gen {
        let mut rates = Vec::new();
        for _ in 0..reps {
            let (_, ms) = engine.bench(&random_tokens(1), n)?;
            rates.push(n as f64 * 1000.0 / ms);
        }
        rows.push(Row { test: format!("tg{n}"), tokens: n, rates });
    }
    let bandwidth = measure_read_bandwidth(threads);
    // Bytes a decode step reads: every weight but the embedding table (one row is gathered),
    // plus the table again when it doubles as the output projection.
    let w = &model.weights;
    let bytes_per_token = w.total_bytes() - w.token_embd.bytes + if w.tied_embeddings { w.token_embd.bytes } else { 0 };
    println!("model: {} ({}), {:.1} MiB; device: {}; threads: {threads}", model.name, model.path.display(), w.total_bytes() as f64 / 1048576.0, engine.device_name());
    println!("memory read bandwidth: {:.1} GB/s; bytes read per generated token: {:.1} MB", bandwidth / 1e9, bytes_per_token as f64 / 1e6);
    println!();
    println!("| test | t/s | ± sd | share of bandwidth roofline |");
    println!("|---|---:|---:|---:|");
    let mut json_rows = Vec::new();
    for r in &rows {
        let (mean, sd) = mean_sd(&r.rates);
        let roof = if r.test.starts_with("tg") && bandwidth > 0.0 { format!("{:.0}%", 100.0 * mean * bytes_per_token as f64 / bandwidth) } else { "-".into() };
        println!("| {} | {:.1} | {:.1} | {} |", r.test, mean, sd, roof);
        json_rows.push(serde_json::json!({"test": r.test, "tokens": r.tokens, "tokens_per_s": mean, "sd": sd, "samples": r.rates}));
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "engine": "strata-rt", "version": env!("CARGO_PKG_VERSION"), "model": model.path.display().to_string(),
            "device": engine.device_name(), "threads": threads, "reps": reps,
            "read_bandwidth_bytes_per_s": bandwidth, "bytes_per_token": bytes_per_token, "results": json_rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
