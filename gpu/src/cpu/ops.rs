//! The CPU's element-wise and attention ops (the matrix products live in `strata-quant`).

use half::f16;
use strata_model::RopeStyle;
use strata_quant::{AttnOrder, Kernels};

use crate::kv_memory::HostKvMemory;

/// `out = x / sqrt(mean(x²) + eps) * w`, as ggml computes it: the squares summed in f64 in
/// order, the mean rounded to f32, the row scaled, then multiplied by the weight.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let sum_sq: f64 = x.iter().map(|v| (v * v) as f64).sum();
    let mean = (sum_sq / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// [`rms_norm`], its output then moved one ulp ([`nudge_one_ulp`]) when `nudge`
/// (`CpuOptions::nudge_norms`).
pub fn rms_norm_nudged(x: &[f32], w: &[f32], eps: f32, out: &mut [f32], nudge: bool) {
    rms_norm(x, w, eps, out);
    if nudge {
        nudge_one_ulp(out);
    }
}

/// Moves each value one representable value away from zero (zero to the smallest subnormal; the
/// largest finite magnitudes, infinities and NaNs stay as they are): `CpuOptions::nudge_norms`'
/// perturbation.
pub fn nudge_one_ulp(values: &mut [f32]) {
    for v in values {
        if v.abs() < f32::MAX {
            *v = f32::from_bits(v.to_bits() + 1);
        }
    }
}

/// The cos and sin of each of the `rope_dims / 2` rotary angles at position `pos`, as ggml's
/// `rope_cache_init` computes them: the angle starts at `pos` and is multiplied by
/// `base^(-2/rope_dims)` (libm `powf`) from one pair to the next, in f32. The Vulkan plan
/// uploads a table of exactly these values.
pub fn rope_angles(rope_dims: usize, base: f32, pos: u32) -> (Vec<f32>, Vec<f32>) {
    let half = rope_dims / 2;
    let (mut cos, mut sin) = (vec![0.0; half], vec![0.0; half]);
    rope_angles_into(rope_dims, base, pos, &mut cos, &mut sin);
    (cos, sin)
}

/// [`rope_angles`] into caller-owned slices of `rope_dims / 2`.
pub fn rope_angles_into(rope_dims: usize, base: f32, pos: u32, cos: &mut [f32], sin: &mut [f32]) {
    let theta_scale = base.powf(-2.0 / rope_dims as f32);
    let mut theta = pos as f32;
    for (c, s) in cos.iter_mut().zip(sin.iter_mut()) {
        (*c, *s) = (theta.cos(), theta.sin());
        theta *= theta_scale;
    }
}

/// Rotates one head in place; `cos`/`sin` hold `rope_dims / 2` angles for this token. The
/// rotation fuses one product of each output the way ggml's x86 build does (measured against
/// llama.cpp's tensors): `x0*c - x1*s` as `fma(x0, c, -(x1*s))`, `x0*s + x1*c` as
/// `fma(x0, s, x1*c)`.
pub fn rope(head: &mut [f32], cos: &[f32], sin: &[f32], style: RopeStyle) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has FMA (checked just above).
        unsafe { rope_fma(head, cos, sin, style) };
        return;
    }
    rope_body(head, cos, sin, style);
}

/// [`rope`] compiled with FMA enabled: `mul_add` becomes one instruction instead of a call to
/// the software `fmaf` (same bits: both are the fused, correctly rounded operation).
///
/// # Safety
/// The CPU must have FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn rope_fma(head: &mut [f32], cos: &[f32], sin: &[f32], style: RopeStyle) {
    rope_body(head, cos, sin, style);
}

#[inline(always)]
fn rope_body(head: &mut [f32], cos: &[f32], sin: &[f32], style: RopeStyle) {
    let half = cos.len();
    let (stride, offset) = match style {
        RopeStyle::Normal => (2, 1),
        RopeStyle::Neox => (1, half),
    };
    for i in 0..half {
        let (i0, i1) = (i * stride, i * stride + offset);
        let (a, b) = (head[i0], head[i1]);
        head[i0] = a.mul_add(cos[i], -(b * sin[i]));
        head[i1] = a.mul_add(sin[i], b * cos[i]);
    }
}

/// Converts to half precision (round to nearest even, as ggml does), with F16C where the CPU has
/// it (`half`'s slice conversion; the same rounding as the scalar one).
pub fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    use half::slice::HalfFloatSliceExt;
    let n = src.len().min(dst.len());
    dst[..n].convert_from_f32_slice(&src[..n]);
}

