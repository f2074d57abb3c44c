//! Architectures and their hyperparameters, read from a GGUF file's metadata.

use std::fmt;

use strata_io::gguf::Metadata;

use crate::ModelError;

/// A supported model architecture (the GGUF `general.architecture` value).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// Llama, Mistral, SmolLM and friends: no biases, interleaved ("normal") RoPE.
    Llama,
    /// Qwen2 / Qwen2.5: biases on Q, K and V, NeoX RoPE.
    Qwen2,
    /// Qwen3: RMSNorm on each Q and K head (QK-norm), NeoX RoPE.
    Qwen3,
}

impl Architecture {
    /// The architecture named by `general.architecture`.
    ///
    /// # Errors
    /// [`ModelError::UnsupportedArchitecture`] for any other name.
    pub fn from_gguf_name(name: &str) -> Result<Self, ModelError> {
        match name {
            "llama" | "mistral" => Ok(Architecture::Llama),
            "qwen2" => Ok(Architecture::Qwen2),
            "qwen3" => Ok(Architecture::Qwen3),
            other => Err(ModelError::UnsupportedArchitecture(other.to_string())),
        }
    }

    /// The name used as the metadata key prefix.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
        }
    }

    /// How this architecture rotates query and key pairs.
    pub fn rope_style(self) -> RopeStyle {
        match self {
            Architecture::Llama => RopeStyle::Normal,
            Architecture::Qwen2 | Architecture::Qwen3 => RopeStyle::Neox,
        }
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.gguf_name())
    }
}

/// Which elements RoPE rotates together.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)` (GGML's `GGML_ROPE_TYPE_NORMAL`; llama GGUFs are converted for it).
    Normal,
    /// Halves `(i, i + rope_dims/2)` (GGML's `GGML_ROPE_TYPE_NEOX`).
    Neox,
}

/// The dimensions and constants of a llama-family transformer.
#[derive(Clone, Debug, PartialEq)]
pub struct HParams {
    pub arch: Architecture,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Leading dimensions of each head that RoPE rotates (the rest pass through).
    pub rope_dims: usize,
    pub rope_base: f32,
    pub rope_style: RopeStyle,
    pub rms_eps: f32,
    pub vocab_size: usize,
    /// The context length the model was trained for.
    pub trained_context: usize,
}

/// Largest dimension accepted from a file; bounds every allocation a header can ask for.
const MAX_DIM: usize = 1 << 20;

impl HParams {
    /// Reads the hyperparameters from GGUF metadata.
    ///
    /// # Errors
    /// A missing or mistyped key, or dimensions that do not fit together (heads that do not divide
    /// the embedding, KV heads that do not divide the query heads, zero or absurd sizes).
    pub fn from_metadata(meta: &Metadata) -> Result<Self, ModelError> {
        let arch = Architecture::from_gguf_name(meta.str("general.architecture")?)?;
        let p = arch.gguf_name();
        let key = |k: &str| format!("{p}.{k}");
        let n_layers = meta.u32(&key("block_count"))? as usize;
        let n_embd = meta.u32(&key("embedding_length"))? as usize;
        let n_ff = meta.u32(&key("feed_forward_length"))? as usize;
        let n_heads = meta.u32(&key("attention.head_count"))? as usize;
        let n_kv_heads = meta
            .opt_u32(&key("attention.head_count_kv"))?
            .map_or(n_heads, |v| v as usize);
        for (name, v) in [
            ("block_count", n_layers),
            ("embedding_length", n_embd),
            ("feed_forward_length", n_ff),
            ("attention.head_count", n_heads),
            ("attention.head_count_kv", n_kv_heads),
        ] {
            if v == 0 || v > MAX_DIM {
                return Err(ModelError::BadHParam { key: key(name), value: v as u64, why: "must be between 1 and 2^20" });
            }
        }
        let head_dim = match meta.opt_u32(&key("attention.key_length"))? {
            Some(v) => v as usize,
            None => {
                if !n_embd.is_multiple_of(n_heads) {
                    return Err(ModelError::BadHParam { key: key("attention.head_count"), value: n_heads as u64, why: "does not divide embedding_length" });
                }
                n_embd / n_heads
            }
        };
        if let Some(v) = meta.opt_u32(&key("attention.value_length"))? {
            if v as usize != head_dim {
                return Err(ModelError::BadHParam { key: key("attention.value_length"), value: v as u64, why: "differs from key_length, which is not supported" });
            }
        }
        if head_dim == 0 || head_dim % 2 != 0 || head_dim > 1024 {
            return Err(ModelError::BadHParam { key: key("attention.key_length"), value: head_dim as u64, why: "head size must be even and at most 1024" });
        }
        if !n_heads.is_multiple_of(n_kv_heads) {
            return Err(ModelError::BadHParam { key: key("attention.head_count_kv"), value: n_kv_heads as u64, why: "does not divide attention.head_count" });
        }
        let rope_dims = meta.opt_u32(&key("rope.dimension_count"))?.map_or(head_dim, |v| v as usize);
        if rope_dims == 0 || rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(ModelError::BadHParam { key: key("rope.dimension_count"), value: rope_dims as u64, why: "must be even and at most the head size" });
        }
        let rope_base = meta.opt_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0);
        if !(rope_base.is_finite() && rope_base > 1.0) {
            return Err(ModelError::BadHParamF { key: key("rope.freq_base"), value: rope_base });
        }
        let rms_eps = meta.opt_f32(&key("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5);
        if !(rms_eps.is_finite() && rms_eps > 0.0) {
            return Err(ModelError::BadHParamF { key: key("attention.layer_norm_rms_epsilon"), value: rms_eps });
        }
        let vocab_size = match meta.opt_u32(&key("vocab_size"))? {
            Some(v) => v as usize,
            None => meta.str_array("tokenizer.ggml.tokens")?.len(),
        };
        if vocab_size == 0 || vocab_size > (1 << 22) {
            return Err(ModelError::BadHParam { key: key("vocab_size"), value: vocab_size as u64, why: "must be between 1 and 2^22" });
        }
        let trained_context = meta.opt_u32(&key("context_length"))?.map_or(4096, |v| v as usize).max(1);
        Ok(HParams {
            arch,
            n_layers,
            n_embd,
            n_ff,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dims,
            rope_base,
            rope_style: arch.rope_style(),
            rms_eps,
            vocab_size,
            trained_context,
        })
    }

    /// Width of all query heads together.
    pub fn q_width(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of all key (or value) heads together: one KV cell row.
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}
