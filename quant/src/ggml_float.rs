//! The float ops of attention and SwiGLU in ggml's exact CPU arithmetic (x86, AVX-512 build):
//! its vectorized `expf`, its softmax, and the two summation orders its attention products take
//! (`ggml_vec_dot_f16` for a one-token step, llamafile's tinyBLAS for a many-token one); beside
//! them, strata-rt's own sequential order for when llama.cpp's bits are not the goal.
//!
//! Why: with 8-bit activations a last-bit difference anywhere moves some activation a whole
//! quantization step, and over 30 layers that flips near-ties of the output. Computing what
//! llama.cpp computes, bit for bit, is what puts the CPU device's top-1 agreement with it on
//! the golden prompts above the noise floor of "the same math in another order".
//!
//! The portable functions here define the results; `avx512.rs` computes the same bits faster.
//! Every function is checked against the AVX-512 one in `tests/kernels.rs`.

/// The summation order of an attention product (scores `q.k` and the weighted sum of values).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AttnOrder {
    /// ggml's one-token path (`ggml_vec_dot_f16`): four 16-lane accumulators over chunks of 64
    /// elements, reduced `(a0+a2)+(a1+a3)`, then across lanes.
    Decode,
    /// ggml's many-token path (llamafile tinyBLAS): one 16-lane accumulator over chunks of 16
    /// elements, reduced across lanes.
    Prefill,
    /// Not ggml's: the scores as [`AttnOrder::Prefill`]; the value product with one accumulator
    /// per output element, the positions added in order. ggml's orders keep 64 or 16 rows of
    /// accumulators per head (one per position modulo that), which a decode step of a short
    /// context writes and reduces for a few positions each; this order has no such fixed cost.
    /// For the products' own non-ggml order (`ProductOrder::Interleaved`), where llama.cpp's bits
    /// are not kept anyway.
    Sequential,
}

impl AttnOrder {
    /// Accumulator lanes of the value product: one per position modulo this.
    pub fn value_lanes(self) -> usize {
        match self {
            AttnOrder::Decode => 64,
            AttnOrder::Prefill => 16,
            AttnOrder::Sequential => 1,
        }
    }
}

const EXP_SHIFT: f32 = 12_582_912.0; // 0x1.8p23
const LOG2E: f32 = f32::from_bits(0x3fb8_aa3b); // 0x1.715476p+0
const LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 0x1.62e4p-1
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // 0x1.7f7d1cp-20
const P5: f32 = f32::from_bits(0x3c07_2010); // 0x1.0e4020p-7
const P4: f32 = f32::from_bits(0x3d2b_9f17); // 0x1.573e2ep-5
const P3: f32 = f32::from_bits(0x3e2a_af33); // 0x1.555e66p-3
const P2: f32 = f32::from_bits(0x3eff_fedb); // 0x1.fffdb6p-2
const P1: f32 = f32::from_bits(0x3f7f_fff6); // 0x1.ffffecp-1

/// The constants of ggml's vectorized `expf`, for the SIMD versions.
pub(crate) const EXP_CONSTS: [f32; 9] = [EXP_SHIFT, LOG2E, LN2_HI, LN2_LO, P5, P4, P3, P2, P1];

