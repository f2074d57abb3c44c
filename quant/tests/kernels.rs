//! Every SIMD level this CPU has against the scalar kernels, and the scalar kernels against
//! dequantized f64 math.

use half::f16;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata_quant::{activation_row_bytes, dequantize, quantize, GgmlType, Kernels, ProductOrder, SimdLevel};

const WEIGHT_TYPES: [GgmlType; 9] = [
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::F32,
];

/// Every SIMD kernel set this CPU has; AVX-512 VNNI's batched 32-block tiles in both forms
/// (256-bit and 512-bit registers), whichever this CPU takes by default.
fn simd_levels() -> Vec<Kernels> {
    let mut levels: Vec<Kernels> = Kernels::with_level(SimdLevel::Avx2).into_iter().collect();
    if let Some(k) = Kernels::with_level(SimdLevel::Avx512Vnni) {
        levels.extend([k.with_wide_tiles(false), k.with_wide_tiles(true)]);
    }
    levels
}

/// The levels with a product order of their own (AVX-512 VNNI's interleaved one), in both tile
/// widths.
fn interleaved() -> Vec<Kernels> {
    let k = Kernels::with_level(SimdLevel::Avx512Vnni).map(|k| k.with_order(ProductOrder::Interleaved));
    k.into_iter().flat_map(|k| [k.with_wide_tiles(false), k.with_wide_tiles(true)]).collect()
}

/// `w` (rows of `k` elements of `ty`) as `kern`'s products read it.
fn weights_for(kern: &Kernels, ty: GgmlType, k: usize, w: &[u8]) -> Vec<u8> {
    let rows = w.len() / ty.row_bytes(k as u64).unwrap() as usize;
    kern.repack_weights(ty, k, rows, w).unwrap().unwrap_or_else(|| w.to_vec())
}

fn scalar() -> Kernels {
    Kernels::with_level(SimdLevel::Scalar).unwrap()
}

/// The bit patterns of `v`: for comparisons where -0.0 and 0.0 or two NaNs must not pass as equal.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn rand_vec(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0) * scale).collect()
}

struct Case {
    ty: GgmlType,
    k: usize,
    nrows: usize,
    n_tokens: usize,
    w: Vec<u8>,
    a: Vec<u8>,
    wf: Vec<f32>,
    af: Vec<f32>,
}

fn make_case(rng: &mut StdRng, ty: GgmlType, k: usize, nrows: usize, n_tokens: usize) -> Case {
    let wsrc = rand_vec(rng, nrows * k, 0.5);
    let rb = ty.row_bytes(k as u64).unwrap() as usize;
    let mut w = vec![0u8; nrows * rb];
    quantize(ty, &wsrc, &mut w).unwrap();
    let mut wf = vec![0f32; nrows * k];
    dequantize(ty, &w, &mut wf).unwrap();
    let asrc = rand_vec(rng, n_tokens * k, 2.0);
    let at = Kernels::activation_type(ty);
    let arb = activation_row_bytes(ty, k);
    let mut a = vec![0u8; n_tokens * arb];
    quantize(at, &asrc, &mut a).unwrap();
    let mut af = vec![0f32; n_tokens * k];
    dequantize(at, &a, &mut af).unwrap();
    Case { ty, k, nrows, n_tokens, w, a, wf, af }
}

/// Per-output tolerance: a fraction of the sum of |w * a| (what a dropped or doubled block
/// would change by far more).
fn bounds(c: &Case, rel: f64) -> Vec<f64> {
    let mut b = vec![0f64; c.n_tokens * c.nrows];
    for t in 0..c.n_tokens {
        for r in 0..c.nrows {
            let s: f64 = (0..c.k).map(|i| (c.wf[r * c.k + i] as f64 * c.af[t * c.k + i] as f64).abs()).sum();
            b[t * c.nrows + r] = s * rel + 1e-6;
        }
    }
    b
}

fn run(kern: &Kernels, c: &Case, rows: std::ops::Range<usize>) -> Vec<f32> {
    let mut out = vec![f32::NAN; c.n_tokens * rows.len()];
    kern.matmul(c.ty, &weights_for(kern, c.ty, c.k, &c.w), c.k, rows, &c.a, c.n_tokens, &mut out).unwrap();
    out
}

