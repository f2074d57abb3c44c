//! The scheduler: admission, the waiting queue, continuous batching and per-request streams.
//!
//! It is an actor with a handle ([`SchedulerHandle`]), a command enum and a bounded mailbox, and it
//! runs on its own device thread, which owns the [`Engine`] (and with it the KV arena's
//! bookkeeping). Every step batches all decoding sequences (one token each) with chunks of
//! prompts still being prefilled, up to `ubatch` tokens, so a long prompt never stalls the other
//! streams. Generated tokens go straight to each request's bounded stream; the HTTP side
//! detokenizes them.

mod timing;

pub use timing::TimingRecord;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError};
use strata_kv::SeqId;
use strata_model::sampling::{log_softmax, Sampler, SamplingParams};
use tokio::sync::{mpsc, oneshot};

use crate::engine::{Engine, RowOutput, SeqStep, StepOutput, StepStatus, StopReason};

/// Limits of the scheduler.
#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// Requests admitted to the waiting queue; beyond it, submissions are refused.
    pub max_queued: usize,
    /// Sequences running at once.
    pub max_running: usize,
    /// A request running longer than this is stopped with an error.
    pub request_timeout: Duration,
    /// Prompt tokens one sequence prefills per step (a long prompt takes several steps).
    pub prefill_chunk: usize,
    /// Where per-request timing records go (besides the log), one JSON line each.
    pub timing_log: Option<std::path::PathBuf>,
    /// Device names for the timing record.
    pub prefill_device: String,
    pub decode_device: String,
    /// Most tokens of one greedy run (`batching.greedy_run_tokens`; 0: none): a lone greedy
    /// request's decode steps, each submitted before the host reads the token before it.
    pub greedy_run_tokens: usize,
}

/// The most likely alternatives of one generated token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    /// `(token, logprob)`, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// What a request's stream carries.
#[derive(Clone, Debug)]
pub enum GenEvent {
    /// The request was admitted; its prompt reuses this many cached tokens.
    Started { reused_tokens: usize },
    /// One generated token.
    Token { id: u32, logprob: Option<TokenLogprob> },
    /// Generation ended.
    Done(GenSummary),
    /// Generation failed; nothing more follows.
    Error(String),
}

/// The end of a generation.
#[derive(Clone, Debug)]
pub struct GenSummary {
    pub stop: StopReason,
    pub prompt_tokens: usize,
    pub reused_tokens: usize,
    pub completion_tokens: usize,
}

/// What the HTTP side can tell a running request.
#[derive(Debug, Default)]
pub struct RequestControl {
    /// A stop string matched: end with reason `stop` (its cells stay cached).
    stop: AtomicBool,
}

impl RequestControl {
    /// Asks the scheduler to end the request with reason `stop` at the next step.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A generation request.
pub struct GenRequest {
    pub id: String,
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Top alternatives to report per token (`None`: no logprobs).
    pub logprobs: Option<usize>,
    pub control: Arc<RequestControl>,
    pub events: mpsc::Sender<GenEvent>,
    pub span: tracing::Span,
}

/// Why a submission was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("the queue is full ({0} requests waiting)")]
    QueueFull(usize),
    #[error("the scheduler has stopped")]
    Stopped,
}

/// Counters for `/health` and the metrics.
#[derive(Clone, Debug, Default)]
pub struct SchedulerStats {
    pub waiting: usize,
    pub running: usize,
    pub kv_blocks_total: u32,
    pub kv_blocks_free: usize,
    pub kv_blocks_cached: usize,
}

enum Command {
    Submit(Box<GenRequest>),
    Stats(oneshot::Sender<SchedulerStats>),
    /// Refuse new requests; end the ones still running at the deadline with an error.
    Drain(Instant),
    Shutdown,
}

/// The scheduler's handle: cheap to clone, every method is a message.
#[derive(Clone)]
pub struct SchedulerHandle {
    tx: Sender<Command>,
    queued: Arc<AtomicUsize>,
    max_queued: usize,
}

/// The running scheduler thread; joins on [`SchedulerThread::shutdown`].
pub struct SchedulerThread {
    handle: SchedulerHandle,
    thread: Option<JoinHandle<()>>,
}

