//! Every op of the forward graph, on every device present (the CPU, and each usable Vulkan device:
//! Mesa's lavapipe in CI), against a float64 reference, with random inputs of awkward sizes (not
//! multiples of the workgroups). A device is compared by normalized mean squared error with a
//! threshold per weight type: both devices multiply quantized weights with activations rounded to
//! 8 bits as ggml does, so their products are also compared with each other, tightly. Vulkan runs
//! twice where the device has integer dot products: with them (8-bit quants multiplied as
//! integers) and without (the rounded activations multiplied in f32).
//!
//! Set `REQUIRE_VULKAN_DEVICE=1` (CI does) to fail when no Vulkan device is found instead of
//! checking the CPU alone.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use strata_gpu::backend_ops::{AttentionArgs, CpuOps, OpBackend};
use strata_gpu::DeviceError;
use strata_gpu::kv_memory::HostKvMemory;
use strata_gpu::vulkan::{ops::VulkanOps, ContextOptions, VulkanContext};
use strata_kv::{KvDtype, KvLayout, KvShape, LayoutParams};
use strata_model::RopeStyle;
use strata_quant::{GgmlType, Kernels};

fn require_vulkan() -> bool {
    std::env::var("REQUIRE_VULKAN_DEVICE").is_ok_and(|v| v == "1")
}

/// The Vulkan devices; without one, an empty list, unless one is required: then the listing's
/// error fails the test (an empty list alone would not say why).
fn vulkan_devices() -> Vec<strata_gpu::vulkan::DeviceInfo> {
    match strata_gpu::vulkan::list_devices() {
        Ok(devices) => devices,
        Err(e) if require_vulkan() => panic!("REQUIRE_VULKAN_DEVICE=1 but the Vulkan devices cannot be listed: {e}"),
        Err(_) => Vec::new(),
    }
}

fn backends() -> Vec<Box<dyn OpBackend>> {
    let mut v: Vec<Box<dyn OpBackend>> = vec![Box::new(CpuOps::new(Kernels::best()))];
    let devices = vulkan_devices();
    for d in devices.iter().filter(|d| d.usable) {
        let ctx = VulkanContext::with_options(d.index, ContextOptions { integer_dot_product: true, exact: false }).expect("a listed Vulkan device opens");
        v.push(Box::new(VulkanOps::new(&ctx).expect("ops")));
        if d.integer_dot_product {
            let ctx = VulkanContext::with_options(d.index, ContextOptions { integer_dot_product: false, exact: false }).expect("a listed Vulkan device opens");
            v.push(Box::new(VulkanOps::new(&ctx).expect("ops")));
        }
    }
    if require_vulkan() {
        assert!(v.len() > 1, "REQUIRE_VULKAN_DEVICE=1 but no usable Vulkan device was found: {devices:?}");
    }
    v
}

/// The ops of the first usable Vulkan device; `None` (a skip) without one, unless one is required.
fn first_vulkan_ops() -> Option<VulkanOps> {
    first_vulkan_context(ContextOptions::default()).map(|ctx| VulkanOps::new(&ctx).expect("ops"))
}

/// The first usable Vulkan device opened with `options`; `None` as [`first_vulkan_ops`].
fn first_vulkan_context(options: ContextOptions) -> Option<Arc<VulkanContext>> {
    let devices = vulkan_devices();
    let Some(d) = devices.iter().find(|d| d.usable) else {
        assert!(!require_vulkan(), "no Vulkan device");
        return None;
    };
    Some(VulkanContext::with_options(d.index, options).expect("open"))
}

/// The first usable Vulkan device opened in the exact mode; `None` (the test passes) where there
/// is none or it cannot run the exact mode (no integer dot products or shaderFloat64).
fn first_exact_vulkan_context() -> Option<Arc<VulkanContext>> {
    first_vulkan_context(ContextOptions { integer_dot_product: true, exact: true }).filter(|ctx| ctx.exact())
}

fn nmse(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "output length");
    let err: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    err / norm.max(1e-30)
}

fn random(rng: &mut rand::rngs::StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0) * scale).collect()
}

fn quantized(ty: GgmlType, vals: &[f32], cols: usize) -> (Vec<u8>, Vec<f32>) {
    let rows = vals.len() / cols;
    let bytes = ty.row_bytes(cols as u64).expect("row bytes") as usize * rows;
    let mut q = vec![0u8; bytes];
    strata_quant::quantize(ty, vals, &mut q).expect("quantize");
    let mut deq = vec![0f32; vals.len()];
    strata_quant::dequantize(ty, &q, &mut deq).expect("dequantize");
    (q, deq)
}

/// `out[t][r] = W[r] · x[t]` in float64, from the dequantized weights.
fn reference_product(w: &[f32], x: &[f32], rows: usize, cols: usize, n: usize) -> Vec<f64> {
    (0..n).flat_map(|t| (0..rows).map(move |r| (0..cols).map(|c| w[r * cols + c] as f64 * x[t * cols + c] as f64).sum())).collect()
}

/// NMSE bound of a product with a weight of `ty`, for `device`.
fn matmul_threshold(ty: GgmlType, device: &str) -> f64 {
    match ty {
        GgmlType::F32 | GgmlType::F16 if device != "cpu" => 1e-9,
        GgmlType::F32 | GgmlType::F16 => 1e-6,
        // 8-bit activations (Q8_0 / Q8_K).
        _ => 2e-4,
    }
}

const TYPES: [GgmlType; 7] = [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K];

#[test]
fn matmul_every_type_every_token_count() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut backends = backends();
    for ty in TYPES {
        // 256-element super-blocks: 3 per row; 32-element blocks: 4 per row (fewer than a team).
        let cols = if ty.block_elems() == 256 { 768 } else { 128 };
        let rows = 67;
        let (wq, wd) = quantized(ty, &random(&mut rng, rows * cols, 1.0), cols);
        for n in [1usize, 3, 5, 8, 13, 70, 130] {
            let x = random(&mut rng, n * cols, 1.0);
            let want = reference_product(&wd, &x, rows, cols, n);
            for b in backends.iter_mut() {
                let got = b.matmul(ty, &wq, rows, cols, &x, n).unwrap_or_else(|e| panic!("{} matmul {ty}: {e}", b.name()));
                let e = nmse(&got, &want);
                assert!(e < matmul_threshold(ty, &b.name()), "{} matmul {ty} {rows}x{cols} n={n}: nmse {e:e}", b.name());
            }
        }
    }
}