fn check_simd_against_scalar(c: &Case) {
    let reference = run(&scalar(), c, 0..c.nrows);
    let tol = bounds(c, 2e-5);
    for kern in simd_levels() {
        let got = run(&kern, c, 0..c.nrows);
        // The 32-block types follow ggml's x86 arithmetic on every level: the same bits.
        if matches!(c.ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0) {
            assert_eq!(bits(&got), bits(&reference), "{:?} {} k={} rows={} tokens={}: not the scalar bits", kern, c.ty, c.k, c.nrows, c.n_tokens);
        }
        for i in 0..got.len() {
            assert!(
                ((got[i] - reference[i]) as f64).abs() <= tol[i],
                "{:?} {} k={} rows={} tokens={} out[{i}]: {} vs scalar {} (tol {})",
                kern,
                c.ty,
                c.k,
                c.nrows,
                c.n_tokens,
                got[i],
                reference[i],
                tol[i]
            );
        }
        // A sub-range of rows gives the same values as the full run.
        if c.nrows > 2 {
            let sub = run(&kern, c, 1..c.nrows - 1);
            let n = c.nrows - 2;
            for t in 0..c.n_tokens {
                for r in 0..n {
                    assert_eq!(sub[t * n + r], got[t * c.nrows + r + 1], "{:?} {} sub-range", kern.level(), c.ty);
                }
            }
        }
    }
}

fn ks(ty: GgmlType) -> Vec<usize> {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => vec![256, 768, 1280],
        GgmlType::F16 | GgmlType::BF16 | GgmlType::F32 => vec![7, 32, 100, 576],
        _ => vec![32, 96, 160, 608, 576],
    }
}

#[test]
fn simd_matmul_matches_scalar_awkward_sizes() {
    let mut rng = StdRng::seed_from_u64(1);
    for ty in WEIGHT_TYPES {
        for k in ks(ty) {
            for (nrows, n_tokens) in [(1, 1), (3, 1), (5, 2), (6, 3), (7, 4), (9, 5), (4, 6), (2, 7), (13, 8), (5, 9), (6, 17)] {
                let c = make_case(&mut rng, ty, k, nrows, n_tokens);
                check_simd_against_scalar(&c);
            }
        }
    }
}

/// The interleaved order sums the scalar level's terms in another order: within rounding of
/// them at every width (no group, whole groups, groups and a tail), row range and token count;
/// and not llama.cpp's bits (else it would not be a different order).
#[test]
fn interleaved_products_match_scalar_within_rounding() {
    let mut rng = StdRng::seed_from_u64(43);
    for kern in interleaved() {
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
            let mut differ = 0;
            for k in [32, 224, 256, 576, 608, 1536] {
                for (nrows, n_tokens) in [(1, 1), (7, 3), (13, 9)] {
                    let c = make_case(&mut rng, ty, k, nrows, n_tokens);
                    let want = run(&scalar(), &c, 0..nrows);
                    let got = run(&kern, &c, 0..nrows);
                    let tol = bounds(&c, 2e-6);
                    for i in 0..got.len() {
                        assert!(((got[i] - want[i]) as f64).abs() <= tol[i], "{ty} k={k} rows={nrows} tokens={n_tokens} out[{i}]: {} vs scalar {} (tol {})", got[i], want[i], tol[i]);
                    }
                    differ += got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                    if nrows > 2 {
                        let sub = run(&kern, &c, 2..nrows);
                        for t in 0..n_tokens {
                            assert_eq!(bits(&sub[t * (nrows - 2)..(t + 1) * (nrows - 2)]), bits(&got[t * nrows + 2..(t + 1) * nrows]), "{ty} k={k}: sub-range");
                        }
                    }
                }
            }
            assert!(differ > 0, "{ty}: the interleaved order gave ggml's bits everywhere");
            // Weights of the wrong length or width are refused; ggml's order keeps GGUF's layout.
            let c = make_case(&mut rng, ty, 64, 3, 1);
            assert!(kern.repack_weights(ty, 64, 4, &c.w).is_err(), "{ty}: rows beyond the bytes");
            assert!(kern.repack_weights(ty, 48, 3, &c.w).is_err(), "{ty}: a width of no whole blocks");
            assert!(kern.with_order(ProductOrder::Ggml).repack_weights(ty, 64, 3, &c.w).unwrap().is_none(), "{ty}: ggml's order repacked");
        }
    }
}

