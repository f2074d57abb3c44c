//! The HTTP front end (actix-web): the OpenAI endpoints, llama-server's `/tokenize` and
//! `/detokenize`, `/health` and `/metrics`.
//!
//! Handlers validate at the edge (the `strata-openai` crate), tokenize on the blocking pool (the
//! tokenizer "actor": a bounded pool of threads sharing one tokenizer), submit to the scheduler
//! and turn its token stream into text: incremental detokenization and stop strings happen here.

mod generate;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use actix_web::http::header;
use actix_web::{web, App, HttpResponse, HttpServer};
use parking_lot::Mutex;
use strata_openai::{ApiError, Limits};

use crate::engine::LoadedModel;
use crate::scheduler::{SchedulerHandle, SchedulerThread};

/// What the server needs once the model is loaded.
pub struct Ready {
    pub model: Arc<LoadedModel>,
    pub scheduler: SchedulerHandle,
    pub limits: Limits,
    pub served_name: String,
    pub device: String,
}

/// Shared by every handler.
pub struct AppState {
    ready: OnceLock<Ready>,
    /// Set when loading failed: `/health` reports it.
    load_error: Mutex<Option<String>>,
    scheduler: Mutex<Option<SchedulerThread>>,
    metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    max_body_bytes: usize,
    started: Instant,
}

impl AppState {
    /// A state with nothing loaded yet (`/health` answers 503).
    pub fn new(max_body_bytes: usize, metrics: Option<metrics_exporter_prometheus::PrometheusHandle>) -> Arc<AppState> {
        Arc::new(AppState {
            ready: OnceLock::new(),
            load_error: Mutex::new(None),
            scheduler: Mutex::new(None),
            metrics,
            max_body_bytes,
            started: Instant::now(),
        })
    }

    /// Marks the model loaded and the scheduler running.
    pub fn set_ready(&self, ready: Ready, scheduler: SchedulerThread) {
        *self.scheduler.lock() = Some(scheduler);
        let _ = self.ready.set(ready);
        tracing::info!(seconds = self.started.elapsed().as_secs_f64(), "ready");
    }

    /// Records why loading failed; the server keeps answering `/health` with it.
    pub fn set_load_error(&self, error: String) {
        *self.load_error.lock() = Some(error);
    }

    /// Starts a graceful shutdown: new requests are refused, and the ones in flight may run until
    /// `deadline`, when those still running end with an error event.
    pub fn drain(&self, deadline: Instant) {
        if let Some(s) = self.scheduler.lock().as_ref() {
            s.drain(deadline);
        }
    }

    /// Stops the scheduler after the HTTP server has drained.
    pub fn shutdown(&self) {
        if let Some(s) = self.scheduler.lock().take() {
            s.shutdown();
        }
    }

    fn ready(&self) -> Result<&Ready, ApiError> {
        self.ready.get().ok_or_else(|| match self.load_error.lock().as_ref() {
            Some(e) => ApiError::internal(format!("the model failed to load: {e}")),
            None => ApiError::overloaded(5).with_code("model_loading"),
        })
    }
}

/// Answers an [`ApiError`] as OpenAI does, with `Retry-After` when it has one.
pub(crate) fn error_response(e: &ApiError) -> HttpResponse {
    let status = actix_web::http::StatusCode::from_u16(e.status).unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut b = HttpResponse::build(status);
    b.content_type("application/json");
    if let Some(s) = e.retry_after_s {
        b.insert_header((header::RETRY_AFTER, s.to_string()));
    }
    crate::metrics::http_error(e.status);
    b.body(e.to_json())
}

async fn health(state: web::Data<AppState>) -> HttpResponse {
    if let Some(r) = state.ready.get() {
        let stats = r.scheduler.stats().await.unwrap_or_default();
        return HttpResponse::Ok().json(serde_json::json!({
            "status": "ok",
            "model": r.served_name,
            "device": r.device,
            "requests_waiting": stats.waiting,
            "requests_running": stats.running,
            "kv_blocks_free": stats.kv_blocks_free,
            "kv_blocks_total": stats.kv_blocks_total,
        }));
    }
    let (status, detail) = match state.load_error.lock().as_ref() {
        Some(e) => ("error", e.clone()),
        None => ("loading", "the model is loading".to_string()),
    };
    HttpResponse::ServiceUnavailable().insert_header((header::RETRY_AFTER, "5")).json(serde_json::json!({ "status": status, "detail": detail }))
}

async fn models(state: web::Data<AppState>) -> HttpResponse {
    match state.ready() {
        Ok(r) => HttpResponse::Ok().json(strata_openai::ModelList::new(std::slice::from_ref(&r.served_name), strata_openai::unix_now(), "strata-rt")),
        Err(e) => error_response(&e),
    }
}

/// The Prometheus text. The request and KV gauges are kept current by the scheduler thread, so
/// a scrape never waits for a device step; only the process gauges are read here.
async fn metrics_text(state: web::Data<AppState>) -> HttpResponse {
    crate::metrics::refresh_process();
    match &state.metrics {
        Some(h) => HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(h.render()),
        None => HttpResponse::NotFound().body("metrics are disabled ([metrics] enabled = false)"),
    }
}

async fn not_found() -> HttpResponse {
    error_response(&ApiError::not_found("no such endpoint"))
}

/// Builds and binds the HTTP server, serving the metrics at `metrics_path` (`None`: not on this
/// address, e.g. when `[metrics] listen` gives them their own). It does not listen for signals:
/// the caller stops it through its handle ([`actix_web::dev::ServerHandle::stop`]), after which
/// in-flight responses get `shutdown_timeout` to finish.
///
/// # Errors
/// The address cannot be bound.
pub fn bind_with_metrics(
    state: Arc<AppState>,
    listen: SocketAddr,
    workers: usize,
    shutdown_timeout: Duration,
    metrics_path: Option<String>,
) -> std::io::Result<actix_web::dev::Server> {
    let data = web::Data::from(state);
    let max_body = data.max_body_bytes;
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(web::PayloadConfig::new(max_body.saturating_add(1)))
            .route("/health", web::get().to(health))
            .route("/v1/models", web::get().to(models))
            .configure(|cfg| {
                if let Some(p) = metrics_path.as_deref() {
                    cfg.route(p, web::get().to(metrics_text));
                }
            })
            .route("/v1/chat/completions", web::post().to(generate::chat_completions))
            .route("/v1/completions", web::post().to(generate::completions))
            .route("/tokenize", web::post().to(generate::tokenize))
            .route("/detokenize", web::post().to(generate::detokenize))
            .default_service(web::to(not_found))
    })
    .workers(workers.max(1))
    .shutdown_timeout(shutdown_timeout.as_secs())
    .disable_signals()
    .bind(listen)?
    .run();
    Ok(server)
}

/// Binds a second, metrics-only server (`[metrics] listen`): `path` answers the Prometheus text,
/// everything else 404. One worker; it does not listen for signals (stop it through its handle).
///
/// # Errors
/// The address cannot be bound.
pub fn bind_metrics(state: Arc<AppState>, listen: SocketAddr, path: String) -> std::io::Result<actix_web::dev::Server> {
    let data = web::Data::from(state);
    let server = HttpServer::new(move || App::new().app_data(data.clone()).route(&path, web::get().to(metrics_text)).default_service(web::to(not_found)))
        .workers(1)
        .disable_signals()
        .bind(listen)?
        .run();
    Ok(server)
}