/// Quantized products on each Vulkan path against the CPU's, on the same weights and activations:
/// every block's integer sum is exact on both, so only the order of the f32 sums over blocks
/// differs. Rows of fewer items than a workgroup and of more (the integer kernel's loop), 1-8
/// tokens (the decode kernels) and more (the tiled kernel).
#[test]
fn vulkan_products_equal_the_cpu_products() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let mut backends = backends();
    if backends.len() < 2 {
        return;
    }
    // The portable kernels: ggml's arithmetic block by block, in order.
    let mut scalar = CpuOps::new(Kernels::with_level(strata_quant::SimdLevel::Scalar).expect("scalar kernels"));
    for ty in TYPES.into_iter().filter(|t| !matches!(t, GgmlType::F32 | GgmlType::F16)) {
        let widths = if ty.block_elems() == 256 { [768, 256 * 19] } else { [96, 32 * 300] };
        for cols in widths {
            let rows = 37;
            let (wq, _) = quantized(ty, &random(&mut rng, rows * cols, 1.0), cols);
            // Observed: 1e-14..1e-11, and 2e-9 (lavapipe) to 2.4e-8 (H200, Q4_0 37x96, one
            // token: an output 5e-4 off) where an activation block's quant or scale is one step
            // off (the fast kernels' divisions need not be correctly rounded; the exact mode's
            // are). A wrong kernel is off by far more. Q4_1's offset term uses Q8_1's block sum
            // rounded to f16, which the f32 kernels (13 tokens, or no integer dot products) do
            // not round: 5e-7.
            let bound = if ty == GgmlType::Q4_1 { 2e-6 } else { 1e-7 };
            for n in [1usize, 2, 4, 5, 8, 13, 40, 70] {
                let x = random(&mut rng, n * cols, 1.0);
                let cpu = scalar.matmul(ty, &wq, rows, cols, &x, n).expect("cpu matmul");
                let want: Vec<f64> = cpu.iter().map(|&v| v as f64).collect();
                for b in backends[1..].iter_mut() {
                    let got = b.matmul(ty, &wq, rows, cols, &x, n).unwrap_or_else(|e| panic!("{} matmul {ty}: {e}", b.name()));
                    let e = nmse(&got, &want);
                    if e >= bound {
                        let worst = got.iter().zip(&want).enumerate().max_by(|a, b| (*a.1 .0 as f64 - a.1 .1).abs().total_cmp(&(*b.1 .0 as f64 - b.1 .1).abs()));
                        panic!("{} matmul {ty} {rows}x{cols} n={n}: nmse {e:e} against the CPU; the worst output (index, got, want): {worst:?}", b.name());
                    }
                }
            }
        }
    }
}

/// The fast integer products are batch invariant: a token's outputs are the same bits whether it
/// is multiplied alone (the one-token kernel) or with others (the four-token kernel, passes
/// partly empty), for rows short enough for 64 lanes a row (but of more than 64 blocks, so that
/// the lanes' shares differ between layouts) and long enough for 128.
#[test]
fn vulkan_integer_products_do_not_depend_on_the_batch() {
    let Some(ctx) = first_vulkan_context(ContextOptions { integer_dot_product: true, exact: false }) else { return };
    let mut vk = VulkanOps::new(&ctx).expect("ops");
    let mut rng = rand::rngs::StdRng::seed_from_u64(34);
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K] {
        // (The last: more than four blocks a lane at 128 lanes a row, where the order of a lane's
        // additions shows.)
        let widths = if ty.block_elems() == 256 { [256 * 14, 256 * 19, 256 * 74] } else { [32 * 100, 32 * 300, 32 * 601] };
        for cols in widths {
            let rows = 21;
            let (wq, _) = quantized(ty, &random(&mut rng, rows * cols, 1.0), cols);
            let x = random(&mut rng, 6 * cols, 1.0);
            let alone: Vec<Vec<f32>> = (0..6).map(|t| vk.matmul(ty, &wq, rows, cols, &x[t * cols..(t + 1) * cols], 1).expect("one token")).collect();
            for n in [2usize, 5, 6] {
                let together = vk.matmul(ty, &wq, rows, cols, &x[..n * cols], n).expect("batch");
                for (t, want) in alone.iter().take(n).enumerate() {
                    let got = &together[t * rows..(t + 1) * rows];
                    let differ = got.iter().zip(want).filter(|(g, w)| g.to_bits() != w.to_bits()).count();
                    assert_eq!(differ, 0, "{ty} {rows}x{cols}: token {t} of {n} differs from the token alone in {differ} outputs");
                }
            }
        }
    }
}

/// In the exact mode, the integer products of decode-sized steps compute the CPU device's bits: Q4_0, Q4_1 and
/// Q8_0 as every CPU level does (ggml's x86 arithmetic), Q4_K as this host's level does (AVX-512
/// or AVX2: their lane orders differ; skipped on a CPU with neither). Awkward row counts, widths
/// that are not multiples of the lanes' loads ahead, and token counts that leave a pass partly
/// empty.
#[test]
fn vulkan_integer_products_compute_the_cpu_bits() {
    let Some(ctx) = first_exact_vulkan_context() else { return };
    let mut vk = VulkanOps::new(&ctx).expect("ops");
    let mut rng = rand::rngs::StdRng::seed_from_u64(33);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K] {
        let kernels = if ty == GgmlType::Q4_K { Kernels::best() } else { Kernels::with_level(strata_quant::SimdLevel::Scalar).expect("the scalar level") };
        if kernels.level() == strata_quant::SimdLevel::Scalar && ty == GgmlType::Q4_K {
            eprintln!("Q4_K: this CPU has neither AVX2 nor AVX-512, whose orders the exact products follow: skipped");
            continue;
        }
        let mut cpu = CpuOps::new(kernels);
        let widths = if ty.block_elems() == 256 { [256, 256 * 19] } else { [96, 32 * 301] };
        for cols in widths {
            let rows = 37;
            let (wq, _) = quantized(ty, &random(&mut rng, rows * cols, 1.0), cols);
            for n in [1usize, 3, 4, 13] {
                let x = random(&mut rng, n * cols, 1.0);
                let want = cpu.matmul(ty, &wq, rows, cols, &x, n).expect("cpu matmul");
                let got = vk.matmul(ty, &wq, rows, cols, &x, n).expect("vulkan matmul");
                let differ = got.iter().zip(&want).filter(|(g, w)| g.to_bits() != w.to_bits()).count();
                assert_eq!(differ, 0, "{ty} {rows}x{cols} n={n}: {differ} of {} outputs differ from the CPU's bits (first, ours vs the CPU's: {:?})", want.len(), got.iter().zip(&want).find(|(g, w)| g.to_bits() != w.to_bits()));
            }
        }
    }
}