/// Both tile widths give the same bits, in ggml's order and the interleaved one, at every row and
/// token count of a batched product (pairs of rows, a last odd row, 5-9 tokens and more).
#[test]
fn wide_and_narrow_tiles_give_the_same_bits() {
    let Some(avx512) = Kernels::with_level(SimdLevel::Avx512Vnni) else { return };
    let mut rng = StdRng::seed_from_u64(44);
    for order in [ProductOrder::Ggml, ProductOrder::Interleaved] {
        let (narrow, wide) = (avx512.with_order(order).with_wide_tiles(false), avx512.with_order(order).with_wide_tiles(true));
        assert!(wide.wide_tiles() && !narrow.wide_tiles());
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
            for k in [32, 256, 576, 608] {
                for (nrows, n_tokens) in [(2, 5), (3, 8), (5, 7), (8, 9), (7, 16), (4, 70)] {
                    let c = make_case(&mut rng, ty, k, nrows, n_tokens);
                    assert_eq!(bits(&run(&wide, &c, 0..nrows)), bits(&run(&narrow, &c, 0..nrows)), "{order:?} {ty} k={k} rows={nrows} tokens={n_tokens}");
                }
            }
        }
    }
}

/// Large weights are repacked on several threads: the same bytes as row ranges repacked alone.
#[test]
fn repacking_large_weights_on_threads_gives_the_bytes_of_small_ranges() {
    for kern in interleaved() {
        let (ty, k, rows) = (GgmlType::Q8_0, 4096, 4001);
        let rb = ty.row_bytes(k as u64).unwrap() as usize;
        let w: Vec<u8> = (0..rows * rb).map(|i| (i * 131 + i / 977) as u8).collect();
        let whole = kern.repack_weights(ty, k, rows, &w).unwrap().unwrap();
        for range in [0..7, 1999..2003, 3990..4001] {
            let part = kern.repack_weights(ty, k, range.len(), &w[range.start * rb..range.end * rb]).unwrap().unwrap();
            assert_eq!(part, whole[range.start * rb..range.end * rb], "rows {range:?}");
        }
    }
}

#[test]
fn simd_matmul_matches_scalar_many_tokens() {
    // More than one token cache block (64), rows not a multiple of 4.
    let mut rng = StdRng::seed_from_u64(2);
    for ty in WEIGHT_TYPES {
        let k = ks(ty)[1];
        let c = make_case(&mut rng, ty, k, 6, 70);
        check_simd_against_scalar(&c);
    }
}

#[test]
fn scalar_matmul_matches_dequantized_math() {
    let mut rng = StdRng::seed_from_u64(3);
    for ty in WEIGHT_TYPES {
        for k in ks(ty) {
            let c = make_case(&mut rng, ty, k, 5, 3);
            let got = run(&scalar(), &c, 0..c.nrows);
            // Q8_1's s is stored as f16, so Q4_1 carries a 2^-11 relative error on its min term.
            let tol = bounds(&c, if ty == GgmlType::Q4_1 { 1e-3 } else { 2e-5 });
            for t in 0..c.n_tokens {
                for r in 0..c.nrows {
                    let exact: f64 = (0..k).map(|i| c.wf[r * k + i] as f64 * c.af[t * k + i] as f64).sum();
                    let g = got[t * c.nrows + r] as f64;
                    assert!((g - exact).abs() <= tol[t * c.nrows + r], "{ty} k={k} r={r} t={t}: {g} vs {exact}");
                }
            }
        }
    }
}

#[test]
fn simd_activation_quantization_is_bit_exact() {
    let mut rng = StdRng::seed_from_u64(4);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16] {
        for k in [256usize, 512, 1536] {
            let mut x = rand_vec(&mut rng, k, 3.0);
            // Ties and zero blocks.
            x[3] = 0.5;
            x[40] = -2.5;
            for v in &mut x[64..96] {
                *v = 0.0;
            }
            let n = activation_row_bytes(ty, k);
            let mut want = vec![0u8; n];
            scalar().quantize_activations(ty, &x, &mut want).unwrap();
            let mut direct = vec![0u8; n];
            quantize(Kernels::activation_type(ty), &x, &mut direct).unwrap();
            assert_eq!(want, direct);
            for kern in simd_levels() {
                let mut got = vec![0u8; n];
                kern.quantize_activations(ty, &x, &mut got).unwrap();
                assert_eq!(got, want, "{:?} {ty} k={k}", kern.level());
            }
        }
    }
}

