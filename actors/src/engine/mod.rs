//! The engine: a loaded model, a device plan and the KV arena, driven one sequence at a time by
//! `strata-rt generate` and the golden tests, and step by step by the scheduler.

mod load;

pub use load::{LoadedModel, LoadError};

use std::sync::Arc;
use std::time::Instant;

use strata_gpu::cpu::{CpuOptions, CpuPlan};
use strata_gpu::kv_memory::HostKvMemory;
use strata_gpu::vulkan::{ContextOptions, KvSource, VulkanContext, VulkanOptions, VulkanPlan};
use strata_gpu::{DeviceError, DeviceKind, ForwardPlan, StepBatch};
use strata_kv::{CellCopy, KvArena, KvError, KvLayout, KvShape, LayoutParams, Owner, SeqId};

use crate::kv_broker::{BrokerError, CellCopier, KvBroker, KvBrokerHandle};
use strata_model::sampling::{Candidate, Sampler, SamplingParams};

/// Sizes of the engine's step buffers and KV arena.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// CPU compute threads; 0 means every core.
    pub threads: usize,
    /// Longest sequence (prompt + generated tokens).
    pub max_context: usize,
    /// KV cells in the arena (a multiple of `block_size`).
    pub n_cells: usize,
    /// Cells per KV block.
    pub block_size: usize,
    /// Most tokens in one step.
    pub ubatch: usize,
    /// Most rows of logits one step returns (at least the number of sequences decoded together).
    pub max_outputs: usize,
    /// The CPU kernels' SIMD level; `None` picks the best this CPU has.
    pub simd: Option<strata_quant::SimdLevel>,
    /// The device that prefills prompts of at least `prefill_min_tokens` tokens.
    pub prefill_device: DeviceKind,
    /// The device that decodes (and prefills shorter prompts).
    pub decode_device: DeviceKind,
    /// Prompts (and steps) of at least this many tokens run on the prefill device.
    pub prefill_min_tokens: usize,
    /// Most sequences one step holds.
    pub max_seqs: usize,
    /// Keep the KV arena in host memory even when both devices are the same GPU.
    pub kv_in_host_memory: bool,
    /// Vulkan computes the CPU device's bits in decode steps (also `STRATA_VULKAN_EXACT=1`); the
    /// CPU then sums its products in ggml's order whatever `cpu_products` says.
    pub vulkan_exact: bool,
    /// The order of the CPU device's Q4_0 / Q4_1 / Q8_0 products (`devices.cpu_products`;
    /// ggml's by default, here and in the configuration).
    pub cpu_products: strata_quant::ProductOrder,
    /// Logits in a step from which the host work on them (the copy out of the device, each
    /// sequence's sampling) is spread over threads. On the H200's host a step of 32 sequences of
    /// a 152k vocabulary (19.5 MB) took ~2.3 ms to copy and ~5.5 ms to sample greedily on one
    /// thread, next to ~20 ms of GPU work (spread: decode 1,092 -> 1,513 t/s). Below it one
    /// thread: the CPU device's compute threads would be competed with for less than it saves.
    pub parallel_logits_min: usize,
    /// The CPU device moves every RMSNorm output one ulp (`CpuOptions::nudge_norms`): a
    /// measurement of how far any arithmetic that is not the CPU's bit for bit lands.
    pub cpu_nudge_norms: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            threads: 0,
            max_context: 4096,
            n_cells: 4096,
            block_size: 16,
            ubatch: 512,
            max_outputs: 64,
            simd: None,
            prefill_device: DeviceKind::Cpu,
            decode_device: DeviceKind::Cpu,
            prefill_min_tokens: 1024,
            max_seqs: 64,
            kv_in_host_memory: false,
            vulkan_exact: false,
            cpu_products: strata_quant::ProductOrder::Ggml,
            parallel_logits_min: 1 << 19,
            cpu_nudge_norms: false,
        }
    }
}

