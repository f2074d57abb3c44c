//! Kernel benchmark: decode (n_tokens = 1) matvec bandwidth and 512-token matmul throughput,
//! per weight type and SIMD level, plus whole-model passes on SmolLM2-135M's shapes
//! (30 layers of Q4_1 q/k/v/o/gate/up/down, Q8_0 output head 49152 x 576).
//!
//! `cargo run --release -p strata-quant --example kernel_bench [quick]`

use std::time::Instant;
use strata_quant::{activation_row_bytes, quantize, GgmlType, Kernels, SimdLevel};

struct Mat {
    ty: GgmlType,
    rows: usize,
    k: usize,
    w: Vec<u8>,
}

fn lcg(seed: &mut u64) -> f32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

fn mat(ty: GgmlType, rows: usize, k: usize, seed: u64) -> Mat {
    let mut s = seed;
    let rb = ty.row_bytes(k as u64).unwrap() as usize;
    let mut w = vec![0u8; rows * rb];
    // Quantize row chunks (quantizing K-quants is slow; reuse one chunk pattern).
    let chunk_rows = 64.min(rows);
    let src: Vec<f32> = (0..chunk_rows * k).map(|_| lcg(&mut s) * 0.1).collect();
    let mut q = vec![0u8; chunk_rows * rb];
    quantize(ty, &src, &mut q).unwrap();
    for (i, c) in w.chunks_mut(chunk_rows * rb).enumerate() {
        let n = c.len();
        c.copy_from_slice(&q[..n]);
        // perturb so chunks differ (keep scales valid: touch only quant bytes of first block)
        if ty != GgmlType::F32 && ty != GgmlType::F16 && ty != GgmlType::BF16 && n > 40 {
            c[n / 2] ^= (i as u8).wrapping_mul(17) & 0x0f;
        }
    }
    Mat { ty, rows, k, w }
}

fn acts(kern: &Kernels, ty: GgmlType, k: usize, n: usize) -> Vec<u8> {
    let mut s = 7u64;
    let x: Vec<f32> = (0..k * n).map(|_| lcg(&mut s)).collect();
    let arb = activation_row_bytes(ty, k);
    let mut a = vec![0u8; arb * n];
    for t in 0..n {
        kern.quantize_activations(ty, &x[t * k..(t + 1) * k], &mut a[t * arb..(t + 1) * arb]).unwrap();
    }
    a
}

/// This thread's CPU time in seconds (Linux schedstat), so single-thread figures are not
/// inflated by waiting for a CPU on a shared machine; wall time elsewhere.
fn thread_cpu_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(s.split_whitespace().next()?.parse::<f64>().ok()? / 1e9)
}

/// Best seconds per call of `f` over a few timed batches; `cpu`: measure this thread's CPU
/// time instead of wall time (only meaningful when `f` runs on this thread alone).
fn time_with(mut f: impl FnMut(), min_s: f64, cpu: bool) -> f64 {
    let now = || if cpu { thread_cpu_s().unwrap_or(0.0) } else { START.with(|s| s.elapsed().as_secs_f64()) };
    f();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = now();
        let mut n = 0u32;
        while now() - start < min_s / 3.0 || n == 0 {
            f();
            n += 1;
        }
        best = best.min((now() - start) / n as f64);
    }
    best
}

thread_local! {
    static START: Instant = Instant::now();
}

fn time(f: impl FnMut(), min_s: f64) -> f64 {
    time_with(f, min_s, thread_cpu_s().is_some())
}

