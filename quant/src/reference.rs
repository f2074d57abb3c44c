//! Reference (scalar) quantization and dequantization, bit-compatible with ggml's
//! `quantize_row_*_ref` / `dequantize_row_*` (same operation order, same rounding).

use crate::{GgmlType, QuantError};
use half::f16;

pub(crate) const QK_K: usize = 256;

#[inline(always)]
pub(crate) fn f16_at(b: &[u8], off: usize) -> f32 {
    f16::from_le_bytes([b[off], b[off + 1]]).to_f32()
}

#[inline(always)]
fn put_f16(b: &mut [u8], off: usize, v: f32) {
    b[off..off + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

#[inline(always)]
pub(crate) fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// ggml's `nearest_int`: round half to even through the 1.5 * 2^23 trick.
#[inline(always)]
pub(crate) fn nearest_int(f: f32) -> i32 {
    let val = f + 12582912.0f32;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// ggml's `ggml_compute_fp32_to_bf16`: NaN forced quiet, otherwise round to nearest even.
#[inline(always)]
pub(crate) fn f32_to_bf16_bits(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// Weight and activation types this crate quantizes and dequantizes.
pub(crate) fn is_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, F32 | F16 | BF16 | Q8_0 | Q8_1 | Q8_K | Q4_0 | Q4_1 | Q4_K | Q5_K | Q6_K)
}

fn check_lengths(ty: GgmlType, elems: usize, bytes: usize, op: &'static str) -> Result<usize, QuantError> {
    if !is_supported(ty) {
        return Err(QuantError::Unsupported { ty, op });
    }
    let be = ty.block_elems();
    if !elems.is_multiple_of(be) {
        return Err(QuantError::NotBlockMultiple { ty, elems, block: be });
    }
    let nb = elems / be;
    let expected = nb * ty.block_bytes();
    if bytes != expected {
        return Err(QuantError::Length { what: "quantized bytes", expected, got: bytes });
    }
    Ok(nb)
}

/// Dequantizes `dst.len()` elements of type `ty` from `src`, which must hold exactly their bytes.
///
/// The results are those of ggml's `dequantize_row_*` (and of the `gguf` Python package),
/// bit for bit.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let nb = check_lengths(ty, dst.len(), src.len(), "dequantize")?;
    let bb = ty.block_bytes();
    match ty {
        GgmlType::F32 => {
            for (o, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }
        }
        GgmlType::Q8_0 | GgmlType::Q8_1 => {
            let qoff = if ty == GgmlType::Q8_0 { 2 } else { 4 };
            for i in 0..nb {
                let b = &src[i * bb..(i + 1) * bb];
                let d = f16_at(b, 0);
                for j in 0..32 {
                    dst[i * 32 + j] = (b[qoff + j] as i8) as f32 * d;
                }
            }
        }
        GgmlType::Q8_K => {
            for i in 0..nb {
                let b = &src[i * bb..(i + 1) * bb];
                let d = f32_at(b, 0);
                for j in 0..QK_K {
                    dst[i * QK_K + j] = d * (b[4 + j] as i8) as f32;
                }
            }
        }
        GgmlType::Q4_0 => {
            for i in 0..nb {
                let b = &src[i * bb..(i + 1) * bb];
                let d = f16_at(b, 0);
                for j in 0..16 {
                    let x0 = (b[2 + j] & 0x0f) as i32 - 8;
                    let x1 = (b[2 + j] >> 4) as i32 - 8;
                    dst[i * 32 + j] = x0 as f32 * d;
                    dst[i * 32 + j + 16] = x1 as f32 * d;
                }
            }
        }
        GgmlType::Q4_1 => {
            for i in 0..nb {
                let b = &src[i * bb..(i + 1) * bb];
                let d = f16_at(b, 0);
                let m = f16_at(b, 2);
                for j in 0..16 {
                    let x0 = (b[4 + j] & 0x0f) as f32;
                    let x1 = (b[4 + j] >> 4) as f32;
                    dst[i * 32 + j] = x0 * d + m;
                    dst[i * 32 + j + 16] = x1 * d + m;
                }
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let is5 = ty == GgmlType::Q5_K;
            for i in 0..nb {
                let b = &src[i * bb..(i + 1) * bb];
                let d = f16_at(b, 0);
                let min = f16_at(b, 2);
                let scales = &b[4..16];
                let (qh, ql) = if is5 { (&b[16..48], &b[48..176]) } else { (&b[0..0], &b[16..144]) };
                let y = &mut dst[i * QK_K..(i + 1) * QK_K];
                for j in 0..4 {
                    let (sc1, m1) = get_scale_min_k4(2 * j, scales);
                    let (sc2, m2) = get_scale_min_k4(2 * j + 1, scales);
                    let d1 = d * sc1 as f32;
                    let mm1 = min * m1 as f32;
                    let d2 = d * sc2 as f32;
                    let mm2 = min * m2 as f32;
                    let q = &ql[32 * j..32 * j + 32];
                    let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
                    for l in 0..32 {
                        let mut v1 = (q[l] & 0xf) as i32;
                        let mut v2 = (q[l] >> 4) as i32;
                        if is5 {
                            v1 += if qh[l] & u1 != 0 { 16 } else { 0 };
                            v2 += if qh[l] & u2 != 0 { 16 } else { 0 };
                        }
                        y[64 * j + l] = d1 * v1 as f32 - mm1;
                        y[64 * j + 32 + l] = d2 * v2 as f32 - mm2;
                    }
                }
            }
        }
        GgmlType::Q6_K => {
            for i in 0..nb {
                let b = &src[i * bb..(i + 1) * bb];
                let d = f16_at(b, 208);
                let y = &mut dst[i * QK_K..(i + 1) * QK_K];
                for n in 0..2 {
                    let ql = &b[64 * n..64 * n + 64];
                    let qh = &b[128 + 32 * n..128 + 32 * n + 32];
                    let sc = &b[192 + 8 * n..192 + 8 * n + 8];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) << 4)) as i32 - 32;
                        let y0 = &mut y[128 * n..];
                        y0[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                        y0[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                        y0[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                        y0[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                    }
                }
            }
        }
        _ => unreachable!(),
    }
    Ok(())
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K
/// block, from its 12 scale bytes `q`.
///
/// # Panics
/// If `j` is not below 8 or `q` is shorter than 12 bytes.
#[inline(always)]
pub fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Quantizes `src` into `dst` (exactly the bytes of `src.len()` elements of type `ty`) with
/// ggml's reference quantizers, so files written with it load identically in llama.cpp.
pub fn quantize(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let nb = check_lengths(ty, src.len(), dst.len(), "quantize")?;
    let bb = ty.block_bytes();
    match ty {
        GgmlType::F32 => {
            for (c, v) in dst.chunks_exact_mut(4).zip(src) {
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (c, v) in dst.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (c, v) in dst.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&f32_to_bf16_bits(*v).to_le_bytes());
            }
        }
        _ => {
            for i in 0..nb {
                let x = &src[i * ty.block_elems()..(i + 1) * ty.block_elems()];
                let y = &mut dst[i * bb..(i + 1) * bb];
                match ty {
                    GgmlType::Q8_0 => quantize_block_q8_0(x, y),
                    GgmlType::Q8_1 => quantize_block_q8_1(x, y),
                    GgmlType::Q8_K => quantize_block_q8_k(x, y),
                    GgmlType::Q4_0 => quantize_block_q4_0(x, y),
                    GgmlType::Q4_1 => quantize_block_q4_1(x, y),
                    GgmlType::Q4_K => quantize_block_qk_k(x, y, false),
                    GgmlType::Q5_K => quantize_block_qk_k(x, y, true),
                    GgmlType::Q6_K => quantize_block_q6_k(x, y),
                    _ => unreachable!(),
                }
            }
        }
    }
    Ok(())
}

/// Quantizes activation rows for Q4_0/Q4_1/Q8_0 products (`ty` Q8_0 or Q8_1) the way ggml's
/// x86 `quantize_row_q8_0`/`quantize_row_q8_1` do, not its reference quantizer: the inverse
/// scale is `127 / amax` and values round half to even. Matching it bit for bit is what keeps
/// the CPU device next to llama.cpp (a last-bit difference here moves a whole 8-bit step).
pub(crate) fn quantize_activations_q8(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    let (bb, qo) = if ty == GgmlType::Q8_0 { (34, 2) } else { (36, 4) };
    for (x, y) in src.chunks_exact(32).zip(dst.chunks_exact_mut(bb)) {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        put_f16(y, 0, d);
        let mut sum = 0i32;
        for j in 0..32 {
            let q = (x[j] * id).round_ties_even() as i32;
            y[qo + j] = q as i8 as u8;
            sum += q;
        }
        if ty == GgmlType::Q8_1 {
            put_f16(y, 2, d * sum as f32);
        }
    }
}

pub(crate) fn quantize_block_q8_0(x: &[f32], y: &mut [u8]) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(y, 0, d);
    for j in 0..32 {
        y[2 + j] = (x[j] * id).round() as i8 as u8;
    }
}

pub(crate) fn quantize_block_q8_1(x: &[f32], y: &mut [u8]) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(y, 0, d);
    let mut sum = 0i32;
    for j in 0..32 {
        let q = (x[j] * id).round() as i8;
        y[4 + j] = q as u8;
        sum += q as i32;
    }
    put_f16(y, 2, sum as f32 * d);
}

