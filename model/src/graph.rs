//! The forward graph: what one step of the model computes, as a list of ops over named activation
//! buffers and weights. It is built once per model; each device compiles it into its own executable
//! form (a CPU plan, recorded Vulkan command buffers, a captured CUDA graph) and replays it per step.
//!
//! Every activation buffer is a matrix with one row per token of the step (or, after
//! [`Op::SelectRows`], one row per token whose logits are wanted).

use crate::arch::{HParams, RopeStyle};
use crate::weights::{ModelWeights, WeightRef};

/// Index of an activation buffer in [`ForwardGraph::buffers`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufId(pub u16);

/// Index of a weight in [`ForwardGraph::weights`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct WeightId(pub u16);

/// How many rows a buffer has in a step.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rows {
    /// One per token of the step.
    Tokens,
    /// One per token whose logits are wanted.
    Outputs,
}

/// An activation buffer.
#[derive(Clone, Debug)]
pub struct BufferDesc {
    pub name: &'static str,
    /// Elements per row.
    pub width: usize,
    pub rows: Rows,
}

/// One output of a [`Op::MatMul`]: `out = input · weightᵀ (+ bias)`.
#[derive(Clone, Debug)]
pub struct Projection {
    pub weight: WeightId,
    pub bias: Option<WeightId>,
    pub out: BufId,
}

/// One operation of the forward graph.
#[derive(Clone, Debug)]
pub enum Op {
    /// `out[t] = table[token[t]]`, dequantized.
    Embed { table: WeightId, out: BufId },
    /// `out[t] = input[t] / rms(input[t]) * weight`.
    RmsNorm { input: BufId, weight: WeightId, out: BufId },
    /// Several projections of the same input (Q, K and V; gate and up), run as one dispatch so the
    /// input is quantized once.
    MatMul { input: BufId, outputs: Vec<Projection> },
    /// RMSNorm of each `head_dim`-wide head of `buf`, in place (Qwen3's QK-norm).
    HeadNorm { buf: BufId, weight: WeightId, n_heads: usize },
    /// Rotary position embedding of each head of `buf`, in place, at each token's position.
    Rope { buf: BufId, n_heads: usize },
    /// Writes each token's K and V rows into its KV cell for `layer`.
    StoreKv { layer: usize, k: BufId, v: BufId },
    /// Causal attention of each token's query heads over its own sequence's cells `0..=pos`.
    Attention { layer: usize, q: BufId, out: BufId },
    /// `out = silu(gate) * up`.
    SwiGlu { gate: BufId, up: BufId, out: BufId },
    /// `acc += other` (the residual stream).
    Add { acc: BufId, other: BufId },
    /// Copies the rows whose logits are wanted into `out` (a [`Rows::Outputs`] buffer).
    SelectRows { input: BufId, out: BufId },
}

/// The forward graph of a model.
#[derive(Clone, Debug)]
pub struct ForwardGraph {
    pub hparams: HParams,
    pub buffers: Vec<BufferDesc>,
    pub weights: Vec<WeightRef>,
    pub ops: Vec<Op>,
    /// The buffer holding the logits ([`Rows::Outputs`] rows of `vocab_size`).
    pub logits: BufId,
    /// `1/sqrt(head_dim)`.
    pub attention_scale: f32,
    pub rope_style: RopeStyle,
}

