//! The device layer. Each device compiles the model's [`ForwardGraph`](strata_model::ForwardGraph)
//! into a plan it replays step after step ([`ForwardPlan`]); the KV arena's memory is allocated by
//! one device and may be imported by another ([`kv_memory`]).
//!
//! | device | folder | state |
//! |---|---|---|
//! | `cpu` | [`cpu`] | the reference; SIMD chosen at run time |
//! | `vulkan` | [`vulkan`] | `ash`, GLSL compute shaders compiled to SPIR-V by the build |
//! | `cuda`, `hip` | `native/` | arrive with their issue |

pub mod backend_ops;
pub mod cpu;
pub mod kv_memory;
pub mod vulkan;

use std::fmt;

/// Why a device could not do what was asked. Device errors are values: the server reports them and
/// keeps running.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device {device}: {what}")]
    Unsupported { device: String, what: String },
    #[error("device {device}: out of memory allocating {bytes} bytes for {what}")]
    OutOfMemory { device: String, bytes: u64, what: String },
    #[error("step batch is invalid: {0}")]
    BadBatch(String),
    #[error("kernel failed: {0}")]
    Kernel(#[from] strata_quant::QuantError),
    #[error("device {0:?} is not available on this machine")]
    NotAvailable(String),
    #[error("the imported KV arena does not match this device's layout: {0}")]
    LayoutMismatch(String),
    #[error("device {device}: {call} failed: {result}")]
    Vulkan { device: String, call: &'static str, result: String },
}

/// One step's worth of tokens: any mix of prompt chunks and decode tokens of many sequences.
#[derive(Clone, Copy, Debug)]
pub struct StepBatch<'a> {
    /// The token ids, one per row.
    pub tokens: &'a [u32],
    /// Each token's position in its sequence.
    pub positions: &'a [u32],
    /// Each token's sequence, as an index into `block_tables`.
    pub seq_of_token: &'a [u32],
    /// Each sequence's KV block table: the arena blocks holding its positions, in order.
    pub block_tables: &'a [&'a [u32]],
    /// The rows (indices into `tokens`) whose logits are wanted, in the order they are returned.
    pub output_rows: &'a [u32],
}

impl StepBatch<'_> {
    /// Number of tokens in the step.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the step has no tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// What a plan accepts in one step; [`BatchLimits::check`] is every device's validation.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    pub max_tokens: usize,
    pub max_outputs: usize,
    pub vocab_size: usize,
    pub block_size: usize,
    /// Blocks in the KV arena.
    pub n_blocks: usize,
}

impl BatchLimits {
    /// Checks lengths, token ids, output rows, and that every position lies in a block of its
    /// sequence's table and every block in the arena.
    ///
    /// # Errors
    /// [`DeviceError::BadBatch`] naming what is wrong.
    pub fn check(&self, b: &StepBatch<'_>) -> Result<(), DeviceError> {
        let n = b.len();
        let bad = |m: String| Err(DeviceError::BadBatch(m));
        if n == 0 || n > self.max_tokens {
            return bad(format!("{n} tokens in a step; this plan takes 1 to {}", self.max_tokens));
        }
        if b.positions.len() != n || b.seq_of_token.len() != n {
            return bad(format!("{n} tokens but {} positions and {} sequence indices", b.positions.len(), b.seq_of_token.len()));
        }
        if b.output_rows.is_empty() || b.output_rows.len() > self.max_outputs {
            return bad(format!("{} output rows; this plan returns 1 to {}", b.output_rows.len(), self.max_outputs));
        }
        if let Some(r) = b.output_rows.iter().find(|&&r| r as usize >= n) {
            return bad(format!("output row {r} is not a token of this {n}-token step"));
        }
        if let Some(t) = b.tokens.iter().find(|&&t| t as usize >= self.vocab_size) {
            return bad(format!("token id {t} is outside the vocabulary of {}", self.vocab_size));
        }
        let bs = self.block_size as u64;
        for i in 0..n {
            let seq = b.seq_of_token[i] as usize;
            let table = b.block_tables.get(seq).ok_or_else(|| DeviceError::BadBatch(format!("token {i} names sequence {seq}, but there are {} block tables", b.block_tables.len())))?;
            let pos = b.positions[i] as u64;
            if pos / bs >= table.len() as u64 {
                return bad(format!("position {pos} of sequence {seq} lies beyond its {} blocks", table.len()));
            }
        }
        for (s, table) in b.block_tables.iter().enumerate() {
            if let Some(blk) = table.iter().find(|&&blk| blk as usize >= self.n_blocks) {
                return bad(format!("sequence {s}'s block table names block {blk}; the arena has {}", self.n_blocks));
            }
        }
        Ok(())
    }
}

