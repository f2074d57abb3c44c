//! The synthetic-model generator: GGUF files of a named (or hand-made) llama-family shape with
//! seeded random weights and a valid GPT-2-style BPE tokenizer, loadable by strata-rt and by
//! llama.cpp. They are how large shapes are tested and benchmarked where no real weights can be
//! had.
//!
//! ```no_run
//! use strata_model::synth::{shape_by_name, write_synthetic_model, SynthOptions};
//! use strata_quant::GgmlType;
//! let opts = SynthOptions {
//!     shape: shape_by_name("qwen2.5-7b").expect("a known shape"),
//!     ty: GgmlType::Q4_K,
//!     seed: 42,
//!     threads: 16,
//! };
//! let report = write_synthetic_model("q7b.gguf".as_ref(), &opts, &mut |done, total| {
//!     eprint!("\r{done}/{total}");
//! })?;
//! println!("{} bytes in {:.1} s ({:.0} MB/s)", report.bytes, report.seconds, report.mb_per_s());
//! # Ok::<(), strata_model::synth::SynthError>(())
//! ```
//!
//! # What is written
//! - Tensors, in llama.cpp's names and GGML dims order (`[cols, rows]`): `token_embd.weight`,
//!   then per block `attn_norm`, `attn_q`/`attn_k`/`attn_v` (+ `.bias` for qwen2,
//!   `attn_q_norm`/`attn_k_norm` for qwen3), `attn_output`, `ffn_norm`, `ffn_gate`, `ffn_up`,
//!   `ffn_down`, then `output_norm.weight` and (untied shapes) `output.weight`.
//! - Every 2-D tensor is stored in [`SynthOptions::ty`]; where its row length is not a whole number
//!   of that type's blocks it falls back to Q8_0, else F16, and [`SynthReport::fallbacks`] says so.
//!   Norm weights and biases are F32.
//! - Values: approximately normal (see below), `std 0.02` for the projections, scaled by
//!   `1/sqrt(2 n_layers)` for the two that write into the residual stream (`attn_output`,
//!   `ffn_down`); `std 1/sqrt(n_embd)` for the output projection (and for tied embeddings, which
//!   serve as it), so logits come out with a standard deviation near 1; `0.02` for untied
//!   embeddings; norm weights `1 ± 0.02`; biases `std 0.01`.
//! - Metadata: `general.*`, every `{arch}.*` hyperparameter [`crate::HParams::from_metadata`] and
//!   llama.cpp read, and the `tokenizer.ggml.*` keys of the vocabulary from [`tokenizer`], with a
//!   ChatML chat template.
//!
//! # Determinism and speed
//! Every value is a pure function of (seed, tensor index, row, column): a SplitMix64 hash of a
//! counter, its four 16-bit parts summed (Irwin–Hall). Files are therefore byte-identical for any
//! thread count, and the same seed gives the same underlying f32 weights in every type. Rows are
//! generated and quantized in chunks of about [`JOB_ELEMS`] elements on a rayon pool of
//! [`SynthOptions::threads`] threads, while the calling thread writes the previous batch, so memory
//! stays at a few batches of chunks whatever the tensor size.

mod rng;
mod shapes;
pub mod tokenizer;

#[cfg(test)]
mod tests;

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use rayon::prelude::*;
use strata_io::gguf::{GgufError, GgufStream, GgufWriter, TensorInfo};
use strata_quant::{quantize, GgmlType, QuantError};

use crate::arch::Architecture;

pub use shapes::{shape_by_name, shape_names, SynthShape};
pub use tokenizer::{build_vocab, SynthVocab};

/// The weight types the generator can write (those `strata_quant::quantize` implements).
pub const SUPPORTED_TYPES: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Elements generated and quantized per job (one or more whole rows): 512 KiB of f32.
pub const JOB_ELEMS: usize = 128 * 1024;

/// What to generate.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    /// The model's dimensions.
    pub shape: SynthShape,
    /// The type of every 2-D tensor (see the module docs for the fallback). One of
    /// [`SUPPORTED_TYPES`].
    pub ty: GgmlType,
    /// The seed of every weight.
    pub seed: u64,
    /// Worker threads; 0 means all available cores. Does not change the output.
    pub threads: usize,
}

/// A tensor stored in another type than the one asked for, because its rows are not a whole
/// number of that type's blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeFallback {
    /// The tensor.
    pub tensor: String,
    /// Its row length (elements).
    pub row: u64,
    /// The type asked for.
    pub wanted: GgmlType,
    /// The type used.
    pub used: GgmlType,
}