impl SchedulerThread {
    /// Starts the scheduler's device thread, which takes ownership of `engine`.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(engine: Engine, opts: SchedulerOptions) -> std::io::Result<SchedulerThread> {
        // The mailbox holds the waiting requests plus a few control messages.
        let (tx, rx) = crossbeam_channel::bounded(opts.max_queued + 16);
        let queued = Arc::new(AtomicUsize::new(0));
        let handle = SchedulerHandle { tx, queued: queued.clone(), max_queued: opts.max_queued };
        let thread = std::thread::Builder::new().name("strata-scheduler".into()).spawn(move || {
            let mut s = Scheduler::new(engine, opts, rx, queued);
            s.run();
        })?;
        Ok(SchedulerThread { handle, thread: Some(thread) })
    }

    /// A handle for submitting requests.
    pub fn handle(&self) -> SchedulerHandle {
        self.handle.clone()
    }

    /// Refuses new requests from now on and lets the running and waiting ones finish until
    /// `deadline`; those still running then end with an error event ("the server is shutting
    /// down"), so their streams close complete. Returns at once.
    pub fn drain(&self, deadline: Instant) {
        // The mailbox keeps room for control messages beyond the queued requests; the timeout
        // only guards against a scheduler thread that is gone or stuck.
        if self.handle.tx.send_timeout(Command::Drain(deadline), Duration::from_secs(1)).is_err() {
            tracing::warn!("the scheduler did not take the drain command");
        }
    }

    /// Lets running requests finish, refuses new ones, and joins the thread.
    pub fn shutdown(mut self) {
        let _ = self.handle.tx.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl SchedulerHandle {
    /// Queues a request.
    ///
    /// # Errors
    /// [`SubmitError::QueueFull`] when `max_queued` requests already wait (answer 429/503), or
    /// [`SubmitError::Stopped`] during shutdown.
    pub fn submit(&self, req: GenRequest) -> Result<(), SubmitError> {
        let prev = self.queued.fetch_add(1, Ordering::SeqCst);
        if prev >= self.max_queued {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::QueueFull(prev));
        }
        // Counted before the send, so the scheduler's decrement never comes first.
        crate::metrics::request_queued();
        match self.tx.try_send(Command::Submit(Box::new(req))) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                self.queued.fetch_sub(1, Ordering::SeqCst);
                crate::metrics::request_unqueued();
                Err(SubmitError::QueueFull(prev))
            }
            Err(TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(1, Ordering::SeqCst);
                crate::metrics::request_unqueued();
                Err(SubmitError::Stopped)
            }
        }
    }

    /// Current counts.
    ///
    /// # Cancel safety
    /// Dropping the future only drops the reply.
    pub async fn stats(&self) -> Option<SchedulerStats> {
        let (tx, rx) = oneshot::channel();
        self.tx.try_send(Command::Stats(tx)).ok()?;
        rx.await.ok()
    }

    /// Requests waiting to be admitted.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

enum Phase {
    /// `done` prompt tokens are in the cache.
    Prefill { done: usize },
    /// The next token to feed.
    Decode { next: u32 },
}

struct Running {
    req: Box<GenRequest>,
    seq: SeqId,
    phase: Phase,
    sampler: Sampler,
    history: Vec<u32>,
    /// Tokens sampled (the end-of-generation token included).
    generated: usize,
    /// Tokens sent to the client.
    emitted: usize,
    reused: usize,
    admitted: Instant,
    prefill_started: Instant,
    decode_started: Option<Instant>,
    prefill_ms: f64,
    queue_ms: f64,
    /// Tokens the context still has room for.
    budget: usize,
}

impl Running {
    /// Takes the token this sequence's step picked, `eog` if it ends generation: it joins the
    /// history, and unless it ends generation goes to the stream (with `logprob()`) and becomes
    /// the next step's input. Returns why the sequence ends here, if it does: the end-of-
    /// generation token (not sent), a stream that cannot take it, or the length budget.
    fn take_token(&mut self, tok: u32, eog: bool, logprob: impl FnOnce() -> Option<TokenLogprob>) -> Option<StopReason> {
        self.history.push(tok);
        self.generated += 1;
        if eog {
            return Some(StopReason::Stop);
        }
        // The stream holds max_tokens + a few events, so it is never full while the client
        // reads; a client that stopped reading is cancelled at the next step.
        if self.req.events.try_send(GenEvent::Token { id: tok, logprob: logprob() }).is_err() {
            return Some(StopReason::Cancelled);
        }
        self.emitted += 1;
        if self.generated >= self.budget {
            return Some(StopReason::Length);
        }
        self.phase = Phase::Decode { next: tok };
        None
    }
}

