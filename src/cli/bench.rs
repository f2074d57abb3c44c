//! `strata-rt bench`: llama-bench-style prompt processing (`-p`) and generation (`-n`) figures,
//! each also given as a share of its roofline measured in the same run: decode as bytes read per
//! generated token over the measured memory read bandwidth, prefill as FLOPs per prompt token over
//! the measured matrix rate of the device's own matrix kernel on the model's main weight type.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use strata_config::Config;
use strata_model::sampling::Rng;
use strata_quant::{GgmlType, Kernels};

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
    /// Weight type for the matrix-rate measurement (default: the model's main matrix type).
    #[arg(long)]
    matrix_type: Option<String>,
    /// The device for both phases (`cpu`, `vulkan:N`); default: the configuration's devices.
    #[arg(long)]
    device: Option<String>,
    /// Context depths for the generation tests (comma-separated): each `tg` test first fills the
    /// context with this many prompt tokens (llama-bench's `-d`). Default: an empty context.
    #[arg(short = 'd', long, value_delimiter = ',')]
    depth: Vec<usize>,
    /// Batched decode tests: this many sequences decode together (comma-separated), each after a
    /// 128-token prompt, for the first generation length's steps.
    #[arg(long, value_delimiter = ',')]
    batch: Vec<usize>,
}

struct Row {
    test: String,
    tokens: usize,
    /// Mean context length during the test (for the KV bytes a decode step reads).
    context: usize,
    /// Sequences decoded together.
    batch: usize,
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

/// The weight type holding most bytes of the model's matrices (the layers' projections and the
/// output projection).
fn main_matrix_type(w: &strata_model::ModelWeights) -> GgmlType {
    let mut by_type: Vec<(GgmlType, u64)> = Vec::new();
    let mats = w.layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]).chain([&w.output]);
    for m in mats {
        match by_type.iter_mut().find(|(t, _)| *t == m.ty) {
            Some((_, b)) => *b += m.bytes,
            None => by_type.push((m.ty, m.bytes)),
        }
    }
    by_type.into_iter().max_by_key(|&(_, b)| b).map_or(GgmlType::Q8_0, |(t, _)| t)
}

/// Matrix FLOPs (multiply and add counted as 2) per prompt token of a `p`-token prompt: every
/// layer projection, attention scores and values at the mean context `(p + 1) / 2`, and the output
/// projection once per prompt (only the last position's logits are computed).
fn prefill_flops_per_token(model: &strata_actors::LoadedModel, p: usize) -> f64 {
    let w = &model.weights;
    let hp = &model.hparams;
    let params: f64 = w.layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]).map(|m| (m.rows * m.cols) as f64).sum();
    let attn = 2.0 * 2.0 * (hp.n_heads * hp.head_dim * hp.n_layers) as f64 * (p as f64 + 1.0) / 2.0;
    let output = 2.0 * (w.output.rows * w.output.cols) as f64 / p.max(1) as f64;
    2.0 * params + attn + output
}

/// The CPU device's matrix rate in FLOP/s (multiply-adds × 2) for weights of type `ty`:
/// `Kernels::matmul` on a 4096 × 4096 matrix of seeded random weights times 256 activation rows
/// (a prefill ubatch), the rows split over `threads` threads; the best of 3.
fn measure_matrix_rate(ty: GgmlType, threads: usize) -> Result<f64> {
    const K: usize = 4096;
    const ROWS: usize = 4096;
    const TOKENS: usize = 256;
    let kernels = Kernels::best();
    let mut rng = Rng::new(7);
    let mut rand_f32 = |n: usize| (0..n).map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5).collect::<Vec<f32>>();
    let rb = ty.row_bytes(K as u64).context("matrix type row size")? as usize;
    let mut weights = vec![0u8; rb * ROWS];
    let src = rand_f32(K * 64);
    for (i, chunk) in weights.chunks_mut(rb * 64).enumerate() {
        // 64 rows at a time from one random block of values, rotated so rows differ
        let mut rows = src.clone();
        rows.rotate_left((i * 97) % K);
        strata_quant::quantize(ty, &rows[..chunk.len() / rb * K], chunk).with_context(|| format!("quantizing {}", ty.name()))?;
    }
    let arb = strata_quant::activation_row_bytes(ty, K);
    let mut acts = vec![0u8; arb * TOKENS];
    let a = rand_f32(K * TOKENS);
    for (t, dst) in acts.chunks_mut(arb).enumerate() {
        kernels.quantize_activations(ty, &a[t * K..(t + 1) * K], dst).context("quantizing activations")?;
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
    let mut best = 0.0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let results: Vec<Result<f32, strata_quant::QuantError>> = pool.broadcast(|ctx| {
            let (i, n) = (ctx.index(), ctx.num_threads());
            let rows = ROWS * i / n..ROWS * (i + 1) / n;
            let mut out = vec![0f32; rows.len() * TOKENS];
            kernels.matmul(ty, &weights, K, rows, &acts, TOKENS, &mut out).map(|_| out.iter().sum())
        });
        let secs = t.elapsed().as_secs_f64();
        for r in results {
            std::hint::black_box(r.context("matmul")?);
        }
        best = best.max(2.0 * (K * ROWS * TOKENS) as f64 / secs);
    }
    Ok(best)
}