/// One tensor of a planned file.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedTensor {
    /// GGUF name.
    pub name: String,
    /// Dims in GGML order (`dims[0]` is the row length).
    pub dims: Vec<u64>,
    /// Stored type.
    pub ty: GgmlType,
    /// Data bytes.
    pub bytes: u64,
    /// Mean of the generated values.
    pub mean: f32,
    /// Standard deviation of the generated values.
    pub std: f32,
}

impl PlannedTensor {
    fn cols(&self) -> u64 {
        self.dims[0]
    }

    fn rows(&self) -> u64 {
        self.dims[1..].iter().product()
    }
}

/// Everything about a file except its tensor data: computed without writing anything.
#[derive(Clone, Debug)]
pub struct SynthPlan {
    /// The tensors, in file order.
    pub tensors: Vec<PlannedTensor>,
    /// Tensors stored in a fallback type.
    pub fallbacks: Vec<TypeFallback>,
    /// Bytes before the tensor data (header, metadata, tensor infos, padding).
    pub header_bytes: u64,
    /// The exact size of the file.
    pub file_bytes: u64,
    /// Elements in all tensors.
    pub parameters: u64,
    writer: GgufWriter,
}

/// What [`write_synthetic_model`] did.
#[derive(Clone, Debug)]
pub struct SynthReport {
    /// The file written.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Tensors in it.
    pub tensors: usize,
    /// Elements in all tensors.
    pub parameters: u64,
    /// Tensors stored in a fallback type.
    pub fallbacks: Vec<TypeFallback>,
    /// Wall-clock seconds, header to rename.
    pub seconds: f64,
    /// Worker threads used.
    pub threads: usize,
}

impl SynthReport {
    /// Write speed in MB (10^6 bytes) per second.
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }

    /// One line per (wanted, used, row length) group of fallbacks, e.g.
    /// `73 tensors with rows of 896 (token_embd.weight, blk.0.attn_q.weight, ...): Q8_0 instead of
    /// Q4_K (256-element blocks)`; empty when there were none.
    pub fn fallback_summary(&self) -> Vec<String> {
        fallback_summary(&self.fallbacks)
    }
}

/// See [`SynthReport::fallback_summary`].
pub fn fallback_summary(fallbacks: &[TypeFallback]) -> Vec<String> {
    let mut groups: Vec<(GgmlType, GgmlType, u64, Vec<&str>)> = Vec::new();
    for f in fallbacks {
        match groups
            .iter_mut()
            .find(|g| g.0 == f.wanted && g.1 == f.used && g.2 == f.row)
        {
            Some(g) => g.3.push(&f.tensor),
            None => groups.push((f.wanted, f.used, f.row, vec![&f.tensor])),
        }
    }
    groups
        .into_iter()
        .map(|(wanted, used, row, names)| {
            let shown: Vec<&str> = names.iter().take(3).copied().collect();
            let more = if names.len() > 3 { ", ..." } else { "" };
            format!(
                "{} tensors with rows of {row} ({}{more}): {used} instead of {wanted} ({}-element blocks)",
                names.len(),
                shown.join(", "),
                wanted.block_elems()
            )
        })
        .collect()
}

/// Why a synthetic model could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// The shape's dimensions do not fit together.
    #[error("shape {shape}: {why}")]
    BadShape {
        /// The shape's name.
        shape: String,
        /// What is wrong.
        why: String,
    },
    /// A type the generator cannot write.
    #[error("cannot generate {0} weights (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)")]
    UnsupportedType(GgmlType),
    /// The header could not be built (a bug: names or sizes the writer refused).
    #[error("building the GGUF header: {0}")]
    Header(#[source] GgufError),
    /// Quantizing a chunk of a tensor failed (a bug: the sizes are computed to fit).
    #[error("{}: tensor {tensor}: quantizing rows {rows:?} to {ty}: {source}", path.display())]
    Quantize {
        /// The file being written.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The rows of the failing chunk.
        rows: std::ops::Range<u64>,
        /// The type.
        ty: GgmlType,
        /// The quantizer's error.
        source: QuantError,
    },
    /// Writing the file failed (the error names the file).
    #[error(transparent)]
    Write(GgufError),
    /// The worker pool could not be started.
    #[error("starting {threads} generator threads: {source}")]
    ThreadPool {
        /// Threads asked for.
        threads: usize,
        /// Rayon's error.
        source: rayon::ThreadPoolBuildError,
    },
    /// A generator thread panicked.
    #[error("{}: a generator thread panicked: {message}", path.display())]
    Panicked {
        /// The file being written.
        path: PathBuf,
        /// The panic message.
        message: String,
    },
}