struct Scheduler {
    engine: Engine,
    opts: SchedulerOptions,
    rx: Receiver<Command>,
    queued: Arc<AtomicUsize>,
    waiting: VecDeque<(Box<GenRequest>, Instant)>,
    running: Vec<Running>,
    next_seq: SeqId,
    shutting_down: bool,
    /// Set by [`Command::Drain`]: when running requests are cut off.
    drain_deadline: Option<Instant>,
    lp_scratch: Vec<f32>,
    metrics: crate::metrics::SchedulerMetrics,
    /// When the KV arena series were last published, and whether a sequence started or ended
    /// since (which publishes them at once).
    kv_published: Instant,
    kv_changed: bool,
}

/// What a stream still running when the shutdown grace ends is told.
const SHUTDOWN_CUT_OFF: &str = "the server is shutting down: the request did not finish within its shutdown grace";

/// How stale the KV arena series may grow while the same sequences run: reading them is a round
/// trip to the KV broker (~0.3 ms on the 2-core machine), too dear for every decode step.
const KV_PUBLISH_INTERVAL: Duration = Duration::from_millis(100);

impl Scheduler {
    fn new(engine: Engine, opts: SchedulerOptions, rx: Receiver<Command>, queued: Arc<AtomicUsize>) -> Self {
        let kv = engine.kv().stats().unwrap_or_default();
        let metrics = crate::metrics::SchedulerMetrics::new(&opts.prefill_device, &opts.decode_device, &kv, engine.layout().total_bytes());
        Scheduler { engine, opts, rx, queued, waiting: VecDeque::new(), running: Vec::new(), next_seq: 1 << 32, shutting_down: false, drain_deadline: None, lp_scratch: Vec::new(), metrics, kv_published: Instant::now(), kv_changed: true }
    }

    /// Publishes the gateway gauges (running, KV usage) and the KV arena series: the latter at
    /// once when a sequence started or ended, else at most every [`KV_PUBLISH_INTERVAL`].
    fn publish_metrics(&mut self) {
        self.metrics.set_running(self.running.len());
        if !self.kv_changed && self.kv_published.elapsed() < KV_PUBLISH_INTERVAL {
            return;
        }
        if let Ok(kv) = self.engine.kv().stats() {
            self.metrics.publish_kv(&kv);
        }
        self.kv_changed = false;
        self.kv_published = Instant::now();
    }

    fn run(&mut self) {
        loop {
            if !self.intake() {
                break;
            }
            self.admit();
            if self.running.is_empty() {
                self.publish_metrics();
                if self.shutting_down && self.waiting.is_empty() {
                    break;
                }
                continue;
            }
            self.step();
            self.publish_metrics();
        }
        for r in std::mem::take(&mut self.running) {
            let _ = r.req.events.try_send(GenEvent::Error("the server is shutting down".into()));
            let _ = self.engine.end_sequence(r.seq, false, r.req.prompt.len());
        }
    }

