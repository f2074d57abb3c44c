//! The CPU's element-wise and attention ops (the matrix products live in `strata-quant`).

use half::f16;
use strata_model::RopeStyle;
use strata_quant::Kernels;

use crate::kv_memory::HostKvMemory;

/// `out = x / sqrt(mean(x²) + eps) * w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let sum_sq: f32 = x.iter().map(|v| v * v).sum();
    let scale = 1.0 / (sum_sq / x.len() as f32 + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// The cos and sin of each of the `rope_dims / 2` rotary angles at position `pos`, as the CPU
/// plan computes them (the Vulkan plan uploads a table of exactly these values).
pub fn rope_angles(rope_dims: usize, base: f32, pos: u32) -> (Vec<f32>, Vec<f32>) {
    (0..rope_dims / 2)
        .map(|i| {
            let f = base.powf(-2.0 * i as f32 / rope_dims as f32);
            let (s, c) = (pos as f32 * f).sin_cos();
            (c, s)
        })
        .unzip()
}

/// Rotates one head in place; `cos`/`sin` hold `rope_dims / 2` angles for this token.
pub fn rope(head: &mut [f32], cos: &[f32], sin: &[f32], style: RopeStyle) {
    let half = cos.len();
    match style {
        RopeStyle::Normal => {
            for i in 0..half {
                let (a, b) = (head[2 * i], head[2 * i + 1]);
                head[2 * i] = a * cos[i] - b * sin[i];
                head[2 * i + 1] = a * sin[i] + b * cos[i];
            }
        }
        RopeStyle::Neox => {
            for i in 0..half {
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * cos[i] - b * sin[i];
                head[i + half] = a * sin[i] + b * cos[i];
            }
        }
    }
}

/// `out = silu(gate) * up`.
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + (-g).exp()) * u;
    }
}

/// Converts to half precision (round to nearest even, as ggml does).
pub fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f16::from_f32(s);
    }
}

/// Attention of the query heads that share one KV head over their sequence's cells `0..len`, each
/// head computed exactly as alone (see [`attend_one`]): `q` and `out` hold the `q.len() / hd`
/// heads back to back, `scores` holds one row of `len` per head. Each K and V row is converted
/// from f16 once for the group instead of once per head.
#[allow(clippy::too_many_arguments)]
pub fn attend_group(
    kernels: &Kernels,
    kv: &HostKvMemory,
    layer: usize,
    block_table: &[u32],
    block_size: usize,
    kv_col: usize,
    hd: usize,
    len: usize,
    q: &[f32],
    scale: f32,
    scores: &mut [f32],
    q_rounded: &mut [f32],
    out: &mut [f32],
) {
    let heads = q.len() / hd;
    for (r, &x) in q_rounded.iter_mut().zip(q) {
        *r = f16::from_f32(x).to_f32();
    }
    let q = &q_rounded[..heads * hd];
    let scores = &mut scores[..heads * len];
    let stride = kv.placement().row_stride_bytes as usize / 2;
    let block_rows = |v: bool, j0: usize, n: usize| -> &[f16] {
        let first = (block_table[j0 / block_size] as usize * block_size) as u64;
        // SAFETY: the batch was validated: every position up to this token's lies in a block of
        // its table, inside the arena; a block's cells are consecutive rows of `stride` elements;
        // cells of earlier positions are no longer being written.
        unsafe { std::slice::from_raw_parts((kv.row_ptr(layer, v, first) as *const f16).add(kv_col), (n - 1) * stride + hd) }
    };
    let mut j0 = 0;
    while j0 < len {
        let n = (block_size - j0 % block_size).min(len - j0);
        kernels.dot_f16_f32_rows_multi(block_rows(false, j0, n), stride, n, q, hd, &mut scores[j0..], len);
        j0 += n;
    }
    for head_scores in scores.chunks_exact_mut(len) {
        let mut max = f32::NEG_INFINITY;
        for s in head_scores.iter_mut() {
            *s *= scale;
            max = max.max(*s);
        }
        let mut sum = 0.0f32;
        for s in head_scores.iter_mut() {
            *s = (*s - max).exp();
            sum += *s;
        }
        let inv = 1.0 / sum;
        for s in head_scores.iter_mut() {
            *s = f16::from_f32(*s * inv).to_f32();
        }
    }
    let out = &mut out[..heads * hd];
    out.fill(0.0);
    let mut j0 = 0;
    while j0 < len {
        let n = (block_size - j0 % block_size).min(len - j0);
        kernels.axpy_f16_rows_multi(out, hd, &scores[j0..], len, n, block_rows(true, j0, n), stride);
        j0 += n;
    }
}

