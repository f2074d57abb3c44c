//! The subcommands.

mod bench;
mod compare;
mod generate;
mod inspect;
mod serve;
mod synth;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use strata_actors::{Engine, EngineOptions, LoadedModel};
use strata_config::{Config, DeviceSpec};
use strata_gpu::DeviceKind;

/// strata-rt: an LLM inference server (OpenAI HTTP API) that prefills on the native runtime and
/// decodes on Vulkan over one shared KV cache.
#[derive(Parser, Debug)]
#[command(name = "strata-rt", version, about)]
pub struct Cli {
    /// Configuration file (TOML); `STRATA_<SECTION>__<KEY>` variables override its keys.
    #[arg(long, global = true, env = "STRATA_CONFIG")]
    config: Option<PathBuf>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate text for one prompt and stream it to stdout.
    Generate(generate::GenerateArgs),
    /// Print a GGUF file's metadata and tensors.
    Inspect(inspect::InspectArgs),
    /// List the compute devices strata-rt can use here.
    Devices,
    /// Time prompt processing and generation (llama-bench style).
    Bench(bench::BenchArgs),
    /// Write a synthetic model (seeded random weights, valid tokenizer) of a named shape.
    SynthModel(synth::SynthArgs),
    /// Check a device against the CPU reference: teacher-forced logits, KL and top-1 agreement.
    CompareDevices(compare::CompareArgs),
}

/// Runs the command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    if cli.command.is_some() {
        init_logging("warn", false);
    }
    match cli.command {
        Some(Command::Generate(args)) => generate::run(cli.config.as_deref(), args),
        Some(Command::Inspect(args)) => inspect::run(args),
        Some(Command::Bench(args)) => bench::run(cli.config.as_deref(), args),
        Some(Command::SynthModel(args)) => synth::run(args),
        Some(Command::CompareDevices(args)) => compare::run(args),
        Some(Command::Devices) => {
            println!("{}", strata_gpu::cpu::describe());
            match strata_gpu::vulkan::list_devices() {
                Ok(list) if list.is_empty() => println!("vulkan: the loader found no device (install a driver: mesa-vulkan-drivers, or the GPU vendor's)"),
                Ok(list) => list.iter().for_each(|d| println!("{d}")),
                Err(e) => println!("vulkan: {e}"),
            }
            println!("cuda, hip: not built yet");
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let path = cli.config.context("no configuration given: run `strata-rt --config config/examples/dev.toml` (or see --help)")?;
            let config = Config::load(&path)?;
            if cli.print_config {
                print!("{}", config.to_toml_string());
                return Ok(ExitCode::SUCCESS);
            }
            init_logging(&config.log.level, config.log.format == strata_config::LogFormat::Json);
            // Developer knobs change which kernels run: say so where the operator looks.
            for (var, value) in Config::process_env().iter().filter(|(k, _)| strata_config::ENV_DEVELOPER_KNOBS.contains(&k.as_str())) {
                tracing::warn!(%var, %value, "a developer knob is set (README, \"Developer knobs\")");
            }
            serve::run(config)
        }
    }
}

/// Logs to stderr at `level` (`STRATA_LOG` overrides it), as text or one JSON object a line.
fn init_logging(level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}

/// Models larger than this get a progress bar while their pages are read in.
const PREFAULT_PROGRESS_BYTES: u64 = 512 << 20;

/// Loads a model; a large one is read into memory with a progress bar (on a terminal).
pub fn load_model(path: &std::path::Path) -> Result<Arc<LoadedModel>> {
    let model = LoadedModel::load(path).with_context(|| format!("loading {}", path.display()))?;
    if model.file.file_bytes() >= PREFAULT_PROGRESS_BYTES {
        let bar = indicatif::ProgressBar::new(model.file.file_bytes());
        bar.set_style(
            indicatif::ProgressStyle::with_template("reading weights [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        model.prefault(&mut |done, _| bar.set_position(done));
        bar.finish_and_clear();
    }
    Ok(Arc::new(model))
}

/// Engine options from the configuration, with the KV arena sized for one sequence when
/// `single_sequence` (the CLI) or for `max_seqs` (the server).
pub fn engine_options(config: &Config, model: &LoadedModel, single_sequence: bool) -> EngineOptions {
    let max_context = config.kv.context_len(model.hparams.trained_context);
    let seqs = if single_sequence { 1 } else { config.batching.max_seqs };
    EngineOptions {
        threads: config.model.compute_threads(),
        max_context,
        n_cells: config.kv.cells_wanted(model.hparams.trained_context, seqs),
        block_size: config.kv.block_size,
        ubatch: config.batching.ubatch,
        max_outputs: 64.max(config.batching.max_seqs),
        simd: None,
        prefill_device: DeviceKind::Cpu,
        decode_device: DeviceKind::Cpu,
        prefill_min_tokens: config.devices.prefill_min_tokens,
        vulkan_exact: config.devices.vulkan_exact,
        cpu_products: match config.devices.cpu_products {
            strata_config::CpuProducts::Interleaved => strata_quant::ProductOrder::Interleaved,
            strata_config::CpuProducts::Ggml => strata_quant::ProductOrder::Ggml,
        },
        max_seqs: if single_sequence { 1 } else { config.batching.max_seqs },
        parallel_logits_min: config.batching.parallel_sampling_min_logits,
        cpu_nudge_norms: false,
        kv_in_host_memory: config.kv.resident == strata_config::KvResidence::Host,
    }
}

/// The device a configured spec names; `auto` takes the first Vulkan GPU (not a CPU driver such
/// as lavapipe) for decoding, and the decode device for prefilling (no native device is built
/// yet).
pub fn resolve_devices(config: &Config) -> Result<(DeviceKind, DeviceKind)> {
    let concrete = |spec: DeviceSpec| -> Result<Option<DeviceKind>> {
        Ok(match spec {
            DeviceSpec::Auto => None,
            DeviceSpec::Cpu => Some(DeviceKind::Cpu),
            DeviceSpec::Vulkan(i) => Some(DeviceKind::Vulkan(i)),
            DeviceSpec::Cuda(_) | DeviceSpec::Hip(_) => anyhow::bail!("device {spec} is not built into this strata-rt yet (cpu and vulkan:N are)"),
        })
    };
    let decode = match concrete(config.devices.decode)? {
        Some(d) => d,
        None => {
            let gpus = strata_gpu::vulkan::list_devices().unwrap_or_default();
            gpus.iter().find(|d| d.usable && !d.is_cpu()).map_or(DeviceKind::Cpu, |d| DeviceKind::Vulkan(d.index))
        }
    };
    let prefill = concrete(config.devices.prefill)?.unwrap_or(decode);
    Ok((prefill, decode))
}

/// Builds the engine on the configured devices.
pub fn build_engine(config: &Config, model: Arc<LoadedModel>, single_sequence: bool) -> Result<Engine> {
    let (prefill_device, decode_device) = resolve_devices(config)?;
    let opts = EngineOptions { prefill_device, decode_device, ..engine_options(config, &model, single_sequence) };
    Engine::new(model, opts).with_context(|| format!("starting the devices (prefill {prefill_device}, decode {decode_device})"))
}