/// llama.cpp's `general.file_type` (`llama_ftype`) for files whose matrices are all `ty`.
pub fn llama_file_type(ty: GgmlType) -> u32 {
    match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Q4_K => 14, // Q4_K_S: all Q4_K
        GgmlType::Q5_K => 16, // Q5_K_S
        GgmlType::Q6_K => 18,
        GgmlType::BF16 => 32,
        _ => 0,
    }
}

/// The type a 2-D tensor with rows of `cols` elements is stored in when `ty` is asked for.
pub fn storage_type(ty: GgmlType, cols: u64) -> GgmlType {
    if cols.is_multiple_of(ty.block_elems() as u64) {
        ty
    } else if cols.is_multiple_of(GgmlType::Q8_0.block_elems() as u64) {
        GgmlType::Q8_0
    } else {
        GgmlType::F16
    }
}

fn header_err(e: GgufError) -> SynthError {
    SynthError::Header(e)
}

/// Lays out the file: tensors, types, metadata and sizes, without generating anything.
///
/// # Errors
/// [`SynthError::BadShape`], [`SynthError::UnsupportedType`], [`SynthError::Header`].
pub fn plan(opts: &SynthOptions) -> Result<SynthPlan, SynthError> {
    let shape = &opts.shape;
    let bad = |why: String| SynthError::BadShape {
        shape: shape.name.clone(),
        why,
    };
    shape.validate().map_err(bad)?;
    if !SUPPORTED_TYPES.contains(&opts.ty) {
        return Err(SynthError::UnsupportedType(opts.ty));
    }

    let (d, q, kv, ff) = (
        shape.n_embd as u64,
        shape.q_width() as u64,
        shape.kv_width() as u64,
        shape.n_ff as u64,
    );
    let vocab = shape.vocab_size as u64;
    let resid_std = 0.02 / (2.0 * shape.n_layers as f32).sqrt();
    let out_std = 1.0 / (shape.n_embd as f32).sqrt();
    let mut tensors = Vec::new();
    let mut fallbacks = Vec::new();
    let mut matrix = |name: String, cols: u64, rows: u64, std: f32| {
        let ty = storage_type(opts.ty, cols);
        if ty != opts.ty {
            fallbacks.push(TypeFallback {
                tensor: name.clone(),
                row: cols,
                wanted: opts.ty,
                used: ty,
            });
        }
        PlannedTensor {
            name,
            dims: vec![cols, rows],
            ty,
            bytes: 0,
            mean: 0.0,
            std,
        }
    };
    let vector = |name: String, n: u64, mean: f32, std: f32| PlannedTensor {
        name,
        dims: vec![n],
        ty: GgmlType::F32,
        bytes: 0,
        mean,
        std,
    };
    let embd_std = if shape.tied_embeddings { out_std } else { 0.02 };
    tensors.push(matrix("token_embd.weight".into(), d, vocab, embd_std));
    for l in 0..shape.n_layers {
        let n = |s: &str| format!("blk.{l}.{s}");
        tensors.push(vector(n("attn_norm.weight"), d, 1.0, 0.02));
        tensors.push(matrix(n("attn_q.weight"), d, q, 0.02));
        tensors.push(matrix(n("attn_k.weight"), d, kv, 0.02));
        tensors.push(matrix(n("attn_v.weight"), d, kv, 0.02));
        match shape.arch {
            Architecture::Qwen2 => {
                tensors.push(vector(n("attn_q.bias"), q, 0.0, 0.01));
                tensors.push(vector(n("attn_k.bias"), kv, 0.0, 0.01));
                tensors.push(vector(n("attn_v.bias"), kv, 0.0, 0.01));
            }
            Architecture::Qwen3 => {
                tensors.push(vector(
                    n("attn_q_norm.weight"),
                    shape.head_dim as u64,
                    1.0,
                    0.02,
                ));
                tensors.push(vector(
                    n("attn_k_norm.weight"),
                    shape.head_dim as u64,
                    1.0,
                    0.02,
                ));
            }
            Architecture::Llama => {}
        }
        tensors.push(matrix(n("attn_output.weight"), q, d, resid_std));
        tensors.push(vector(n("ffn_norm.weight"), d, 1.0, 0.02));
        tensors.push(matrix(n("ffn_gate.weight"), d, ff, 0.02));
        tensors.push(matrix(n("ffn_up.weight"), d, ff, 0.02));
        tensors.push(matrix(n("ffn_down.weight"), ff, d, resid_std));
    }
    tensors.push(vector("output_norm.weight".into(), d, 1.0, 0.02));
    if !shape.tied_embeddings {
        tensors.push(matrix("output.weight".into(), d, vocab, out_std));
    }

    let mut w = GgufWriter::new();
    add_metadata(&mut w, opts).map_err(header_err)?;
    for t in &mut tensors {
        w.add_tensor_info(&t.name, &t.dims, t.ty)
            .map_err(header_err)?;
    }
    for (t, info) in tensors.iter_mut().zip(w.tensor_infos()) {
        t.bytes = info.bytes;
    }
    let header_bytes = w.start(std::io::sink()).map_err(header_err)?.position();
    let data_bytes = w.tensor_infos().last().map_or(0, |t| {
        (t.offset + t.bytes).div_ceil(w.alignment()) * w.alignment()
    });
    let parameters = tensors.iter().map(|t| t.dims.iter().product::<u64>()).sum();
    Ok(SynthPlan {
        tensors,
        fallbacks,
        header_bytes,
        file_bytes: header_bytes + data_bytes,
        parameters,
        writer: w,
    })
}