/// ggml's `ggml_v_expf` (AVX-512 build) on one value: a degree-5 polynomial after range
/// reduction by `ln 2`, scaled by `2^n`; 0 below and infinity above the range.
pub fn v_expf(x: f32) -> f32 {
    let z = x.mul_add(LOG2E, EXP_SHIFT);
    let n = z - EXP_SHIFT;
    let b = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let u = b * b;
    let j = P5.mul_add(b, P4).mul_add(u, P3.mul_add(b, P2)).mul_add(u, P1.mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    if n.is_nan() {
        return f32::NAN;
    }
    // `scalef`: j * 2^n rounded once (the product is exact in f64).
    (j as f64 * 2f64.powi(n as i32)) as f32
}

/// ggml's `ggml_v_silu`: `x / (1 + v_expf(-x))`.
pub fn v_silu(x: f32) -> f32 {
    x / (1.0 + v_expf(0.0 - x))
}

/// The lane reduction of GCC's `_mm512_reduce_add_ps`: halves, then quarters, then pairs.
pub fn reduce16(x: &[f32; 16]) -> f32 {
    let r8: [f32; 8] = std::array::from_fn(|i| x[i] + x[i + 8]);
    let r4: [f32; 4] = std::array::from_fn(|i| r8[i] + r8[i + 4]);
    (r4[0] + r4[2]) + (r4[1] + r4[3])
}

/// `sum a[i] * b[i]` in `order` (ggml: f16 K row against the f16-rounded query; both given as
/// f32 here, so every product is exact).
pub fn dot(a: &[f32], b: &[f32], order: AttnOrder) -> f32 {
    let n = a.len().min(b.len());
    if order != AttnOrder::Decode && n.is_multiple_of(16) {
        let mut acc = [0f32; 16];
        for c in (0..n).step_by(16) {
            for l in 0..16 {
                acc[l] = a[c + l].mul_add(b[c + l], acc[l]);
            }
        }
        return reduce16(&acc);
    }
    // ggml_vec_dot_f16 (also tinyBLAS's fallback when `n` is not a multiple of 16).
    let np = n - n % 64;
    let mut acc = [[0f32; 16]; 4];
    for c in (0..np).step_by(64) {
        for (j, accj) in acc.iter_mut().enumerate() {
            for (l, lane) in accj.iter_mut().enumerate() {
                let i = c + 16 * j + l;
                *lane = a[i].mul_add(b[i], *lane);
            }
        }
    }
    let mut sum = if np > 0 {
        let x: [f32; 16] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
        reduce16(&x) as f64
    } else {
        0.0
    };
    for i in np..n {
        sum += (a[i] * b[i]) as f64;
    }
    sum as f32
}

/// ggml's `soft_max_ext` on one row of raw scores followed by the f16 rounding its value product
/// gives the weights: `p = f16(softmax(scale * s))`, in place. Exponentials in 16-wide chunks
/// whose sums are added in f64.
pub fn softmax_f16(scores: &mut [f32], scale: f32) {
    let mut max = f32::NEG_INFINITY;
    for s in scores.iter_mut() {
        *s *= scale;
        max = max.max(*s);
    }
    let mut sum = 0f64;
    for chunk in scores.chunks_mut(16) {
        let mut e = [0f32; 16];
        for (l, s) in chunk.iter_mut().enumerate() {
            *s = v_expf(*s - max);
            e[l] = *s;
        }
        sum += reduce16(&e) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for s in scores.iter_mut() {
        *s = half::f16::from_f32(*s * inv).to_f32();
    }
}

/// Adds rows `first..first + weights.len()` of the weighted sum of values to `acc`
/// (`order.value_lanes() * hd` floats, zero at the start): position `j`'s row goes into
/// accumulator row `j % lanes` with one FMA per element. `values` holds the rows, `hd` each.
pub fn accumulate_values(acc: &mut [f32], hd: usize, order: AttnOrder, first: usize, weights: &[f32], values: &[f32]) {
    let lanes = order.value_lanes();
    for (i, &w) in weights.iter().enumerate() {
        let row = (first + i) % lanes;
        let a = &mut acc[row * hd..(row + 1) * hd];
        for (o, &v) in a.iter_mut().zip(&values[i * hd..(i + 1) * hd]) {
            *o = w.mul_add(v, *o);
        }
    }
}

/// The value product's result from its accumulators (see [`accumulate_values`]).
pub fn finish_values(acc: &[f32], hd: usize, order: AttnOrder, out: &mut [f32]) {
    for (d, o) in out.iter_mut().enumerate().take(hd) {
        let lane = |r: usize| acc[r * hd + d];
        let x: [f32; 16] = match order {
            AttnOrder::Decode => std::array::from_fn(|l| (lane(l) + lane(32 + l)) + (lane(16 + l) + lane(48 + l))),
            AttnOrder::Prefill => std::array::from_fn(lane),
            AttnOrder::Sequential => {
                *o = lane(0);
                continue;
            }
        };
        *o = reduce16(&x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v_expf_is_close_to_exp_and_saturates() {
        for i in -1700..1700 {
            let x = i as f32 * 0.05;
            let (got, want) = (v_expf(x), x.exp());
            assert!((got - want).abs() <= want * 3e-7 + 1e-37, "{x}: {got} vs {want}");
        }
        assert_eq!(v_expf(89.0), f32::INFINITY);
        assert_eq!(v_expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(v_expf(-1000.0), 0.0);
        assert_eq!(v_expf(1000.0), f32::INFINITY);
    }

    /// The sequential order's value product is the running sum of `w * v`, one FMA a position
    /// in position order, whatever position the rows start at.
    #[test]
    fn sequential_values_are_a_running_sum() {
        let hd = 48;
        let weights: Vec<f32> = (0..37).map(|j| ((j * 7 % 11) as f32 * 0.09).max(0.0)).collect();
        let values: Vec<f32> = (0..37 * hd).map(|i| (i as f32 * 0.173).sin()).collect();
        let mut want = vec![0f32; hd];
        for (j, w) in weights.iter().enumerate() {
            for (d, o) in want.iter_mut().enumerate() {
                *o = w.mul_add(values[j * hd + d], *o);
            }
        }
        let order = AttnOrder::Sequential;
        assert_eq!(order.value_lanes(), 1);
        let mut acc = vec![0f32; hd];
        accumulate_values(&mut acc, hd, order, 3, &weights[..20], &values[..20 * hd]);
        accumulate_values(&mut acc, hd, order, 23, &weights[20..], &values[20 * hd..]);
        let mut out = vec![f32::NAN; hd];
        finish_values(&acc, hd, order, &mut out);
        assert_eq!(out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    }

    #[test]
    fn orders_sum_the_same_products() {
        let a: Vec<f32> = (0..128).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..128).map(|i| (i as f32 * 0.11).cos()).collect();
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        for order in [AttnOrder::Decode, AttnOrder::Prefill, AttnOrder::Sequential] {
            assert!((dot(&a, &b, order) as f64 - exact).abs() < 1e-4);
        }
    }
}