#[test]
fn dot_f32_matches_scalar() {
    let mut rng = StdRng::seed_from_u64(5);
    for n in [0usize, 1, 7, 8, 15, 16, 17, 31, 33, 64, 100, 129] {
        let a = rand_vec(&mut rng, n, 1.0);
        let b = rand_vec(&mut rng, n, 1.0);
        let s = scalar();
        let abs: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum::<f32>() + 1e-6;
        for kern in simd_levels() {
            assert!((kern.dot_f32(&a, &b) - s.dot_f32(&a, &b)).abs() <= 1e-5 * abs, "{:?} n={n}", kern.level());
        }
    }
}

#[test]
fn errors_name_types_and_lengths() {
    let kern = Kernels::best();
    let e = kern.matmul(GgmlType::IQ2_XXS, &[], 256, 0..1, &[], 1, &mut [0.0]).unwrap_err();
    assert!(e.to_string().contains("IQ2_XXS"), "{e}");
    let w = vec![0u8; 2 * 20];
    let a = vec![0u8; 36];
    let e = kern.matmul(GgmlType::Q4_1, &w, 32, 0..3, &a, 1, &mut [0.0; 3]).unwrap_err();
    assert!(e.to_string().contains("0..3") || e.to_string().contains("3"), "{e}");
    let e = kern.matmul(GgmlType::Q4_1, &w, 32, 0..2, &a, 1, &mut [0.0; 3]).unwrap_err();
    assert!(e.to_string().contains("expected 2, got 3"), "{e}");
    let e = kern.matmul(GgmlType::Q4_K, &w, 32, 0..1, &a, 1, &mut [0.0; 1]).unwrap_err();
    assert!(e.to_string().contains("256"), "{e}");
    let e = dequantize(GgmlType::Q4_0, &[0u8; 17], &mut [0f32; 32]).unwrap_err();
    assert!(e.to_string().contains("expected 18, got 17"), "{e}");
    let e = quantize(GgmlType::Q3_K, &[0f32; 256], &mut [0u8; 110]).unwrap_err();
    assert!(e.to_string().contains("Q3_K"), "{e}");
    assert_eq!(activation_row_bytes(GgmlType::Q4_1, 576), 18 * 36);
    assert_eq!(activation_row_bytes(GgmlType::Q6_K, 512), 2 * 292);
    assert_eq!(activation_row_bytes(GgmlType::F16, 10), 40);
    assert_eq!(Kernels::activation_type(GgmlType::Q8_0), GgmlType::Q8_0);
    assert_eq!(Kernels::activation_type(GgmlType::Q5_K), GgmlType::Q8_K);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn proptest_simd_matmul_matches_scalar(
        ti in 0usize..WEIGHT_TYPES.len(),
        blocks in 1usize..8,
        nrows in 1usize..10,
        n_tokens in 1usize..10,
        seed in any::<u64>(),
    ) {
        let ty = WEIGHT_TYPES[ti];
        let k = match ty {
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => 256 * blocks.min(3),
            GgmlType::F16 | GgmlType::BF16 | GgmlType::F32 => 13 * blocks,
            _ => 32 * blocks,
        };
        let mut rng = StdRng::seed_from_u64(seed);
        let c = make_case(&mut rng, ty, k, nrows, n_tokens);
        check_simd_against_scalar(&c);
    }

    #[test]
    fn proptest_activation_quantization_bit_exact(seed in any::<u64>(), blocks in 1usize..4, scale in 0.001f32..100.0) {
        let mut rng = StdRng::seed_from_u64(seed);
        let k = 256 * blocks;
        let x = rand_vec(&mut rng, k, scale);
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K] {
            let n = activation_row_bytes(ty, k);
            let mut want = vec![0u8; n];
            scalar().quantize_activations(ty, &x, &mut want).unwrap();
            for kern in simd_levels() {
                let mut got = vec![0u8; n];
                kern.quantize_activations(ty, &x, &mut got).unwrap();
                prop_assert_eq!(&got, &want);
            }
        }
    }
}