/// Attention of one query head over its sequence's cells `0..scores.len()`: [`attend_group`]
/// with a group of one.
///
/// `kv_col` is the element offset of the head's KV head inside a cell row. The query and the
/// attention weights are rounded to f16 before they meet the f16 cache, as ggml does: it keeps the
/// CPU reference numerically next to llama.cpp (measured on the default model: top-1 agreement
/// with llama.cpp 94.9% without the rounding, 96.8% with it). The cells of one KV block are
/// consecutive rows, so each block is one kernel call for the scores and one for the values.
#[allow(clippy::too_many_arguments)]
pub fn attend_one(
    kernels: &Kernels,
    kv: &HostKvMemory,
    layer: usize,
    block_table: &[u32],
    block_size: usize,
    kv_col: usize,
    q: &[f32],
    scale: f32,
    scores: &mut [f32],
    q_rounded: &mut [f32],
    out: &mut [f32],
) {
    attend_group(kernels, kv, layer, block_table, block_size, kv_col, q.len(), scores.len(), q, scale, scores, q_rounded, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use strata_kv::{KvDtype, KvLayout, KvShape, LayoutParams};

    /// The grouped attention is the per-head attention, bit for bit, on every kernel level, for
    /// GQA groups of 1, 3 and 7 heads over scattered blocks.
    #[test]
    fn attend_group_equals_attend_one_per_head() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for (group, hd) in [(1usize, 64usize), (3, 64), (7, 128)] {
            let n_kv_heads = 2u32;
            let shape = KvShape { n_layers: 1, n_kv_heads, head_dim: hd as u32, dtype: KvDtype::F16 };
            let mut p = LayoutParams::new(shape, 256);
            p.block_size = 16;
            let kv = HostKvMemory::allocate_for(&KvLayout::compute(&p).expect("layout")).expect("allocate");
            let width = n_kv_heads as usize * hd;
            for cell in 0..256u64 {
                for v in [false, true] {
                    // SAFETY: cell < n_cells; nothing else touches this arena.
                    let row = unsafe { std::slice::from_raw_parts_mut(kv.row_ptr(0, v, cell) as *mut f16, width) };
                    row.iter_mut().for_each(|x| *x = f16::from_f32(rng.gen_range(-1.0f32..1.0)));
                }
            }
            let table = [9u32, 2, 14, 5, 0, 11];
            let len = 83;
            let q: Vec<f32> = (0..group * hd).map(|_| rng.gen_range(-2.0f32..2.0)).collect();
            for level in [strata_quant::SimdLevel::Scalar, strata_quant::SimdLevel::Avx2, strata_quant::SimdLevel::Avx512Vnni] {
                let Some(k) = Kernels::with_level(level) else { continue };
                let kvh = 1;
                let mut out = vec![0f32; group * hd];
                let (mut scores, mut qr) = (vec![0f32; group * len], vec![0f32; group * hd]);
                attend_group(&k, &kv, 0, &table, 16, kvh * hd, hd, len, &q, 0.125, &mut scores, &mut qr, &mut out);
                for g in 0..group {
                    let mut want = vec![0f32; hd];
                    let (mut s1, mut q1) = (vec![0f32; len], vec![0f32; hd]);
                    attend_one(&k, &kv, 0, &table, 16, kvh * hd, &q[g * hd..(g + 1) * hd], 0.125, &mut s1, &mut q1, &mut want);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&out[g * hd..(g + 1) * hd]), bits(&want), "group {group}, head {g}, {level:?}");
                }
            }
        }
    }
}