/// The exact mode's division, fused multiply-add and square root (common.glsl's helpers, in the
/// build this device runs) are the CPU's IEEE operations bit for bit, alone and in chains that
/// must round every step to f32: on edge values (zeros,
/// subnormals, the largest finite, infinities, NaN, neighbours of 1) in every pairing, on random
/// bit patterns over every exponent, and on ordinary values where a sum cancels (subnormals only
/// where the device keeps them). Mesa 25's llvmpipe skipped the f32 roundings between chained
/// `float(double(a) / double(b))` and `float(double(a) * double(b) + double(c))`, what the
/// helpers were before (this test then fails there: "div of div", "fma chain").
#[test]
fn vulkan_exact_rounding_helpers_are_ieee() {
    let Some(ctx) = first_exact_vulkan_context() else { return };
    let mut vk = VulkanOps::new(&ctx).expect("ops");
    let edges: Vec<f32> = [0.0f32, -0.0, 1.0, -1.0, 0.5, 3.0, 127.0, -127.0, f32::MIN_POSITIVE, -f32::MIN_POSITIVE, f32::MAX, f32::MIN, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-30, 7e-39, 1e30]
        .into_iter()
        .chain([1, 2, 0x7FFFFF, 0x400000, 0x3F80_0001, 0x3F7F_FFFF, 0x7F7F_FFFE, 0x0080_0001].map(f32::from_bits))
        .collect();
    // Input 0 probes whether the device flushes subnormals (fma(0, 1, the smallest subnormal)):
    // NVIDIA's shaders do by default, the CPU device does not. There, results with a subnormal
    // input, intermediate or output are left out (the kernels never meet one in practice: the
    // H200's exact logits are the CPU's bit for bit).
    let (mut a, mut b, mut c) = (vec![0.0f32], vec![1.0f32], vec![f32::from_bits(1)]);
    for &x in &edges {
        for &y in &edges {
            a.push(x);
            b.push(y);
            c.push(edges[(a.len() * 7) % edges.len()]);
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(51);
    for _ in 0..40_000 {
        a.push(f32::from_bits(rng.gen()));
        b.push(f32::from_bits(rng.gen()));
        c.push(f32::from_bits(rng.gen()));
    }
    for _ in 0..40_000 {
        // Ordinary magnitudes, c near -a * b: the sums that cancel.
        let (x, y): (f32, f32) = (rng.gen_range(-4.0..4.0), rng.gen_range(-4.0..4.0));
        a.push(x);
        b.push(y);
        c.push(-(x * y) * (1.0 + rng.gen_range(-1e-6f32..1e-6)));
    }
    let got = vk.rounding_check(&a, &b, &c).expect("rounding check");
    let same = |g: f32, w: f32| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
    let flushes = got[1].to_bits() != 1;
    let subnormal = |v: &[f32]| flushes && v.iter().any(|x| x.is_subnormal());
    let (mut wrong, mut left_out) = (Vec::new(), 0usize);
    for i in 0..a.len() {
        let (x, y, z) = (a[i], b[i], c[i]);
        let mut chain_values = vec![z];
        let chain = (0..8).map(|j| (i + j) % a.len()).fold(z, |acc, k| {
            let next = a[k].mul_add(b[k], acc);
            chain_values.extend([a[k], b[k], next]);
            next
        });
        let ops = [
            ("div", x / y, vec![x, y, x / y]),
            ("fma", x.mul_add(y, z), vec![x, y, z, x.mul_add(y, z)]),
            ("sqrt", x.abs().sqrt(), vec![x, x.abs().sqrt()]),
            ("div of div", z / (x / y), vec![x, y, z, x / y, z / (x / y)]),
            ("fma chain", chain, chain_values),
        ];
        for (j, (op, w, values)) in ops.into_iter().enumerate() {
            if subnormal(&values) {
                left_out += 1;
                continue;
            }
            let g = got[5 * i + j];
            if !same(g, w) {
                wrong.push(format!("{op}({x:e} [{:#x}], {y:e}, {z:e}) = {g:e} [{:#x}], want {w:e} [{:#x}]", x.to_bits(), g.to_bits(), w.to_bits()));
            }
        }
    }
    if flushes {
        eprintln!("this device flushes subnormals: {left_out} of {} results that meet one were left out", 5 * a.len());
    }
    assert!(wrong.is_empty(), "{} of {} results differ from IEEE's, e.g.:\n{}", wrong.len(), 5 * a.len(), wrong.iter().take(12).cloned().collect::<Vec<_>>().join("\n"));
}

#[test]
fn matmul_float_rows_of_any_width() {
    // F32 and F16 rows need not be a multiple of 32 elements.
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let mut backends = backends();
    for ty in [GgmlType::F32, GgmlType::F16] {
        let (rows, cols) = (19usize, 45usize);
        let (wq, wd) = quantized(ty, &random(&mut rng, rows * cols, 1.0), cols);
        for n in [2usize, 9] {
            let x = random(&mut rng, n * cols, 1.0);
            let want = reference_product(&wd, &x, rows, cols, n);
            for b in backends.iter_mut() {
                if b.name() == "cpu" {
                    continue; // the CPU kernels take whole 32-element blocks
                }
                let got = b.matmul(ty, &wq, rows, cols, &x, n).expect("matmul");
                assert!(nmse(&got, &want) < 1e-9, "{} matmul {ty} {rows}x{cols} n={n}", b.name());
            }
        }
    }
}

#[test]
fn embedding_rows_every_type() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let mut backends = backends();
    for ty in TYPES {
        // Rows of more than 64 units of 32: two workgroups a token, the second partly idle.
        let cols = if ty.block_elems() == 256 { 2304 } else { 2144 };
        let rows = 37;
        let (q, deq) = quantized(ty, &random(&mut rng, rows * cols, 2.0), cols);
        let tokens = [0u32, 36, 5, 5, 17];
        let want: Vec<f64> = tokens.iter().flat_map(|&t| deq[t as usize * cols..(t as usize + 1) * cols].iter().map(|&v| v as f64)).collect();
        for b in backends.iter_mut() {
            let got = b.embed(ty, &q, rows, cols, &tokens).expect("embed");
            assert!(nmse(&got, &want) < 1e-12, "{} embed {ty}", b.name());
        }
    }
}

#[test]
fn elementwise_ops() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let mut backends = backends();
    let (n, d) = (7usize, 333usize);
    let x = random(&mut rng, n * d, 3.0);
    let w = random(&mut rng, d, 1.0);
    let eps = 1e-5f32;
    let want_norm: Vec<f64> = x
        .chunks(d)
        .flat_map(|r| {
            let ms = r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
            let s = 1.0 / (ms + eps as f64).sqrt();
            r.iter().zip(&w).map(move |(&v, &g)| v as f64 * s * g as f64).collect::<Vec<_>>()
        })
        .collect();
    let up = random(&mut rng, n * d, 2.0);
    let want_swiglu: Vec<f64> = x.iter().zip(&up).map(|(&g, &u)| g as f64 / (1.0 + (-(g as f64)).exp()) * u as f64).collect();
    let want_add: Vec<f64> = x.iter().zip(&up).map(|(&a, &b)| a as f64 + b as f64).collect();
    for b in backends.iter_mut() {
        assert!(nmse(&b.rms_norm(&x, &w, eps).expect("rms_norm"), &want_norm) < 1e-10, "{} rms_norm", b.name());
        assert!(nmse(&b.swiglu(&x, &up).expect("swiglu"), &want_swiglu) < 1e-10, "{} swiglu", b.name());
        assert!(nmse(&b.add(&x, &up).expect("add"), &want_add) < 1e-12, "{} add", b.name());
    }
}