/// Batch invariance: a token's results are bit-identical whether it is multiplied alone or with
/// any number of other tokens (a server batches unrelated requests together; greedy outputs must
/// not depend on the company a request keeps).
#[test]
fn every_level_is_batch_invariant() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut kernels = simd_levels();
    kernels.push(scalar());
    kernels.extend(interleaved());
    for ty in WEIGHT_TYPES {
        // Interleaved rows: two groups of eight blocks and a tail of three.
        let k = if ty.block_elems() == 32 { 608 } else { ks(ty)[0] };
        let c = make_case(&mut rng, ty, k, 9, 70);
        let arb = activation_row_bytes(ty, k);
        for kern in &kernels {
            let all = run(kern, &c, 0..c.nrows);
            for n in [1usize, 2, 3, 5, 17, 64] {
                for t0 in [0usize, 3, 70 - n] {
                    let part = Case { n_tokens: n, a: c.a[t0 * arb..(t0 + n) * arb].to_vec(), w: c.w.clone(), wf: Vec::new(), af: Vec::new(), ..c };
                    let out = run(kern, &part, 0..c.nrows);
                    for t in 0..n {
                        let (got, want) = (&out[t * c.nrows..(t + 1) * c.nrows], &all[(t0 + t) * c.nrows..(t0 + t + 1) * c.nrows]);
                        assert!(
                            got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{ty} at {:?}: token {} gives other bits in a batch of {n} than in one of 70",
                            kern,
                            t0 + t
                        );
                    }
                }
            }
        }
    }
}

