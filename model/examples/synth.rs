//! Writes a synthetic model: `cargo run --release -p strata-model --example synth -- --shape tiny
//! --type Q4_K --seed 42 --out /tmp/tiny.gguf [--threads N]`.

use std::path::PathBuf;
use std::process::ExitCode;

use strata_model::synth::{shape_by_name, shape_names, write_synthetic_model, SynthOptions};
use strata_quant::GgmlType;

fn main() -> ExitCode {
    let mut shape = "tiny".to_string();
    let mut ty = GgmlType::Q4_K;
    let mut seed = 42u64;
    let mut threads = 0usize;
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            eprintln!("{flag} needs a value");
            return ExitCode::FAILURE;
        };
        let ok = match flag.as_str() {
            "--shape" => {
                shape = value.clone();
                true
            }
            "--type" => GgmlType::from_name(&value).map(|t| ty = t).is_some(),
            "--seed" => value.parse().map(|s| seed = s).is_ok(),
            "--threads" => value.parse().map(|t| threads = t).is_ok(),
            "--out" => {
                out = Some(PathBuf::from(&value));
                true
            }
            _ => false,
        };
        if !ok {
            eprintln!("bad argument {flag} {value}");
            return ExitCode::FAILURE;
        }
    }
    let Some(out) = out else {
        eprintln!("--out FILE is required");
        return ExitCode::FAILURE;
    };
    let Some(shape) = shape_by_name(&shape) else {
        eprintln!("unknown shape {shape}; known: {}", shape_names().join(", "));
        return ExitCode::FAILURE;
    };
    let opts = SynthOptions {
        shape,
        ty,
        seed,
        threads,
    };
    let mut next_report = 0u64;
    let result = write_synthetic_model(&out, &opts, &mut |done, total| {
        if done >= next_report || done == total {
            eprintln!(
                "{:5.1}%  {done} / {total} bytes",
                100.0 * done as f64 / total as f64
            );
            next_report = done + total / 10;
        }
    });
    match result {
        Ok(r) => {
            for line in r.fallback_summary() {
                eprintln!("fallback: {line}");
            }
            println!(
                "wrote {} ({} bytes, {} tensors, {} parameters) in {:.2} s with {} threads: {:.1} MB/s, {:.1} Mparam/s",
                r.path.display(),
                r.bytes,
                r.tensors,
                r.parameters,
                r.seconds,
                r.threads,
                r.mb_per_s(),
                r.parameters as f64 / 1e6 / r.seconds
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