/// The top-k of logits rows on every device, exactly (positions and value bits) as
/// `strata_model::sampling::top_k` orders them: larger first by `total_cmp` (-0 below +0), of
/// equal values the smaller position, NaNs never taken. Rows: random (the usual path: few values
/// pass the floor), a handful of distinct values (thousands of equal values pass: the exact
/// select, and the first positions of the ties), NaNs, infinities and signed zeros sprinkled in,
/// fewer values than k, only NaNs, only -inf; widths from 1 to a 152k vocabulary.
#[test]
fn top_k_of_rows_of_every_kind() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let mut backends = backends();
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0];
    let mut cases: Vec<(String, usize, Vec<f32>)> = Vec::new();
    for width in [1usize, 10, 63, 64, 65, 1000, 5003, 49152, 152_064] {
        cases.push((format!("random {width}"), width, random(&mut rng, 2 * width, 8.0)));
        cases.push((format!("seven values {width}"), width, (0..width).map(|_| rng.gen_range(-3i32..=3) as f32).collect()));
        cases.push((
            format!("specials {width}"),
            width,
            (0..width).map(|_| if rng.gen_range(0..4) == 0 { specials[rng.gen_range(0..specials.len())] } else { rng.gen_range(-2.0f32..2.0) }).collect(),
        ));
    }
    cases.push(("only NaN".into(), 3000, vec![f32::NAN; 3000]));
    cases.push(("only -inf".into(), 3000, vec![f32::NEG_INFINITY; 3000]));
    cases.push(("a few values among NaNs".into(), 4096, (0..4096).map(|i| if i % 97 == 5 { i as f32 } else { f32::NAN }).collect()));
    let bits = |rows: &[Vec<strata_model::sampling::Candidate>]| rows.iter().map(|r| r.iter().map(|c| (c.token, c.logit.to_bits())).collect::<Vec<_>>()).collect::<Vec<_>>();
    for (name, width, x) in &cases {
        for k in [1usize, 40, 64] {
            let want: Vec<Vec<_>> = x.chunks(*width).map(|row| strata_model::sampling::top_k(row, k)).collect();
            for b in backends.iter_mut() {
                let got = b.top_k(x, *width, k).unwrap_or_else(|e| panic!("{} top_k: {e}", b.name()));
                assert_eq!(bits(&got), bits(&want), "{}: top {k} of {name}", b.name());
            }
        }
    }
}

#[test]
fn rope_both_styles_and_partial_rotation() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(10);
    let mut backends = backends();
    for (style, head_dim, rope_dims) in [(RopeStyle::Normal, 64, 64), (RopeStyle::Neox, 128, 128), (RopeStyle::Neox, 96, 64)] {
        let (n, heads) = (5usize, 3usize);
        let x = random(&mut rng, n * heads * head_dim, 1.0);
        let positions = [0u32, 1, 17, 300, 4095];
        let base = 10000.0f32;
        let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let half = rope_dims / 2;
        for (t, &p) in positions.iter().enumerate() {
            for h in 0..heads {
                for i in 0..half {
                    let theta = p as f64 * (base as f64).powf(-2.0 * i as f64 / rope_dims as f64);
                    let s = t * heads * head_dim + h * head_dim;
                    let (ia, ib) = if style == RopeStyle::Neox { (s + i, s + i + half) } else { (s + 2 * i, s + 2 * i + 1) };
                    let (a, b) = (x[ia] as f64, x[ib] as f64);
                    want[ia] = a * theta.cos() - b * theta.sin();
                    want[ib] = a * theta.sin() + b * theta.cos();
                }
            }
        }
        for b in backends.iter_mut() {
            let got = b.rope(&x, heads, head_dim, rope_dims, base, &positions, style).expect("rope");
            // f32 angles at position 4095 carry ~1e-4 relative error on every device alike.
            let e = nmse(&got, &want);
            assert!(e < 1e-7, "{} rope {style:?} {head_dim}/{rope_dims}: {e:e}", b.name());
        }
    }
}

fn kv_arena(n_layers: u32, n_kv_heads: u32, head_dim: u32, n_cells: u64, block: u32) -> Arc<HostKvMemory> {
    let shape = KvShape { n_layers, n_kv_heads, head_dim, dtype: KvDtype::F16 };
    let mut p = LayoutParams::new(shape, n_cells);
    p.block_size = block;
    // One tensor per chunk: several chunks.
    p.chunk_limit_bytes = (n_cells * (n_kv_heads * head_dim * 2) as u64).next_multiple_of(4096);
    Arc::new(HostKvMemory::allocate_for(&KvLayout::compute(&p).expect("layout")).expect("allocate"))
}

