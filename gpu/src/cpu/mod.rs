//! The CPU device: the reference every other device is checked against, and a fast one.
//!
//! It compiles the forward graph into a [`CpuPlan`]: activation buffers sized for the largest
//! step, the small weights (norms, biases) dequantized once, and the large ones read in place from
//! the mapped file. Each parallel op is one broadcast over a fixed thread pool with a static
//! partition of the work, so a decode step costs a few hundred wake-ups, not thousands of tasks.

pub(crate) mod ops;
mod pool;
use pool::WorkQueue;

pub use pool::SpinPool;

use std::ops::Range;
use std::sync::Arc;

use parking_lot::Mutex;
use strata_io::gguf::GgufFile;
use strata_model::graph::{BufId, ForwardGraph, Op, Projection, Rows};
use strata_model::weights::WeightRef;
use strata_quant::{AttnOrder, GgmlType, Kernels};

use crate::kv_memory::HostKvMemory;
use crate::{DeviceError, ForwardPlan, StepBatch};

/// Options of a CPU plan.
#[derive(Clone, Debug)]
pub struct CpuOptions {
    /// Compute threads; 0 means every core.
    pub threads: usize,
    /// Most tokens one step may hold (the `ubatch`).
    pub max_batch_tokens: usize,
    /// Most rows of logits one step may return.
    pub max_outputs: usize,
    /// Cells per KV block.
    pub block_size: usize,
    /// The kernel set; `None` picks the best this CPU has.
    pub kernels: Option<Kernels>,
    /// Moves every RMSNorm output one representable value away from zero: a measurement, not a
    /// mode to serve with. The CPU against itself so perturbed gives the KL and top-1 agreement
    /// that any arithmetic not bit-identical to this device's meets on a model (8-bit activations
    /// turn a last-bit difference into a different rounding a few layers on), the floor under a
    /// device comparison's bars (`strata-rt compare-devices --nudge-norms`).
    pub nudge_norms: bool,
}

/// The CPU device's description for `strata-rt devices`.
pub fn describe() -> String {
    let k = Kernels::best();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let tiles = if k.wide_tiles() { ", batched products in 512-bit tiles" } else { "" };
    format!("cpu: {cores} threads available, SIMD level {:?}{tiles}", k.level())
}

/// A raw pointer that may cross into the pool's threads. Every use writes a region no other
/// thread touches in the same op; each use site says why.
#[derive(Copy, Clone)]
struct SharedMut<T>(*mut T);

impl<T> SharedMut<T> {
    /// The pointer. A method, so closures capture the whole (Sync) wrapper, not the raw field.
    fn ptr(self) -> *mut T {
        self.0
    }
}
// SAFETY: see the type's documentation: disjoint writes only, each region owned by the one thread
// that holds its range, block or claimed item.
unsafe impl<T> Send for SharedMut<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SharedMut<T> {}

/// Writes row `t` of a product's input (the op before the product, run in the product's
/// quantization pass by the thread that then quantizes the row).
type RowProducer<'a> = dyn Fn(usize, &mut [f32]) + Sync + 'a;

/// Per-thread scratch space.
#[derive(Default)]
struct Scratch {
    attn: ops::AttnScratch,
}

/// Where a weight's bytes are, plus its dequantized values when it is a small vector.
struct WeightSlot {
    w: WeightRef,
    range: Range<usize>,
    /// Bytes of one row.
    row_bytes: usize,
    /// Norm weights and biases, dequantized once.
    small: Option<Arc<[f32]>>,
    /// The weights as the products read them, where the kernels repack them
    /// (`Kernels::repack_weights`); lookups (the embedding) read the file's bytes.
    repacked: Option<Vec<u8>>,
}

/// The forward graph compiled for the CPU.
pub struct CpuPlan {
    graph: ForwardGraph,
    file: Arc<GgufFile>,
    kv: Arc<HostKvMemory>,
    kernels: Kernels,
    pool: SpinPool,
    threads: usize,
    weights: Vec<WeightSlot>,
    bufs: Vec<Vec<f32>>,
    /// Quantized activations, one buffer per activation type.
    acts: Vec<(GgmlType, Vec<u8>)>,
    /// Activation packs of earlier products, reused by later ones of the same shape.
    spare_packs: Vec<strata_quant::PackedActivations>,
    scratch: Vec<Mutex<Scratch>>,
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
    opts: CpuOptions,
}

/// Rows per unit of matmul work: small enough to balance threads, large enough for the kernels'
/// tiles.
const MATMUL_BLOCK_ROWS: usize = 64;
/// Steps of at most this many tokens compute a claimed run of row blocks in one kernel call
/// (the kernels stream a call's rows once per 64 tokens).
const MERGE_MAX_TOKENS: usize = 64;
/// Rows per thread at least before a per-row op (RMSNorm, RoPE, the K/V store, activation
/// quantization) is shared out: the workers spin between jobs, so handing out a few rows costs
/// well under a microsecond, while leaving them on the calling thread idles every other core
/// (about a seventh of a batched decode step on two cores, measured with perf).
const ROW_OP_MIN_ROWS: usize = 2;
/// Activation packs kept for reuse between products (a few per step shape: one per weight type
/// and input width, for the step's tokens and for its output rows).
const SPARE_PACKS: usize = 8;