/// Per-thread buffers of [`attend_group`].
#[derive(Default)]
pub struct AttnScratch {
    scores: Vec<f32>,
    q_half: Vec<f16>,
    q_rounded: Vec<f32>,
    acc: Vec<f32>,
}

/// Attention of the query heads of `kv_heads` consecutive KV heads (from column `kv_col` of the
/// cache's rows) over their sequence's cells `0..len`, each head computed exactly as alone (see
/// [`attend_one`]): `q` and `out` hold the `q.len() / hd` heads back to back, split evenly among
/// the KV heads in order. The kernels read the f16 cache in place, each row once for the heads.
///
/// Why several KV heads at once: a cell's row holds every KV head's columns, and a paged cache's
/// blocks are scattered; reading whole rows is what lets prefetching reach the core's read
/// bandwidth (an item per KV head read a third of each row and ran at about half the speed when
/// the cache is out of L3).
///
/// The arithmetic is llama.cpp's (non-flash) attention on the CPU, bit for bit: the query and
/// the softmax weights are rounded to f16 before they meet the f16 cache, the softmax is ggml's,
/// and both products follow `order` (ggml sums a one-token step's products differently from a
/// many-token step's; see [`AttnOrder`]; `AttnOrder::Sequential` is strata-rt's own).
#[allow(clippy::too_many_arguments)]
pub fn attend_group(
    kernels: &Kernels,
    kv: &HostKvMemory,
    layer: usize,
    block_table: &[u32],
    block_size: usize,
    kv_col: usize,
    kv_heads: usize,
    hd: usize,
    len: usize,
    q: &[f32],
    scale: f32,
    order: AttnOrder,
    scratch: &mut AttnScratch,
    out: &mut [f32],
) {
    let heads = q.len() / hd;
    let width = kv_heads * hd;
    let per_head = order.value_lanes() * hd;
    let AttnScratch { scores, q_half, q_rounded, acc } = scratch;
    scores.resize(scores.len().max(heads * len), 0.0);
    q_half.resize(q_half.len().max(heads * hd), f16::ZERO);
    q_rounded.resize(q_rounded.len().max(heads * hd), 0.0);
    // Written whole by `values_f16_rows`: no clearing.
    acc.resize(acc.len().max(heads * per_head), 0.0);
    // The query rounded to f16 (as ggml stores it) and back, 16 lanes at a time where the CPU
    // has F16C (`half`'s slice conversions; the same rounding as one by one).
    {
        use half::slice::HalfFloatSliceExt;
        let n = q.len().min(heads * hd);
        q_half[..n].convert_from_f32_slice(&q[..n]);
        q_half[..n].convert_to_f32_slice(&mut q_rounded[..n]);
    }
    let q = &q_rounded[..heads * hd];
    let scores = &mut scores[..heads * len];
    let acc = &mut acc[..heads * per_head];
    // The KV heads' `width` columns of cells `0..len` of K or V, wherever their blocks lie: the
    // kernels take the rows in position order across blocks (a value lane's positions span many
    // blocks).
    assert!(block_table.len() * block_size >= len, "attend_group: the block table is shorter than the sequence");
    let stride = kv.placement().row_stride_bytes as usize / 2;
    // What the row slices below rely on; how the query heads split among the KV heads is the
    // kernels' check.
    assert!(kv_col + width <= stride, "attend_group: {kv_heads} KV heads of {hd} from column {kv_col} do not fit rows of {stride}");
    let fill_rows = |v: bool, rows: &mut Vec<&[f16]>| {
        rows.clear();
        for (b, &block) in block_table.iter().enumerate().take(len.div_ceil(block_size)) {
            let n = (len - b * block_size).min(block_size);
            // SAFETY: the batch was validated: every position up to this token's lies in a block
            // of its table, inside the arena; a block's cells are consecutive rows of `stride`
            // elements, each holding every KV head's columns (`kv_col + width` at least); cells of
            // earlier positions are no longer being written.
            unsafe {
                let first = (kv.row_ptr(layer, v, (block as usize * block_size) as u64) as *const f16).add(kv_col);
                rows.extend((0..n).map(|i| std::slice::from_raw_parts(first.add(i * stride), width)));
            }
        }
    };
    let mut rows = Vec::with_capacity(len);
    fill_rows(false, &mut rows);
    kernels.attn_dots_f16_rows(&rows, q, hd, kv_heads, order, scores, len);
    for head_scores in scores.chunks_exact_mut(len) {
        kernels.softmax_f16(head_scores, scale);
    }
    fill_rows(true, &mut rows);
    kernels.values_f16_rows(acc, hd, kv_heads, order, scores, len, &rows);
    for h in 0..heads {
        kernels.finish_values(&acc[h * per_head..(h + 1) * per_head], hd, order, &mut out[h * hd..(h + 1) * hd]);
    }
}