/// Writes random K/V values for `cells` of `layer` from the host, as the CPU device does.
fn fill_kv(kv: &HostKvMemory, layer: usize, width: usize, cells: u64, rng: &mut rand::rngs::StdRng) {
    for cell in 0..cells {
        for v in [false, true] {
            // SAFETY: cell < n_cells; no device is running on this arena now.
            let row = unsafe { std::slice::from_raw_parts_mut(kv.row_ptr(layer, v, cell) as *mut half::f16, width) };
            for x in row.iter_mut() {
                *x = half::f16::from_f32(rng.gen_range(-1.0f32..1.0));
            }
        }
    }
}

fn reference_attention(kv: &HostKvMemory, a: &AttentionArgs<'_>) -> Vec<f64> {
    let (hd, group) = (a.head_dim, a.n_heads / a.n_kv_heads);
    let qw = a.n_heads * hd;
    let mut out = vec![0f64; a.positions.len() * qw];
    for t in 0..a.positions.len() {
        let table = a.block_tables[a.seq_of_token[t] as usize];
        let len = a.positions[t] as usize + 1;
        for h in 0..a.n_heads {
            let col = (h / group) * hd;
            let row = |v: bool, j: usize| -> Vec<f64> {
                let cell = (table[j / a.block_size] as usize * a.block_size + j % a.block_size) as u64;
                // SAFETY: the cell is in the arena; nothing writes it now.
                let r = unsafe { std::slice::from_raw_parts((kv.row_ptr(a.layer, v, cell) as *const half::f16).add(col), hd) };
                r.iter().map(|x| x.to_f64()).collect()
            };
            let q = &a.q[t * qw + h * hd..t * qw + (h + 1) * hd];
            let scores: Vec<f64> = (0..len).map(|j| row(false, j).iter().zip(q).map(|(k, &q)| k * q as f64).sum::<f64>() * a.scale as f64).collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (j, p) in e.iter().enumerate() {
                for (d, v) in row(true, j).iter().enumerate() {
                    out[t * qw + h * hd + d] += p / sum * v;
                }
            }
        }
    }
    out
}

#[test]
fn attention_over_block_tables_and_zero_copy_import() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut backends = backends();
    // GQA 7:1 (Qwen2.5-7B's ratio) with head_dim 64, and 3:1 with head_dim 128.
    for (n_heads, n_kv_heads, hd) in [(14usize, 2usize, 64usize), (6, 2, 128)] {
        let block = 16usize;
        let kv = kv_arena(2, n_kv_heads as u32, hd as u32, 1024, block as u32);
        let width = n_kv_heads * hd;
        fill_kv(&kv, 1, width, 1024, &mut rng);
        // Two sequences with scattered blocks; tokens at the start, in the middle and deep in.
        let t0: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % 64).collect();
        let t1: Vec<u32> = (0..20).map(|i| 63 - i).collect();
        let tables: Vec<&[u32]> = vec![&t0, &t1];
        let positions = [0u32, 5, 16, 299, 639, 1, 319, 200];
        let seq_of_token = [0u32, 0, 0, 0, 0, 1, 1, 1];
        let q = random(&mut rng, positions.len() * n_heads * hd, 1.0);
        let args = AttentionArgs { layer: 1, q: &q, n_heads, n_kv_heads, head_dim: hd, positions: &positions, seq_of_token: &seq_of_token, block_tables: &tables, block_size: block, scale: 1.0 / (hd as f32).sqrt() };
        let want = reference_attention(&kv, &args);
        for b in backends.iter_mut() {
            let got = b.attention(&kv, &args).expect("attention");
            // The CPU rounds the query and the weights to f16 as ggml does.
            let bound = if b.name() == "cpu" { 1e-5 } else { 1e-9 };
            let e = nmse(&got, &want);
            assert!(e < bound, "{} attention {n_heads}/{n_kv_heads}x{hd}: nmse {e:e}", b.name());
        }
        // Zero copy: overwrite the arena from the host after the devices imported it; each device
        // must read the new values in place.
        fill_kv(&kv, 1, width, 1024, &mut rng);
        let want = reference_attention(&kv, &args);
        for b in backends.iter_mut() {
            let got = b.attention(&kv, &args).expect("attention");
            let bound = if b.name() == "cpu" { 1e-5 } else { 1e-9 };
            assert!(nmse(&got, &want) < bound, "{} reads the arena in place after host writes", b.name());
        }
    }
}

/// The decode attentions (attention_decode.comp, a workgroup per query head; and for long
/// contexts attention_decode_gqa.comp, a workgroup per KV head serving its group), each alone and
/// one step split between them by context length, against the reference. Shapes: GQA 7:1 x 64,
/// 3:1 x 128, 8:1 x 32 (the largest group), 2:1 x 256 (V slices longer than the GQA kernel's
/// loads ahead). Each with blocks of 16 cells and with the same cells in blocks of one (every
/// position then its own table entry: a split, and a tile, spans many blocks).
#[test]
fn vulkan_decode_attention_kernels_match_the_reference() {
    let Some(mut ops) = first_vulkan_ops() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    for (n_heads, n_kv_heads, hd) in [(14usize, 2usize, 64usize), (6, 2, 128), (16, 2, 32), (4, 2, 256)] {
        let block = 16usize;
        let kv = kv_arena(2, n_kv_heads as u32, hd as u32, 204 * 16, block as u32);
        fill_kv(&kv, 1, n_kv_heads * hd, 204 * 16, &mut rng);
        let t0: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % 64).collect();
        let t1: Vec<u32> = (0..20).map(|i| 63 - i).collect();
        // A longer context: splits of more than one 64-position tile (the online softmax's
        // rescaling between tiles; the GQA kernel's splits of 128 from 2049 positions), the last
        // one partial.
        let t2: Vec<u32> = (0..140).map(|i| 64 + (i * 37) % 140).collect();
        let tables: Vec<&[u32]> = vec![&t0, &t1, &t2];
        let positions = [0u32, 5, 16, 299, 639, 1, 319, 200, 2200];
        let seq_of_token = [0u32, 0, 0, 0, 0, 1, 1, 1, 2];
        let q = random(&mut rng, positions.len() * n_heads * hd, 1.0);
        let args = AttentionArgs { layer: 1, q: &q, n_heads, n_kv_heads, head_dim: hd, positions: &positions, seq_of_token: &seq_of_token, block_tables: &tables, block_size: block, scale: 1.0 / (hd as f32).sqrt() };
        let want = reference_attention(&kv, &args);
        // The same cells, a block each.
        let cells: Vec<Vec<u32>> = tables.iter().map(|t| t.iter().flat_map(|&b| (0..block as u32).map(move |i| b * block as u32 + i)).collect()).collect();
        let cell_tables: Vec<&[u32]> = cells.iter().map(Vec::as_slice).collect();
        let per_cell = AttentionArgs { block_tables: &cell_tables, block_size: 1, ..args };
        // Per query head only; the GQA kernel only; tokens of 300 positions and more to it.
        for (blocks, args) in [("blocks of 16", &args), ("blocks of 1", &per_cell)] {
            for gqa_from in [u32::MAX, 0, 300] {
                let got = match ops.decode_attention(&kv, args, gqa_from) {
                    Err(DeviceError::Unsupported { .. }) if gqa_from != u32::MAX => continue,
                    r => r.expect("decode attention"),
                };
                let e = nmse(&got, &want);
                eprintln!("decode attention {n_heads}/{n_kv_heads}x{hd}, {blocks}, GQA kernel from {gqa_from}: nmse {e:e}");
                assert!(e < 1e-8, "decode attention {n_heads}/{n_kv_heads}x{hd}, {blocks}, GQA kernel from {gqa_from}: nmse {e:e}");
            }
        }
    }
}