impl CpuPlan {
    /// Compiles `graph` for the CPU, reading weights from `file` and K/V from `kv`.
    ///
    /// # Errors
    /// A weight whose type the CPU kernels cannot multiply, or a thread pool that cannot start.
    pub fn compile(graph: ForwardGraph, file: Arc<GgufFile>, kv: Arc<HostKvMemory>, opts: CpuOptions) -> Result<CpuPlan, DeviceError> {
        let kernels = opts.kernels.unwrap_or_else(Kernels::best);
        let threads = if opts.threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { opts.threads };
        let pool = SpinPool::new(threads, "strata-cpu").map_err(|e| DeviceError::Unsupported { device: "cpu".into(), what: format!("thread pool: {e}") })?;
        let hp = &graph.hparams;
        if kv.placement().k.len() != hp.n_layers || kv.placement().row_stride_bytes < (hp.kv_width() * 2) as u64 {
            return Err(DeviceError::Unsupported { device: "cpu".into(), what: "the KV arena was laid out for another model".into() });
        }
        let mut in_products = vec![false; graph.weights.len()];
        for op in &graph.ops {
            if let Op::MatMul { outputs, .. } = op {
                outputs.iter().for_each(|p| in_products[p.weight.0 as usize] = true);
            }
        }
        let mut weights = Vec::with_capacity(graph.weights.len());
        for (w, &in_product) in graph.weights.iter().zip(&in_products) {
            let start = usize::try_from(w.offset).map_err(|_| bad_weight(w))?;
            let len = usize::try_from(w.bytes).map_err(|_| bad_weight(w))?;
            let range = start..start.checked_add(len).ok_or_else(|| bad_weight(w))?;
            let bytes = file.bytes().get(range.clone()).ok_or_else(|| bad_weight(w))?;
            let small = if w.rows == 1 {
                let mut v = vec![0f32; w.cols];
                strata_quant::dequantize(w.ty, bytes, &mut v)?;
                Some(Arc::from(v))
            } else {
                None
            };
            let row_bytes = w.ty.row_bytes(w.cols as u64).and_then(|b| usize::try_from(b).ok()).ok_or_else(|| bad_weight(w))?;
            let repacked = if in_product { kernels.repack_weights(w.ty, w.cols, w.rows, bytes)? } else { None };
            weights.push(WeightSlot { w: w.clone(), range, row_bytes, small, repacked });
        }
        let repacked_bytes: usize = weights.iter().filter_map(|w| w.repacked.as_ref()).map(Vec::len).sum();
        tracing::info!(level = ?kernels.level(), products = ?kernels.order(), repacked_mib = repacked_bytes >> 20, "CPU plan compiled");
        let mut acts: Vec<(GgmlType, Vec<u8>)> = Vec::new();
        for op in &graph.ops {
            if let Op::MatMul { input, outputs } = op {
                let k = graph.buffer(*input).width;
                for p in outputs {
                    let ty = graph.weight(p.weight).ty;
                    if !matmul_supported(ty) {
                        return Err(DeviceError::Unsupported { device: "cpu".into(), what: format!("matrix products of {ty} weights ({})", graph.weight(p.weight).name) });
                    }
                    let at = Kernels::activation_type(ty);
                    let bytes = strata_quant::activation_row_bytes(ty, k) * opts.max_batch_tokens;
                    match acts.iter_mut().find(|(t, _)| *t == at) {
                        Some((_, buf)) => {
                            if buf.len() < bytes {
                                buf.resize(bytes, 0);
                            }
                        }
                        None => acts.push((at, vec![0; bytes])),
                    }
                }
            }
        }
        let bufs = graph
            .buffers
            .iter()
            .map(|b| {
                let rows = match b.rows {
                    Rows::Tokens => opts.max_batch_tokens,
                    Rows::Outputs => opts.max_outputs,
                };
                vec![0f32; rows * b.width]
            })
            .collect();
        let half = hp.rope_dims / 2;
        let scratch = (0..threads).map(|_| Mutex::new(Scratch::default())).collect();
        Ok(CpuPlan {
            rope_cos: vec![0.0; opts.max_batch_tokens * half],
            rope_sin: vec![0.0; opts.max_batch_tokens * half],
            graph,
            file,
            kv,
            kernels,
            pool,
            threads,
            weights,
            bufs,
            acts,
            spare_packs: Vec::new(),
            scratch,
            opts,
        })
    }

    /// The kernel set in use.
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// Threads in use.
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn validate(&self, b: &StepBatch<'_>) -> Result<(), DeviceError> {
        let limits = crate::BatchLimits {
            max_tokens: self.opts.max_batch_tokens,
            max_outputs: self.opts.max_outputs,
            vocab_size: self.graph.hparams.vocab_size,
            block_size: self.opts.block_size,
            n_blocks: (self.kv.placement().n_cells / self.opts.block_size as u64) as usize,
        };
        limits.check(b)
    }