pub(crate) fn quantize_block_q8_k(x: &[f32], y: &mut [u8]) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        y.fill(0);
        return;
    }
    let iscale = -127.0f32 / max;
    for j in 0..QK_K {
        y[4 + j] = nearest_int(iscale * x[j]).min(127) as i8 as u8;
    }
    for j in 0..16 {
        let s: i32 = (0..16).map(|l| y[4 + 16 * j + l] as i8 as i32).sum();
        y[260 + 2 * j..262 + 2 * j].copy_from_slice(&(s as i16).to_le_bytes());
    }
    y[0..4].copy_from_slice(&(1.0f32 / iscale).to_le_bytes());
}

fn quantize_block_q4_0(x: &[f32], y: &mut [u8]) {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(y, 0, d);
    for j in 0..16 {
        let xi0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let xi1 = ((x[16 + j] * id + 8.5) as i8).min(15) as u8;
        y[2 + j] = xi0 | (xi1 << 4);
    }
}

fn quantize_block_q4_1(x: &[f32], y: &mut [u8]) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(y, 0, d);
    put_f16(y, 2, min);
    for j in 0..16 {
        let xi0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
        let xi1 = (((x[16 + j] - min) * id + 0.5) as i8).min(15) as u8;
        y[4 + j] = xi0 | (xi1 << 4);
    }
}