    /// Takes commands; blocks only when there is nothing to compute. Returns false to exit.
    fn intake(&mut self) -> bool {
        let idle = self.running.is_empty() && self.waiting.is_empty();
        if idle {
            if self.shutting_down {
                return false;
            }
            match self.rx.recv() {
                Ok(c) => self.command(c),
                Err(_) => return false,
            }
        }
        loop {
            match self.rx.try_recv() {
                Ok(c) => self.command(c),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => {
                    self.shutting_down = true;
                    return true;
                }
            }
        }
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Submit(req) => {
                if self.shutting_down {
                    self.queued.fetch_sub(1, Ordering::SeqCst);
                    self.metrics.dequeued();
                    let _ = req.events.try_send(GenEvent::Error("the server is shutting down".into()));
                } else {
                    self.waiting.push_back((req, Instant::now()));
                }
            }
            Command::Stats(reply) => {
                let st = self.engine.kv().stats().unwrap_or_default();
                let _ = reply.send(SchedulerStats {
                    waiting: self.waiting.len(),
                    running: self.running.len(),
                    kv_blocks_total: st.total_blocks,
                    kv_blocks_free: st.free_blocks,
                    kv_blocks_cached: st.cached_blocks,
                });
            }
            Command::Drain(deadline) => {
                self.shutting_down = true;
                self.drain_deadline = Some(deadline);
                tracing::info!(running = self.running.len(), waiting = self.waiting.len(), "draining");
            }
            Command::Shutdown => self.shutting_down = true,
        }
    }

    /// Whether a drain's deadline has passed: what still runs or waits is cut off.
    fn past_drain_deadline(&self) -> bool {
        self.drain_deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Moves waiting requests into the running set while there is room.
    fn admit(&mut self) {
        if self.past_drain_deadline() {
            for (req, _) in std::mem::take(&mut self.waiting) {
                self.queued.fetch_sub(1, Ordering::SeqCst);
                self.metrics.dequeued();
                self.metrics.finished(crate::metrics::Finish::Cancelled, &crate::metrics::RequestTimes::default());
                let _ = req.events.try_send(GenEvent::Error(SHUTDOWN_CUT_OFF.into()));
            }
        }
        while self.running.len() < self.opts.max_running {
            let Some((req, queued_at)) = self.waiting.pop_front() else { break };
            self.queued.fetch_sub(1, Ordering::SeqCst);
            self.metrics.dequeued();
            if req.events.is_closed() {
                tracing::info!(parent: &req.span, request_id = %req.id, "cancelled while waiting");
                self.metrics.finished(crate::metrics::Finish::Cancelled, &crate::metrics::RequestTimes::default());
                continue;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            let reused = match self.engine.start_sequence(seq, &req.prompt) {
                Ok(r) => r,
                Err(e) => {
                    let _ = req.events.try_send(GenEvent::Error(e.to_string()));
                    self.metrics.finished(crate::metrics::Finish::Error, &crate::metrics::RequestTimes::default());
                    continue;
                }
            };
            self.kv_changed = true;
            let max_context = self.engine.options().max_context;
            let budget = req.max_tokens.min(max_context.saturating_sub(req.prompt.len()));
            let _ = req.events.try_send(GenEvent::Started { reused_tokens: reused });
            let now = Instant::now();
            self.metrics.admitted(now.duration_since(queued_at));
            tracing::debug!(parent: &req.span, reused_tokens = reused, "admitted");
            self.running.push(Running {
                sampler: Sampler::new(req.sampling.clone()),
                history: req.prompt.clone(),
                seq,
                phase: Phase::Prefill { done: reused },
                generated: 0,
                emitted: 0,
                reused,
                admitted: now,
                prefill_started: now,
                decode_started: None,
                prefill_ms: 0.0,
                queue_ms: now.duration_since(queued_at).as_secs_f64() * 1e3,
                budget,
                req,
            });
        }
    }

    /// One batched step over every running sequence.
    fn step(&mut self) {
        // Drop the requests whose clients went away, and the ones a stop string ended.
        let cut_off = self.past_drain_deadline();
        let mut i = 0;
        while i < self.running.len() {
            let r = &self.running[i];
            let timed_out = r.admitted.elapsed() > self.opts.request_timeout;
            if r.req.events.is_closed() {
                let r = self.running.swap_remove(i);
                self.end(r, StopReason::Cancelled, None);
            } else if r.req.control.stop.load(Ordering::Relaxed) {
                let r = self.running.swap_remove(i);
                self.end(r, StopReason::Stop, None);
            } else if timed_out {
                let r = self.running.swap_remove(i);
                let msg = format!("the request ran past the server's {} s limit", self.opts.request_timeout.as_secs());
                self.end(r, StopReason::Cancelled, Some(msg));
            } else if cut_off {
                let r = self.running.swap_remove(i);
                self.end(r, StopReason::Cancelled, Some(SHUTDOWN_CUT_OFF.into()));
            } else {
                i += 1;
            }
        }
        if self.running.is_empty() || self.greedy_run() {
            return;
        }
        // Decoding sequences first (one token each), then prompt chunks in the room left.
        let mut budget = self.engine.max_step_tokens();
        let mut plan: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        let mut order: Vec<usize> = (0..self.running.len()).collect();
        order.sort_by_key(|&i| matches!(self.running[i].phase, Phase::Prefill { .. }));
        for i in order {
            if budget == 0 {
                break;
            }
            let r = &self.running[i];
            let n = match r.phase {
                Phase::Decode { .. } => 1,
                Phase::Prefill { done } => (r.req.prompt.len() - done).min(budget).min(self.opts.prefill_chunk),
            };
            budget -= n;
            plan.push((i, 0..n));
        }
        let n_decoding = plan.iter().filter(|(i, _)| matches!(self.running[*i].phase, Phase::Decode { .. })).count();
        let n_tokens: usize = plan.iter().map(|(_, r)| r.len()).sum();
        let step_started = Instant::now();
        let result = {
            let running = &self.running;
            let work: Vec<SeqStep<'_>> = plan
                .iter()
                .map(|(i, range)| {
                    let r = &running[*i];
                    // Requests without logprobs need only the device's argmax (greedy) or the
                    // top k of their logits (a sampler whose first cut is a top-k).
                    let wanted = match (r.req.logprobs, r.sampler.top_k_cut()) {
                        (Some(_), _) => StepOutput::Logits,
                        (None, _) if r.sampler.picks_argmax() => StepOutput::Token,
                        (None, Some(k)) => StepOutput::TopK(k),
                        (None, None) => StepOutput::Logits,
                    };
                    match &r.phase {
                        Phase::Decode { next } => SeqStep { seq: r.seq, tokens: std::slice::from_ref(next), output: wanted, decode: true },
                        Phase::Prefill { done } => {
                            let end = done + range.len();
                            let output = if end == r.req.prompt.len() { wanted } else { StepOutput::Nothing };
                            SeqStep { seq: r.seq, tokens: &r.req.prompt[*done..end], output, decode: false }
                        }
                    }
                })
                .collect();
            // A panic in the device code fails this step's requests, not the server.
            let engine = &mut self.engine;
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.step(&work)))
                .unwrap_or_else(|p| Err(crate::engine::EngineError::Panic(panic_message(&p))))
        };
        self.metrics.step(plan.len(), n_decoding, n_tokens, step_started.elapsed());
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(error = %e, "step failed; ending its sequences");
                let mut idx: Vec<usize> = plan.iter().map(|(i, _)| *i).collect();
                idx.sort_unstable_by(|a, b| b.cmp(a));
                for i in idx {
                    let r = self.running.swap_remove(i);
                    self.end(r, StopReason::Cancelled, Some(format!("device error: {e}")));
                }
                return;
            }
        };
        let mut failed: Vec<(usize, String)> = Vec::new();
        let mut ran: Vec<(usize, std::ops::Range<usize>, Option<RowOutput>)> = Vec::new();
        for ((i, range), st) in plan.iter().zip(&outcome.status) {
            match st {
                StepStatus::Ran { output } => ran.push((*i, range.clone(), *output)),
                StepStatus::Deferred => {} // waits for another sequence to give blocks back
                StepStatus::Failed(msg) => failed.push((*i, msg.clone())),
            }
        }
        if ran.is_empty() && failed.is_empty() {
            // Nothing fits and nothing will end by itself: fail the sequence admitted first, so
            // the others can go on.
            if let Some(oldest) = (0..self.running.len()).min_by_key(|&i| self.running[i].admitted) {
                failed.push((oldest, "the KV cache is full".to_string()));
            }
        }
        let logits = outcome.logits;
        let candidates = outcome.candidates;
        let vocab = self.engine.model().hparams.vocab_size;
        // Every row's token first (each sampler reads only its own row and history): on several
        // threads when the logits are many (a GPU step of dozens of sequences of a large
        // vocabulary), as the engine copied them.
        let mut row_of: Vec<Option<RowOutput>> = vec![None; self.running.len()];
        for (i, _, output) in &ran {
            row_of[*i] = *output;
        }
        let sample = |(r, output): (&mut Running, &Option<RowOutput>)| {
            output.map(|o| match o {
                RowOutput::Logits(row) => r.sampler.sample(&logits[row * vocab..(row + 1) * vocab], &r.history),
                RowOutput::Token(tok) => tok,
                RowOutput::Candidates { start, len } => r.sampler.sample_top(&candidates[start..start + len]),
            })
        };
        let sampled: Vec<Option<u32>> = if logits.len() >= self.engine.options().parallel_logits_min {
            use rayon::prelude::*;
            self.running.par_iter_mut().zip(row_of.par_iter()).map(sample).collect()
        } else {
            self.running.iter_mut().zip(&row_of).map(sample).collect()
        };
        let mut finished: Vec<(usize, StopReason, Option<String>)> = Vec::new();
        for (i, range, output) in &ran {
            let r = &mut self.running[*i];
            if let Phase::Prefill { done } = &mut r.phase {
                *done += range.len();
            }
            let Some(output) = output else { continue };
            if let Phase::Prefill { .. } = r.phase {
                r.prefill_ms = r.prefill_started.elapsed().as_secs_f64() * 1e3;
                r.decode_started = Some(Instant::now());
                self.metrics.first_token(Duration::from_secs_f64(r.queue_ms / 1e3) + r.admitted.elapsed());
                if let Err(e) = self.engine.hand_off_to_decode(r.seq) {
                    tracing::error!(parent: &r.req.span, error = %e, "hand-off failed");
                } else {
                    self.metrics.handoff();
                }
            }
            let Some(tok) = sampled[*i] else { continue };
            let eog = self.engine.model().tokenizer.is_end_of_generation(tok);
            let (lp_scratch, wanted) = (&mut self.lp_scratch, r.req.logprobs);
            // (Requests with logprobs always asked for their logits.)
            let logprob = || match (wanted, output) {
                (Some(top_n), RowOutput::Logits(row)) => {
                    log_softmax(&logits[row * vocab..(row + 1) * vocab], lp_scratch);
                    Some(top_logprobs(lp_scratch, tok, top_n))
                }
                _ => None,
            };
            if let Some(stop) = r.take_token(tok, eog, logprob) {
                finished.push((*i, stop, None));
            }
        }
        // A failed sequence is answered with its error and counted as one, not as cancelled.
        finished.extend(failed.into_iter().map(|(i, msg)| (i, StopReason::Cancelled, Some(msg))));
        finished.sort_unstable_by_key(|f| std::cmp::Reverse(f.0));
        finished.dedup_by_key(|f| f.0);
        for (i, stop, error) in finished {
            let r = self.running.swap_remove(i);
            self.end(r, stop, error);
        }
    }

    /// A lone greedy request's next decode steps as one run (`greedy_run_tokens`), when it runs
    /// alone, decodes, wants neither logprobs nor sampling, and nothing waits: on a GPU each step
    /// is submitted before the host has read the token before it. Each token is handled as
    /// [`Scheduler::step`] handles it; anything else for the scheduler to look at (a command, a
    /// waiting request, a stop, a closed stream, a deadline) ends the run after that token.
    /// Returns whether a run took the step's place (false: nothing ran).
    fn greedy_run(&mut self) -> bool {
        let Scheduler { engine, running, metrics, rx, queued, opts, drain_deadline, waiting, .. } = self;
        let [r] = running.as_mut_slice() else { return false };
        let Phase::Decode { next } = r.phase else { return false };
        let steps = r.budget.saturating_sub(r.generated).min(opts.greedy_run_tokens);
        let nothing_else = |rx: &Receiver<Command>, queued: &AtomicUsize| rx.is_empty() && queued.load(Ordering::SeqCst) == 0;
        if steps < 2 || r.req.logprobs.is_some() || !r.sampler.picks_argmax() || !waiting.is_empty() || !nothing_else(rx, queued) {
            return false;
        }
        let model = engine.model().clone();
        let (seq, timeout, deadline) = (r.seq, opts.request_timeout, *drain_deadline);
        let mut finish = None;
        let mut ran = 0;
        let mut last_token_at = Instant::now();
        let result = {
            let mut keep_going = |tok: u32| -> bool {
                metrics.step(1, 1, 1, last_token_at.elapsed());
                last_token_at = Instant::now();
                ran += 1;
                finish = r.take_token(tok, model.tokenizer.is_end_of_generation(tok), || None);
                finish.is_none()
                    && nothing_else(rx, queued)
                    && !r.req.events.is_closed()
                    && !r.req.control.stop.load(Ordering::Relaxed)
                    && r.admitted.elapsed() <= timeout
                    && deadline.is_none_or(|d| Instant::now() < d)
            };
            // A panic in the device code fails this request, not the server.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.decode_greedy_run_with(seq, next, steps, &mut keep_going)))
                .unwrap_or_else(|p| Err(crate::engine::EngineError::Panic(panic_message(&p))))
        };
        metrics.greedy_run(ran);
        match result {
            // The arena cannot hold the run now (or the device ran none of it): steps one at a
            // time, which defer or fail it.
            Ok(None) => return false,
            Ok(Some(picked)) if picked.is_empty() => return false,
            Ok(Some(_)) => {
                if let Some(stop) = finish {
                    let r = self.running.swap_remove(0);
                    self.end(r, stop, None);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "greedy run failed; ending its sequence");
                let r = self.running.swap_remove(0);
                self.end(r, StopReason::Cancelled, Some(format!("device error: {e}")));
            }
        }
        true
    }

    fn end(&mut self, r: Running, stop: StopReason, error: Option<String>) {
        let _span = r.req.span.enter();
        self.kv_changed = true;
        let cache = stop != StopReason::Cancelled;
        if let Err(e) = self.engine.end_sequence(r.seq, cache, r.req.prompt.len()) {
            tracing::error!(error = %e, "ending a sequence");
        }
        let completion_tokens = r.emitted;
        let failed = error.is_some();
        if let Some(msg) = error {
            let _ = r.req.events.try_send(GenEvent::Error(msg));
        }
        let decode_ms = r.decode_started.map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
        let record = TimingRecord {
            request_id: r.req.id.clone(),
            prompt_tokens: r.req.prompt.len(),
            reused_tokens: r.reused,
            prefill_ms: r.prefill_ms,
            generated_tokens: completion_tokens,
            decode_ms,
            wall_ms: r.admitted.elapsed().as_secs_f64() * 1e3 + r.queue_ms,
            queue_ms: r.queue_ms,
            stop_reason: stop.as_str(),
            prefill_device: self.opts.prefill_device.clone(),
            decode_device: self.opts.decode_device.clone(),
        };
        self.metrics.finished(
            crate::metrics::Finish::new(stop, failed),
            &crate::metrics::RequestTimes {
                e2e: Duration::from_secs_f64(record.wall_ms / 1e3),
                prefill: r.decode_started.map(|_| Duration::from_secs_f64(r.prefill_ms / 1e3)),
                decode: r.decode_started.map(|t| t.elapsed()),
                generated: r.generated,
                emitted: completion_tokens,
            },
        );
        if stop == StopReason::Cancelled {
            tracing::info!(parent: &r.req.span, request_id = %r.req.id, generated = completion_tokens, "request cancelled");
        } else {
            record.emit(self.opts.timing_log.as_deref());
            let _ = r.req.events.try_send(GenEvent::Done(GenSummary {
                stop,
                prompt_tokens: r.req.prompt.len(),
                reused_tokens: r.reused,
                completion_tokens,
            }));
        }
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "a panic".into())
}

/// The chosen token's log-probability and the `top_n` most likely alternatives.
fn top_logprobs(lp: &[f32], chosen: u32, top_n: usize) -> TokenLogprob {
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(top_n + 1);
    if top_n > 0 {
        let mut idx: Vec<u32> = (0..lp.len() as u32).collect();
        let k = top_n.min(idx.len());
        idx.select_nth_unstable_by(k - 1, |&a, &b| lp[b as usize].total_cmp(&lp[a as usize]));
        idx.truncate(k);
        idx.sort_unstable_by(|&a, &b| lp[b as usize].total_cmp(&lp[a as usize]));
        top.extend(idx.into_iter().map(|i| (i, lp[i as usize])));
    }
    TokenLogprob { logprob: lp.get(chosen as usize).copied().unwrap_or(f32::NEG_INFINITY), top }
}
