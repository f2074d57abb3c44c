//! `strata-rt --config FILE`: the server.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use strata_actors::http::{self, AppState, Ready};
use strata_actors::scheduler::{SchedulerOptions, SchedulerThread};
use strata_config::Config;
use strata_openai::Limits;

/// How long in-flight streams may take to finish after SIGINT/SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

pub fn run(config: Config) -> Result<ExitCode> {
    let metrics = if config.metrics.enabled { strata_actors::metrics::install() } else { None };
    let state = AppState::new(config.server.max_body_bytes as usize, metrics);
    let listen = config.server.listen;
    let system = actix_web::rt::System::new();
    system.block_on(async {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).min(4);
        // With `[metrics] listen`, the metrics get their own address and leave the API port
        // (disabled metrics answer 404 with a reason on the API port).
        let metrics_on_main = (!config.metrics.enabled || config.metrics.listen.is_none()).then(|| config.metrics.path.clone());
        let server = http::bind_with_metrics(state.clone(), listen, workers, SHUTDOWN_GRACE, metrics_on_main).with_context(|| format!("listening on {listen}"))?;
        let metrics_server = match config.metrics.listen.filter(|_| config.metrics.enabled) {
            Some(addr) => {
                let s = http::bind_metrics(state.clone(), addr, config.metrics.path.clone()).with_context(|| format!("listening on {addr} ([metrics] listen)"))?;
                eprintln!("metrics on http://{addr}{}", config.metrics.path);
                let handle = s.handle();
                actix_web::rt::spawn(s);
                Some(handle)
            }
            None => None,
        };
        eprintln!("strata-rt {} listening on http://{listen} (loading {})", env!("CARGO_PKG_VERSION"), config.model.path.display());
        let loader_state = state.clone();
        let cfg = config.clone();
        std::thread::Builder::new()
            .name("strata-loader".into())
            .spawn(move || match load(&cfg) {
                Ok((ready, scheduler)) => {
                    eprintln!("ready: {} on {}", ready.served_name, ready.device);
                    loader_state.set_ready(ready, scheduler);
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    eprintln!("error: {msg}");
                    tracing::error!(error = %msg, "the model failed to load");
                    loader_state.set_load_error(msg);
                }
            })
            .context("starting the loader thread")?;
        server.await.context("the HTTP server failed")?;
        if let Some(m) = metrics_server {
            m.stop(true).await;
        }
        eprintln!("shutting down");
        state.shutdown();
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn load(config: &Config) -> Result<(Ready, SchedulerThread)> {
    let model = super::load_model(&config.model.path)?;
    eprintln!("{}", model.summary());
    let engine = super::build_engine(config, model.clone(), false)?;
    let layout = engine.layout();
    let arena_bytes = layout.total_bytes();
    eprintln!(
        "KV arena: {} cells ({} tokens per sequence, {} blocks of {}), {:.1} MiB in {} chunk(s), layout hash {}",
        layout.params.n_cells,
        engine.options().max_context,
        layout.n_blocks(),
        layout.params.block_size,
        arena_bytes as f64 / 1048576.0,
        layout.chunks.len(),
        &layout.hash_hex()[..16]
    );
    let max_context = engine.options().max_context;
    let (prefill_device, decode_device) = (engine.prefill_device_name(), engine.decode_device_name());
    eprintln!(
        "devices: prefill {prefill_device}, decode {decode_device}; {:.1} MiB of weights, {:.1} MiB KV arena ({})",
        model.weights.total_bytes() as f64 / 1048576.0,
        arena_bytes as f64 / 1048576.0,
        if decode_device.starts_with("vulkan") && prefill_device == decode_device && !engine.options().kv_in_host_memory { "device memory" } else { "host memory" }
    );
    let device = engine.device_name();
    strata_actors::metrics::set_build_info(&config.model.served_name(), &device, &device);
    let opts = SchedulerOptions {
        max_queued: config.server.max_queued_requests,
        max_running: config.max_running_requests(),
        // 0 means no limit.
        request_timeout: if config.server.request_timeout_s == 0 { Duration::MAX } else { Duration::from_secs(config.server.request_timeout_s) },
        prefill_chunk: config.batching.prefill_chunk,
        timing_log: config.log.timing_log.clone(),
        prefill_device,
        decode_device,
    };
    let scheduler = SchedulerThread::start(engine, opts).context("starting the scheduler")?;
    let served_name = config.model.served_name();
    let default_max_tokens = if config.server.max_tokens_default == 0 { max_context } else { config.server.max_tokens_default };
    let limits = Limits {
        max_body_bytes: config.server.max_body_bytes as usize,
        max_context,
        vocab_size: model.hparams.vocab_size,
        default_max_tokens,
        served_model_names: vec![served_name.clone()],
    };
    Ok((Ready { model: Arc::clone(&model), scheduler: scheduler.handle(), limits, served_name, device }, scheduler))
}
