//! The model's tensors, found by name in the GGUF file and checked against the hyperparameters.

use strata_io::gguf::GgufFile;
use strata_quant::GgmlType;

use crate::arch::{Architecture, HParams};
use crate::ModelError;

/// A weight tensor in the mapped file: a matrix of `rows` rows of `cols` elements
/// (GGML order: `cols` is `dims[0]`), or a vector when `rows == 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightRef {
    pub name: String,
    pub ty: GgmlType,
    pub cols: usize,
    pub rows: usize,
    /// Absolute file offset of the data.
    pub offset: u64,
    pub bytes: u64,
}

/// The tensors of one transformer block.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub attn_norm: WeightRef,
    pub wq: WeightRef,
    pub wk: WeightRef,
    pub wv: WeightRef,
    pub bq: Option<WeightRef>,
    pub bk: Option<WeightRef>,
    pub bv: Option<WeightRef>,
    pub q_norm: Option<WeightRef>,
    pub k_norm: Option<WeightRef>,
    pub wo: WeightRef,
    pub ffn_norm: WeightRef,
    pub gate: WeightRef,
    pub up: WeightRef,
    pub down: WeightRef,
}

/// Every tensor the forward pass reads.
#[derive(Clone, Debug)]
pub struct ModelWeights {
    pub token_embd: WeightRef,
    pub layers: Vec<LayerWeights>,
    pub output_norm: WeightRef,
    /// The output projection; `token_embd` itself when the file ties them.
    pub output: WeightRef,
    pub tied_embeddings: bool,
}

impl ModelWeights {
    /// Finds and checks every tensor the architecture needs.
    ///
    /// # Errors
    /// A missing tensor, or one whose shape does not match the hyperparameters.
    pub fn from_gguf(file: &GgufFile, hp: &HParams) -> Result<Self, ModelError> {
        let get = |name: &str, cols: usize, rows: usize| -> Result<WeightRef, ModelError> {
            let t = file.tensor(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
            let found_cols = t.dims.first().copied().unwrap_or(0) as usize;
            let found_rows = t.rows() as usize;
            if found_cols != cols || found_rows != rows {
                return Err(ModelError::TensorShape {
                    name: name.to_string(),
                    expected: format!("[{cols}, {rows}]"),
                    found: format!("{:?}", t.dims),
                });
            }
            Ok(WeightRef { name: name.to_string(), ty: t.ty, cols, rows, offset: t.offset, bytes: t.bytes })
        };
        let opt = |name: &str, cols: usize, rows: usize| -> Result<Option<WeightRef>, ModelError> {
            if file.tensor(name).is_some() {
                get(name, cols, rows).map(Some)
            } else {
                Ok(None)
            }
        };
        let (d, q, kv, ff) = (hp.n_embd, hp.q_width(), hp.kv_width(), hp.n_ff);
        let token_embd = get("token_embd.weight", d, hp.vocab_size)?;
        let mut layers = Vec::with_capacity(hp.n_layers);
        for l in 0..hp.n_layers {
            let n = |s: &str| format!("blk.{l}.{s}");
            let (bq, bk, bv) = (
                opt(&n("attn_q.bias"), q, 1)?,
                opt(&n("attn_k.bias"), kv, 1)?,
                opt(&n("attn_v.bias"), kv, 1)?,
            );
            if hp.arch == Architecture::Qwen2 && (bq.is_none() || bk.is_none() || bv.is_none()) {
                return Err(ModelError::MissingTensor(n("attn_{q,k,v}.bias")));
            }
            let (q_norm, k_norm) = (
                opt(&n("attn_q_norm.weight"), hp.head_dim, 1)?,
                opt(&n("attn_k_norm.weight"), hp.head_dim, 1)?,
            );
            if hp.arch == Architecture::Qwen3 && (q_norm.is_none() || k_norm.is_none()) {
                return Err(ModelError::MissingTensor(n("attn_{q,k}_norm.weight")));
            }
            layers.push(LayerWeights {
                attn_norm: get(&n("attn_norm.weight"), d, 1)?,
                wq: get(&n("attn_q.weight"), d, q)?,
                wk: get(&n("attn_k.weight"), d, kv)?,
                wv: get(&n("attn_v.weight"), d, kv)?,
                bq,
                bk,
                bv,
                q_norm,
                k_norm,
                wo: get(&n("attn_output.weight"), q, d)?,
                ffn_norm: get(&n("ffn_norm.weight"), d, 1)?,
                gate: get(&n("ffn_gate.weight"), d, ff)?,
                up: get(&n("ffn_up.weight"), d, ff)?,
                down: get(&n("ffn_down.weight"), ff, d)?,
            });
        }
        let output_norm = get("output_norm.weight", d, 1)?;
        let (output, tied_embeddings) = match opt("output.weight", d, hp.vocab_size)? {
            Some(w) => (w, false),
            None => (token_embd.clone(), true),
        };
        Ok(ModelWeights { token_embd, layers, output_norm, output, tied_embeddings })
    }

    /// Every distinct tensor, once (the tied output is not repeated).
    pub fn all(&self) -> Vec<&WeightRef> {
        let mut v = vec![&self.token_embd, &self.output_norm];
        if !self.tied_embeddings {
            v.push(&self.output);
        }
        for l in &self.layers {
            v.extend([&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.gate, &l.up, &l.down]);
            v.extend([&l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm].into_iter().flatten());
        }
        v
    }

    /// Bytes of all weights.
    pub fn total_bytes(&self) -> u64 {
        self.all().iter().map(|w| w.bytes).sum()
    }
}