/// Runs `m` x acts split over `threads` row chunks (as the CPU device does with rayon).
fn matmul_threads(kern: &Kernels, m: &Mat, a: &[u8], n_tokens: usize, out: &mut [f32], threads: usize) {
    if threads == 1 {
        kern.matmul(m.ty, &m.w, m.k, 0..m.rows, a, n_tokens, out).unwrap();
        return;
    }
    use rayon::prelude::*;
    let per = m.rows.div_ceil(threads).div_ceil(4) * 4;
    let parts: Vec<Vec<f32>> = (0..threads)
        .into_par_iter()
        .map(|i| {
            let r0 = (i * per).min(m.rows);
            let r1 = ((i + 1) * per).min(m.rows);
            let mut o = vec![0f32; (r1 - r0) * n_tokens];
            kern.matmul(m.ty, &m.w, m.k, r0..r1, a, n_tokens, &mut o).unwrap();
            o
        })
        .collect();
    out[0] += parts.iter().map(|p| p.first().copied().unwrap_or(0.0)).sum::<f32>();
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    if let Some(pos) = std::env::args().position(|a| a == "profile") {
        // profile TYPE LEVEL N_TOKENS: loop one shape for a few seconds (for perf).
        let args: Vec<String> = std::env::args().collect();
        let ty = GgmlType::from_name(&args[pos + 1]).unwrap();
        let kern = if args[pos + 2] == "avx2" { Kernels::with_level(SimdLevel::Avx2) } else { Kernels::with_level(SimdLevel::Avx512Vnni) }.unwrap();
        let n: usize = args[pos + 3].parse().unwrap();
        let k_default = if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K) { 1536 } else { 576 };
        let k = std::env::var("K").ok().and_then(|v| v.parse().ok()).unwrap_or(k_default);
        let rows = std::env::var("ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(1536);
        // ORDER=interleaved: the AVX-512 products in the interleaved order, on repacked weights.
        let kern = if std::env::var("ORDER").is_ok_and(|o| o == "interleaved") { kern.with_order(strata_quant::ProductOrder::Interleaved) } else { kern };
        let mut m = mat(ty, rows, k, 1);
        if let Some(w) = kern.repack_weights(ty, k, rows, &m.w).unwrap() {
            m.w = w;
        }
        let a = acts(&kern, ty, k, n);
        let mut o = vec![0f32; m.rows * n];
        if let Some(iters) = args.get(pos + 4) {
            // Fixed work for `perf stat -e cycles:u` (robust on a loaded machine).
            let iters: usize = iters.parse().unwrap();
            for _ in 0..iters {
                kern.matmul(ty, &m.w, m.k, 0..m.rows, &a, n, &mut o).unwrap();
            }
            println!("ops per call {} bytes per call {}", 2 * m.rows * k * n, m.w.len());
            return;
        }
        let t = time(|| kern.matmul(ty, &m.w, m.k, 0..m.rows, &a, n, &mut o).unwrap(), 3.0);
        println!("{ty} {:?} n={n}: {:.1} us/call, {:.2} GB/s, {:.1} GOPS", kern.level(), t * 1e6, m.w.len() as f64 / t / 1e9, 2.0 * (m.rows * k * n) as f64 / t / 1e9);
        return;
    }
    let min_s = if quick { 0.15 } else { 0.4 };
    let levels: Vec<Kernels> =
        [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512Vnni].into_iter().filter_map(Kernels::with_level).collect();
    println!("best level: {:?}", Kernels::best().level());
    rayon::ThreadPoolBuilder::new().num_threads(2).build_global().ok();
    println!("timing: 1-thread figures use this thread's CPU time (immune to run-queue waits on a shared machine); 2-thread figures use wall time");

    // Per type: decode GB/s (weights hot in L2/L3) and 512-token GOPS on 1536 x 1536.
    let types = [
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
    println!("\n== per type, 1536 x 1536, one thread ==");
    println!("{:<6} {:<11} {:>14} {:>16}", "type", "level", "decode GB/s", "prefill GOPS");
    for ty in types {
        let m = mat(ty, 1536, 1536, 1);
        for kern in &levels {
            let a1 = acts(kern, ty, m.k, 1);
            let mut o1 = vec![0f32; m.rows];
            let t1 = time(|| kern.matmul(ty, &m.w, m.k, 0..m.rows, &a1, 1, &mut o1).unwrap(), min_s);
            let gbs = m.w.len() as f64 / t1 / 1e9;
            let ntok = if kern.level() == SimdLevel::Scalar { 32 } else { 512 };
            let ap = acts(kern, ty, m.k, ntok);
            let mut op = vec![0f32; m.rows * ntok];
            let tp = time(|| kern.matmul(ty, &m.w, m.k, 0..m.rows, &ap, ntok, &mut op).unwrap(), min_s);
            let gops = 2.0 * (m.rows * m.k * ntok) as f64 / tp / 1e9;
            println!("{:<6} {:<11} {:>14.2} {:>16.1}", ty.name(), format!("{:?}", kern.level()), gbs, gops);
        }
    }

    // Whole model (SmolLM2-135M Q4_1): 30 layers x q,k,v,o,gate,up,down + Q8_0 head.
    println!("\n== SmolLM2-135M shapes: matmuls of one forward pass ==");
    let shapes = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)];
    let layers: Vec<Vec<Mat>> = (0..30)
        .map(|l| shapes.iter().enumerate().map(|(i, &(r, k))| mat(GgmlType::Q4_1, r, k, (l * 10 + i) as u64)).collect())
        .collect();
    let head = mat(GgmlType::Q8_0, 49152, 576, 99);
    let total_bytes: usize = layers.iter().flatten().map(|m| m.w.len()).sum::<usize>() + head.w.len();
    println!("weights streamed per token: {:.1} MB", total_bytes as f64 / 1e6);
    for kern in levels.iter().filter(|k| k.level() != SimdLevel::Scalar) {
        let a576 = acts(kern, GgmlType::Q4_1, 576, 1);
        let a1536 = acts(kern, GgmlType::Q4_1, 1536, 1);
        let ah = acts(kern, GgmlType::Q8_0, 576, 1);
        for threads in [1, 2] {
            let mut out = vec![0f32; 49152];
            let t = time_with(
                || {
                    for l in &layers {
                        for m in l {
                            let a = if m.k == 576 { &a576 } else { &a1536 };
                            matmul_threads(kern, m, a, 1, &mut out[..m.rows], threads);
                        }
                    }
                    matmul_threads(kern, &head, &ah, 1, &mut out, threads);
                },
                min_s * 3.0,
                threads == 1 && thread_cpu_s().is_some(),
            );
            println!(
                "decode  {:<11} {} thread(s): {:7.2} ms/token  {:6.1} GB/s  ({:.0} tok/s matmul ceiling)",
                format!("{:?}", kern.level()),
                threads,
                t * 1e3,
                total_bytes as f64 / t / 1e9,
                1.0 / t
            );
        }
        let n = 512;
        let p576 = acts(kern, GgmlType::Q4_1, 576, n);
        let p1536 = acts(kern, GgmlType::Q4_1, 1536, n);
        let ph = acts(kern, GgmlType::Q8_0, 576, 1);
        let flops: f64 = layers.iter().flatten().map(|m| 2.0 * (m.rows * m.k * n) as f64).sum();
        for threads in [1, 2] {
            let mut out = vec![0f32; 1536 * n];
            let t = time_with(
                || {
                    for l in &layers {
                        for m in l {
                            let a = if m.k == 576 { &p576 } else { &p1536 };
                            matmul_threads(kern, m, a, n, &mut out[..m.rows * n], threads);
                        }
                    }
                    // llama.cpp computes the head only for the last token of a prompt.
                    let mut o = vec![0f32; 49152];
                    matmul_threads(kern, &head, &ph, 1, &mut o, threads);
                },
                min_s * 3.0,
                threads == 1 && thread_cpu_s().is_some(),
            );
            println!(
                "prefill {:<11} {} thread(s): {:7.1} ms / 512 tokens  {:6.1} GOPS  ({:.0} tok/s matmul ceiling)",
                format!("{:?}", kern.level()),
                threads,
                t * 1e3,
                flops / t / 1e9,
                n as f64 / t
            );
        }
    }
}