/// The exact size of the file [`write_synthetic_model`] would write.
///
/// # Errors
/// As [`plan`].
pub fn expected_file_size(opts: &SynthOptions) -> Result<u64, SynthError> {
    plan(opts).map(|p| p.file_bytes)
}

fn add_metadata(w: &mut GgufWriter, opts: &SynthOptions) -> Result<(), GgufError> {
    let s = &opts.shape;
    let arch = s.arch.gguf_name();
    let vocab = build_vocab(s.vocab_size).map_err(GgufError::WriterState)?;
    let k = |key: &str| format!("{arch}.{key}");
    let u = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    w.add_str("general.architecture", arch)?;
    w.add_str(
        "general.name",
        format!("synthetic {} {} seed {}", s.name, opts.ty, opts.seed),
    )?;
    w.add_u32("general.file_type", llama_file_type(opts.ty))?;
    w.add_u32("general.quantization_version", 2)?;
    w.add_u32(k("block_count"), u(s.n_layers))?;
    w.add_u32(k("context_length"), u(s.context_length))?;
    w.add_u32(k("embedding_length"), u(s.n_embd))?;
    w.add_u32(k("feed_forward_length"), u(s.n_ff))?;
    w.add_u32(k("attention.head_count"), u(s.n_heads))?;
    w.add_u32(k("attention.head_count_kv"), u(s.n_kv_heads))?;
    w.add_u32(k("attention.key_length"), u(s.head_dim))?;
    w.add_u32(k("attention.value_length"), u(s.head_dim))?;
    w.add_u32(k("rope.dimension_count"), u(s.head_dim))?;
    w.add_f32(k("rope.freq_base"), s.rope_base)?;
    w.add_f32(k("attention.layer_norm_rms_epsilon"), s.rms_eps)?;
    w.add_u32(k("vocab_size"), u(s.vocab_size))?;
    w.add_str("tokenizer.ggml.model", "gpt2")?;
    w.add_str("tokenizer.ggml.pre", s.tokenizer_pre)?;
    w.add_str_array("tokenizer.ggml.tokens", &vocab.tokens)?;
    w.add_i32_array("tokenizer.ggml.token_type", vocab.token_types)?;
    w.add_str_array("tokenizer.ggml.merges", &vocab.merges)?;
    w.add_u32("tokenizer.ggml.bos_token_id", vocab.endoftext_id)?;
    w.add_u32("tokenizer.ggml.eos_token_id", vocab.im_end_id)?;
    w.add_u32("tokenizer.ggml.padding_token_id", vocab.endoftext_id)?;
    w.add_bool("tokenizer.ggml.add_bos_token", false)?;
    w.add_bool("tokenizer.ggml.add_eos_token", false)?;
    w.add_str("tokenizer.chat_template", tokenizer::CHATML_TEMPLATE)?;
    Ok(())
}

/// One unit of work: rows `row0..row0 + rows` of tensor `tensor`.
#[derive(Copy, Clone, Debug)]
struct Job {
    tensor: usize,
    row0: u64,
    rows: u64,
}