pub fn run(config_path: Option<&Path>, args: BenchArgs) -> Result<ExitCode> {
    let mut config = match (config_path, &args.model) {
        (Some(p), _) => Config::load(p)?,
        (None, Some(m)) => Config::with_model(m, &Config::process_env())?,
        (None, None) => anyhow::bail!("give --config FILE or --model FILE.gguf"),
    };
    if let Some(m) = &args.model {
        config.model.path = m.clone();
    }
    if args.threads > 0 {
        config.model.threads = args.threads;
    }
    if let Some(d) = &args.device {
        let spec: strata_config::DeviceSpec = d.parse().map_err(|e| anyhow::anyhow!("--device {d}: {e}"))?;
        config.devices.prefill = spec;
        config.devices.decode = spec;
    }
    let reps = args.reps.max(1);
    let model = super::load_model(&config.model.path)?;
    let depths: Vec<usize> = if args.depth.is_empty() { vec![0] } else { args.depth.clone() };
    let max_gen = args.gen.iter().copied().max().unwrap_or(0);
    let longest = args.prompt.iter().copied().max().unwrap_or(1).max(depths.iter().max().unwrap_or(&0) + max_gen) + 1;
    let batch_prompt = 128;
    let batch_gen = args.gen.first().copied().unwrap_or(128);
    let max_batch = args.batch.iter().copied().max().unwrap_or(1);
    let batch_cells = max_batch * (batch_prompt + batch_gen + config.kv.block_size);
    config.kv.max_context = longest.max(batch_prompt + batch_gen + 1);
    config.kv.cells = longest.max(batch_cells).div_ceil(config.kv.block_size) * config.kv.block_size;
    config.batching.max_seqs = config.batching.max_seqs.max(max_batch);
    let mut engine = super::build_engine(&config, model.clone(), args.batch.is_empty())?;
    let threads = config.model.compute_threads();
    let vocab = model.hparams.vocab_size as u64;
    let mut rng = Rng::new(42);
    let mut random_tokens = |n: usize| (0..n).map(|_| (rng.next_u64() % vocab) as u32).collect::<Vec<_>>();
    // Warm-up: page the weights in, settle the threads, and let a device build the kernels of
    // both step sizes (a GPU driver compiles a pipeline on its first use: the H200's first pp2048
    // of a new build ran at a third of its speed).
    engine.bench(&random_tokens(8), 4).context("warm-up")?;
    if let Some(&longest_prompt) = args.prompt.iter().max().filter(|&&p| p > 8) {
        engine.bench(&random_tokens(longest_prompt.min(config.batching.ubatch)), 0).context("warm-up")?;
    }
    let mut rows = Vec::new();
    for &p in &args.prompt {
        let mut rates = Vec::new();
        for _ in 0..reps {
            let (ms, _) = engine.bench(&random_tokens(p), 0)?;
            rates.push(p as f64 * 1000.0 / ms);
        }
        rows.push(Row { test: format!("pp{p}"), tokens: p, context: p / 2, batch: 1, rates });
    }
    for &d in &depths {
        for &n in &args.gen {
            let mut rates = Vec::new();
            for _ in 0..reps {
                let (_, ms) = engine.bench(&random_tokens(d.max(1)), n)?;
                rates.push(n as f64 * 1000.0 / ms);
            }
            let test = if d == 0 { format!("tg{n}") } else { format!("tg{n} @ d{d}") };
            rows.push(Row { test, tokens: n, context: d + n / 2, batch: 1, rates });
        }
    }
    for &b in &args.batch {
        let mut rates = Vec::new();
        for _ in 0..reps {
            let prompts: Vec<Vec<u32>> = (0..b).map(|_| random_tokens(batch_prompt)).collect();
            let ms = engine.bench_batched(&prompts, batch_gen)?;
            rates.push((b * batch_gen) as f64 * 1000.0 / ms);
        }
        rows.push(Row { test: format!("tg{batch_gen} x{b} @ d{batch_prompt}"), tokens: batch_gen, context: batch_prompt + batch_gen / 2, batch: b, rates });
    }
    let decode_device = engine.decode_device_name();
    let bandwidth = match decode_device.strip_prefix("vulkan:").and_then(|i| i.parse::<u32>().ok()) {
        Some(i) => strata_gpu::vulkan::VulkanContext::new(i).and_then(|ctx| strata_gpu::vulkan::measure_read_bandwidth(&ctx)).unwrap_or_else(|e| {
            eprintln!("device bandwidth not measured: {e}");
            0.0
        }),
        None => measure_read_bandwidth(threads),
    };
    let matrix_type = match &args.matrix_type {
        Some(name) => GgmlType::from_name(name).with_context(|| format!("unknown --matrix-type {name}"))?,
        None => main_matrix_type(&model.weights),
    };
    // The CPU device's own kernel; a GPU's matrix rate is not measured yet.
    let matrix_rate = if engine.prefill_device_name() == "cpu" {
        measure_matrix_rate(matrix_type, threads).unwrap_or_else(|e| {
            eprintln!("matrix rate not measured: {e:#}");
            0.0
        })
    } else {
        0.0
    };
    // Bytes a decode step reads: every weight but the embedding table (one row is gathered),
    // plus the table again when it doubles as the output projection.
    let w = &model.weights;
    let bytes_per_token = w.total_bytes() - w.token_embd.bytes + if w.tied_embeddings { w.token_embd.bytes } else { 0 };
    // K and V (f16) of every layer at each cell of the context, read once per generated token.
    let hp = &model.hparams;
    let kv_bytes_per_cell = (2 * hp.n_layers * hp.kv_width() * 2) as u64;
    // A step of `b` sequences reads the weights once and each sequence's cells.
    let step_bytes = |r: &Row| bytes_per_token + r.batch as u64 * r.context as u64 * kv_bytes_per_cell;
    println!("model: {} ({}), {:.1} MiB; device: {}; threads: {threads}", model.name, model.path.display(), w.total_bytes() as f64 / 1048576.0, engine.device_name());
    println!("memory read bandwidth ({decode_device}): {:.1} GB/s; weight bytes read per decode step: {:.1} MB, plus {:.1} KB of KV per cell of context", bandwidth / 1e9, bytes_per_token as f64 / 1e6, kv_bytes_per_cell as f64 / 1e3);
    println!(
        "matrix rate: {:.1} GFLOP/s ({} weights x {} activations, {:?} kernels); FLOPs per prompt token: {:.1} M (pp{})",
        matrix_rate / 1e9,
        matrix_type.name(),
        Kernels::activation_type(matrix_type).name(),
        Kernels::best().level(),
        prefill_flops_per_token(&model, args.prompt.first().copied().unwrap_or(512)) / 1e6,
        args.prompt.first().copied().unwrap_or(512),
    );
    println!();
    println!("| test | t/s | ± sd | share of roofline |");
    println!("|---|---:|---:|---:|");
    let mut json_rows = Vec::new();
    for r in &rows {
        let (mean, sd) = mean_sd(&r.rates);
        let share = if r.test.starts_with("tg") {
            // Steps per second times bytes per step.
            (bandwidth > 0.0).then(|| mean / r.batch as f64 * step_bytes(r) as f64 / bandwidth)
        } else {
            (matrix_rate > 0.0).then(|| mean * prefill_flops_per_token(&model, r.tokens) / matrix_rate)
        };
        let roof = match share {
            Some(s) if r.test.starts_with("tg") => format!("{:.0}% of bandwidth", 100.0 * s),
            Some(s) => format!("{:.0}% of matrix rate", 100.0 * s),
            None => "-".into(),
        };
        println!("| {} | {:.1} | {:.1} | {} |", r.test, mean, sd, roof);
        let mut row = serde_json::json!({"test": r.test, "tokens": r.tokens, "context": r.context, "batch": r.batch, "tokens_per_s": mean, "sd": sd, "samples": r.rates, "roofline_share": share});
        if r.test.starts_with("pp") {
            row["flops_per_token"] = prefill_flops_per_token(&model, r.tokens).into();
        }
        json_rows.push(row);
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "engine": "strata-rt", "version": env!("CARGO_PKG_VERSION"), "model": model.path.display().to_string(),
            "device": engine.device_name(), "threads": threads, "reps": reps,
            "read_bandwidth_bytes_per_s": bandwidth, "bytes_per_token": bytes_per_token,
            "matrix_rate_flops_per_s": matrix_rate, "matrix_type": matrix_type.name(),
            "matrix_kernels": format!("{:?}", Kernels::best().level()), "results": json_rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
