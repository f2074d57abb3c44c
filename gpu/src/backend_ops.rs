//! Single ops of the forward graph on any device, for checking every device against a reference
//! op by op (ggml's `test-backend-ops` pattern): one test body runs each op on every device that
//! is present. Production code runs whole plans, never these.

use std::sync::Arc;

use strata_model::sampling::Candidate;
use strata_model::RopeStyle;
use strata_quant::{GgmlType, Kernels};

use crate::kv_memory::HostKvMemory;
use crate::DeviceError;

/// Attention of a step's query rows over a KV arena, as the forward graph's `Attention` op.
#[derive(Clone, Copy, Debug)]
pub struct AttentionArgs<'a> {
    pub layer: usize,
    /// One row of `n_heads * head_dim` per token.
    pub q: &'a [f32],
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub positions: &'a [u32],
    pub seq_of_token: &'a [u32],
    pub block_tables: &'a [&'a [u32]],
    pub block_size: usize,
    pub scale: f32,
}

/// The ops of the forward graph on one device.
pub trait OpBackend {
    /// `cpu`, `vulkan:0`, ...
    fn name(&self) -> String;
    /// `out[t][r] = W[r] · x[t]` for a `rows` x `cols` weight of type `ty` (GGUF bytes).
    fn matmul(&mut self, ty: GgmlType, weight: &[u8], rows: usize, cols: usize, x: &[f32], n_tokens: usize) -> Result<Vec<f32>, DeviceError>;
    /// Rows `tokens` of a `rows` x `cols` table of type `ty`, dequantized.
    fn embed(&mut self, ty: GgmlType, table: &[u8], rows: usize, cols: usize, tokens: &[u32]) -> Result<Vec<f32>, DeviceError>;
    /// RMSNorm of each `width`-wide row of `x`.
    fn rms_norm(&mut self, x: &[f32], weight: &[f32], eps: f32) -> Result<Vec<f32>, DeviceError>;
    /// Rotary embedding of each head of each row (`n_heads * head_dim` wide) at its position.
    #[allow(clippy::too_many_arguments)]
    fn rope(&mut self, x: &[f32], n_heads: usize, head_dim: usize, rope_dims: usize, base: f32, positions: &[u32], style: RopeStyle) -> Result<Vec<f32>, DeviceError>;
    fn swiglu(&mut self, gate: &[f32], up: &[f32]) -> Result<Vec<f32>, DeviceError>;
    fn add(&mut self, acc: &[f32], other: &[f32]) -> Result<Vec<f32>, DeviceError>;
    /// Attention over `kv`, read in place.
    fn attention(&mut self, kv: &Arc<HostKvMemory>, args: &AttentionArgs<'_>) -> Result<Vec<f32>, DeviceError>;
    /// The `k` largest values of each `width`-wide row of `x` with their positions, largest
    /// first (`strata_model::sampling::top_k`).
    fn top_k(&mut self, x: &[f32], width: usize, k: usize) -> Result<Vec<Vec<Candidate>>, DeviceError>;
}

/// The CPU device's ops.
pub struct CpuOps {
    kernels: Kernels,
}

impl CpuOps {
    pub fn new(kernels: Kernels) -> CpuOps {
        CpuOps { kernels }
    }
}

pub use crate::cpu::ops::rope_angles;

impl OpBackend for CpuOps {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn matmul(&mut self, ty: GgmlType, weight: &[u8], rows: usize, cols: usize, x: &[f32], n: usize) -> Result<Vec<f32>, DeviceError> {
        let arb = strata_quant::activation_row_bytes(ty, cols);
        let mut act = vec![0u8; arb * n];
        for t in 0..n {
            self.kernels.quantize_activations(ty, &x[t * cols..(t + 1) * cols], &mut act[t * arb..(t + 1) * arb])?;
        }
        let mut out = vec![0f32; rows * n];
        self.kernels.matmul(ty, weight, cols, 0..rows, &act, n, &mut out)?;
        // The kernel writes [token][row] for the row range, which is all rows here.
        Ok(out)
    }

    fn embed(&mut self, ty: GgmlType, table: &[u8], _rows: usize, cols: usize, tokens: &[u32]) -> Result<Vec<f32>, DeviceError> {
        let rb = ty.row_bytes(cols as u64).unwrap_or(0) as usize;
        let mut out = vec![0f32; tokens.len() * cols];
        for (t, &tok) in tokens.iter().enumerate() {
            let src = table.get(tok as usize * rb..(tok as usize + 1) * rb).ok_or_else(|| DeviceError::BadBatch(format!("token {tok} outside the table")))?;
            strata_quant::dequantize(ty, src, &mut out[t * cols..(t + 1) * cols])?;
        }
        Ok(out)
    }

    fn rms_norm(&mut self, x: &[f32], w: &[f32], eps: f32) -> Result<Vec<f32>, DeviceError> {
        let d = w.len();
        let mut out = vec![0f32; x.len()];
        for (o, r) in out.chunks_exact_mut(d).zip(x.chunks_exact(d)) {
            crate::cpu::ops::rms_norm(r, w, eps, o);
        }
        Ok(out)
    }

    fn rope(&mut self, x: &[f32], n_heads: usize, head_dim: usize, rope_dims: usize, base: f32, positions: &[u32], style: RopeStyle) -> Result<Vec<f32>, DeviceError> {
        let mut out = x.to_vec();
        let width = n_heads * head_dim;
        for (t, &pos) in positions.iter().enumerate() {
            let (c, s) = rope_angles(rope_dims, base, pos);
            for h in 0..n_heads {
                let start = t * width + h * head_dim;
                crate::cpu::ops::rope(&mut out[start..start + head_dim], &c, &s, style);
            }
        }
        Ok(out)
    }

    fn swiglu(&mut self, gate: &[f32], up: &[f32]) -> Result<Vec<f32>, DeviceError> {
        let mut out = vec![0f32; gate.len()];
        self.kernels.swiglu(gate, up, &mut out);
        Ok(out)
    }

    fn add(&mut self, acc: &[f32], other: &[f32]) -> Result<Vec<f32>, DeviceError> {
        Ok(acc.iter().zip(other).map(|(a, b)| a + b).collect())
    }

    fn top_k(&mut self, x: &[f32], width: usize, k: usize) -> Result<Vec<Vec<Candidate>>, DeviceError> {
        Ok(x.chunks(width.max(1)).map(|row| strata_model::sampling::top_k(row, k)).collect())
    }

    fn attention(&mut self, kv: &Arc<HostKvMemory>, a: &AttentionArgs<'_>) -> Result<Vec<f32>, DeviceError> {
        let n = a.positions.len();
        let qw = a.n_heads * a.head_dim;
        let group = a.n_heads / a.n_kv_heads;
        let mut out = vec![0f32; n * qw];
        for t in 0..n {
            let table = a.block_tables[a.seq_of_token[t] as usize];
            let len = a.positions[t] as usize + 1;
            let mut scratch = crate::cpu::ops::AttnScratch::default();
            for h in 0..a.n_heads {
                let q = &a.q[t * qw + h * a.head_dim..t * qw + (h + 1) * a.head_dim];
                let o = &mut out[t * qw + h * a.head_dim..t * qw + (h + 1) * a.head_dim];
                crate::cpu::ops::attend_one(&self.kernels, kv, a.layer, table, a.block_size, (h / group) * a.head_dim, len, q, a.scale, strata_quant::AttnOrder::Decode, &mut scratch, o);
            }
        }
        Ok(out)
    }
}
