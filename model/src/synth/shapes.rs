//! The named model shapes the generator knows: real models' dimensions without their weights.

use crate::arch::Architecture;

/// The dimensions and constants of a synthetic llama-family model.
///
/// The named shapes ([`shape_by_name`]) copy real models' hyperparameters; any other combination can
/// be built by hand (it is checked by [`SynthShape::validate`] before a file is written).
#[derive(Clone, Debug, PartialEq)]
pub struct SynthShape {
    /// The shape's name, e.g. `qwen2.5-7b` (written into `general.name`).
    pub name: String,
    /// The architecture (`general.architecture`).
    pub arch: Architecture,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Embedding (residual stream) width.
    pub n_embd: usize,
    /// Feed-forward hidden width.
    pub n_ff: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Width of one head (written as `attention.key_length` / `value_length`).
    pub head_dim: usize,
    /// Tokens in the vocabulary, special tokens included.
    pub vocab_size: usize,
    /// The trained context length (`context_length`).
    pub context_length: usize,
    /// RoPE frequency base.
    pub rope_base: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Whether the output projection reuses `token_embd.weight` (no `output.weight` tensor).
    pub tied_embeddings: bool,
    /// The `tokenizer.ggml.pre` pre-tokenizer name (`qwen2`, `llama-bpe`, `smollm`, ...).
    pub tokenizer_pre: &'static str,
}

/// The names [`shape_by_name`] knows, smallest first.
const NAMES: &[&str] = &[
    "tiny",
    "tiny-qwen2",
    "tiny-qwen2-hd128",
    "tiny-qwen2-wide",
    "tiny-qwen2-long-ff",
    "tiny-qwen2-7b-width",
    "tiny-qwen3",
    "smollm2-135m",
    "qwen2.5-0.5b",
    "qwen3-0.6b",
    "qwen2.5-7b",
    "qwen3-8b",
    "llama3-8b",
];

/// The names of the built-in shapes, smallest first.
pub fn shape_names() -> &'static [&'static str] {
    NAMES
}

/// The built-in shape called `name` (case-insensitive), or `None`.
///
/// - `tiny`: llama, 2 layers, width 64, 4/2 heads, vocab 512: for fast tests (its rows are too
///   short for the K-quants, which fall back to Q8_0).
/// - `tiny-qwen2`, `tiny-qwen3`: the same idea for the other architectures, width 256 so that
///   every type applies.
/// - `tiny-qwen2-hd128`: Qwen2.5-7B's head geometry at test size; `tiny-qwen2-wide`: a row of
///   1,280 (five 256-blocks, more than a 128-invocation workgroup holds at eight elements each);
///   `tiny-qwen2-long-ff`: FFN rows of 4,608 (144 blocks of 32), which the Vulkan device's
///   one-token down projection reads with 128 lanes a row, as a 7B shape's;
///   `tiny-qwen2-7b-width`: Qwen2.5-7B's width and heads (3,584, 28 of 128, 4 KV heads) in two
///   layers with short FFN rows and a small vocabulary.
/// - `smollm2-135m`, `qwen2.5-0.5b`, `qwen3-0.6b`, `qwen2.5-7b`, `qwen3-8b`, `llama3-8b`: the
///   dimensions of the real models of those names.
pub fn shape_by_name(name: &str) -> Option<SynthShape> {
    let lower = name.to_ascii_lowercase();
    #[allow(clippy::too_many_arguments)]
    let s = |arch, n_layers, n_embd, n_ff, n_heads, n_kv_heads, head_dim, vocab_size| SynthShape {
        name: lower.clone(),
        arch,
        n_layers,
        n_embd,
        n_ff,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab_size,
        context_length: 4096,
        rope_base: 10_000.0,
        rms_eps: 1e-5,
        tied_embeddings: false,
        tokenizer_pre: "smollm",
    };
    use Architecture::{Llama, Qwen2, Qwen3};
    let shape = match lower.as_str() {
        "tiny" => SynthShape {
            context_length: 2048,
            ..s(Llama, 2, 64, 128, 4, 2, 16, 512)
        },
        "tiny-qwen2" => SynthShape {
            context_length: 2048,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tied_embeddings: true,
            tokenizer_pre: "qwen2",
            ..s(Qwen2, 2, 256, 512, 4, 2, 64, 1024)
        },
        // Qwen2.5-7B's head geometry (128-wide heads, 7 query heads per KV head) at test size.
        "tiny-qwen2-hd128" => SynthShape {
            context_length: 2048,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tokenizer_pre: "qwen2",
            ..s(Qwen2, 2, 896, 1024, 7, 1, 128, 1024)
        },
        // Rows wider than a workgroup's eight-element runs cover in one pass (1,024).
        "tiny-qwen2-wide" => SynthShape {
            context_length: 2048,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tokenizer_pre: "qwen2",
            ..s(Qwen2, 2, 1280, 1536, 10, 2, 128, 1024)
        },
        // Down projection rows of more than 128 blocks (a 7B shape's product layout).
        "tiny-qwen2-long-ff" => SynthShape {
            context_length: 2048,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tokenizer_pre: "qwen2",
            ..s(Qwen2, 2, 256, 4608, 4, 2, 64, 1024)
        },
        // Qwen2.5-7B's attention width (rows of 112 blocks of 32) at test depth.
        "tiny-qwen2-7b-width" => SynthShape {
            context_length: 2048,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tokenizer_pre: "qwen2",
            ..s(Qwen2, 2, 3584, 1024, 28, 4, 128, 1024)
        },
        "tiny-qwen3" => SynthShape {
            context_length: 2048,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tokenizer_pre: "qwen2",
            ..s(Qwen3, 2, 256, 512, 4, 2, 64, 1024)
        },
        "smollm2-135m" => SynthShape {
            context_length: 8192,
            rope_base: 100_000.0,
            tied_embeddings: true,
            ..s(Llama, 30, 576, 1536, 9, 3, 64, 49152)
        },
        "qwen2.5-0.5b" => SynthShape {
            context_length: 32768,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tied_embeddings: true,
            tokenizer_pre: "qwen2",
            ..s(Qwen2, 24, 896, 4864, 14, 2, 64, 151_936)
        },
        "qwen3-0.6b" => SynthShape {
            context_length: 40960,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tied_embeddings: true,
            tokenizer_pre: "qwen2",
            ..s(Qwen3, 28, 1024, 3072, 16, 8, 128, 151_936)
        },
        "qwen2.5-7b" => SynthShape {
            context_length: 32768,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tokenizer_pre: "qwen2",
            ..s(Qwen2, 28, 3584, 18944, 28, 4, 128, 152_064)
        },
        "qwen3-8b" => SynthShape {
            context_length: 40960,
            rope_base: 1e6,
            rms_eps: 1e-6,
            tokenizer_pre: "qwen2",
            ..s(Qwen3, 36, 4096, 12288, 32, 8, 128, 151_936)
        },
        "llama3-8b" => SynthShape {
            context_length: 8192,
            rope_base: 500_000.0,
            tokenizer_pre: "llama-bpe",
            ..s(Llama, 32, 4096, 14336, 32, 8, 128, 128_256)
        },
        _ => return None,
    };
    Some(shape)
}