#[test]
fn vulkan_imports_the_host_arena_itself() {
    let Some(mut ops) = first_vulkan_ops() else { return };
    let kv = kv_arena(2, 2, 64, 512, 16);
    ops.imported(&kv).expect("import");
    let origins = ops.import_origins(&kv).expect("imported");
    let export = kv.export().expect("export");
    let strata_gpu::kv_memory::KvExport::Host { chunks, .. } = export else { panic!("host export") };
    assert!(chunks.len() > 1, "several chunks");
    assert_eq!(origins.len(), chunks.len());
    for (o, (ptr, _)) in origins.iter().zip(&chunks) {
        assert_eq!(*o, strata_gpu::vulkan::memory::Origin::HostPointer(*ptr), "each Vulkan buffer is the host chunk itself");
    }
}

#[test]
fn vulkan_rounds_activations_exactly_as_the_cpu_quantizes_them() {
    use strata_gpu::vulkan::kernels::ActRounding;
    let Some(mut ops) = first_vulkan_ops() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    let kernels = Kernels::best();
    for (rounding, weight_ty, cols) in [(ActRounding::Q8_0, GgmlType::Q4_0, 96usize), (ActRounding::Q8_0, GgmlType::Q4_1, 896), (ActRounding::Q8_K, GgmlType::Q4_K, 768)] {
        let rows = 5;
        let mut x = random(&mut rng, rows * cols, 4.0);
        x[3] = 0.0;
        x[cols..cols + 32].iter_mut().for_each(|v| *v = 0.0); // an all-zero block
        x[2 * cols + 7] = -9.0; // ties of the maximum magnitude with both signs
        x[2 * cols + 9] = 9.0;
        // The same rounded values; only the scale may differ in its last bit (a shader's division
        // need not be correctly rounded).
        let got = ops.round_activations(rounding, &x, cols).expect("round");
        let act = Kernels::activation_type(weight_ty);
        let rb = strata_quant::activation_row_bytes(weight_ty, cols);
        for r in 0..rows {
            let mut q = vec![0u8; rb];
            kernels.quantize_activations(weight_ty, &x[r * cols..(r + 1) * cols], &mut q).expect("quantize");
            let mut want = vec![0f32; cols];
            strata_quant::dequantize(act, &q, &mut want).expect("dequantize");
            for c in 0..cols {
                assert!((got[r * cols + c] - want[c]).abs() <= 1e-6 * want[c].abs(), "{rounding:?} row {r} col {c}: {} vs {}", got[r * cols + c], want[c]);
            }
        }
    }
}

/// The import tests' KV layout: 2 layers of 2 heads of 64, 256 cells, chunks of one tensor each.
fn layout_of_several_chunks() -> (LayoutParams, KvLayout) {
    let shape = KvShape { n_layers: 2, n_kv_heads: 2, head_dim: 64, dtype: KvDtype::F16 };
    let mut p = LayoutParams::new(shape, 256);
    p.chunk_limit_bytes = 256 * 2 * 64 * 2;
    let layout = KvLayout::compute(&p).expect("layout");
    assert!(layout.chunks.len() > 1, "several chunks");
    (p, layout)
}

#[test]
fn a_vulkan_kv_arena_exported_as_opaque_fds_is_imported_in_place_by_another_device() {
    use strata_gpu::vulkan::memory::Origin;
    use strata_gpu::vulkan::VulkanKvMemory;
    let devices = vulkan_devices();
    let Some(d) = devices.iter().find(|d| d.usable && d.has(strata_gpu::vulkan::context::EXT_EXTERNAL_MEMORY_FD)) else {
        assert!(!require_vulkan(), "no Vulkan device with VK_KHR_external_memory_fd");
        return;
    };
    // Two logical devices: the exporter (as the native prefill device would be) and the importer.
    let exporter = VulkanContext::new(d.index).expect("open");
    let importer = VulkanContext::new(d.index).expect("open again");
    let (p, layout) = layout_of_several_chunks();
    let mine = VulkanKvMemory::allocate(&exporter, &layout).expect("allocate");
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    mine.write_bytes(1, 4096, &data).expect("write");
    // A layout that differs is refused, naming both.
    let mut other = p;
    other.n_cells = 128;
    let err = match unsafe { VulkanKvMemory::import(&importer, &KvLayout::compute(&other).expect("layout"), mine.export().expect("export")) } {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a mismatched layout imports"),
    };
    assert!(err.contains("128") && err.contains("256"), "{err}");
    // SAFETY: opaque fds carry their own reference to the memory.
    let theirs = unsafe { VulkanKvMemory::import(&importer, &layout, mine.export().expect("export")) }.expect("import");
    assert!(theirs.origins().iter().all(|o| *o == Origin::OpaqueFd));
    assert_eq!(theirs.read_bytes(1, 4096, 4096).expect("read"), data, "the importer reads the exporter's bytes");
    // And the other way: what the importer writes, the exporter reads (one memory, no copy).
    theirs.write_bytes(0, 0, &data[..1024]).expect("write");
    assert_eq!(mine.read_bytes(0, 0, 1024).expect("read"), &data[..1024]);
}

