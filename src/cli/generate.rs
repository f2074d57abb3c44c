//! `strata-rt generate`: one prompt, streamed to stdout.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use strata_actors::Flow;
use strata_config::Config;
use strata_model::sampling::SamplingParams;
use strata_tokenizer::{ChatMessage, IncrementalDecoder};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// The prompt.
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 means greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// A model file to use instead of the configuration's `model.path` (or without a configuration).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Print the generated token ids (one line, after the text) instead of nothing.
    #[arg(long)]
    print_ids: bool,
    /// Print timings to stderr when done.
    #[arg(long)]
    timings: bool,
}

pub fn run(config_path: Option<&Path>, args: GenerateArgs) -> Result<ExitCode> {
    let mut config = match config_path {
        Some(p) => Config::load(p)?,
        None => {
            let model = args.model.clone().context("give --config FILE or --model FILE.gguf")?;
            Config::with_model(&model, &Config::process_env())?
        }
    };
    if let Some(m) = &args.model {
        config.model.path = m.clone();
    }
    let model = super::load_model(&config.model.path)?;
    let mut engine = super::build_engine(&config, model.clone(), true)?;
    let tok = &model.tokenizer;
    let text = if args.chat {
        let template = model.chat_template.as_ref().context("the model has no chat template; drop --chat")?;
        template.render(&[ChatMessage { role: "user".into(), content: args.prompt.clone() }], true)?
    } else {
        args.prompt.clone()
    };
    let prompt = tok.encode(&text, true, true)?;
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        seed: args.seed,
        ..SamplingParams::default()
    };
    let mut decoder = IncrementalDecoder::new(tok.clone());
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut write_err = None;
    let outcome = engine.generate(&prompt, args.max_tokens, &sampling, |id| {
        // Ids come from the model's own vocabulary, so decoding cannot fail; an error would only
        // drop this piece.
        let piece = decoder.push(id).unwrap_or_default();
        if let Err(e) = out.write_all(piece.as_bytes()).and_then(|_| out.flush()) {
            write_err = Some(e);
            return Flow::Cancel;
        }
        Flow::Continue
    })?;
    let rest = decoder.finish();
    out.write_all(rest.as_bytes())?;
    if args.print_ids {
        writeln!(out)?;
        writeln!(out, "{:?}", outcome.tokens)?;
    }
    out.flush()?;
    if let Some(e) = write_err {
        return Err(e).context("writing to stdout");
    }
    if args.timings {
        eprintln!(
            "\nprompt {} tokens ({} reused) in {:.1} ms ({:.1} t/s); generated {} tokens in {:.1} ms ({:.1} t/s); stop: {}",
            outcome.prompt_tokens,
            outcome.reused_tokens,
            outcome.prefill_ms,
            outcome.prefill_tokens_per_s(),
            outcome.tokens.len(),
            outcome.decode_ms,
            outcome.decode_tokens_per_s(),
            outcome.stop.as_str()
        );
    }
    Ok(ExitCode::SUCCESS)
}