/// The many-row attention helpers are bit-identical to the one-row calls they batch.
/// The ggml-exact float ops (SwiGLU, attention dots, softmax, value sums) give the scalar
/// level's bits on every level, over awkward lengths and every summation order.
#[test]
fn ggml_float_ops_are_bit_identical_across_levels() {
    use strata_quant::AttnOrder;
    let mut rng = StdRng::seed_from_u64(77);
    let s = scalar();
    for n in [1usize, 15, 16, 17, 100, 1536] {
        let gate = rand_vec(&mut rng, n, 12.0);
        let up = rand_vec(&mut rng, n, 3.0);
        let mut want = vec![0f32; n];
        s.swiglu(&gate, &up, &mut want);
        let mut scores = rand_vec(&mut rng, n, 40.0);
        let mut want_sm = scores.clone();
        s.softmax_f16(&mut want_sm, 0.125);
        for kern in simd_levels() {
            let mut got = vec![0f32; n];
            kern.swiglu(&gate, &up, &mut got);
            assert_eq!(bits(&got), bits(&want), "{:?} swiglu n={n}", kern.level());
            let mut sm = scores.clone();
            kern.softmax_f16(&mut sm, 0.125);
            assert_eq!(bits(&sm), bits(&want_sm), "{:?} softmax n={n}", kern.level());
        }
        scores.clear();
    }
    for hd in [64usize, 128] {
        for order in [AttnOrder::Decode, AttnOrder::Prefill, AttnOrder::Sequential] {
            let rows_n = 37;
            let rows: Vec<f32> = rand_vec(&mut rng, rows_n * hd, 1.0).iter().map(|&x| f16::from_f32(x).to_f32()).collect();
            let q: Vec<f32> = rand_vec(&mut rng, hd, 2.0).iter().map(|&x| f16::from_f32(x).to_f32()).collect();
            let weights: Vec<f32> = rand_vec(&mut rng, rows_n, 1.0).iter().map(|&x| f16::from_f32(x.abs()).to_f32()).collect();
            let rows16: Vec<f16> = rows.iter().map(|&x| f16::from_f32(x)).collect();
            let run = |k: &Kernels| {
                let mut dots = vec![0f32; rows_n];
                k.attn_dots_f16(&rows16, hd, rows_n, &q, hd, order, &mut dots, rows_n);
                let mut acc = vec![0f32; order.value_lanes() * hd];
                // Two calls, the second starting mid-way, as blocks of the KV cache arrive.
                k.accumulate_values_f16(&mut acc, hd, order, 5, &weights[..20], 20, 20, &rows16[..20 * hd], hd);
                k.accumulate_values_f16(&mut acc, hd, order, 25, &weights[20..], rows_n - 20, rows_n - 20, &rows16[20 * hd..], hd);
                let mut out = vec![0f32; hd];
                k.finish_values(&acc, hd, order, &mut out);
                (dots, out)
            };
            let (wd, wo) = run(&s);
            for kern in simd_levels() {
                let (d, o) = run(&kern);
                assert_eq!(bits(&d), bits(&wd), "{:?} dots hd={hd} {order:?}", kern.level());
                assert_eq!(bits(&o), bits(&wo), "{:?} values hd={hd} {order:?}", kern.level());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The attention kernels over rows scattered across blocks of a paged cache (one slice per
    /// row) give ggml's bits on every level: the scores of `ggml_float::dot`, the value
    /// accumulators of `ggml_float::accumulate_values` row by row from zero, whatever the head
    /// count (more than one pass of heads too), head size, length and block size.
    #[test]
    fn proptest_attention_rows_match_ggml(
        hdi in 0usize..6,
        group in 1usize..11,
        kv_heads in 1usize..4,
        len in 1usize..300,
        bsi in 0usize..4,
        seed in any::<u64>(),
    ) {
        use strata_quant::{ggml_float, AttnOrder};
        let hd = [16usize, 48, 64, 128, 192, 256][hdi];
        let block_size = [1usize, 3, 16, 64][bsi];
        let heads = group * kv_heads;
        let mut rng = StdRng::seed_from_u64(seed);
        // An arena of blocks, rows of 1 + kv_heads heads' columns plus padding; the call reads
        // the KV heads from the second on.
        let n_blocks = len.div_ceil(block_size) + 3;
        let width = kv_heads * hd;
        let stride = hd + width + 8;
        let arena: Vec<f16> = (0..n_blocks * block_size * stride)
            .map(|i| match i % 97 {
                0 => f16::from_f32(-0.0),
                1 => f16::from_f32(0.0),
                _ => f16::from_f32(rng.gen_range(-1.0f32..1.0)),
            })
            .collect();
        let mut table: Vec<usize> = (0..n_blocks).collect();
        for i in (1..n_blocks).rev() {
            table.swap(i, rng.gen_range(0..=i));
        }
        let rows: Vec<&[f16]> = (0..len)
            .map(|j| {
                let cell = table[j / block_size] * block_size + j % block_size;
                &arena[cell * stride + hd..cell * stride + hd + width]
            })
            .collect();
        let rows32: Vec<Vec<f32>> = rows.iter().map(|r| r.iter().map(|x| x.to_f32()).collect()).collect();
        // Query head h's columns of row j: its KV head's.
        let kv_cols = |j: usize, h: usize| &rows32[j][h / group * hd..(h / group + 1) * hd];
        let q: Vec<f32> = (0..heads * hd).map(|_| f16::from_f32(rng.gen_range(-2.0f32..2.0)).to_f32()).collect();
        let weights: Vec<f32> = (0..heads * len)
            .map(|i| if i % 13 == 0 { 0.0 } else { f16::from_f32(rng.gen_range(0.0f32..1.0)).to_f32() })
            .collect();
        for order in [AttnOrder::Decode, AttnOrder::Prefill, AttnOrder::Sequential] {
            let lanes = order.value_lanes();
            let mut want_dots = vec![0f32; heads * len];
            for h in 0..heads {
                for j in 0..len {
                    want_dots[h * len + j] = ggml_float::dot(kv_cols(j, h), &q[h * hd..(h + 1) * hd], order);
                }
            }
            let mut want_acc = vec![0f32; heads * lanes * hd];
            for h in 0..heads {
                let a = &mut want_acc[h * lanes * hd..(h + 1) * lanes * hd];
                for j in 0..len {
                    ggml_float::accumulate_values(a, hd, order, j, &[weights[h * len + j]], kv_cols(j, h));
                }
            }
            for kern in std::iter::once(scalar()).chain(simd_levels()) {
                let level = kern.level();
                let mut dots = vec![f32::NAN; heads * len];
                kern.attn_dots_f16_rows(&rows, &q, hd, kv_heads, order, &mut dots, len);
                prop_assert_eq!(bits(&dots), bits(&want_dots), "{:?} dots hd={} heads={} kv_heads={} len={} {:?}", level, hd, heads, kv_heads, len, order);
                // Written over whatever was there.
                let mut acc = vec![f32::NAN; heads * lanes * hd];
                kern.values_f16_rows(&mut acc, hd, kv_heads, order, &weights, len, &rows);
                prop_assert_eq!(bits(&acc), bits(&want_acc), "{:?} values hd={} heads={} kv_heads={} len={} bs={} {:?}", level, hd, heads, kv_heads, len, block_size, order);
                if kv_heads > 1 {
                    continue;
                }
                // The contiguous form (one KV head), added in two calls, the second starting
                // mid-way.
                let flat: Vec<f16> = rows.iter().flat_map(|r| r.iter().copied()).collect();
                let split = len / 3;
                let mut acc2 = vec![0f32; heads * lanes * hd];
                kern.accumulate_values_f16(&mut acc2, hd, order, 0, &weights, len, split, &flat[..split * hd], hd);
                kern.accumulate_values_f16(&mut acc2, hd, order, split, &weights[split..], len, len - split, &flat[split * hd..], hd);
                prop_assert_eq!(bits(&acc2), bits(&want_acc), "{:?} split values hd={} heads={} len={} {:?}", level, hd, heads, len, order);
            }
        }
    }
}

/// Activations packed once give every row block the bits of an unpacked call, on every level;
/// a pack made for another product is refused.
#[test]
fn packed_activations_give_the_unpacked_bits() {
    let mut rng = StdRng::seed_from_u64(31);
    for ty in WEIGHT_TYPES {
        let (k, nrows, n_tokens) = (if ty.block_elems() == 32 { 608 } else { 512 }, 40, 6);
        let c = make_case(&mut rng, ty, k, nrows, n_tokens);
        for kern in std::iter::once(scalar()).chain(simd_levels()).chain(interleaved()) {
            let w = weights_for(&kern, ty, k, &c.w);
            let pack = kern.pack_activations(ty, &c.a, k, n_tokens).unwrap();
            for rows in [0..nrows, 3..17, 17..40] {
                let want = run(&kern, &c, rows.clone());
                let mut got = vec![f32::NAN; n_tokens * rows.len()];
                kern.matmul_packed(ty, &w, k, rows, &c.a, n_tokens, &pack, &mut got).unwrap();
                assert_eq!(bits(&got), bits(&want), "{:?} {ty}", kern.level());
            }
            let mut out = vec![0f32; n_tokens * nrows];
            assert!(kern.matmul_packed(ty, &w, k, 0..nrows, &c.a[..(n_tokens - 1) * c.a.len() / n_tokens], n_tokens - 1, &pack, &mut out[..(n_tokens - 1) * nrows]).is_err());
        }
    }
}

/// A pack filled token by token, from two threads in an awkward order, gives the bits of one made
/// at once; writing straight into a wider output with a row stride gives the same bits in its
/// columns and leaves the other columns alone; bad token indexes, row lengths and strides are
/// errors.
#[test]
fn packs_filled_token_by_token_and_strided_outputs_give_the_same_bits() {
    let mut rng = StdRng::seed_from_u64(37);
    for ty in WEIGHT_TYPES {
        let (k, nrows, n_tokens) = (if ty.block_elems() == 32 { 608 } else { 512 }, 24, 7);
        let c = make_case(&mut rng, ty, k, nrows, n_tokens);
        let arb = activation_row_bytes(ty, k);
        for kern in std::iter::once(scalar()).chain(simd_levels()).chain(interleaved()) {
            let w = weights_for(&kern, ty, k, &c.w);
            let whole = kern.pack_activations(ty, &c.a, k, n_tokens).unwrap();
            let mut tokenwise = kern.packed_activations(ty, k, n_tokens).unwrap();
            {
                let packer = tokenwise.packer();
                std::thread::scope(|s| {
                    for half in [[6usize, 0, 4, 2], [1, 5, 3, usize::MAX]] {
                        let (packer, a) = (&packer, &c.a);
                        s.spawn(move || {
                            for t in half.into_iter().filter(|&t| t < n_tokens) {
                                // SAFETY: the two threads pack disjoint tokens.
                                unsafe { packer.pack_token(t, &a[t * arb..(t + 1) * arb]) }.unwrap();
                            }
                        });
                    }
                });
                // SAFETY: one thread.
                unsafe {
                    assert!(packer.pack_token(n_tokens, &c.a[..arb]).is_err(), "token index past the pack");
                    assert!(packer.pack_token(0, &c.a[..arb - 1]).is_err(), "short row");
                }
            }
            let rows = 5..19;
            let mut want = vec![0f32; n_tokens * rows.len()];
            kern.matmul_packed(ty, &w, k, rows.clone(), &c.a, n_tokens, &whole, &mut want).unwrap();
            let mut got = vec![0f32; n_tokens * rows.len()];
            kern.matmul_packed(ty, &w, k, rows.clone(), &c.a, n_tokens, &tokenwise, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{:?} {ty}: token-by-token pack", kern.level());
            // Straight into columns 3.. of a 30-wide output.
            let width = 30;
            let mut wide = vec![-7.0f32; n_tokens * width];
            // SAFETY: the writes land in `wide` (columns 3..3 + rows.len() of n_tokens rows).
            unsafe { kern.matmul_packed_into(ty, &w, k, rows.clone(), &c.a, n_tokens, &tokenwise, wide.as_mut_ptr().add(3), width) }.unwrap();
            for t in 0..n_tokens {
                let row = &wide[t * width..(t + 1) * width];
                assert_eq!(bits(&row[3..3 + rows.len()]), bits(&want[t * rows.len()..(t + 1) * rows.len()]), "{:?} {ty}: strided", kern.level());
                assert!(row[..3].iter().chain(&row[3 + rows.len()..]).all(|&x| x == -7.0), "{:?} {ty}: other columns", kern.level());
            }
            // SAFETY: refused before any write.
            assert!(unsafe { kern.matmul_packed_into(ty, &w, k, rows.clone(), &c.a, n_tokens, &tokenwise, wide.as_mut_ptr(), rows.len() - 1) }.is_err(), "stride below the row count");
        }
    }
}

/// A spare pack, repacked with other activations, gives the bits of a new pack of them; only a
/// pack made for the same weight type, width and token count is taken from the spares.
#[test]
fn reused_packs_give_the_bits_of_new_ones() {
    let mut rng = StdRng::seed_from_u64(41);
    for ty in WEIGHT_TYPES {
        let (k, nrows, n_tokens) = (if ty.block_elems() == 32 { 608 } else { 512 }, 20, 8);
        let first = make_case(&mut rng, ty, k, nrows, n_tokens);
        let second = make_case(&mut rng, ty, k, nrows, n_tokens);
        let arb = activation_row_bytes(ty, k);
        for kern in std::iter::once(scalar()).chain(simd_levels()).chain(interleaved()) {
            let w = weights_for(&kern, ty, k, &first.w);
            let mut spare = vec![kern.pack_activations(ty, &first.a, k, n_tokens).unwrap()];
            // Other token counts and widths stay in the spares.
            let other = kern.reuse_packed_activations(&mut spare, ty, k, n_tokens - 1).unwrap();
            let wider = kern.reuse_packed_activations(&mut spare, ty, 2 * k, n_tokens).unwrap();
            assert_eq!(spare.len(), 1, "{:?} {ty}: a pack of another shape was taken", kern.level());
            spare.extend([other, wider]);
            let mut reused = kern.reuse_packed_activations(&mut spare, ty, k, n_tokens).unwrap();
            assert_eq!(spare.len(), 2, "{:?} {ty}: the fitting spare was not taken", kern.level());
            {
                let packer = reused.packer();
                for t in (0..n_tokens).rev() {
                    // SAFETY: one thread.
                    unsafe { packer.pack_token(t, &second.a[t * arb..(t + 1) * arb]) }.unwrap();
                }
            }
            let mut want = vec![0f32; n_tokens * nrows];
            kern.matmul(ty, &w, k, 0..nrows, &second.a, n_tokens, &mut want).unwrap();
            let mut got = vec![0f32; n_tokens * nrows];
            kern.matmul_packed(ty, &w, k, 0..nrows, &second.a, n_tokens, &reused, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{:?} {ty}: reused pack", kern.level());
        }
    }
}