/// A dma-buf arena (HIP's export on AMD): a buffer shorter than its chunk is refused before the
/// driver sees it, a driver without `VK_EXT_external_memory_dma_buf` refuses by that name, and a
/// driver with it refuses a file that is no dma-buf; no refusal leaks the fd it was given. (No
/// driver here imports dma-bufs: lavapipe and NVIDIA's lack the extension, so the successful
/// import runs only on RADV.)
#[test]
fn a_dma_buf_kv_arena_is_checked_and_refused_by_name_without_leaking_its_fds() {
    use std::os::fd::{AsRawFd, OwnedFd};
    use strata_gpu::kv_memory::KvExport;
    use strata_gpu::vulkan::VulkanKvMemory;
    let devices = vulkan_devices();
    let Some(d) = devices.iter().find(|d| d.usable) else {
        assert!(!require_vulkan(), "no usable Vulkan device");
        return;
    };
    let ctx = VulkanContext::new(d.index).expect("open");
    let (_, layout) = layout_of_several_chunks();
    // Plain files stand in for dma-bufs: the size check and the refusals need no real one.
    let dir = std::env::temp_dir();
    let files = |short_chunk: Option<usize>| -> (Vec<OwnedFd>, Vec<(i32, std::path::PathBuf)>) {
        let mut fds = Vec::new();
        let mut names = Vec::new();
        for (i, &bytes) in layout.chunks.iter().enumerate() {
            let path = dir.join(format!("strata-dmabuf-test-{}-{i}-{short_chunk:?}", std::process::id()));
            let f = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(&path).expect("temp file");
            f.set_len(if short_chunk == Some(i) { bytes - 4096 } else { bytes }).expect("size");
            std::fs::remove_file(&path).expect("unlink");
            let fd = OwnedFd::from(f);
            names.push((fd.as_raw_fd(), path));
            fds.push(fd);
        }
        (fds, names)
    };
    // Whether fd `n` is still open on the file it was given for (the number alone could have been
    // reused by the time this looks).
    let still_open = |(n, path): &(i32, std::path::PathBuf)| std::fs::read_link(format!("/proc/self/fd/{n}")).is_ok_and(|l| l.to_string_lossy().starts_with(&*path.to_string_lossy()));

    let (fds, names) = files(Some(0));
    // SAFETY: dma-bufs carry their own reference to the memory.
    let err = match unsafe { VulkanKvMemory::import(&ctx, &layout, KvExport::DmaBuf { fds, layout: layout.clone() }) } {
        Err(e) => e,
        Ok(_) => panic!("a dma-buf shorter than its chunk was imported"),
    };
    let short = layout.chunks[0] - 4096;
    assert!(matches!(err, DeviceError::LayoutMismatch(_)) && err.to_string().contains(&format!("holds {short} bytes")), "{err}");
    assert!(!names.iter().any(still_open), "a refused import leaked an fd");

    let (fds, names) = files(None);
    // SAFETY: as above.
    let err = match unsafe { VulkanKvMemory::import(&ctx, &layout, KvExport::DmaBuf { fds, layout: layout.clone() }) } {
        Err(e) => e,
        Ok(_) => panic!("a plain file was imported as a dma-buf"),
    };
    if d.has(strata_gpu::vulkan::context::EXT_EXTERNAL_MEMORY_DMA_BUF) {
        assert!(matches!(&err, DeviceError::Vulkan { call, .. } if call.contains("dma-buf")), "{err}");
    } else {
        assert!(matches!(&err, DeviceError::Unsupported { .. }) && err.to_string().contains("VK_EXT_external_memory_dma_buf"), "{err}");
    }
    assert!(!names.iter().any(still_open), "a refused import leaked an fd");
}

/// The RMSNorm that quantizes for the next product writes the plain one's normalized rows (to the
/// last bits) and the same 8-bit records (quants, scales, sums) as the quantizer run on its own
/// rows, bit for bit, including all-zero blocks and ties of the largest magnitude.
#[test]
fn vulkan_int_records_hold_the_cpu_quants() {
    // The integer kernels' 8-bit records (quantize_lanes.glsl: eight elements an invocation,
    // blocks of 32 reduced across a quad) against the CPU's Q8_0 / Q8_K blocks, with ties of the
    // largest magnitude inside a block and across blocks, both signs: Q8_K's scale takes the sign
    // of the first, so a wrong tie flips every quant of the super-block.
    use strata_gpu::vulkan::kernels::ActRounding;
    let Some(mut ops) = first_vulkan_ops() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let kernels = Kernels::best();
    for (rounding, weight_ty, cols) in [(ActRounding::Q8_0, GgmlType::Q4_0, 96usize), (ActRounding::Q8_0, GgmlType::Q4_1, 1120), (ActRounding::Q8_K, GgmlType::Q4_K, 768), (ActRounding::Q8_K, GgmlType::Q4_K, 2304)] {
        let rows = 4;
        let mut x = random(&mut rng, rows * cols, 4.0);
        x[cols..cols + 32].iter_mut().for_each(|v| *v = 0.0); // an all-zero block
        // Row 0: a tie of the largest magnitude inside one invocation's eight elements.
        x[2] = -30.0;
        x[5] = 30.0;
        // Row 1: one between the first two invocations of a quad (block 1).
        x[cols + 35] = 30.0;
        x[cols + 41] = -30.0;
        // Row 2: the first block's maximum tied by a later block of its super-block.
        x[2 * cols + 70] = -50.0;
        x[2 * cols + 200 % cols] = 50.0;
        // Row 3: one between the two halves of a quad.
        x[3 * cols + 9] = 20.0;
        x[3 * cols + 25] = -20.0;
        let records = ops.int_records(rounding, &x, cols).expect("records");
        let record = records.len() / rows;
        let meta_offset = cols.next_multiple_of(16);
        let word = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let rb = strata_quant::activation_row_bytes(weight_ty, cols);
        for r in 0..rows {
            let got = &records[r * record..(r + 1) * record];
            let mut cpu = vec![0u8; rb];
            kernels.quantize_activations(weight_ty, &x[r * cols..(r + 1) * cols], &mut cpu).expect("quantize");
            // The CPU's quant and scale of element e (Q8_0 / Q8_1: f16 scale (and sum), then 32
            // quants; Q8_K: f32 scale, 256 quants, 16 sums).
            let act = Kernels::activation_type(weight_ty);
            let (block_elems, block_bytes) = (act.block_elems(), act.block_bytes());
            let quant = |e: usize| -> (i8, f32) {
                let at = (e / block_elems) * block_bytes;
                let first = block_bytes - block_elems - if act == GgmlType::Q8_K { 32 } else { 0 };
                let q = cpu[at + first + e % block_elems] as i8;
                let d = if act == GgmlType::Q8_K { f32::from_bits(word(&cpu, at)) } else { half::f16::from_bits(u16::from_le_bytes([cpu[at], cpu[at + 1]])).to_f32() };
                (q, d)
            };
            for (e, &q) in got[..cols].iter().enumerate() {
                assert_eq!(q as i8, quant(e).0, "{rounding:?} {cols}: row {r} element {e}");
            }
            for blk in 0..cols / 32 {
                let at = meta_offset + 8 * blk;
                let sum: i32 = (0..32).map(|i| i32::from(quant(32 * blk + i).0)).sum();
                assert_eq!(word(got, at + 4) as i32, sum, "{rounding:?} {cols}: row {r} block {blk} quant sum");
                // Q8_0's record keeps the f32 scale the CPU rounds to f16.
                let d = f32::from_bits(word(got, at));
                let d = if rounding == ActRounding::Q8_K { d } else { half::f16::from_f32(d).to_f32() };
                let want = quant(32 * blk).1;
                assert!((d - want).abs() <= 1e-6 * want.abs(), "{rounding:?} {cols}: row {r} block {blk} scale {d} vs {want}");
            }
        }
    }
}