/// Why an engine call failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("KV arena: {0}")]
    Kv(#[from] KvError),
    #[error("KV broker: {0}")]
    Broker(#[from] BrokerError),
    #[error("KV layout: {0}")]
    Layout(#[from] strata_kv::LayoutError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the prompt has {prompt} tokens; the context holds {context}")]
    PromptTooLong { prompt: usize, context: usize },
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfVocab { id: u32, vocab: usize },
    #[error("invalid sampling parameters: {0}")]
    Sampling(String),
    #[error("the device code panicked: {0}")]
    Panic(String),
}

/// Why generation stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token (or a stop condition of the caller).
    Stop,
    /// `max_tokens` or the context length.
    Length,
    /// The caller asked to stop (a client went away).
    Cancelled,
}

impl StopReason {
    /// The OpenAI `finish_reason` / timing-record name.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Stop => "stop",
            StopReason::Length => "length",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// What one generation did, for the timing record.
#[derive(Clone, Debug)]
pub struct GenerationOutcome {
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    pub prompt_tokens: usize,
    pub reused_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

impl GenerationOutcome {
    /// Prompt tokens computed per second of prefill.
    pub fn prefill_tokens_per_s(&self) -> f64 {
        per_s(self.prompt_tokens - self.reused_tokens, self.prefill_ms)
    }

    /// Generated tokens per second of decode (the first token comes from prefill).
    pub fn decode_tokens_per_s(&self) -> f64 {
        per_s(self.tokens.len().saturating_sub(1), self.decode_ms)
    }
}

fn per_s(n: usize, ms: f64) -> f64 {
    if ms > 0.0 { n as f64 * 1000.0 / ms } else { 0.0 }
}

/// What the caller says after each generated token.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Stop here with reason `stop` (a stop string matched).
    Stop,
    /// Stop here with reason `cancelled`.
    Cancel,
}

/// Where a benchmark's greedy decode steps spent their time on the host (reported with
/// `STRATA_VULKAN_PROFILE`): reserving the token's KV cell, the device's step with its argmax
/// (on the host where the device does not take it), committing the token.
#[derive(Default)]
struct DecodePhases {
    total: [std::time::Duration; 3],
}

impl DecodePhases {
    fn add(&mut self, phases: [std::time::Duration; 3]) {
        for (t, p) in self.total.iter_mut().zip(phases) {
            *t += p;
        }
    }

    fn report(&self, steps: usize) {
        let us = |d: std::time::Duration| d.as_secs_f64() * 1e6 / steps as f64;
        let [reserve, step, commit] = self.total;
        eprintln!("engine, greedy decode steps: {steps}; us a step: reserve {:.1}, step with argmax {:.1}, commit {:.1}", us(reserve), us(step), us(commit));
    }
}

/// A loaded model on a device, with its KV arena (memory here, bookkeeping in the KV broker).
pub struct Engine {
    model: Arc<LoadedModel>,
    /// Runs prompts and steps of at least `prefill_min_tokens` tokens.
    plan: Box<dyn ForwardPlan>,
    /// Runs everything else, when it is another device than `plan`'s.
    decode_plan: Option<Box<dyn ForwardPlan>>,
    kv: KvBrokerHandle,
    layout: KvLayout,
    opts: EngineOptions,
    next_seq: SeqId,
}

/// What happened to one entry of a batched [`Engine::step`].
#[derive(Clone, Debug, PartialEq)]
pub enum StepStatus {
    /// Its tokens ran; `output` is its last token's result when it asked for one.
    Ran { output: Option<RowOutput> },
    /// The arena had no room now; nothing ran for it (retry after others finish).
    Deferred,
    /// It cannot go on (it can never fit, or its bookkeeping is wrong).
    Failed(String),
}

/// What a step entry's last token left, as its [`StepOutput`] asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOutput {
    /// Row `n` of the step's logits.
    Logits(usize),
    /// The most likely next token (the first of ties; NaN never wins).
    Token(u32),
    /// `candidates[start..start + len]` of the step: the largest logits, largest first
    /// (`strata_model::sampling::top_k`).
    Candidates { start: usize, len: usize },
}

/// The result of a batched step.
#[derive(Clone, Debug)]
pub struct StepOutcome {
    /// One row of `vocab_size` logits per entry that ran and wanted them.
    pub logits: Vec<f32>,
    /// The top candidates of the entries that wanted them ([`RowOutput::Candidates`]).
    pub candidates: Vec<Candidate>,
    /// One per entry, in order.
    pub status: Vec<StepStatus>,
}

impl Engine {
    /// The engine on the CPU alone (`opts`' devices are ignored).
    ///
    /// # Errors
    /// As [`Engine::new`].
    pub fn new_cpu(model: Arc<LoadedModel>, opts: EngineOptions) -> Result<Engine, EngineError> {
        Engine::new(model, EngineOptions { prefill_device: DeviceKind::Cpu, decode_device: DeviceKind::Cpu, ..opts })
    }

    /// Lays out the KV arena, allocates it where the devices share it (host memory when the CPU
    /// is one of them, imported in place by Vulkan; the GPU's memory when Vulkan runs both
    /// phases), starts its broker and compiles the graph for each device.
    ///
    /// # Errors
    /// An arena that cannot be laid out or allocated, a device that is not there, or a graph the
    /// device cannot run.
    pub fn new(model: Arc<LoadedModel>, opts: EngineOptions) -> Result<Engine, EngineError> {
        let hp = &model.hparams;
        let shape = KvShape { n_layers: hp.n_layers as u32, n_kv_heads: hp.n_kv_heads as u32, head_dim: hp.head_dim as u32, dtype: strata_kv::KvDtype::F16 };
        let mut params = LayoutParams::new(shape, opts.n_cells as u64);
        params.block_size = opts.block_size as u32;
        let layout = KvLayout::compute(&params)?;
        let (prefill, decode) = (opts.prefill_device, opts.decode_device);
        let vk_context = |i: u32| {
            let defaults = ContextOptions::default();
            VulkanContext::with_options(i, ContextOptions { exact: defaults.exact || opts.vulkan_exact, ..defaults })
        };
        let vk_opts = || VulkanOptions { max_batch_tokens: opts.ubatch, max_outputs: opts.max_outputs, block_size: opts.block_size, max_context: opts.max_context, max_seqs: opts.max_seqs.max(1) };
        // Whether a GPU (not a CPU, nor a Vulkan driver running on the CPU) decodes.
        let mut gpu_decode = false;
        // The KV arena in host memory, where it is: the KV broker copies cells there.
        let mut host_kv: Option<Arc<HostKvMemory>> = None;
        let (plan, decode_plan): (Box<dyn ForwardPlan>, Option<Box<dyn ForwardPlan>>) = match (prefill, decode) {
            (DeviceKind::Cpu, DeviceKind::Cpu) => {
                let host = Arc::new(HostKvMemory::allocate_for(&layout)?);
                host_kv = Some(host.clone());
                (Box::new(Self::cpu_plan(&model, &opts, host)?), None)
            }
            (DeviceKind::Cpu, DeviceKind::Vulkan(i)) => {
                let host = Arc::new(HostKvMemory::allocate_for(&layout)?);
                host_kv = Some(host.clone());
                let cpu = Self::cpu_plan(&model, &opts, host.clone())?;
                let ctx = vk_context(i)?;
                gpu_decode = !ctx.info().is_cpu();
                let vk = VulkanPlan::compile(&ctx, model.graph.clone(), &model.file, KvSource::ImportHost(host), vk_opts())?;
                (Box::new(cpu), Some(Box::new(vk)))
            }
            (DeviceKind::Vulkan(a), DeviceKind::Vulkan(b)) if a == b => {
                let ctx = vk_context(a)?;
                gpu_decode = !ctx.info().is_cpu();
                let kv = if opts.kv_in_host_memory {
                    let host = Arc::new(HostKvMemory::allocate_for(&layout)?);
                    host_kv = Some(host.clone());
                    KvSource::ImportHost(host)
                } else {
                    KvSource::Allocate(layout.clone())
                };
                (Box::new(VulkanPlan::compile(&ctx, model.graph.clone(), &model.file, kv, vk_opts())?), None)
            }
            (p, d) => return Err(DeviceError::Unsupported { device: format!("{p}+{d}"), what: format!("prefill on {p} with decode on {d} (supported: cpu+cpu, cpu+vulkan:N, vulkan:N+vulkan:N)") }.into()),
        };
        // A GPU decodes a token every few ms, with two broker calls each: both ends poll then.
        let poll = match std::env::var("STRATA_KV_POLL_US").ok().and_then(|v| v.parse::<u64>().ok()) {
            Some(us) => std::time::Duration::from_micros(us),
            None if gpu_decode => std::time::Duration::from_millis(5),
            None => std::time::Duration::ZERO,
        };
        let block_cells = layout.params.block_size as u64;
        let copier = host_kv.map(|mem| -> CellCopier {
            Box::new(move |c: CellCopy| {
                let (from, to) = (u64::from(c.from.0) * block_cells, u64::from(c.to.0) * block_cells);
                // SAFETY: the broker copies from a cached block (read-only) into a block it has
                // just given to a sequence that has not run yet, between steps: no device reads
                // or writes either range meanwhile.
                unsafe { mem.copy_cells(from, to, c.cells as u64) }.map_err(|e| e.to_string())
            })
        });
        let kv_broker = KvBroker::start_with(KvArena::from_layout(&layout), poll, copier).map_err(|e| DeviceError::Unsupported { device: "kv".into(), what: format!("starting the KV broker: {e}") })?;
        Ok(Engine { model, plan, decode_plan, kv: kv_broker, layout, opts, next_seq: 1 })
    }

    fn cpu_plan(model: &LoadedModel, opts: &EngineOptions, kv: Arc<HostKvMemory>) -> Result<CpuPlan, EngineError> {
        let kernels = match opts.simd {
            Some(level) => strata_quant::Kernels::with_level(level).ok_or_else(|| DeviceError::NotAvailable(format!("cpu SIMD level {level:?}")))?,
            None => strata_quant::Kernels::best(),
        };
        // Vulkan's exact mode reproduces ggml's order (so a step prefilled on the CPU and
        // decoded on Vulkan, or compared with it, sums alike).
        let exact = opts.vulkan_exact || ContextOptions::default().exact;
        let order = if exact { strata_quant::ProductOrder::Ggml } else { opts.cpu_products };
        let kernels = Some(kernels.with_order(order));
        Ok(CpuPlan::compile(
            model.graph.clone(),
            model.file.clone(),
            kv,
            CpuOptions { threads: opts.threads, max_batch_tokens: opts.ubatch, max_outputs: opts.max_outputs, block_size: opts.block_size, kernels, nudge_norms: opts.cpu_nudge_norms },
        )?)
    }

    /// Whether work runs on the prefill device: everything when there is one device; with two,
    /// prompt tokens when the prompt work holds at least `prefill_min_tokens` tokens, never
    /// generated tokens.
    fn on_prefill_device(&self, decode: bool, prompt_tokens: usize) -> bool {
        self.decode_plan.is_none() || (!decode && prompt_tokens >= self.opts.prefill_min_tokens)
    }

    /// The plan for generated tokens (`decode`) or for `prompt_tokens` prompt tokens.
    fn plan_for(&mut self, decode: bool, prompt_tokens: usize) -> &mut dyn ForwardPlan {
        let prefill = self.on_prefill_device(decode, prompt_tokens);
        match &mut self.decode_plan {
            Some(d) if !prefill => d.as_mut(),
            _ => self.plan.as_mut(),
        }
    }

    /// The model.
    pub fn model(&self) -> &Arc<LoadedModel> {
        &self.model
    }

    /// The KV layout.
    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    /// The KV broker that owns the arena's bookkeeping.
    pub fn kv(&self) -> &KvBrokerHandle {
        &self.kv
    }

    /// The options.
    pub fn options(&self) -> &EngineOptions {
        &self.opts
    }

    /// The devices: the prefill device's name, then the decode device's when it is another.
    pub fn device_name(&self) -> String {
        match &self.decode_plan {
            Some(d) => format!("{}+{}", self.plan.device_name(), d.device_name()),
            None => self.plan.device_name(),
        }
    }

    /// The prefill device's name.
    pub fn prefill_device_name(&self) -> String {
        self.plan.device_name()
    }

    /// The decode device's name.
    pub fn decode_device_name(&self) -> String {
        self.decode_plan.as_ref().map_or_else(|| self.plan.device_name(), |d| d.device_name())
    }

    fn check_prompt(&self, prompt: &[u32]) -> Result<(), EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let vocab = self.model.hparams.vocab_size;
        if let Some(&id) = prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::TokenOutOfVocab { id, vocab });
        }
        if prompt.len() > self.opts.max_context {
            return Err(EngineError::PromptTooLong { prompt: prompt.len(), context: self.opts.max_context });
        }
        Ok(())
    }

    fn new_seq(&mut self) -> SeqId {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// One greedy decode step of `seq` after `token`: its most likely next token, from the
    /// device's argmax (a GPU reads back only the token). Adds each phase's time to `phases`.
    fn decode_greedy(&mut self, seq: SeqId, token: u32, phases: &mut DecodePhases) -> Result<u32, EngineError> {
        let vocab = self.model.hparams.vocab_size;
        let t0 = Instant::now();
        let r = self.kv.reserve_batch(vec![(seq, 1)])?.pop().ok_or(BrokerError::Gone)??;
        let positions = [r.start_pos as u32];
        let tables = [r.table.as_slice()];
        let batch = StepBatch { tokens: &[token], positions: &positions, seq_of_token: &[0], block_tables: &tables, output_rows: &[0] };
        let t1 = Instant::now();
        let plan = self.plan_for(true, 1);
        let next = match bench_top_k() {
            // The same token through the top-k path (its cost, for benchmarks).
            Some(k) => plan.forward_top_k(&batch, vocab, k)?.first().map(|c| c.first().map_or(0, |c| c.token)),
            None => plan.forward_argmax(&batch, vocab)?.first().copied(),
        };
        let t2 = Instant::now();
        let next = next.ok_or_else(|| EngineError::Device(DeviceError::BadBatch("a greedy step returned no token".into())))?;
        self.kv.commit_batch(vec![(seq, vec![token])])?;
        phases.add([t1 - t0, t2 - t1, t2.elapsed()]);
        Ok(next)
    }

    /// `n_steps` greedy decode steps of `seq` after `token` (never stopping early): the picked
    /// tokens. Reserves the run's KV cells at once and leaves the steps to the device's
    /// [`ForwardPlan::decode_greedy`] (a GPU keeps two in flight), then commits them. Adds each
    /// phase's time to `phases` (the device's part as the step's).
    fn decode_greedy_run(&mut self, seq: SeqId, token: u32, n_steps: usize, phases: &mut DecodePhases) -> Result<Vec<u32>, EngineError> {
        if n_steps == 0 {
            return Ok(Vec::new());
        }
        if bench_top_k().is_some() {
            // The top-k path's cost, one step at a time.
            let mut picked = Vec::with_capacity(n_steps);
            let mut tok = token;
            for _ in 0..n_steps {
                tok = self.decode_greedy(seq, tok, phases)?;
                picked.push(tok);
            }
            return Ok(picked);
        }
        let picked = self.reserved_greedy_run(seq, token, n_steps, &mut |_| true, phases)??;
        if picked.len() != n_steps {
            return Err(EngineError::Device(DeviceError::BadBatch(format!("a greedy run of {n_steps} steps returned {} tokens", picked.len()))));
        }
        Ok(picked)
    }

    /// Up to `max_steps` greedy decode steps of `seq` after `token` in one run of the decode
    /// device's [`ForwardPlan::decode_greedy`] (a GPU keeps two in flight), `keep_going` seeing
    /// each picked token: the run's KV cells reserved at once, those of the tokens fed (`token`,
    /// then each picked one but the last) committed after. Returns the picked tokens, or the
    /// arena's refusal of the reservation (nothing ran). Adds each phase's time to `phases`
    /// (the device's part as the step's).
    fn reserved_greedy_run(&mut self, seq: SeqId, token: u32, max_steps: usize, keep_going: &mut dyn FnMut(u32) -> bool, phases: &mut DecodePhases) -> Result<Result<Vec<u32>, KvError>, EngineError> {
        let vocab = self.model.hparams.vocab_size;
        let t0 = Instant::now();
        let r = match self.kv.reserve_batch(vec![(seq, max_steps)])?.pop().ok_or(BrokerError::Gone)? {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let start = u32::try_from(r.start_pos).map_err(|_| EngineError::Device(DeviceError::BadBatch(format!("position {} is beyond 2^32", r.start_pos))))?;
        let t1 = Instant::now();
        let picked = self.plan_for(true, 1).decode_greedy(token, start, &r.table, max_steps, vocab, keep_going)?;
        let t2 = Instant::now();
        if let Some((_, fed_after_first)) = picked.split_last() {
            let inputs: Vec<u32> = std::iter::once(token).chain(fed_after_first.iter().copied()).collect();
            self.kv.commit_batch(vec![(seq, inputs)])?;
        }
        phases.add([t1 - t0, t2 - t1, t2.elapsed()]);
        Ok(Ok(picked))
    }

    /// Greedy decode steps of the running sequence `seq` (handed to decode) after `token`, as one
    /// run of up to `max_steps` through the decode device's [`ForwardPlan::decode_greedy`]: a
    /// GPU submits each step before the host has read the token of the step before. `keep_going`
    /// sees each picked token in order; returning false ends the run, and a step already in
    /// flight then finishes with its token dropped. The run's cells are reserved at once; those
    /// of the tokens fed (`token`, then each picked one but the last) are committed.
    ///
    /// Returns the picked tokens (each one `keep_going` saw), or `None` when the KV arena cannot
    /// hold `max_steps` more tokens of `seq` now (nothing ran: take steps one at a time).
    ///
    /// # Errors
    /// A device error (the run's cells are then unspecified: end the sequence) or a stopped
    /// broker.
    pub fn decode_greedy_run_with(&mut self, seq: SeqId, token: u32, max_steps: usize, keep_going: &mut dyn FnMut(u32) -> bool) -> Result<Option<Vec<u32>>, EngineError> {
        if max_steps == 0 {
            return Ok(Some(Vec::new()));
        }
        Ok(self.reserved_greedy_run(seq, token, max_steps, keep_going, &mut DecodePhases::default())?.ok())
    }

    /// Runs one sequence's `tokens` in ubatch-sized steps; returns the last token's logits, or
    /// every token's when `all_logits`.
    /// `decode`: the tokens are generated ones (they run on the decode device); prompt tokens run
    /// on the prefill device from `prefill_min_tokens` on.
    fn run_tokens(&mut self, seq: SeqId, tokens: &[u32], all_logits: bool, decode: bool) -> Result<Vec<f32>, EngineError> {
        let vocab = self.model.hparams.vocab_size;
        let step = if all_logits { self.opts.ubatch.min(self.opts.max_outputs) } else { self.opts.ubatch };
        let mut logits = Vec::new();
        let n_total = tokens.len();
        for chunk in tokens.chunks(step) {
            let r = self.kv.reserve_batch(vec![(seq, chunk.len())])?.pop().ok_or(BrokerError::Gone)??;
            let positions: Vec<u32> = (r.start_pos..r.start_pos + chunk.len()).map(|p| p as u32).collect();
            let seq_of_token = vec![0u32; chunk.len()];
            let output_rows: Vec<u32> = if all_logits { (0..chunk.len() as u32).collect() } else { vec![chunk.len() as u32 - 1] };
            let tables = [r.table.as_slice()];
            let batch = StepBatch { tokens: chunk, positions: &positions, seq_of_token: &seq_of_token, block_tables: &tables, output_rows: &output_rows };
            let out = self.plan_for(decode, n_total).forward(&batch)?;
            if all_logits {
                logits.extend_from_slice(out);
            } else {
                logits.clear();
                logits.extend_from_slice(&out[..vocab]);
            }
            self.kv.commit_batch(vec![(seq, chunk.to_vec())])?;
        }
        Ok(logits)
    }

    /// Logits at every position of `tokens`, teacher-forced (row `i` predicts token `i + 1`).
    /// Uses no prefix cache, and leaves nothing cached.
    ///
    /// # Errors
    /// As [`Engine::generate`].
    pub fn teacher_forced_logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        self.teacher_forced_logits_decoding(tokens, &[])
    }

    /// Teacher-forced logits the way generation computes them: `prompt` in prefill steps (all
    /// logits), then each of `continuation` in a decode step of its own. Row `i` predicts token
    /// `i + 1` of `prompt ++ continuation`; the last continuation token is not fed. Uses no
    /// prefix cache, and leaves nothing cached.
    ///
    /// # Errors
    /// As [`Engine::generate`].
    pub fn teacher_forced_logits_decoding(&mut self, prompt: &[u32], continuation: &[u32]) -> Result<Vec<f32>, EngineError> {
        let mut all = prompt.to_vec();
        all.extend_from_slice(continuation);
        self.check_prompt(&all)?;
        let seq = self.new_seq();
        self.kv.start(seq, &[], Owner::Prefill)?;
        let result = (|| {
            let mut logits = self.run_tokens(seq, prompt, true, false)?;
            for tok in continuation.iter().take(continuation.len().saturating_sub(1)) {
                logits.extend(self.run_tokens(seq, std::slice::from_ref(tok), true, true)?);
            }
            Ok(logits)
        })();
        self.kv.end(seq, false)?;
        result
    }

    /// Generates up to `max_tokens` tokens after `prompt`, calling `on_token` with each; stops at
    /// an end-of-generation token, at `max_tokens`, at the context limit, or when `on_token`
    /// says so. A finished sequence's full KV blocks stay cached for later prompts that share
    /// its prefix.
    ///
    /// # Errors
    /// A bad prompt (empty, too long, ids outside the vocabulary), bad sampling parameters, a full
    /// arena or a device error. The sequence's KV blocks are given back either way.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &SamplingParams,
        mut on_token: impl FnMut(u32) -> Flow,
    ) -> Result<GenerationOutcome, EngineError> {
        self.check_prompt(prompt)?;
        sampling.validate().map_err(EngineError::Sampling)?;
        let seq = self.new_seq();
        let start = self.kv.start(seq, prompt, Owner::Prefill)?;
        let result = self.generate_seq(seq, prompt, start.reused_tokens, max_tokens, sampling, &mut on_token);
        let cache = matches!(&result, Ok(o) if o.stop != StopReason::Cancelled);
        self.end_sequence(seq, cache, prompt.len())?;
        result
    }

    fn generate_seq(
        &mut self,
        seq: SeqId,
        prompt: &[u32],
        reused: usize,
        max_tokens: usize,
        sampling: &SamplingParams,
        on_token: &mut dyn FnMut(u32) -> Flow,
    ) -> Result<GenerationOutcome, EngineError> {
        let t0 = Instant::now();
        let mut logits = self.run_tokens(seq, &prompt[reused..], false, false)?;
        let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
        self.kv.hand_off(seq, Owner::Prefill, Owner::Decode)?;
        let t1 = Instant::now();
        let mut sampler = Sampler::new(sampling.clone());
        let mut history = prompt.to_vec();
        let mut tokens = Vec::new();
        let budget = max_tokens.min(self.opts.max_context.saturating_sub(prompt.len()));
        let mut stop = StopReason::Length;
        while tokens.len() < budget {
            let tok = sampler.sample(&logits, &history);
            tokens.push(tok);
            history.push(tok);
            if self.model.tokenizer.is_end_of_generation(tok) {
                stop = StopReason::Stop;
                break;
            }
            match on_token(tok) {
                Flow::Continue => {}
                Flow::Stop => {
                    stop = StopReason::Stop;
                    break;
                }
                Flow::Cancel => {
                    stop = StopReason::Cancelled;
                    break;
                }
            }
            if tokens.len() == budget {
                break;
            }
            logits = self.run_tokens(seq, &[tok], false, true)?;
        }
        Ok(GenerationOutcome {
            tokens,
            stop,
            prompt_tokens: prompt.len(),
            reused_tokens: reused,
            prefill_ms,
            decode_ms: t1.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// Times one prompt of `prompt` tokens (computed from an empty cache) and then `n_gen`
    /// single-token decode steps fed with the greedy choice, never stopping early: the
    /// llama-bench protocol. Returns (prefill ms, decode ms); nothing is cached afterwards.
    ///
    /// # Errors
    /// As [`Engine::generate`].
    pub fn bench(&mut self, prompt: &[u32], n_gen: usize) -> Result<(f64, f64), EngineError> {
        self.check_prompt(prompt)?;
        let seq = self.new_seq();
        self.kv.start(seq, &[], Owner::Prefill)?;
        let result = (|| {
            let t0 = Instant::now();
            let logits = if prompt.len() > 1 || n_gen == 0 { self.run_tokens(seq, prompt, false, false)? } else { Vec::new() };
            let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
            let t1 = Instant::now();
            let tok = if logits.is_empty() { prompt[0] } else { strata_model::sampling::argmax(&logits) };
            let mut phases = DecodePhases::default();
            self.decode_greedy_run(seq, tok, n_gen, &mut phases)?;
            let decode_ms = t1.elapsed().as_secs_f64() * 1e3;
            if n_gen > 0 && std::env::var_os("STRATA_VULKAN_PROFILE").is_some() {
                phases.report(n_gen);
            }
            Ok((prefill_ms, decode_ms))
        })();
        self.kv.end(seq, false)?;
        result
    }

    /// Greedy generation of `n_gen` tokens after `prompt` (prefilled in steps of the ubatch, then
    /// one decode step a token, each token the device's argmax), without the prefix cache.
    ///
    /// # Errors
    /// As [`Engine::generate`].
    pub fn generate_greedy(&mut self, prompt: &[u32], n_gen: usize) -> Result<Vec<u32>, EngineError> {
        self.check_prompt(prompt)?;
        let seq = self.new_seq();
        self.kv.start(seq, &[], Owner::Prefill)?;
        let result = (|| {
            let logits = self.run_tokens(seq, prompt, false, false)?;
            let tok = strata_model::sampling::argmax(&logits);
            if n_gen == 0 {
                return Ok(Vec::new());
            }
            let mut phases = DecodePhases::default();
            let mut out = Vec::with_capacity(n_gen);
            out.push(tok);
            out.extend(self.decode_greedy_run(seq, tok, n_gen - 1, &mut phases)?);
            Ok(out)
        })();
        self.kv.end(seq, false)?;
        result
    }

    /// Batched decode for benchmarks: `prompts.len()` sequences are prefilled one by one, then
    /// decoded together, `n_gen` steps of one token each (greedy). Returns the decode time in ms.
    ///
    /// # Errors
    /// As [`Engine::step`]; a sequence the arena cannot hold fails the run.
    pub fn bench_batched(&mut self, prompts: &[Vec<u32>], n_gen: usize) -> Result<f64, EngineError> {
        let seqs: Vec<SeqId> = prompts.iter().map(|_| self.new_seq()).collect();
        for (&seq, p) in seqs.iter().zip(prompts) {
            self.check_prompt(p)?;
            self.kv.start(seq, &[], Owner::Prefill)?;
        }
        let result = (|| {
            let mut next = Vec::with_capacity(seqs.len());
            for (&seq, p) in seqs.iter().zip(prompts) {
                let logits = self.run_tokens(seq, p, false, false)?;
                next.push([strata_model::sampling::argmax(&logits)]);
            }
            let t0 = Instant::now();
            for _ in 0..n_gen {
                // Greedy, as the scheduler runs greedy requests: the device's argmax.
                let work: Vec<SeqStep<'_>> = seqs.iter().zip(&next).map(|(&seq, t)| SeqStep { seq, tokens: t, output: StepOutput::Token, decode: true }).collect();
                let out = self.step(&work)?;
                if let Some(StepStatus::Deferred | StepStatus::Failed(_)) = out.status.iter().find(|s| !matches!(s, StepStatus::Ran { .. })) {
                    return Err(EngineError::Device(DeviceError::BadBatch("the KV arena cannot hold every benchmark sequence".into())));
                }
                for (t, st) in next.iter_mut().zip(&out.status) {
                    if let StepStatus::Ran { output: Some(RowOutput::Token(tok)) } = st {
                        t[0] = *tok;
                    }
                }
            }
            Ok(t0.elapsed().as_secs_f64() * 1e3)
        })();
        for &seq in &seqs {
            self.kv.end(seq, false)?;
        }
        result
    }

    /// Starts sequence `seq` for `prompt`, sharing the longest cached prefix; returns the number
    /// of prompt tokens reused.
    ///
    /// # Errors
    /// A bad prompt, or a sequence id already in use.
    pub fn start_sequence(&mut self, seq: SeqId, prompt: &[u32]) -> Result<usize, EngineError> {
        self.check_prompt(prompt)?;
        Ok(self.kv.start(seq, prompt, Owner::Prefill)?.reused_tokens)
    }

    /// Moves `seq` from prefill to decode ownership.
    ///
    /// # Errors
    /// An unknown sequence or one not in prefill.
    pub fn hand_off_to_decode(&mut self, seq: SeqId) -> Result<(), EngineError> {
        Ok(self.kv.hand_off(seq, Owner::Prefill, Owner::Decode)?)
    }

    /// Ends `seq`, whose prompt had `prompt_tokens` tokens: its full blocks join the prefix cache
    /// (`cache`) or everything is given back. With two devices only the prompt's blocks are cached:
    /// the generated tokens' cells were written by the decode device, whose rounding differs from
    /// the prefill device's, and a later prompt reusing them would not continue exactly as a fresh
    /// prefill does.
    ///
    /// # Errors
    /// An unknown sequence.
    pub fn end_sequence(&mut self, seq: SeqId, cache: bool, prompt_tokens: usize) -> Result<(), EngineError> {
        let keep = match (cache, self.decode_plan.is_some()) {
            (false, _) => 0,
            (true, false) => usize::MAX,
            (true, true) => prompt_tokens.max(1),
        };
        Ok(self.kv.end_caching_first(seq, keep)?)
    }

    /// Runs one step over several sequences at once: each entry's tokens follow that sequence's
    /// committed ones. One message to the KV broker reserves room for all of them (entries it
    /// cannot fit now are deferred, not run), one more commits what ran.
    ///
    /// # Errors
    /// A device error or a stopped broker; no entry's tokens are then committed.
    pub fn step(&mut self, work: &[SeqStep<'_>]) -> Result<StepOutcome, EngineError> {
        let reservations = self.kv.reserve_batch(work.iter().map(|w| (w.seq, w.tokens.len())).collect())?;
        // With two devices, decode entries run on the decode device; prompt entries run on the
        // prefill device when the step holds at least `prefill_min_tokens` prompt tokens, else on
        // the decode device. The two parts share the KV arena (different sequences' cells).
        let prompt_tokens: usize = work.iter().filter(|w| !w.decode).map(|w| w.tokens.len()).sum();
        let on_prefill_device = |w: &SeqStep<'_>| self.on_prefill_device(w.decode, prompt_tokens);
        let mut status = Vec::with_capacity(work.len());
        let mut parts = [StepPart::default(), StepPart::default()];
        let mut commits = Vec::new();
        for (i, (w, r)) in work.iter().zip(reservations).enumerate() {
            match r {
                Ok(r) if !w.tokens.is_empty() => {
                    let part = &mut parts[usize::from(!on_prefill_device(w))];
                    let idx = part.tables.len() as u32;
                    part.tables.push(r.table);
                    part.tokens.extend_from_slice(w.tokens);
                    part.positions.extend((r.start_pos..r.start_pos + w.tokens.len()).map(|p| p as u32));
                    part.seq_of_token.extend(std::iter::repeat_n(idx, w.tokens.len()));
                    if w.output != StepOutput::Nothing {
                        part.output_rows.push(part.tokens.len() as u32 - 1);
                        part.entries.push((i, w.output));
                    }
                    status.push(StepStatus::Ran { output: None });
                    commits.push((w.seq, w.tokens.to_vec()));
                }
                Ok(_) => status.push(StepStatus::Ran { output: None }),
                Err(KvError::Full { .. }) => status.push(StepStatus::Deferred),
                Err(e) => status.push(StepStatus::Failed(e.to_string())),
            }
        }
        let vocab = self.model.hparams.vocab_size;
        // Each row wanting logits is copied once, straight from the device's output. A device part
        // none of whose rows wants logits computes what they want there (a GPU then reads back a
        // token or k candidates a row: the H200 host took ~125-150 us to read one 152k row).
        let logit_rows: usize = parts.iter().flat_map(|p| &p.entries).filter(|(_, o)| *o == StepOutput::Logits).count();
        let mut logits: Vec<f32> = Vec::with_capacity(logit_rows * vocab);
        let mut candidates: Vec<Candidate> = Vec::new();
        for (which, part) in parts.iter_mut().enumerate() {
            if part.tokens.is_empty() {
                continue;
            }
            let table_refs: Vec<&[u32]> = part.tables.iter().map(Vec::as_slice).collect();
            // The plan returns at least one row; with none wanted, ask for the last and drop it.
            let wanted = !part.output_rows.is_empty();
            if !wanted {
                part.output_rows.push(part.tokens.len() as u32 - 1);
            }
            let any_logits = part.entries.iter().any(|(_, o)| *o == StepOutput::Logits);
            let top_k = part.entries.iter().filter_map(|(_, o)| if let StepOutput::TopK(k) = o { Some(*k) } else { None }).max();
            let batch = StepBatch { tokens: &part.tokens, positions: &part.positions, seq_of_token: &part.seq_of_token, block_tables: &table_refs, output_rows: &part.output_rows };
            let plan: &mut dyn ForwardPlan = match (&mut self.decode_plan, which) {
                (Some(d), 1) => d.as_mut(),
                _ => self.plan.as_mut(),
            };
            let n_entries = part.entries.len();
            let bad_count = |got: usize| EngineError::Device(DeviceError::BadBatch(format!("{got} results for {n_entries} output rows")));
            if wanted && !any_logits {
                // Tokens, and candidates: a row wanting a token takes its first candidate (the
                // argmax: the largest logit, the first of equal ones).
                let rows: Vec<(Option<u32>, Vec<Candidate>)> = match top_k {
                    None => plan.forward_argmax(&batch, vocab)?.into_iter().map(|t| (Some(t), Vec::new())).collect(),
                    Some(k) => plan.forward_top_k(&batch, vocab, k.max(1))?.into_iter().map(|c| (None, c)).collect(),
                };
                if rows.len() != n_entries {
                    return Err(bad_count(rows.len()));
                }
                for (&(entry, want), (token, cands)) in part.entries.iter().zip(rows) {
                    let output = match want {
                        StepOutput::TopK(k) => push_candidates(&mut candidates, &cands[..k.min(cands.len())]),
                        _ => RowOutput::Token(token.unwrap_or_else(|| cands.first().map_or(0, |c| c.token))),
                    };
                    status[entry] = StepStatus::Ran { output: Some(output) };
                }
                continue;
            }
            let out = plan.forward(&batch)?;
            if !wanted {
                continue;
            }
            let rows = out.get(..n_entries * vocab).ok_or_else(|| bad_count(out.len() / vocab.max(1)))?;
            if part.entries.iter().all(|(_, o)| *o == StepOutput::Logits) {
                let first_row = logits.len() / vocab;
                copy_rows(&mut logits, rows, vocab, self.opts.parallel_logits_min);
                for (k, &(entry, _)) in part.entries.iter().enumerate() {
                    status[entry] = StepStatus::Ran { output: Some(RowOutput::Logits(first_row + k)) };
                }
                continue;
            }
            for (&(entry, want), row) in part.entries.iter().zip(rows.chunks_exact(vocab.max(1))) {
                let output = match want {
                    StepOutput::Token => RowOutput::Token(strata_model::sampling::argmax(row)),
                    StepOutput::TopK(k) => push_candidates(&mut candidates, &strata_model::sampling::top_k(row, k)),
                    _ => {
                        logits.extend_from_slice(row);
                        RowOutput::Logits(logits.len() / vocab - 1)
                    }
                };
                status[entry] = StepStatus::Ran { output: Some(output) };
            }
        }
        self.kv.commit_batch(commits)?;
        Ok(StepOutcome { logits, candidates, status })
    }

    /// Most tokens one step may hold.
    pub fn max_step_tokens(&self) -> usize {
        self.opts.ubatch
    }
}

/// `STRATA_BENCH_TOP_K=K` (1 to 64): greedy decode steps take their token as the first of the
/// device's top-K candidates instead of its argmax (the same token), to measure what a top-k
/// sampler's step costs; a developer knob read once.
fn bench_top_k() -> Option<usize> {
    static K: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *K.get_or_init(|| std::env::var("STRATA_BENCH_TOP_K").ok().and_then(|v| v.parse().ok()).filter(|k| (1..=64).contains(k)))
}

/// Appends `top` to a step's candidates; returns where they are.
fn push_candidates(candidates: &mut Vec<Candidate>, top: &[Candidate]) -> RowOutput {
    let start = candidates.len();
    candidates.extend_from_slice(top);
    RowOutput::Candidates { start, len: top.len() }
}

/// Appends `rows` (whole rows of `vocab` logits) to `dst`, copying on several threads when they
/// are at least `parallel_min` logits.
fn copy_rows(dst: &mut Vec<f32>, rows: &[f32], vocab: usize, parallel_min: usize) {
    use rayon::prelude::*;
    if rows.len() < parallel_min || vocab == 0 {
        dst.extend_from_slice(rows);
        return;
    }
    let start = dst.len();
    dst.reserve(rows.len());
    let spare = &mut dst.spare_capacity_mut()[..rows.len()];
    spare.par_chunks_mut(vocab).zip(rows.par_chunks(vocab)).for_each(|(d, s)| {
        for (d, &s) in d.iter_mut().zip(s) {
            d.write(s);
        }
    });
    // SAFETY: the `rows.len()` elements after `start` were all written just above (the chunks
    // cover the spare slice exactly, as `rows` has that many elements), within the capacity
    // reserved for them.
    unsafe { dst.set_len(start + rows.len()) };
}

/// The tokens of one device's share of a step.
#[derive(Default)]
struct StepPart {
    tokens: Vec<u32>,
    positions: Vec<u32>,
    seq_of_token: Vec<u32>,
    tables: Vec<Vec<u32>>,
    output_rows: Vec<u32>,
    /// The entry of each output row, and what it wants.
    entries: Vec<(usize, StepOutput)>,
}

/// What a step entry wants of its last token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutput {
    /// Nothing (a prompt chunk before the last).
    Nothing,
    /// Its logits, for a sampler.
    Logits,
    /// Only its most likely next token (greedy, no penalties, no logprobs).
    Token,
    /// Only its `k` largest logits with their tokens (a sampler whose first cut is a top-k).
    TopK(usize),
}

/// One sequence's share of a batched [`Engine::step`].
#[derive(Clone, Copy, Debug)]
pub struct SeqStep<'a> {
    pub seq: SeqId,
    pub tokens: &'a [u32],
    /// What its last token should leave.
    pub output: StepOutput,
    /// A generated token (decode), not prompt tokens: it runs on the decode device.
    pub decode: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_rows_appends_every_row_in_order_on_one_thread_or_many() {
        let min = EngineOptions::default().parallel_logits_min;
        for (rows, vocab) in [(3usize, 7usize), (min / 1000 + 3, 1000), (9, min / 8 + 5)] {
            let src: Vec<f32> = (0..rows * vocab).map(|i| i as f32 * 0.5 - 3.0).collect();
            let mut dst = vec![-1.0f32, -2.0];
            copy_rows(&mut dst, &src, vocab, min);
            assert_eq!(dst.len(), 2 + src.len(), "{rows} rows of {vocab}");
            assert_eq!(&dst[..2], &[-1.0, -2.0]);
            assert!(dst[2..].iter().zip(&src).all(|(a, b)| a.to_bits() == b.to_bits()), "{rows} rows of {vocab}");
        }
    }
}
