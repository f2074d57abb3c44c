//! `strata-rt compare-devices`: a device against the CPU reference on one model: teacher-forced
//! logits of a seeded random prompt, compared position by position (KL divergence and top-1
//! agreement), with the bars the test suite uses. With `--reference-ubatch N` the reference is
//! the device itself at N tokens a step instead: the check of decode's batch invariance, whose
//! bar is every position's logits bit for bit.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use strata_actors::{Engine, EngineOptions};
use strata_gpu::DeviceKind;
use strata_model::sampling::{argmax, log_softmax, Rng};

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The model file.
    #[arg(long, short = 'm')]
    model: PathBuf,
    /// The device to check (`vulkan:N`; or `cpu` with `--device-simd`, to measure the CPU's own
    /// kernel-to-kernel differences: the noise floor of the bars).
    #[arg(long)]
    device: String,
    /// With `--device cpu`: the SIMD level of the checked CPU kernels (`scalar`, `avx2`).
    #[arg(long)]
    device_simd: Option<String>,
    /// With `--device cpu`: the checked CPU moves every RMSNorm output one ulp. What this gives is
    /// the floor of the bars on this model and text: any device whose arithmetic is not the
    /// CPU's bit for bit (another summation order is enough) lands about there.
    #[arg(long)]
    nudge_norms: bool,
    /// Teacher-force this UTF-8 text file's tokens instead of a seeded random prompt (it must hold
    /// at least `--prompt-tokens` + `--positions` tokens; the first ones are taken).
    #[arg(long)]
    text: Option<PathBuf>,
    /// Prompt tokens before the compared positions.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    prompt_tokens: u32,
    /// Positions compared (after the prompt).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    positions: u32,
    /// Seed of the random prompt (without `--text`).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Tokens per step on the checked device: 64 runs the prompt-sized kernels, 1 runs every
    /// product through the decode kernels (integer dot products on 8-bit activations on Vulkan).
    /// Default 64, or 1 in the exact mode.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    ubatch: Option<u32>,
    /// With `--device vulkan:N`: the exact mode (`devices.vulkan_exact`, or
    /// `STRATA_VULKAN_EXACT=1`), in which Vulkan's decode steps compute the CPU's bits. It covers
    /// decode-sized steps, so the comparison then takes one token a step unless `--ubatch` says
    /// otherwise.
    #[arg(long)]
    exact: bool,
    /// CPU threads (0: every core).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Mean KL bar in nats.
    #[arg(long, default_value_t = 0.005)]
    max_kl: f64,
    /// Top-1 agreement bar, as a fraction of the positions.
    #[arg(long, default_value_t = 62.0 / 64.0)]
    min_top1: f64,
    /// Also print each compared position's KL and largest logit difference.
    #[arg(long)]
    per_position: bool,
    /// Compare the device against itself at this many tokens a step, not against the CPU: decode's
    /// batch invariance (steps of 1..=32 tokens are meant to give the same bits; 33 and more run
    /// the prompt-sized kernels, which do not). It passes only if every compared position's
    /// logits are the same bits (the KL and top-1 bars are then ignored).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    reference_ubatch: Option<u32>,
}