/// ggml's `make_qkx2_quants`.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    the_min: &mut f32,
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> f32 {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        *the_min = -min;
        return 0.0;
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let mut diff = scale * l_out[i] as f32 + min - x[i];
        diff = if use_mad { diff.abs() } else { diff * diff };
        best_error += weights[i] * diff;
    }
    if nstep < 1 {
        *the_min = -min;
        return scale;
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let dd = sum_w * sum_l2 - sum_l * sum_l;
        if dd > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / dd;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / dd;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let mut diff = this_scale * laux[i] as f32 + this_min - x[i];
                diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    scale
}

/// ggml's `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref` for one super-block.
fn quantize_block_qk_k(x: &[f32], y: &mut [u8], five: bool) {
    let nmax = if five { 31 } else { 15 };
    let (rmin, rdelta, nstep) = if five { (-0.5f32, 0.1f32, 15) } else { (-1.0f32, 0.1f32, 20) };
    let mut l_all = [0u8; QK_K];
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut mins = [0f32; 8];
    let mut scales = [0f32; 8];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for l in 0..32 {
            weights[l] = av_x + xs[l].abs();
        }
        scales[j] = make_qkx2_quants(
            nmax,
            xs,
            &weights,
            &mut l_all[32 * j..32 * j + 32],
            &mut mins[j],
            &mut laux,
            rmin,
            rdelta,
            nstep,
            false,
        );
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut y[4..16];
    sc.fill(0);
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    put_f16(y, 0, max_scale / 63.0);
    put_f16(y, 2, max_min / 63.0);
    let df = f16_at(y, 0);
    let dminf = f16_at(y, 2);
    for j in 0..8 {
        let (s, m) = get_scale_min_k4(j, &y[4..16]);
        let d = df * s as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dminf * m as f32;
        for ii in 0..32 {
            let l = nearest_int((x[32 * j + ii] + dm) / d);
            l_all[32 * j + ii] = l.clamp(0, nmax) as u8;
        }
    }
    if five {
        let (qh, ql) = y[16..176].split_at_mut(32);
        qh.fill(0);
        let (mut m1, mut m2) = (1u8, 2u8);
        for n in 0..4 {
            for j in 0..32 {
                let mut l1 = l_all[64 * n + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l_all[64 * n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[32 * n + j] = l1 | (l2 << 4);
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    } else {
        let q = &mut y[16..144];
        for n in 0..4 {
            for l in 0..32 {
                q[32 * n + l] = l_all[64 * n + l] | (l_all[64 * n + l + 32] << 4);
            }
        }
    }
}

/// ggml's `make_qx_quants` with `rmse_type == 1` and no importance weights.
#[allow(clippy::needless_range_loop)] // kept index-shaped like ggml's code it must match
fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < 1e-15 {
        l_out[..n].fill(0);
        return 0.0;
    }
    let mut iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
        let w = x[i] * x[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1f32 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
            let w = x[i] * x[i];
            let lf = l as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `quantize_row_q6_K_ref` for one super-block.
fn quantize_block_q6_k(x: &[f32], y: &mut [u8]) {
    let mut l_all = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for ib in 0..16 {
        let scale = make_qx_quants_rmse1(32, &x[16 * ib..16 * ib + 16], &mut l_all[16 * ib..16 * ib + 16]);
        scales[ib] = scale;
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = scale;
        }
    }
    if max_abs_scale < 1e-15 {
        y.fill(0);
        return;
    }
    let iscale = -128.0f32 / max_scale;
    put_f16(y, 208, 1.0 / iscale);
    for ib in 0..16 {
        y[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
    }
    let df = f16_at(y, 208);
    for j in 0..16 {
        let d = df * (y[192 + j] as i8) as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let l = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
            l_all[16 * j + ii] = (l + 32) as i8;
        }
    }
    let l_all = l_all.map(|v| v as u8);
    for n in 0..2 {
        let j = 128 * n;
        for l in 0..32 {
            let q1 = l_all[j + l] & 0xf;
            let q2 = l_all[j + l + 32] & 0xf;
            let q3 = l_all[j + l + 64] & 0xf;
            let q4 = l_all[j + l + 96] & 0xf;
            y[64 * n + l] = q1 | (q3 << 4);
            y[64 * n + l + 32] = q2 | (q4 << 4);
            y[128 + 32 * n + l] = (l_all[j + l] >> 4)
                | ((l_all[j + l + 32] >> 4) << 2)
                | ((l_all[j + l + 64] >> 4) << 4)
                | ((l_all[j + l + 96] >> 4) << 6);
        }
    }
}