#[test]
fn fused_swiglu_quantizes_exactly_as_the_quantizer() {
    // SwiGLU with the quantization for the down projection in one kernel: its f32 rows are the
    // plain SwiGLU's bits, its records the quantizer's of those rows.
    use strata_gpu::vulkan::kernels::ActRounding;
    let Some(mut ops) = first_vulkan_ops() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    for (rounding, cols) in [(ActRounding::Q8_0, 1536usize), (ActRounding::Q8_0, 96), (ActRounding::Q8_K, 2304)] {
        let rows = 3;
        let (gate, up) = (random(&mut rng, rows * cols, 3.0), random(&mut rng, rows * cols, 3.0));
        let (act, records) = ops.swiglu_with_records(rounding, &gate, &up, cols).expect("fused");
        let plain = ops.swiglu(&gate, &up).expect("swiglu");
        let first_diff = act.iter().zip(&plain).position(|(a, b)| a.to_bits() != b.to_bits());
        assert!(first_diff.is_none(), "{rounding:?} {cols}: SwiGLU rows differ from element {first_diff:?} ({:?})", first_diff.map(|i| (act[i], plain[i])));
        let want = ops.int_records(rounding, &plain, cols).expect("records");
        // Each record's quants and block metadata (not the padding after them).
        let (record, meta_offset) = (records.len() / rows, cols.next_multiple_of(16));
        for r in 0..rows {
            let (a, b) = (&records[r * record..(r + 1) * record], &want[r * record..(r + 1) * record]);
            assert_eq!(a[..cols], b[..cols], "{rounding:?} {cols}: row {r} quants");
            assert_eq!(a[meta_offset..meta_offset + cols / 32 * 8], b[meta_offset..meta_offset + cols / 32 * 8], "{rounding:?} {cols}: row {r} block scales and sums");
        }
    }
}

#[test]
fn fused_rms_norm_quantizes_exactly_as_the_quantizer() {
    use strata_gpu::vulkan::kernels::ActRounding;
    let Some(mut ops) = first_vulkan_ops() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    for (rounding, cols) in [(ActRounding::Q8_0, 96usize), (ActRounding::Q8_0, 3584), (ActRounding::Q8_K, 768), (ActRounding::Q8_K, 4864)] {
        let rows = 3;
        let mut x = random(&mut rng, rows * cols, 3.0);
        x[cols..cols + 32].iter_mut().for_each(|v| *v = 0.0); // an all-zero block
        x[2 * cols + 40] = -50.0; // a tie of the largest magnitude, both signs, across blocks
        x[2 * cols + 70] = 50.0;
        let weight: Vec<f32> = (0..cols).map(|i| if i == 70 { 1.0 } else { 0.5 + (i % 7) as f32 * 0.1 }).collect();
        let mut w = weight.clone();
        w[40] = 1.0;
        let (normed, records) = ops.rms_norm_with_records(rounding, &x, &w, 1e-6).expect("fused");
        let plain = ops.rms_norm(&x, &w, 1e-6).expect("rms_norm");
        // Its sum of squares runs in another order than the plain kernel's (a wider workgroup).
        for (i, (a, b)) in normed.iter().zip(&plain).enumerate() {
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1e-3), "{rounding:?} {cols}: normalized element {i}: {a} vs {b}");
        }
        let want = ops.int_records(rounding, &normed, cols).expect("records");
        assert_eq!(records.len(), want.len());
        // Each record's quants and block metadata (not the padding after them).
        let record = records.len() / rows;
        let meta_offset = cols.next_multiple_of(16);
        let word = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        for r in 0..rows {
            let (a, b) = (&records[r * record..(r + 1) * record], &want[r * record..(r + 1) * record]);
            assert_eq!(a[..cols], b[..cols], "{rounding:?} {cols}: row {r} quants");
            for blk in 0..cols / 32 {
                let at = meta_offset + 8 * blk;
                assert_eq!(word(a, at + 4), word(b, at + 4), "{rounding:?} {cols}: row {r} block {blk} quant sum");
                // The scale may differ in its last bit: a shader's division need not be
                // correctly rounded.
                let (sa, sb) = (word(a, at) as i64, word(b, at) as i64);
                assert!((sa - sb).abs() <= 1, "{rounding:?} {cols}: row {r} block {blk} scale {} vs {}", f32::from_bits(sa as u32), f32::from_bits(sb as u32));
            }
        }
    }
}
