//! Portable scalar kernels: the reference every SIMD level is tested against.
//!
//! They work on the raw GGML block bytes (no repacking), one (row, token) pair at a time, with
//! exact integer sums inside each block.

use crate::reference::{f16_at, f32_at, get_scale_min_k4, QK_K};
use crate::GgmlType;

/// Dot product of one weight row (`k` elements of `ty`) with one activation row quantized for it.
pub(crate) fn dot_row(ty: GgmlType, w: &[u8], a: &[u8], k: usize) -> f32 {
    match ty {
        GgmlType::F32 => {
            let mut s = 0.0f32;
            for i in 0..k {
                s += f32_at(w, 4 * i) * f32_at(a, 4 * i);
            }
            s
        }
        GgmlType::F16 => {
            let mut s = 0.0f32;
            for i in 0..k {
                s += f16_at(w, 2 * i) * f32_at(a, 4 * i);
            }
            s
        }
        GgmlType::BF16 => {
            let mut s = 0.0f32;
            for i in 0..k {
                let wv = f32::from_bits((u16::from_le_bytes([w[2 * i], w[2 * i + 1]]) as u32) << 16);
                s += wv * f32_at(a, 4 * i);
            }
            s
        }
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => dot_row_b32(ty, w, a, k),
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => {
            let bb = ty.block_bytes();
            let mut s = 0.0f32;
            for (x, y) in w.chunks_exact(bb).zip(a.chunks_exact(292)).take(k / QK_K) {
                s += dot_superblock(ty, x, y);
            }
            s
        }
        _ => unreachable!("dot_row on {ty}"),
    }
}

/// A 32-block weight row against its Q8_0/Q8_1 activations in ggml's x86 arithmetic: eight
/// float lanes, lane `l` adding `d_w * d_a * (sum of products 4l..4l+3)` with one FMA per block
/// (elements in ggml's order: a nibble block's 16 low nibbles, then its 16 high ones), summed by
/// `hsum_float_8`, plus Q4_1's `m * s` terms on their own chain. The SIMD kernels compute
/// exactly this.
fn dot_row_b32(ty: GgmlType, w: &[u8], a: &[u8], k: usize) -> f32 {
    let (wb, ab) = match ty {
        GgmlType::Q4_0 => (18, 34),
        GgmlType::Q4_1 => (20, 36),
        _ => (34, 34),
    };
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (x, y) in w.chunks_exact(wb).zip(a.chunks_exact(ab)).take(k / 32) {
        let aq = &y[ab - 32..];
        let weight = |j: usize| -> i32 {
            match ty {
                GgmlType::Q8_0 => x[2 + j] as i8 as i32,
                _ => {
                    let byte = x[wb - 16 + j % 16];
                    let q = if j < 16 { byte & 0xf } else { byte >> 4 } as i32;
                    if ty == GgmlType::Q4_0 { q - 8 } else { q }
                }
            }
        };
        let d = f16_at(x, 0) * f16_at(y, 0);
        for (l, lane) in acc.iter_mut().enumerate() {
            let sumi: i32 = (4 * l..4 * l + 4).map(|j| weight(j) * (aq[j] as i8) as i32).sum();
            *lane = d.mul_add(sumi as f32, *lane);
        }
        if ty == GgmlType::Q4_1 {
            summs += f16_at(x, 2) * f16_at(y, 2);
        }
    }
    hsum8(&acc) + summs
}

/// ggml's `hsum_float_8`: `((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))`.
fn hsum8(a: &[f32; 8]) -> f32 {
    let r = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (r[0] + r[2]) + (r[1] + r[3])
}

/// One K-quant super-block against one Q8_K block.
fn dot_superblock(ty: GgmlType, x: &[u8], y: &[u8]) -> f32 {
    let yd = f32_at(y, 0);
    let q8 = |i: usize| (y[4 + i] as i8) as i32;
    let bsum = |i: usize| i16::from_le_bytes([y[260 + 2 * i], y[261 + 2 * i]]) as i32;
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let five = ty == GgmlType::Q5_K;
            let scales = &x[4..16];
            let (qh, ql) = if five { (&x[16..48], &x[48..176]) } else { (&x[0..0], &x[16..144]) };
            let mut sumi = 0i32;
            let mut summ = 0i32;
            for j in 0..4 {
                for half in 0..2 {
                    let sub = 2 * j + half;
                    let (sc, m) = get_scale_min_k4(sub, scales);
                    let mut si = 0i32;
                    for l in 0..32 {
                        let mut q = ((ql[32 * j + l] >> (4 * half)) & 0xf) as i32;
                        if five && qh[l] & (1 << sub) != 0 {
                            q += 16;
                        }
                        si += q * q8(64 * j + 32 * half + l);
                    }
                    sumi += sc as i32 * si;
                    summ += m as i32 * (bsum(2 * sub) + bsum(2 * sub + 1));
                }
            }
            let d = f16_at(x, 0) * yd;
            let dmin = f16_at(x, 2) * yd;
            d * sumi as f32 - dmin * summ as f32
        }
        GgmlType::Q6_K => {
            let mut sumi = 0i32;
            for n in 0..2 {
                let ql = &x[64 * n..64 * n + 64];
                let qh = &x[128 + 32 * n..160 + 32 * n];
                let sc = &x[192 + 8 * n..200 + 8 * n];
                let mut sub = [0i32; 8];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) << 4)) as i32 - 32;
                    let base = 128 * n;
                    sub[is] += q1 * q8(base + l);
                    sub[is + 2] += q2 * q8(base + l + 32);
                    sub[is + 4] += q3 * q8(base + l + 64);
                    sub[is + 6] += q4 * q8(base + l + 96);
                }
                for (i, v) in sub.iter().enumerate() {
                    sumi += (sc[i] as i8) as i32 * v;
                }
            }
            f16_at(x, 208) * yd * sumi as f32
        }
        _ => unreachable!(),
    }
}

/// Scalar `sum a[i] * b[i]`.
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