    fn weight_bytes(&self, id: strata_model::graph::WeightId) -> &[u8] {
        // The ranges were checked against the file in `compile`.
        &self.file.bytes()[self.weights[id.0 as usize].range.clone()]
    }

    /// A weight's bytes as the products read them (repacked where the kernels repack).
    fn product_bytes(&self, id: strata_model::graph::WeightId) -> &[u8] {
        match &self.weights[id.0 as usize].repacked {
            Some(bytes) => bytes,
            None => self.weight_bytes(id),
        }
    }

    fn small(&self, id: strata_model::graph::WeightId) -> &[f32] {
        self.weights[id.0 as usize].small.as_deref().unwrap_or(&[])
    }

    /// As [`Self::small`], owned (for a closure that runs while the plan is borrowed mutably).
    fn small_shared(&self, id: strata_model::graph::WeightId) -> Arc<[f32]> {
        self.weights[id.0 as usize].small.clone().unwrap_or_else(|| Arc::from(Vec::new()))
    }

    /// The projections of `op` when it is a product of `buf` over `rows` rows that writes none of
    /// `reads` (the buffers the op before it reads), so that it can compute `buf`'s rows itself
    /// in its quantization pass (`STRATA_CPU_FUSE_ROWS=0` turns this off, for comparison).
    fn product_of<'o>(&self, op: Option<&'o Op>, buf: BufId, rows: usize, reads: [BufId; 2], n: usize, n_out: usize) -> Option<&'o [Projection]> {
        static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *OFF.get_or_init(|| std::env::var("STRATA_CPU_FUSE_ROWS").as_deref() == Ok("0")) {
            return None;
        }
        match op {
            Some(Op::MatMul { input, outputs }) if *input == buf && self.rows_of(buf, n, n_out) == rows && outputs.iter().all(|p| p.out != buf && !reads.contains(&p.out)) => Some(outputs),
            _ => None,
        }
    }

    fn rows_of(&self, buf: BufId, n_tokens: usize, n_outputs: usize) -> usize {
        match self.graph.buffer(buf).rows {
            Rows::Tokens => n_tokens,
            Rows::Outputs => n_outputs,
        }
    }

    /// Runs `f(thread_index, n_threads)` on every pool thread and waits.
    fn broadcast<F: Fn(usize, usize) + Sync>(&self, f: F) {
        self.pool.run(&f);
    }

    /// Splits `0..n` into contiguous ranges, one per thread; small `n` runs on the caller.
    fn par_ranges<F: Fn(Range<usize>) + Sync>(&self, n: usize, min_per_thread: usize, f: F) {
        if n < 2 * min_per_thread || self.threads == 1 {
            f(0..n);
            return;
        }
        self.broadcast(|i, t| f(n * i / t..n * (i + 1) / t));
    }

    /// Quantizes `n` rows of `x` once per activation type the projections need (into `acts`) and
    /// repacks them once per weight type, in one parallel pass over the tokens: each thread packs
    /// the tokens it quantized. With a `producer`, each thread first writes the rows it is about
    /// to quantize (`producer(t, row t of x)`: the op before the product, in the same pass instead
    /// of a parallel region of its own). Returns the packs and each projection's pack.
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn quantize_and_pack(&self, x: &mut [f32], producer: Option<&RowProducer<'_>>, acts: &mut [(GgmlType, Vec<u8>)], spare: &mut Vec<strata_quant::PackedActivations>, outputs: &[Projection], n: usize, k: usize) -> Result<(Vec<(GgmlType, strata_quant::PackedActivations)>, Vec<usize>), strata_quant::QuantError> {
        let mut packs: Vec<(GgmlType, strata_quant::PackedActivations)> = Vec::new();
        let mut pack_of = Vec::with_capacity(outputs.len());
        for p in outputs {
            let ty = self.graph.weight(p.weight).ty;
            if let Some(i) = packs.iter().position(|(t, _)| *t == ty) {
                pack_of.push(i);
                continue;
            }
            pack_of.push(packs.len());
            packs.push((ty, self.kernels.reuse_packed_activations(spare, ty, k, n)?));
        }
        // Per activation type: its buffer, the row bytes, and the packers that read it.
        let mut targets = Vec::new();
        for (at, buf) in acts.iter_mut() {
            let Some(wty) = packs.iter().map(|(t, _)| *t).find(|t| Kernels::activation_type(*t) == *at) else {
                continue;
            };
            targets.push((wty, *at, SharedMut(buf.as_mut_ptr()), strata_quant::activation_row_bytes(wty, k)));
        }
        let packers: Vec<(GgmlType, strata_quant::ActivationPacker<'_>)> = packs.iter_mut().map(|(ty, p)| (Kernels::activation_type(*ty), p.packer())).collect();
        let kernels = self.kernels;
        let err = Mutex::new(None);
        assert!(x.len() >= n * k, "{} input floats for {n} rows of {k}", x.len());
        let xs = SharedMut(x.as_mut_ptr());
        self.par_ranges(n, ROW_OP_MIN_ROWS, |rows| {
            for t in rows {
                // SAFETY: row t of the input (n rows of k floats, checked above) is written (by
                // the producer) and read only by the thread whose range holds t.
                let xrow = unsafe { std::slice::from_raw_parts_mut(xs.ptr().add(t * k), k) };
                if let Some(produce) = producer {
                    produce(t, xrow);
                }
                for (wty, at, dst, rb) in &targets {
                    // SAFETY: row t of the activation buffer (rb bytes at t*rb, inside the buffer
                    // sized for max_batch_tokens rows) is written by exactly one thread, which
                    // then reads it back below.
                    let row = unsafe { std::slice::from_raw_parts_mut(dst.ptr().add(t * rb), *rb) };
                    let packed = kernels.quantize_activations(*wty, xrow, row).and_then(|()| {
                        packers.iter().filter(|(a, _)| a == at).try_for_each(|(_, packer)| {
                            // SAFETY: token t is in this thread's range alone.
                            unsafe { packer.pack_token(t, row) }
                        })
                    });
                    if let Err(e) = packed {
                        *err.lock() = Some(e);
                    }
                }
            }
        });
        drop(packers);
        match err.into_inner() {
            Some(e) => Err(e),
            None => Ok((packs, pack_of)),
        }
    }

    /// The projections of `input`; with a `producer`, its rows are written in the quantization's
    /// pass (see [`Self::quantize_and_pack`]).
    fn matmul(&mut self, input: BufId, outputs: &[Projection], n_tokens: usize, n_outputs: usize, producer: Option<&RowProducer<'_>>) -> Result<(), DeviceError> {
        let n = self.rows_of(input, n_tokens, n_outputs);
        let k = self.graph.buffer(input).width;
        let mut x = std::mem::take(&mut self.bufs[input.0 as usize]);
        let mut acts = std::mem::take(&mut self.acts);
        let mut spare = std::mem::take(&mut self.spare_packs);
        let prepared = self.quantize_and_pack(&mut x, producer, &mut acts, &mut spare, outputs, n, k);
        let (packs, pack_of) = match prepared {
            Ok(p) => p,
            Err(e) => {
                self.spare_packs = spare;
                self.acts = acts;
                self.bufs[input.0 as usize] = x;
                return Err(e.into());
            }
        };
        let packs: Vec<(&[u8], strata_quant::PackedActivations)> = packs
            .into_iter()
            .map(|(ty, pack)| {
                let arb = strata_quant::activation_row_bytes(ty, k);
                let act = acts.iter().find(|(t, _)| *t == Kernels::activation_type(ty)).map(|(_, b)| &b[..n * arb]).unwrap_or(&[]);
                (act, pack)
            })
            .collect();
        // Units of work: blocks of rows of each projection, dealt to threads round-robin.
        let mut jobs: Vec<(usize, Range<usize>)> = Vec::new();
        // Up to one cache block of tokens (the kernels' TB) a call's rows are streamed once
        // whatever their number, so a claimed run of blocks can be one call; prefill keeps
        // blocks small enough for each to stay in cache across the token blocks.
        let merge_claims = n > 4 && n <= MERGE_MAX_TOKENS;
        for (pi, p) in outputs.iter().enumerate() {
            let rows = self.graph.weight(p.weight).rows;
            // Decoding streams the weights once: one contiguous share per thread keeps the
            // kernel calls few. Prefill reuses each weight block across tokens: small blocks.
            // Batched steps: blocks small enough that each thread gets several, handed out as
            // threads come free (below), so a thread the OS preempts or a projection that does
            // not divide evenly leaves no core idle.
            // Batched decode (one cache block of tokens): blocks of 16 rows, consecutive claimed
            // blocks computed by one call (below), so the last claims are short and the
            // threads finish together.
            let block = if n <= 4 {
                rows.div_ceil(self.threads).next_multiple_of(16)
            } else if merge_claims {
                16
            } else {
                rows.div_ceil(8 * self.threads).next_multiple_of(16).clamp(16, MATMUL_BLOCK_ROWS)
            };
            let mut r = 0;
            while r < rows {
                let end = (r + block).min(rows);
                jobs.push((pi, r..end));
                r = end;
            }
        }
        let mut outs: Vec<(SharedMut<f32>, usize)> = Vec::with_capacity(outputs.len());
        let mut taken = Vec::with_capacity(outputs.len());
        for p in outputs {
            let mut buf = std::mem::take(&mut self.bufs[p.out.0 as usize]);
            let width = self.graph.buffer(p.out).width;
            outs.push((SharedMut(buf.as_mut_ptr()), width));
            taken.push((p.out, buf));
        }
        let plan = &*self;
        let kernels = self.kernels;
        let err = Mutex::new(None);
        // Decoding: thread i takes share i (one contiguous share each). Batched: the next
        // unclaimed block. Which thread computes a block does not change its arithmetic.
        let queue = WorkQueue::new(jobs.len(), self.threads);
        let claim_dynamically = n > 4;
        plan.broadcast(|ti, nt| {
            let mut mine = jobs.iter().skip(ti).step_by(nt);
            let mut claimed = 0..0;
            let mut next_job = || -> Option<(usize, Range<usize>)> {
                if !claim_dynamically {
                    return mine.next().cloned();
                }
                if claimed.is_empty() {
                    claimed = queue.claim()?;
                }
                let (pi, mut rows) = jobs[claimed.next()?].clone();
                while merge_claims && claimed.start < claimed.end && jobs[claimed.start].0 == pi && jobs[claimed.start].1.start == rows.end {
                    rows.end = jobs[claimed.start].1.end;
                    claimed.start += 1;
                }
                Some((pi, rows))
            };
            while let Some((pi, rows)) = next_job() {
                let p = &outputs[pi];
                let w = plan.graph.weight(p.weight);
                let (act, pack) = &packs[pack_of[pi]];
                let (dst, width) = &outs[pi];
                // SAFETY: columns `rows` of this projection's output rows 0..n (a buffer of at
                // least n rows of `width` floats) are written only by the thread holding this job.
                let written = unsafe { kernels.matmul_packed_into(w.ty, plan.product_bytes(p.weight), k, rows.clone(), act, n, pack, dst.ptr().add(rows.start), *width) };
                if let Err(e) = written {
                    *err.lock() = Some(e);
                    return;
                }
                if let Some(b) = p.bias.map(|b| &plan.small(b)[rows.clone()]) {
                    for t in 0..n {
                        // SAFETY: as above: this job's columns of row t.
                        let out = unsafe { std::slice::from_raw_parts_mut(dst.ptr().add(t * width + rows.start), rows.len()) };
                        out.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                    }
                }
            }
        });
        for (id, buf) in taken {
            self.bufs[id.0 as usize] = buf;
        }
        // The packs serve the next products of the same shape (a step's layers, the next step).
        spare.extend(packs.into_iter().map(|(_, pack)| pack));
        if spare.len() > SPARE_PACKS {
            spare.drain(..spare.len() - SPARE_PACKS);
        }
        self.spare_packs = spare;
        self.acts = acts;
        self.bufs[input.0 as usize] = x;
        match err.into_inner() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    fn attention(&mut self, layer: usize, q: BufId, out: BufId, b: &StepBatch<'_>) {
        let hp = &self.graph.hparams;
        let (n_heads, hd, group) = (hp.n_heads, hp.head_dim, hp.n_heads / hp.n_kv_heads);
        let qw = hp.q_width();
        let scale = self.graph.attention_scale;
        let bs = self.opts.block_size;
        let n = b.len();
        let qbuf = std::mem::take(&mut self.bufs[q.0 as usize]);
        let mut obuf = std::mem::take(&mut self.bufs[out.0 as usize]);
        let dst = SharedMut(obuf.as_mut_ptr());
        let plan = &*self;
        // One item per token when there are tokens enough to keep every thread busy: it reads
        // whole rows of the paged cache (every KV head's columns), which is what lets its
        // prefetches reach the core's read bandwidth. Fewer tokens (a few sequences decoding):
        // one item per (token, KV head), its query heads sharing each converted K and V row; fewer
        // still (one sequence), one per (token, query head). All compute every head with the
        // same arithmetic.
        let n_kv_heads = n_heads / group;
        let threads = self.threads.max(1);
        let heads_per_item = if n >= 2 * threads {
            n_heads
        } else if n * n_kv_heads >= 2 * threads {
            group
        } else {
            1
        };
        let items_per_token = n_heads / heads_per_item;
        let items = n * items_per_token;
        // ggml sums a step's attention products in one order when the step has one token and
        // in another when it has many (see AttnOrder). Per sequence here, so that a decoding
        // sequence's results do not depend on what else is in the step: a sequence with several
        // tokens in the step is prefilling, one with a single token is decoding. With the
        // products in their own order llama.cpp's bits are gone anyway, and attention takes the
        // order without ggml's fixed cost per head (the same for prefill and decode).
        let own_order = self.kernels.order() == strata_quant::ProductOrder::Interleaved;
        let mut tokens_of_seq = vec![0u32; b.block_tables.len()];
        for &s in b.seq_of_token {
            tokens_of_seq[s as usize] += 1;
        }
        // Longest sequences first, each item to the next free thread: a step mixes sequences
        // of very different lengths, and a fixed deal would leave one thread the long ones.
        let mut by_length: Vec<u32> = (0..items as u32).collect();
        by_length.sort_by_key(|&item| std::cmp::Reverse(b.positions[item as usize / items_per_token]));
        // One item per claim while items are few (a decode step: the claims are cheap next to
        // an item); shrinking chunks for a prefill's hundreds.
        let queue = if items <= 64 { WorkQueue::one_at_a_time(items) } else { WorkQueue::new(items, self.threads) };
        let work = |ti: usize, _nt: usize| {
            let mut scratch = plan.scratch[ti].lock();
            while let Some(claimed) = queue.claim() {
                for &item in &by_length[claimed] {
                    let item = item as usize;
                    let (t, h0) = (item / items_per_token, (item % items_per_token) * heads_per_item);
                    let (kvh, kv_heads) = (h0 / group, (heads_per_item / group).max(1));
                    let seq = b.seq_of_token[t] as usize;
                    let table = b.block_tables[seq];
                    let order = if own_order {
                        AttnOrder::Sequential
                    } else if tokens_of_seq[seq] > 1 {
                        AttnOrder::Prefill
                    } else {
                        AttnOrder::Decode
                    };
                    let len = b.positions[t] as usize + 1;
                    let cols = t * qw + h0 * hd..t * qw + (h0 + heads_per_item) * hd;
                    let qv = &qbuf[cols.clone()];
                    // SAFETY: row t's columns of this item's query heads are written by the one thread
                    // holding this item.
                    let o = unsafe { std::slice::from_raw_parts_mut(dst.ptr().add(cols.start), heads_per_item * hd) };
                    ops::attend_group(&plan.kernels, &plan.kv, layer, table, bs, kvh * hd, kv_heads, hd, len, qv, scale, order, &mut scratch.attn, o);
                }
            }
        };
        if items >= 2 && self.threads > 1 {
            plan.broadcast(work);
        } else {
            work(0, 1);
        }
        self.bufs[q.0 as usize] = qbuf;
        self.bufs[out.0 as usize] = obuf;
    }

    fn prepare_rope(&mut self, b: &StepBatch<'_>) {
        let hp = &self.graph.hparams;
        let half = hp.rope_dims / 2;
        for (t, &pos) in b.positions.iter().enumerate() {
            let range = t * half..(t + 1) * half;
            ops::rope_angles_into(hp.rope_dims, hp.rope_base, pos, &mut self.rope_cos[range.clone()], &mut self.rope_sin[range]);
        }
    }
}

/// Weight types the CPU kernels multiply.
fn matmul_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q4_K | Q5_K | Q6_K)
}