impl SynthShape {
    /// Width of all query heads together.
    pub fn q_width(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of all key (or value) heads together.
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// The number of weights (every element of every tensor).
    pub fn parameter_count(&self) -> u64 {
        let (d, q, kv, ff) = (
            self.n_embd as u64,
            self.q_width() as u64,
            self.kv_width() as u64,
            self.n_ff as u64,
        );
        let mut per_layer = 2 * d + d * q + 2 * d * kv + q * d + 3 * d * ff;
        match self.arch {
            Architecture::Qwen2 => per_layer += q + 2 * kv,
            Architecture::Qwen3 => per_layer += 2 * self.head_dim as u64,
            Architecture::Llama => {}
        }
        let embd = d * self.vocab_size as u64;
        let output = if self.tied_embeddings { 0 } else { embd };
        embd + output + d + self.n_layers as u64 * per_layer
    }

    /// Checks that the dimensions fit together the way [`crate::HParams::from_metadata`] and
    /// llama.cpp require.
    ///
    /// # Errors
    /// A description of the first problem found.
    pub fn validate(&self) -> Result<(), String> {
        let dims = [
            ("n_layers", self.n_layers),
            ("n_embd", self.n_embd),
            ("n_ff", self.n_ff),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("context_length", self.context_length),
        ];
        for (name, v) in dims {
            if v == 0 || v > 1 << 20 {
                return Err(format!("{name} = {v} must be between 1 and 2^20"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(format!(
                "n_kv_heads = {} does not divide n_heads = {}",
                self.n_kv_heads, self.n_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) || self.head_dim > 1024 {
            return Err(format!(
                "head_dim = {} must be even and at most 1024",
                self.head_dim
            ));
        }
        let min_vocab = super::tokenizer::MIN_VOCAB;
        if self.vocab_size < min_vocab || self.vocab_size > 1 << 22 {
            return Err(format!(
                "vocab_size = {} must be between {min_vocab} and 2^22",
                self.vocab_size
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return Err(format!(
                "rope_base = {} must be finite and above 1",
                self.rope_base
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0) {
            return Err(format!(
                "rms_eps = {} must be finite and positive",
                self.rms_eps
            ));
        }
        Ok(())
    }
}