/// A compiled forward graph on one device.
pub trait ForwardPlan: Send {
    /// Runs one step; returns the logits of `batch.output_rows`, one row of `vocab_size` each.
    ///
    /// # Errors
    /// A malformed batch (lengths that disagree, token ids outside the vocabulary, positions
    /// beyond a block table) or a device failure. The KV cells of the batch's tokens are then in
    /// an unspecified state; other sequences' cells are untouched.
    fn forward(&mut self, batch: &StepBatch<'_>) -> Result<&[f32], DeviceError>;

    /// Runs one step and returns each output row's most likely token (the first position of
    /// its largest logit, NaNs skipped: `strata_model::sampling::argmax`), for greedy steps. By
    /// default the logits' argmax on the host; a GPU computes it there and reads back only the
    /// tokens.
    ///
    /// # Errors
    /// As [`ForwardPlan::forward`].
    fn forward_argmax(&mut self, batch: &StepBatch<'_>, vocab_size: usize) -> Result<Vec<u32>, DeviceError> {
        Ok(self.forward(batch)?.chunks(vocab_size.max(1)).map(strata_model::sampling::argmax).collect())
    }

    /// Greedy decode of one sequence in `n_steps` one-token steps: the first step reads
    /// `first_token` at position `start_pos`, each later one the token the step before picked
    /// (its argmax, as [`ForwardPlan::forward_argmax`]) at the next position; every position
    /// must lie in `block_table`. `keep_going` sees each picked token in order and stops the run
    /// by returning false: steps already submitted then finish and their tokens are dropped
    /// (their KV cells are written, beyond the tokens returned). Returns the picked tokens.
    ///
    /// By default one [`ForwardPlan::forward_argmax`] a step. A GPU submits each step before
    /// the host has read the token of the step before (the step reads that token where the
    /// device wrote it), so the device never waits for the host between tokens.
    ///
    /// # Errors
    /// As [`ForwardPlan::forward`]; the KV cells of the run's positions are then unspecified.
    fn decode_greedy(&mut self, first_token: u32, start_pos: u32, block_table: &[u32], n_steps: usize, vocab_size: usize, keep_going: &mut dyn FnMut(u32) -> bool) -> Result<Vec<u32>, DeviceError> {
        greedy_steps_one_by_one(self, first_token, start_pos, block_table, n_steps, vocab_size, keep_going)
    }

    /// Runs one step and returns each output row's `k` largest logits with their tokens, largest
    /// first (`strata_model::sampling::top_k`: of equal logits the smaller token, NaNs skipped),
    /// for samplers that cut to the top k. By default taken from the logits on the host; a GPU
    /// computes them there (up to a limit of its own) and reads back only those.
    ///
    /// # Errors
    /// As [`ForwardPlan::forward`].
    fn forward_top_k(&mut self, batch: &StepBatch<'_>, vocab_size: usize, k: usize) -> Result<Vec<Vec<strata_model::sampling::Candidate>>, DeviceError> {
        Ok(self.forward(batch)?.chunks(vocab_size.max(1)).map(|row| strata_model::sampling::top_k(row, k)).collect())
    }

    /// The device's name, as configured (`cpu`, `vulkan:0`, ...).
    fn device_name(&self) -> String;

    /// Most tokens one step may hold.
    fn max_batch_tokens(&self) -> usize;
}

/// [`ForwardPlan::decode_greedy`] one [`ForwardPlan::forward_argmax`] a step (its default, and
/// a GPU plan's fallback).
///
/// # Errors
/// As [`ForwardPlan::forward`].
pub fn greedy_steps_one_by_one<P: ForwardPlan + ?Sized>(plan: &mut P, first_token: u32, start_pos: u32, block_table: &[u32], n_steps: usize, vocab_size: usize, keep_going: &mut dyn FnMut(u32) -> bool) -> Result<Vec<u32>, DeviceError> {
    let mut picked = Vec::with_capacity(n_steps.min(1 << 16));
    let mut token = first_token;
    let tables = [block_table];
    for i in 0..n_steps {
        let position = greedy_position(start_pos, i)?;
        let batch = StepBatch { tokens: &[token], positions: &[position], seq_of_token: &[0], block_tables: &tables, output_rows: &[0] };
        token = plan.forward_argmax(&batch, vocab_size)?.first().copied().ok_or_else(|| DeviceError::BadBatch("a greedy step returned no token".into()))?;
        picked.push(token);
        if !keep_going(token) {
            break;
        }
    }
    Ok(picked)
}

/// The position of a greedy run's step `i` from `start_pos`.
pub(crate) fn greedy_position(start_pos: u32, i: usize) -> Result<u32, DeviceError> {
    u32::try_from(i).ok().and_then(|i| start_pos.checked_add(i)).ok_or_else(|| DeviceError::BadBatch("a greedy run past position 2^32".into()))
}

/// A device named in the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Vulkan(u32),
    Cuda(u32),
    Hip(u32),
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKind::Cpu => write!(f, "cpu"),
            DeviceKind::Vulkan(i) => write!(f, "vulkan:{i}"),
            DeviceKind::Cuda(i) => write!(f, "cuda:{i}"),
            DeviceKind::Hip(i) => write!(f, "hip:{i}"),
        }
    }
}