fn bad_weight(w: &WeightRef) -> DeviceError {
    DeviceError::Unsupported { device: "cpu".into(), what: format!("weight {} lies outside the file", w.name) }
}

impl ForwardPlan for CpuPlan {
    fn forward(&mut self, b: &StepBatch<'_>) -> Result<&[f32], DeviceError> {
        self.validate(b)?;
        let n = b.len();
        let n_out = b.output_rows.len();
        self.prepare_rope(b);
        let ops = std::mem::take(&mut self.graph.ops);
        let result = self.run_ops(&ops, b, n, n_out);
        self.graph.ops = ops;
        result?;
        let vocab = self.graph.hparams.vocab_size;
        Ok(&self.bufs[self.graph.logits.0 as usize][..n_out * vocab])
    }

    fn device_name(&self) -> String {
        "cpu".to_string()
    }

    fn max_batch_tokens(&self) -> usize {
        self.opts.max_batch_tokens
    }
}

impl CpuPlan {
    fn run_ops(&mut self, ops: &[Op], b: &StepBatch<'_>, n: usize, n_out: usize) -> Result<(), DeviceError> {
        let hp = self.graph.hparams.clone();
        let mut next = 0;
        while let Some(op) = ops.get(next) {
            next += 1;
            // A residual add and the norm of its sum (every layer, twice): one parallel pass, not
            // a serial add on the calling thread and then a pass of its own. Same arithmetic.
            if let (Op::Add { acc, other }, Some(Op::RmsNorm { input, weight, out })) = (op, ops.get(next)) {
                if acc.0 == input.0 && other.0 != out.0 && acc.0 != out.0 {
                    next += 1;
                    let rows = self.rows_of(*acc, n, n_out);
                    let d = self.graph.buffer(*acc).width;
                    let mut x = std::mem::take(&mut self.bufs[acc.0 as usize]);
                    let y = std::mem::take(&mut self.bufs[other.0 as usize]);
                    if let Some(outputs) = self.product_of(ops.get(next), *out, rows, [*acc, *other], n, n_out) {
                        // The add and the norm in the product's quantization pass: each thread
                        // computes the rows it then quantizes (one parallel region, not two).
                        next += 1;
                        assert!(x.len() >= rows * d && y.len() >= rows * d, "residual buffers of {rows} rows of {d}");
                        let sums = SharedMut(x.as_mut_ptr());
                        let w = self.small_shared(*weight);
                        let eps = hp.rms_eps;
                        let nudge = self.opts.nudge_norms;
                        let y_ref = &y;
                        let produce = move |t: usize, orow: &mut [f32]| {
                            // SAFETY: row t of the residual sum (checked above) is written only by
                            // the thread that holds token t in the quantization pass.
                            let xrow = unsafe { std::slice::from_raw_parts_mut(sums.ptr().add(t * d), d) };
                            xrow.iter_mut().zip(&y_ref[t * d..(t + 1) * d]).for_each(|(a, b)| *a += b);
                            ops::rms_norm_nudged(xrow, &w, eps, orow, nudge);
                        };
                        let done = self.matmul(*out, outputs, n, n_out, Some(&produce));
                        self.bufs[acc.0 as usize] = x;
                        self.bufs[other.0 as usize] = y;
                        done?;
                        continue;
                    }
                    let mut o = std::mem::take(&mut self.bufs[out.0 as usize]);
                    let (sums, dst) = (SharedMut(x.as_mut_ptr()), SharedMut(o.as_mut_ptr()));
                    let w = self.small(*weight);
                    let nudge = self.opts.nudge_norms;
                    self.par_ranges(rows, ROW_OP_MIN_ROWS, |r| {
                        for t in r {
                            // SAFETY: row t of the sum and of the output (both buffers hold at
                            // least `rows` rows of d floats) is written by the one thread whose
                            // range holds t.
                            let (xrow, orow) = unsafe { (std::slice::from_raw_parts_mut(sums.ptr().add(t * d), d), std::slice::from_raw_parts_mut(dst.ptr().add(t * d), d)) };
                            xrow.iter_mut().zip(&y[t * d..(t + 1) * d]).for_each(|(a, b)| *a += b);
                            ops::rms_norm_nudged(xrow, w, hp.rms_eps, orow, nudge);
                        }
                    });
                    self.bufs[acc.0 as usize] = x;
                    self.bufs[other.0 as usize] = y;
                    self.bufs[out.0 as usize] = o;
                    continue;
                }
            }
            match op {
                Op::Embed { table, out } => {
                    let w = &self.weights[table.0 as usize].w;
                    let (ty, d) = (w.ty, w.cols);
                    let row_bytes = self.weights[table.0 as usize].row_bytes;
                    let mut o = std::mem::take(&mut self.bufs[out.0 as usize]);
                    let bytes = self.weight_bytes(*table);
                    let mut res = Ok(());
                    for (t, &tok) in b.tokens.iter().enumerate() {
                        let src = &bytes[tok as usize * row_bytes..(tok as usize + 1) * row_bytes];
                        if let Err(e) = strata_quant::dequantize(ty, src, &mut o[t * d..(t + 1) * d]) {
                            res = Err(e);
                            break;
                        }
                    }
                    self.bufs[out.0 as usize] = o;
                    res?;
                }
                Op::RmsNorm { input, weight, out } => {
                    let rows = self.rows_of(*input, n, n_out);
                    let d = self.graph.buffer(*input).width;
                    let x = std::mem::take(&mut self.bufs[input.0 as usize]);
                    let mut o = std::mem::take(&mut self.bufs[out.0 as usize]);
                    let dst = SharedMut(o.as_mut_ptr());
                    let w = self.small(*weight);
                    let nudge = self.opts.nudge_norms;
                    self.par_ranges(rows, ROW_OP_MIN_ROWS, |r| {
                        for t in r {
                            // SAFETY: row t is written by the one thread whose range holds t.
                            let orow = unsafe { std::slice::from_raw_parts_mut(dst.ptr().add(t * d), d) };
                            ops::rms_norm_nudged(&x[t * d..(t + 1) * d], w, hp.rms_eps, orow, nudge);
                        }
                    });
                    self.bufs[input.0 as usize] = x;
                    self.bufs[out.0 as usize] = o;
                }
                Op::MatMul { input, outputs } => self.matmul(*input, outputs, n, n_out, None)?,
                Op::HeadNorm { buf, weight, n_heads } => {
                    let width = self.graph.buffer(*buf).width;
                    let mut x = std::mem::take(&mut self.bufs[buf.0 as usize]);
                    let w = self.small(*weight);
                    let mut tmp = vec![0f32; hp.head_dim];
                    for t in 0..n {
                        for h in 0..*n_heads {
                            let s = t * width + h * hp.head_dim;
                            ops::rms_norm_nudged(&x[s..s + hp.head_dim], w, hp.rms_eps, &mut tmp, self.opts.nudge_norms);
                            x[s..s + hp.head_dim].copy_from_slice(&tmp);
                        }
                    }
                    self.bufs[buf.0 as usize] = x;
                }
                Op::Rope { buf, n_heads } => {
                    let width = self.graph.buffer(*buf).width;
                    let half = self.graph.hparams.rope_dims / 2;
                    let (hd, n_heads, style) = (hp.head_dim, *n_heads, self.graph.rope_style);
                    let mut x = std::mem::take(&mut self.bufs[buf.0 as usize]);
                    let dst = SharedMut(x.as_mut_ptr());
                    let (cos, sin) = (&self.rope_cos, &self.rope_sin);
                    self.par_ranges(n, ROW_OP_MIN_ROWS, |tokens| {
                        for t in tokens {
                            // SAFETY: row t (width floats of a buffer sized for every token of
                            // the step) is rotated only by the thread whose range holds t.
                            let row = unsafe { std::slice::from_raw_parts_mut(dst.ptr().add(t * width), width) };
                            let (c, s) = (&cos[t * half..(t + 1) * half], &sin[t * half..(t + 1) * half]);
                            for head in row[..n_heads * hd].chunks_exact_mut(hd) {
                                ops::rope(head, c, s, style);
                            }
                        }
                    });
                    self.bufs[buf.0 as usize] = x;
                }
                Op::StoreKv { layer, k, v } => {
                    let width = hp.kv_width();
                    let bs = self.opts.block_size;
                    let (kbuf, vbuf) = (&self.bufs[k.0 as usize], &self.bufs[v.0 as usize]);
                    self.par_ranges(n, ROW_OP_MIN_ROWS, |tokens| {
                        for t in tokens {
                            let table = b.block_tables[b.seq_of_token[t] as usize];
                            let pos = b.positions[t] as usize;
                            let cell = (table[pos / bs] as usize * bs + pos % bs) as u64;
                            for (is_v, buf) in [(false, kbuf), (true, vbuf)] {
                                let src = &buf[t * width..(t + 1) * width];
                                // SAFETY: validate() checked the cell lies in the arena; this
                                // step's sequences own their cells (distinct for distinct tokens),
                                // and only the thread holding token t writes its cell now.
                                let dst = unsafe { std::slice::from_raw_parts_mut(self.kv.row_ptr(*layer, is_v, cell) as *mut half::f16, width) };
                                ops::f32_to_f16(src, dst);
                            }
                        }
                    });
                }
                Op::Attention { layer, q, out } => self.attention(*layer, *q, *out, b),
                Op::SwiGlu { gate, up, out } if let Some(outputs) = self.product_of(ops.get(next), *out, n, [*gate, *up], n, n_out) => {
                    // SwiGLU in the down projection's quantization pass, row by row as below.
                    next += 1;
                    let d = self.graph.buffer(*out).width;
                    let g = std::mem::take(&mut self.bufs[gate.0 as usize]);
                    let u = std::mem::take(&mut self.bufs[up.0 as usize]);
                    let kernels = self.kernels;
                    let (g_ref, u_ref) = (&g, &u);
                    let produce = move |t: usize, orow: &mut [f32]| {
                        let row = t * d..(t + 1) * d;
                        kernels.swiglu(&g_ref[row.clone()], &u_ref[row], orow);
                    };
                    let done = self.matmul(*out, outputs, n, n_out, Some(&produce));
                    self.bufs[gate.0 as usize] = g;
                    self.bufs[up.0 as usize] = u;
                    done?;
                }
                Op::SwiGlu { gate, up, out } => {
                    let d = self.graph.buffer(*out).width;
                    let g = std::mem::take(&mut self.bufs[gate.0 as usize]);
                    let u = std::mem::take(&mut self.bufs[up.0 as usize]);
                    let mut o = std::mem::take(&mut self.bufs[out.0 as usize]);
                    let dst = SharedMut(o.as_mut_ptr());
                    self.par_ranges(n, 4, |r| {
                        // SAFETY: rows r are written only by the thread that holds range r.
                        let orows = unsafe { std::slice::from_raw_parts_mut(dst.ptr().add(r.start * d), r.len() * d) };
                        // Row by row: ggml's SwiGLU takes its 16-wide chunks from each row's start.
                        for (i, o) in orows.chunks_exact_mut(d).enumerate() {
                            let row = (r.start + i) * d..(r.start + i + 1) * d;
                            self.kernels.swiglu(&g[row.clone()], &u[row], o);
                        }
                    });
                    self.bufs[gate.0 as usize] = g;
                    self.bufs[up.0 as usize] = u;
                    self.bufs[out.0 as usize] = o;
                }
                Op::Add { acc, other } => {
                    let d = self.graph.buffer(*acc).width;
                    let rows = self.rows_of(*acc, n, n_out);
                    let o = std::mem::take(&mut self.bufs[other.0 as usize]);
                    for (a, b) in self.bufs[acc.0 as usize][..rows * d].iter_mut().zip(&o[..rows * d]) {
                        *a += b;
                    }
                    self.bufs[other.0 as usize] = o;
                }
                Op::SelectRows { input, out } => {
                    let d = self.graph.buffer(*input).width;
                    let x = std::mem::take(&mut self.bufs[input.0 as usize]);
                    let o = &mut self.bufs[out.0 as usize];
                    for (i, &r) in b.output_rows.iter().enumerate() {
                        let r = r as usize;
                        o[i * d..(i + 1) * d].copy_from_slice(&x[r * d..(r + 1) * d]);
                    }
                    self.bufs[input.0 as usize] = x;
                }
            }
        }
        Ok(())
    }
}