/// Attention of one query head over its sequence's cells `0..len`: [`attend_group`] with a
/// group of one.
#[allow(clippy::too_many_arguments)]
pub fn attend_one(
    kernels: &Kernels,
    kv: &HostKvMemory,
    layer: usize,
    block_table: &[u32],
    block_size: usize,
    kv_col: usize,
    len: usize,
    q: &[f32],
    scale: f32,
    order: AttnOrder,
    scratch: &mut AttnScratch,
    out: &mut [f32],
) {
    attend_group(kernels, kv, layer, block_table, block_size, kv_col, 1, q.len(), len, q, scale, order, scratch, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use strata_kv::{KvDtype, KvLayout, KvShape, LayoutParams};

    #[test]
    fn nudge_moves_each_finite_value_one_ulp_away_from_zero() {
        let mut v = [1.0f32, -1.0, 0.0, -0.0, f32::MAX, f32::INFINITY, f32::NAN, 3.5e-42];
        nudge_one_ulp(&mut v);
        assert_eq!(v[0], 1.0 + f32::EPSILON);
        assert_eq!(v[1], -1.0 - f32::EPSILON);
        assert_eq!(v[2].to_bits(), 1);
        assert_eq!(v[3].to_bits(), 0x8000_0001);
        assert_eq!(v[4], f32::MAX);
        assert_eq!(v[5], f32::INFINITY);
        assert!(v[6].is_nan());
        assert_eq!(v[7].to_bits(), 3.5e-42f32.to_bits() + 1);
    }

    /// The grouped attention is the per-head attention, bit for bit, whether a call takes one KV
    /// head or both, and every kernel level computes the scalar level's bits, for GQA groups of
    /// 1, 3 and 7 heads over scattered blocks, in every summation order.
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
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for order in [AttnOrder::Decode, AttnOrder::Prefill, AttnOrder::Sequential] {
                let mut scalar_out: Option<Vec<f32>> = None;
                for level in [strata_quant::SimdLevel::Scalar, strata_quant::SimdLevel::Avx2, strata_quant::SimdLevel::Avx512Vnni] {
                    let Some(k) = Kernels::with_level(level) else { continue };
                    let kvh = 1;
                    let mut out = vec![0f32; group * hd];
                    let mut scratch = AttnScratch::default();
                    attend_group(&k, &kv, 0, &table, 16, kvh * hd, 1, hd, len, &q, 0.125, order, &mut scratch, &mut out);
                    for g in 0..group {
                        let mut want = vec![0f32; hd];
                        attend_one(&k, &kv, 0, &table, 16, kvh * hd, len, &q[g * hd..(g + 1) * hd], 0.125, order, &mut AttnScratch::default(), &mut want);
                        assert_eq!(bits(&out[g * hd..(g + 1) * hd]), bits(&want), "group {group}, head {g}, {level:?}, {order:?}");
                    }
                    // Both KV heads in one call: each head's bits as above.
                    let q_both: Vec<f32> = q.iter().chain(&q).map(|x| -x).collect();
                    let mut out_both = vec![0f32; 2 * group * hd];
                    attend_group(&k, &kv, 0, &table, 16, 0, 2, hd, len, &q_both, 0.125, order, &mut scratch, &mut out_both);
                    for kvh in 0..2 {
                        let mut want = vec![0f32; group * hd];
                        attend_group(&k, &kv, 0, &table, 16, kvh * hd, 1, hd, len, &q_both[kvh * group * hd..(kvh + 1) * group * hd], 0.125, order, &mut AttnScratch::default(), &mut want);
                        assert_eq!(bits(&out_both[kvh * group * hd..(kvh + 1) * group * hd]), bits(&want), "KV head {kvh} of two, group {group}, {level:?}, {order:?}");
                    }
                    match &scalar_out {
                        None => scalar_out = Some(out),
                        Some(s) => assert_eq!(bits(s), bits(&out), "{level:?} against the scalar level, group {group}, {order:?}"),
                    }
                }
            }
        }
    }
}