pub fn run(args: CompareArgs) -> Result<ExitCode> {
    let spec: strata_config::DeviceSpec = args.device.parse().map_err(|e| anyhow::anyhow!("--device {}: {e}", args.device))?;
    let device = match spec {
        strata_config::DeviceSpec::Vulkan(i) => DeviceKind::Vulkan(i),
        strata_config::DeviceSpec::Cpu if args.device_simd.is_some() || args.nudge_norms => DeviceKind::Cpu,
        other => anyhow::bail!("--device {other}: compare vulkan:N, or cpu with --device-simd or --nudge-norms, against the CPU"),
    };
    if args.nudge_norms && device != DeviceKind::Cpu {
        anyhow::bail!("--nudge-norms perturbs the CPU device: use it with --device cpu");
    }
    if args.exact && device == DeviceKind::Cpu {
        anyhow::bail!("--exact is the Vulkan device's exact mode: use it with --device vulkan:N");
    }
    if args.reference_ubatch.is_some() && device == DeviceKind::Cpu {
        anyhow::bail!("--reference-ubatch compares a Vulkan device against itself: use it with --device vulkan:N");
    }
    let exact = device != DeviceKind::Cpu && (args.exact || strata_gpu::vulkan::ContextOptions::default().exact);
    let ubatch = args.ubatch.unwrap_or(if exact || args.reference_ubatch.is_some() { 1 } else { 64 });
    if let Some(most) = args.reference_ubatch.map(|r| r.max(ubatch)).filter(|&n| n > 32) {
        eprintln!("note: {most} tokens a step run the prompt-sized kernels, which sum in another order than the decode steps (1..=32 tokens): expect other bits");
    }
    if exact && ubatch > 1 {
        eprintln!("note: the exact mode computes the CPU's bits in decode-sized steps; --ubatch {ubatch} runs the prompt-sized kernels, which do not (--ubatch 1 checks the exact mode)");
    }
    let simd = match args.device_simd.as_deref() {
        None => None,
        Some("scalar") => Some(strata_quant::SimdLevel::Scalar),
        Some("avx2") => Some(strata_quant::SimdLevel::Avx2),
        Some(other) => anyhow::bail!("--device-simd {other}: scalar or avx2"),
    };
    let model = super::load_model(&args.model)?;
    let (prompt_tokens, positions) = (args.prompt_tokens as usize, args.positions as usize);
    let total = prompt_tokens + positions;
    let cells = (total + 16).next_multiple_of(16);
    // Both devices take the same steps: the CPU's arithmetic (llama.cpp's) sums a step of one
    // token per sequence in another order than a step of many.
    let opts = EngineOptions { threads: args.threads, max_context: total + 1, n_cells: cells, ubatch: ubatch as usize, max_outputs: 64, prefill_device: device, decode_device: device, prefill_min_tokens: usize::MAX, max_seqs: 1, vulkan_exact: args.exact, ..Default::default() };
    let mut reference = match args.reference_ubatch {
        None => Engine::new_cpu(model.clone(), opts.clone()).context("the CPU device")?,
        Some(r) => Engine::new(model.clone(), EngineOptions { ubatch: r as usize, ..opts.clone() }).with_context(|| format!("device {device} at {r} tokens a step"))?,
    };
    let mut dev = Engine::new(model.clone(), EngineOptions { simd, cpu_nudge_norms: args.nudge_norms, ..opts }).with_context(|| format!("device {device}"))?;
    let vocab = model.hparams.vocab_size;
    let (tokens, source) = match &args.text {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading --text {}", path.display()))?;
            let mut ids = model.tokenizer.encode(&text, true, true).with_context(|| format!("tokenizing {}", path.display()))?;
            anyhow::ensure!(ids.len() >= total, "--text {}: {} tokens, fewer than --prompt-tokens + --positions = {total}", path.display(), ids.len());
            ids.truncate(total);
            (ids, format!("the first {total} tokens of {}", path.display()))
        }
        None => {
            let mut rng = Rng::new(args.seed);
            ((0..total).map(|_| (rng.next_u64() % vocab as u64) as u32).collect(), format!("a random prompt (seed {})", args.seed))
        }
    };
    let want = reference.teacher_forced_logits(&tokens).context("reference forward")?;
    let got = dev.teacher_forced_logits(&tokens).with_context(|| format!("{device} forward"))?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut kl_sum, mut agree, mut identical) = (0.0f64, 0usize, 0usize);
    for i in prompt_tokens..total {
        identical += usize::from(want[i * vocab..(i + 1) * vocab].iter().zip(&got[i * vocab..(i + 1) * vocab]).all(|(x, y)| x.to_bits() == y.to_bits()));
        log_softmax(&want[i * vocab..(i + 1) * vocab], &mut a);
        log_softmax(&got[i * vocab..(i + 1) * vocab], &mut b);
        let kl = a.iter().zip(&b).map(|(&p, &q)| (p as f64).exp() * (p as f64 - q as f64)).sum::<f64>();
        if args.per_position {
            let max_diff = want[i * vocab..(i + 1) * vocab].iter().zip(&got[i * vocab..(i + 1) * vocab]).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            println!("  position {i}: KL {kl:.3e} nats, largest logit difference {max_diff:.3e}");
        }
        kl_sum += kl;
        agree += usize::from(argmax(&a) == argmax(&b));
    }
    let kl = kl_sum / positions as f64;
    let top1 = agree as f64 / positions as f64;
    if let Some(r) = args.reference_ubatch {
        let pass = identical == positions;
        println!(
            "{device}{} at {ubatch} tokens per step vs itself at {r} on {}, {source}: {positions} positions after a {prompt_tokens}-token prompt: mean KL {kl:.6} nats, top-1 {agree}/{positions}, logits bit-identical at {identical}: {} (bar: all {positions})",
            if exact { " (exact mode)" } else { "" },
            model.name,
            if pass { "PASS" } else { "FAIL" }
        );
        return Ok(if pass { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    let pass = kl <= args.max_kl && top1 >= args.min_top1;
    println!(
        "{device}{}{}{} vs cpu on {}, {source}: {} positions after a {}-token prompt, {} tokens per step: mean KL {kl:.6} nats (bar {}), top-1 {agree}/{} (bar {:.0}), logits bit-identical at {identical}: {}",
        args.device_simd.as_deref().map(|s| format!(" ({s} kernels)")).unwrap_or_default(),
        if args.nudge_norms { " (norms nudged one ulp)" } else { "" },
        if exact { " (exact mode)" } else { "" },
        model.name,
        positions,
        prompt_tokens,
        ubatch,
        args.max_kl,
        positions,
        args.min_top1 * positions as f64,
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(if pass { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