impl ForwardGraph {
    /// Builds the llama-family graph (llama, qwen2 with QKV bias, qwen3 with QK-norm).
    pub fn llama(hp: &HParams, w: &ModelWeights) -> ForwardGraph {
        let mut b = Builder { buffers: Vec::new(), weights: Vec::new(), ops: Vec::new() };
        let x = b.buf("x", hp.n_embd, Rows::Tokens);
        let h = b.buf("h", hp.n_embd, Rows::Tokens);
        let q = b.buf("q", hp.q_width(), Rows::Tokens);
        let k = b.buf("k", hp.kv_width(), Rows::Tokens);
        let v = b.buf("v", hp.kv_width(), Rows::Tokens);
        let attn = b.buf("attn", hp.q_width(), Rows::Tokens);
        let proj = b.buf("proj", hp.n_embd, Rows::Tokens);
        let gate = b.buf("gate", hp.n_ff, Rows::Tokens);
        let up = b.buf("up", hp.n_ff, Rows::Tokens);
        let act = b.buf("act", hp.n_ff, Rows::Tokens);
        let last = b.buf("last", hp.n_embd, Rows::Outputs);
        let last_norm = b.buf("last_norm", hp.n_embd, Rows::Outputs);
        let logits = b.buf("logits", hp.vocab_size, Rows::Outputs);

        let table = b.weight(&w.token_embd);
        b.ops.push(Op::Embed { table, out: x });
        for (layer, lw) in w.layers.iter().enumerate() {
            let weight = b.weight(&lw.attn_norm);
            b.ops.push(Op::RmsNorm { input: x, weight, out: h });
            let outputs = vec![
                b.projection(&lw.wq, lw.bq.as_ref(), q),
                b.projection(&lw.wk, lw.bk.as_ref(), k),
                b.projection(&lw.wv, lw.bv.as_ref(), v),
            ];
            b.ops.push(Op::MatMul { input: h, outputs });
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                let (qn, kn) = (b.weight(qn), b.weight(kn));
                b.ops.push(Op::HeadNorm { buf: q, weight: qn, n_heads: hp.n_heads });
                b.ops.push(Op::HeadNorm { buf: k, weight: kn, n_heads: hp.n_kv_heads });
            }
            b.ops.push(Op::Rope { buf: q, n_heads: hp.n_heads });
            b.ops.push(Op::Rope { buf: k, n_heads: hp.n_kv_heads });
            b.ops.push(Op::StoreKv { layer, k, v });
            b.ops.push(Op::Attention { layer, q, out: attn });
            let outputs = vec![b.projection(&lw.wo, None, proj)];
            b.ops.push(Op::MatMul { input: attn, outputs });
            b.ops.push(Op::Add { acc: x, other: proj });
            let weight = b.weight(&lw.ffn_norm);
            b.ops.push(Op::RmsNorm { input: x, weight, out: h });
            let outputs = vec![b.projection(&lw.gate, None, gate), b.projection(&lw.up, None, up)];
            b.ops.push(Op::MatMul { input: h, outputs });
            b.ops.push(Op::SwiGlu { gate, up, out: act });
            let outputs = vec![b.projection(&lw.down, None, proj)];
            b.ops.push(Op::MatMul { input: act, outputs });
            b.ops.push(Op::Add { acc: x, other: proj });
        }
        b.ops.push(Op::SelectRows { input: x, out: last });
        let weight = b.weight(&w.output_norm);
        b.ops.push(Op::RmsNorm { input: last, weight, out: last_norm });
        let outputs = vec![b.projection(&w.output, None, logits)];
        b.ops.push(Op::MatMul { input: last_norm, outputs });

        ForwardGraph {
            hparams: hp.clone(),
            buffers: b.buffers,
            weights: b.weights,
            ops: b.ops,
            logits,
            attention_scale: 1.0 / (hp.head_dim as f32).sqrt(),
            rope_style: hp.rope_style,
        }
    }

    /// The description of a buffer.
    pub fn buffer(&self, id: BufId) -> &BufferDesc {
        &self.buffers[id.0 as usize]
    }

    /// The description of a weight.
    pub fn weight(&self, id: WeightId) -> &WeightRef {
        &self.weights[id.0 as usize]
    }
}

struct Builder {
    buffers: Vec<BufferDesc>,
    weights: Vec<WeightRef>,
    ops: Vec<Op>,
}

impl Builder {
    fn buf(&mut self, name: &'static str, width: usize, rows: Rows) -> BufId {
        self.buffers.push(BufferDesc { name, width, rows });
        BufId((self.buffers.len() - 1) as u16)
    }

    /// Registers a weight once, however many ops read it (tied embeddings read one twice).
    fn weight(&mut self, w: &WeightRef) -> WeightId {
        let idx = match self.weights.iter().position(|x| x.name == w.name) {
            Some(i) => i,
            None => {
                self.weights.push(w.clone());
                self.weights.len() - 1
            }
        };
        WeightId(idx as u16)
    }

    fn projection(&mut self, w: &WeightRef, bias: Option<&WeightRef>, out: BufId) -> Projection {
        let weight = self.weight(w);
        let bias = bias.map(|b| self.weight(b));
        Projection { weight, bias, out }
    }
}