fn jobs(tensors: &[PlannedTensor]) -> Vec<Job> {
    let mut out = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        let per_job = (JOB_ELEMS as u64 / t.cols()).max(1);
        let mut row0 = 0;
        while row0 < t.rows() {
            let rows = per_job.min(t.rows() - row0);
            out.push(Job {
                tensor: i,
                row0,
                rows,
            });
            row0 += rows;
        }
    }
    out
}

fn run_job(job: Job, t: &PlannedTensor, seed: u64, path: &Path) -> Result<Vec<u8>, SynthError> {
    let cols = t.cols() as usize;
    let mut values = vec![0f32; job.rows as usize * cols];
    for (r, row) in values.chunks_exact_mut(cols).enumerate() {
        let key = rng::row_key(seed, job.tensor, job.row0 + r as u64);
        rng::fill_normal(key, t.mean, t.std, row);
    }
    // The plan checked every row is whole blocks of `t.ty`; `row_bytes` cannot fail here.
    let row_bytes = t.ty.row_bytes(t.cols()).unwrap_or(0) as usize;
    let mut out = vec![0u8; job.rows as usize * row_bytes];
    quantize(t.ty, &values, &mut out).map_err(|source| SynthError::Quantize {
        path: path.to_path_buf(),
        tensor: t.name.clone(),
        rows: job.row0..job.row0 + job.rows,
        ty: t.ty,
        source,
    })?;
    Ok(out)
}

/// Writes the synthetic model `opts` describes to `path` (atomically: to `path.tmp`, then
/// renamed), calling `progress(bytes written, file size)` as the data goes out.
///
/// # Errors
/// As [`plan`], [`SynthError::ThreadPool`], [`SynthError::Write`] for I/O errors (naming the
/// file), [`SynthError::Quantize`] / [`SynthError::Panicked`] for bugs. On error `path` is left
/// untouched.
pub fn write_synthetic_model(
    path: &Path,
    opts: &SynthOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SynthReport, SynthError> {
    let start = Instant::now();
    let plan = plan(opts)?;
    let threads = if opts.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        opts.threads
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("synth-{i}"))
        .build()
        .map_err(|source| SynthError::ThreadPool { threads, source })?;
    let all_jobs = jobs(&plan.tensors);
    let batch = threads * 4;
    let total = plan.file_bytes;
    let (tensors, seed) = (&plan.tensors, opts.seed);
    let mut failure: Option<SynthError> = None;

    let written = std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<Result<Vec<u8>, SynthError>>(batch);
        let (pool, all_jobs) = (&pool, &all_jobs);
        // The producer computes batch n+1 on the pool while this thread writes batch n.
        let producer = scope.spawn(move || {
            for chunk in all_jobs.chunks(batch) {
                let results: Vec<Result<Vec<u8>, SynthError>> = pool.install(|| {
                    chunk
                        .par_iter()
                        .map(|&j| run_job(j, &tensors[j.tensor], seed, path))
                        .collect()
                });
                for r in results {
                    let failed = r.is_err();
                    if tx.send(r).is_err() || failed {
                        return;
                    }
                }
            }
        });
        let fill =
            |_: usize, info: &TensorInfo, stream: &mut GgufStream<BufWriter<std::fs::File>>| {
                let mut left = info.bytes;
                while left > 0 {
                    let chunk = match rx.recv() {
                        Ok(Ok(c)) => c,
                        Ok(Err(e)) => {
                            failure = Some(e);
                            return Err(GgufError::WriterState(format!(
                                "generating tensor {} failed",
                                info.name
                            )));
                        }
                        Err(_) => {
                            return Err(GgufError::WriterState(format!(
                                "the generator stopped before tensor {} was complete",
                                info.name
                            )))
                        }
                    };
                    left = left.saturating_sub(chunk.len() as u64);
                    stream.write_chunk(&chunk)?;
                    progress(stream.position(), total);
                }
                Ok(())
            };
        let written = plan.writer.write_to_path_with(path, fill);
        drop(rx);
        if let Err(panic) = producer.join() {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            return Err(SynthError::Panicked {
                path: path.to_path_buf(),
                message,
            });
        }
        written.map_err(SynthError::Write)
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let bytes = written?;
    Ok(SynthReport {
        path: path.to_path_buf(),
        bytes,
        tensors: plan.tensors.len(),
        parameters: plan.parameters,
        fallbacks: plan.fallbacks,
        seconds: start.elapsed().as_secs_f64(),
        threads,
    })
}
