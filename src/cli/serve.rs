//! `strata-rt --config FILE`: the server.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use strata_actors::http::{self, AppState, Ready};
use strata_actors::scheduler::{SchedulerOptions, SchedulerThread};
use strata_config::Config;
use strata_openai::Limits;

/// What the scheduler keeps of the shutdown grace for the HTTP side: it cuts off streams still
/// running this long before the HTTP server would drop their connections, so the error event and
/// `[DONE]` it sends them are written and every client sees a complete response.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(3);

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
        let grace = Duration::from_secs(config.server.shutdown_grace_s);
        // The HTTP server's own timeout is the backstop: the scheduler ends streams earlier.
        let server = http::bind_with_metrics(state.clone(), listen, workers, grace + SHUTDOWN_FLUSH, metrics_on_main).with_context(|| format!("listening on {listen}"))?;
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
        actix_web::rt::spawn(stop_on_signal(server.handle(), metrics_server.clone(), state.clone(), grace));
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
        state.shutdown();
        eprintln!("stopped");
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Waits for SIGINT or SIGTERM, then shuts down gracefully: the listeners close at once, requests
/// in flight get `grace` to finish, and streams still running then end with an error event and
/// `[DONE]` (the scheduler's drain). A second signal ends the grace at once: the streams get
/// their error event and `[DONE]` at the next step, and the server exits.
async fn stop_on_signal(server: actix_web::dev::ServerHandle, metrics: Option<actix_web::dev::ServerHandle>, state: Arc<AppState>, grace: Duration) {
    let name = wait_for_stop_signal().await;
    eprintln!("{name}: shutting down; requests in flight have {} s to finish (send it again to end them now)", grace.as_secs());
    tracing::info!(signal = name, grace_s = grace.as_secs(), "shutting down");
    state.drain(std::time::Instant::now() + grace);
    if let Some(m) = metrics {
        actix_web::rt::spawn(async move { m.stop(true).await });
    }
    // One stop command; the second signal only moves the scheduler's deadline.
    let stopped = server.stop(true);
    tokio::pin!(stopped);
    tokio::select! {
        _ = &mut stopped => {}
        again = wait_for_stop_signal() => {
            eprintln!("{again} again: ending the requests in flight now");
            tracing::info!(signal = again, "shutting down now");
            state.drain(std::time::Instant::now());
            stopped.await;
        }
    }
}

/// The first of SIGINT and SIGTERM. Where SIGTERM cannot be watched, SIGINT alone.
async fn wait_for_stop_signal() -> &'static str {
    use actix_web::rt::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = actix_web::rt::signal::ctrl_c() => "SIGINT",
        },
        Err(e) => {
            eprintln!("warning: cannot watch SIGTERM ({e}); SIGINT still shuts down gracefully");
            let _ = actix_web::rt::signal::ctrl_c().await;
            "SIGINT"
        }
    }
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
        greedy_run_tokens: config.batching.greedy_run_tokens,
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
