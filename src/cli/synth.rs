//! `strata-rt synth-model`: a GGUF of a named shape with seeded random weights and a valid
//! tokenizer, for testing and benchmarking shapes whose real weights cannot be had here.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use strata_model::synth::{self, SynthOptions};
use strata_quant::GgmlType;

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// The shape: tiny, tiny-qwen2, tiny-qwen3, smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, qwen2.5-7b, qwen3-8b, llama3-8b.
    #[arg(long)]
    shape: String,
    /// Type of the weight matrices (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K).
    #[arg(long = "type", default_value = "Q4_K")]
    ty: String,
    /// Seed of every weight: the same seed, shape and type give the same bytes.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
    /// Worker threads (0: every core). The output does not depend on it.
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

pub fn run(args: SynthArgs) -> Result<ExitCode> {
    let shape = synth::shape_by_name(&args.shape)
        .with_context(|| format!("unknown shape {:?}; known: {}", args.shape, synth::shape_names().join(", ")))?;
    let ty = GgmlType::from_name(&args.ty).with_context(|| format!("unknown type {:?}", args.ty))?;
    let opts = SynthOptions { shape, ty, seed: args.seed, threads: args.threads };
    let total = synth::expected_file_size(&opts)?;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(format!("writing {}", args.out.display()));
    let report = synth::write_synthetic_model(&args.out, &opts, &mut |done, _| bar.set_position(done))?;
    bar.finish_and_clear();
    for line in report.fallback_summary() {
        eprintln!("note: {line}");
    }
    eprintln!(
        "wrote {}: {} tensors, {} parameters, {:.1} MB in {:.1} s ({:.0} MB/s, {} threads)",
        args.out.display(),
        report.tensors,
        report.parameters,
        report.bytes as f64 / 1e6,
        report.seconds,
        report.mb_per_s(),
        report.threads
    );
    Ok(ExitCode::SUCCESS)
}
