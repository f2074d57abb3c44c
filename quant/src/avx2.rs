//! AVX2 + FMA kernels (`vpmaddubsw` + `vpmaddwd`), for x86-64 CPUs without AVX-512 VNNI.
//!
//! Every function here is compiled with AVX2/FMA/F16C enabled and must only be called once
//! `Kernels` has detected them at run time.

// Micro-tiles index their register arrays by (row, token); iterators would obscure them.
#![allow(clippy::needless_range_loop)]

use crate::pack::{drive, side_stride, ActPack, Tile};
use crate::reference::{get_scale_min_k4, QK_K};
use crate::GgmlType;
use half::f16;
use std::arch::x86_64::*;

/// What this level adds to Q8_0 weight bytes to use them unsigned (see [`ActPack::new`]).
pub(crate) const Q8_0_OFFSET: i32 = 0;
const Q40: u8 = 0;
const Q41: u8 = 1;
const Q80: u8 = 2;
const Q4K: u8 = 4;
const Q5K: u8 = 5;
const Q6K: u8 = 6;
const F32W: u8 = 10;
/// Software prefetch distance in bytes for streamed weights, prefetched into L2 (see `avx512.rs`).
const PF_DIST: usize = 8192;
const F16W: u8 = 11;
const BF16W: u8 = 12;

/// `out[t * out_stride + r] = dot(weight row rows.start + r, activation row t)`.
///
/// # Safety
/// The CPU must support avx2, fma and f16c; the slices must have been validated by
/// `Kernels::matmul`, and `out` must be valid for writes of those elements, which no one else
/// accesses meanwhile.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn matmul(
    ty: GgmlType,
    weights: &[u8],
    k: usize,
    rows: std::ops::Range<usize>,
    acts: &[u8],
    n_tokens: usize,
    packed: Option<&ActPack>,
    out: *mut f32,
    out_stride: usize,
) {
    let rb = ty.row_bytes(k as u64).unwrap() as usize;
    let nrows = rows.len();
    let w0 = weights.as_ptr().add(rows.start * rb);
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            drive(
                nrows,
                n_tokens,
                |r0, nr, t0, nt| {
                    let tile = Tile {
                        w: w0.add(r0 * rb),
                        rb,
                        nb: k,
                        side: 0,
                        aq: acts.as_ptr().add(t0 * 4 * k),
                        astride: 4 * k,
                        ad: std::ptr::null(),
                    adb: std::ptr::null(),
                    corr: std::ptr::null(),
                    vb: std::ptr::null(),
                    vb_stride: 0,
                        bs: std::ptr::null(),
                        out: out.add(t0 * out_stride + r0),
                        ostride: out_stride,
                    };
                    match ty {
                        GgmlType::F32 => dispatch_tile!(tile_f, F32W, nr, nt, &tile),
                        GgmlType::F16 => dispatch_tile!(tile_f, F16W, nr, nt, &tile),
                        _ => dispatch_tile!(tile_f, BF16W, nr, nt, &tile),
                    }
                },
                |_, _| {},
            );
        }
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => {
            let mut slot = None;
            let pack = ActPack::given_or_new(packed, &mut slot, ty, acts, k, n_tokens, Q8_0_OFFSET, false);
            // One kernel for every token count: each (row, token) result is then computed by the
            // same instructions in the same order whatever else is in the step (batch invariance).
            let nb = k / 32;
            let side = side_stride(nb);
            drive(
                nrows,
                n_tokens,
                |r0, nr, t0, nt| {
                    let tile = Tile {
                        w: w0.add(r0 * rb),
                        rb,
                        nb,
                        side,
                        aq: pack.qs.as_ptr().add(t0 * k),
                        astride: k,
                        ad: pack.d.as_ptr().add(t0 * side),
                        adb: if pack.d_by_block.is_empty() { std::ptr::null() } else { pack.d_by_block.as_ptr().add(t0) },
                        corr: if pack.corr.is_empty() { std::ptr::null() } else { pack.corr.as_ptr().add(t0 * nb * 8) },
                        vb: if pack.v_by_block.is_empty() { std::ptr::null() } else { pack.v_by_block.as_ptr().add(t0) },
                        vb_stride: n_tokens,
                        bs: std::ptr::null(),
                        out: out.add(t0 * out_stride + r0),
                        ostride: out_stride,
                    };
                    match ty {
                        GgmlType::Q4_0 => dispatch_tile!(tile_b32_inline, Q40, nr, nt, &tile),
                        GgmlType::Q4_1 => dispatch_tile!(tile_b32_inline, Q41, nr, nt, &tile),
                        _ => dispatch_tile!(tile_b32_inline, Q80, nr, nt, &tile),
                    }
                },
                |_, _| {},
            );
        }
        _ => {
            let mut slot = None;
            let pack = ActPack::given_or_new(packed, &mut slot, ty, acts, k, n_tokens, Q8_0_OFFSET, false);
            let nsb = k / QK_K;
            let side = pack.stride;
            drive(
                nrows,
                n_tokens,
                |r0, nr, t0, nt| {
                    let tile = Tile {
                        w: w0.add(r0 * rb),
                        rb,
                        nb: nsb,
                        side,
                        aq: pack.qs.as_ptr().add(t0 * k),
                        astride: k,
                        ad: pack.d.as_ptr().add(t0 * side),
                    adb: std::ptr::null(),
                    corr: std::ptr::null(),
                    vb: std::ptr::null(),
                    vb_stride: 0,
                        bs: pack.bsums.as_ptr().add(t0 * nsb * 16),
                        out: out.add(t0 * out_stride + r0),
                        ostride: out_stride,
                    };
                    match ty {
                        GgmlType::Q4_K => dispatch_tile!(tile_k, Q4K, nr, nt, &tile),
                        GgmlType::Q5_K => dispatch_tile!(tile_k, Q5K, nr, nt, &tile),
                        _ => dispatch_tile!(tile_k, Q6K, nr, nt, &tile),
                    }
                },
                |_, _| {},
            );
        }
    }
}

/// f16 at `p` to f32 with F16C.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[inline]
#[target_feature(enable = "f16c")]
unsafe fn h2f(p: *const u8) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((p as *const u16).read_unaligned() as i32)))
}

/// ggml's `hsum_float_8`: `((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))`; the 32-block kernels of both
/// x86 levels end with it.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// `hsum_float_8` of eight vectors at once: lane `i` of the result is `hsum_float_8(v[i])`, bit
/// for bit. The same tree (the two 128-bit halves added, then lanes 0 + 2 and 1 + 3, then those
/// two), each level for all eight vectors in a few shuffles and one add, where one by one costs
/// six instructions a vector.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn hsum8_of_8(v: &[__m256; 8]) -> __m256 {
    // [halves' sum of v[i] | halves' sum of v[i + 1]]: s_i = [a0+a4, a1+a5, a2+a6, a3+a7].
    let halves = |i: usize| _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(v[i], v[i + 1]), _mm256_permute2f128_ps::<0x31>(v[i], v[i + 1]));
    let (s01, s23, s45, s67) = (halves(0), halves(2), halves(4), halves(6));
    // [p_i, q_i, p_j, q_j | ...] with p = s[0] + s[2], q = s[1] + s[3].
    let pq = |a: __m256, b: __m256| _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(a, b), _mm256_shuffle_ps::<0b11_10_11_10>(a, b));
    let (x, y) = (pq(s01, s23), pq(s45, s67));
    // x = [p0 q0 p2 q2 | p1 q1 p3 q3], y the same for 4..8: p + q in lanes [0 2 4 6 | 1 3 5 7].
    let sums = _mm256_add_ps(_mm256_shuffle_ps::<0b10_00_10_00>(x, y), _mm256_shuffle_ps::<0b11_01_11_01>(x, y));
    _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// Writes `hsum_float_8(acc[r][t])` (plus `extra(r, t)` with `ADD`) to `out[t * ostride + r]`
/// for every (row, token) of an R x T tile, bit for bit as one at a time, eight (row, token)
/// sums a [`hsum8_of_8`] in token-major order, so that two or four rows' results of a token are
/// adjacent and stored together.
/// # Safety
/// The CPU must have AVX2 (the caller's `target_feature`s, into which this is inlined); `out`
/// must be valid for those writes.
#[inline(always)]
pub(crate) unsafe fn store_lane_sums<const R: usize, const T: usize, const ADD: bool>(acc: &[[__m256; T]; R], out: *mut f32, ostride: usize, extra: impl Fn(usize, usize) -> f32) {
    let at = |k: usize| (k / R, k % R);
    let mut k0 = 0;
    while k0 + 8 <= R * T {
        let mut sums = hsum8_of_8(&std::array::from_fn(|j| {
            let (t, r) = at(k0 + j);
            acc[r][t]
        }));
        if ADD {
            let e: [f32; 8] = std::array::from_fn(|j| {
                let (t, r) = at(k0 + j);
                extra(r, t)
            });
            sums = _mm256_add_ps(sums, _mm256_loadu_ps(e.as_ptr()));
        }
        let t0 = k0 / R;
        let (lo, hi) = (_mm256_castps256_ps128(sums), _mm256_extractf128_ps::<1>(sums));
        if R == 4 {
            _mm_storeu_ps(out.add(t0 * ostride), lo);
            _mm_storeu_ps(out.add((t0 + 1) * ostride), hi);
        } else if R == 2 {
            for (i, half) in [lo, hi].into_iter().enumerate() {
                _mm_storel_pd(out.add((t0 + 2 * i) * ostride) as *mut f64, _mm_castps_pd(half));
                _mm_storeh_pd(out.add((t0 + 2 * i + 1) * ostride) as *mut f64, _mm_castps_pd(half));
            }
        } else {
            let mut lanes = [0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), sums);
            for (j, x) in lanes.into_iter().enumerate() {
                let (t, r) = at(k0 + j);
                *out.add(t * ostride + r) = x;
            }
        }
        k0 += 8;
    }
    for k in k0..R * T {
        let (t, r) = at(k);
        let x = hsum(acc[r][t]);
        *out.add(t * ostride + r) = if ADD { x + extra(r, t) } else { x };
    }
}

/// R rows x T tokens of a 32-block weight type in ggml's arithmetic (see the AVX-512
/// `tile_b32_inline`: eight float lanes per (row, token), one FMA per block, `hsum_float_8`,
/// Q4_1's `m * s` on a scalar chain); bit-identical to it and to the scalar kernel.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_b32_inline<const W: u8, const R: usize, const T: usize>(p: &Tile) {
    let ones = _mm256_set1_epi16(1);
    let m0f = _mm256_set1_epi8(0x0f);
    let shifts = _mm256_set_epi64x(4, 4, 0, 0);
    let (bb, qo) = match W {
        Q40 => (18, 2),
        Q41 => (20, 4),
        _ => (34, 2),
    };
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let mut summs = [[0f32; T]; R];
    for b in 0..p.nb {
        let mut wv = [_mm256_setzero_si256(); R];
        let mut wsign = [_mm256_setzero_si256(); R];
        let mut dwv = [_mm256_setzero_ps(); R];
        let mut mw = [0f32; R];
        for r in 0..R {
            let blk = p.w.add(r * p.rb + b * bb);
            _mm_prefetch::<_MM_HINT_T1>(blk.wrapping_add(PF_DIST) as *const i8);
            if W == Q80 {
                let w = _mm256_loadu_si256(blk.add(2) as *const __m256i);
                wsign[r] = w;
                wv[r] = _mm256_sign_epi8(w, w);
            } else {
                let q = _mm256_broadcastsi128_si256(_mm_loadu_si128(blk.add(qo) as *const __m128i));
                wv[r] = _mm256_and_si256(_mm256_srlv_epi64(q, shifts), m0f);
            }
            dwv[r] = _mm256_set1_ps(h2f(blk));
            if W == Q41 {
                mw[r] = h2f(blk.add(2));
            }
        }
        for t in 0..T {
            let a = _mm256_loadu_si256(p.aq.add(t * p.astride + 32 * b) as *const __m256i);
            let da = _mm256_set1_ps(*p.ad.add(t * p.side + b));
            // Q4_0: the unsigned nibbles' lane sums less 8 times the activations' (exact).
            let corr = if W == Q40 { _mm256_loadu_si256(p.corr.add((t * p.nb + b) * 8) as *const __m256i) } else { _mm256_setzero_si256() };
            for r in 0..R {
                let a2 = if W == Q80 { _mm256_sign_epi8(a, wsign[r]) } else { a };
                let lanes = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wv[r], a2), ones), corr);
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dwv[r], da), _mm256_cvtepi32_ps(lanes), acc[r][t]);
            }
            if W == Q41 {
                let s = *p.vb.add(b * p.vb_stride + t);
                for r in 0..R {
                    summs[r][t] += mw[r] * s;
                }
            }
        }
    }
    store_lane_sums::<R, T, true>(&acc, p.out, p.ostride, |r, t| summs[r][t]);
}

/// R rows x T tokens of a K-quant weight type against repacked Q8_K activations.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_k<const W: u8, const R: usize, const T: usize>(p: &Tile) {
    let bb = match W {
        Q4K => 144,
        Q5K => 176,
        _ => 210,
    };
    let m0f = _mm256_set1_epi8(0x0f);
    let three = _mm256_set1_epi8(3);
    let sixteen = _mm256_set1_epi8(16);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for sb in 0..p.nb {
        let mut d = [0f32; R];
        let mut dmin = [0f32; R];
        let mut sc = [[0i16; 16]; R];
        let mut side16 = [_mm256_setzero_si256(); R];
        let mut blk = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            let bp = p.w.add(r * p.rb + sb * bb);
            blk[r] = bp;
            let bsl = std::slice::from_raw_parts(bp, bb);
            if W == Q6K {
                d[r] = h2f(bp.add(208));
                for (i, s) in sc[r].iter_mut().enumerate() {
                    *s = bsl[192 + i] as i8 as i16;
                }
                side16[r] = _mm256_loadu_si256(sc[r].as_ptr() as *const __m256i);
            } else {
                d[r] = h2f(bp);
                dmin[r] = h2f(bp.add(2));
                let mut mm = [0i16; 16];
                for j in 0..8 {
                    let (s, m) = get_scale_min_k4(j, &bsl[4..16]);
                    sc[r][j] = s as i16;
                    mm[2 * j] = m as i16;
                    mm[2 * j + 1] = m as i16;
                }
                side16[r] = _mm256_loadu_si256(mm.as_ptr() as *const __m256i);
            }
        }
        let mut iacc = [[_mm256_setzero_si256(); T]; R];
        for v in 0..8 {
            let mut wv = [_mm256_setzero_si256(); R];
            let mut scv = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let bp = blk[r];
                _mm_prefetch::<_MM_HINT_T1>(bp.wrapping_add(32 * v + PF_DIST) as *const i8);
                match W {
                    Q6K => {
                        // vector v covers elements 32v..32v+32: half n, quarter m.
                        let (n, m) = (v / 4, v % 4);
                        let ql = _mm256_loadu_si256(bp.add(64 * n + 32 * (m % 2)) as *const __m256i);
                        let qh = _mm256_loadu_si256(bp.add(128 + 32 * n) as *const __m256i);
                        let lo = if m < 2 { _mm256_and_si256(ql, m0f) } else { _mm256_and_si256(_mm256_srli_epi16::<4>(ql), m0f) };
                        let h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * m as i32)), three);
                        wv[r] = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(h));
                        let s0 = sc[r][2 * v];
                        let s1 = sc[r][2 * v + 1];
                        scv[r] = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
                    }
                    _ => {
                        let j = v / 2;
                        let qo = if W == Q5K { 48 } else { 16 };
                        let q = _mm256_loadu_si256(bp.add(qo + 32 * j) as *const __m256i);
                        let mut w = if v % 2 == 0 { _mm256_and_si256(q, m0f) } else { _mm256_and_si256(_mm256_srli_epi16::<4>(q), m0f) };
                        if W == Q5K {
                            let hv = _mm256_loadu_si256(bp.add(16) as *const __m256i);
                            let bit = _mm256_set1_epi8((1u8 << v) as i8);
                            let set = _mm256_cmpeq_epi8(_mm256_and_si256(hv, bit), bit);
                            w = _mm256_or_si256(w, _mm256_and_si256(set, sixteen));
                        }
                        wv[r] = w;
                        scv[r] = _mm256_set1_epi16(sc[r][v]);
                    }
                }
            }
            for t in 0..T {
                let a = _mm256_loadu_si256(p.aq.add(t * p.astride + sb * QK_K + 32 * v) as *const __m256i);
                for r in 0..R {
                    let prod = _mm256_maddubs_epi16(wv[r], a);
                    iacc[r][t] = _mm256_add_epi32(iacc[r][t], _mm256_madd_epi16(prod, scv[r]));
                }
            }
        }
        for t in 0..T {
            let da = *p.ad.add(t * p.side + sb);
            let bs = _mm256_loadu_si256(p.bs.add((t * p.nb + sb) * 16) as *const __m256i);
            for r in 0..R {
                let s = _mm256_madd_epi16(bs, side16[r]);
                if W == Q6K {
                    let i = _mm256_sub_epi32(iacc[r][t], _mm256_slli_epi32::<5>(s));
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(d[r] * da), acc[r][t]);
                } else {
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][t]), _mm256_set1_ps(d[r] * da), acc[r][t]);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(-dmin[r] * da), acc[r][t]);
                }
            }
        }
    }
    // One at a time here: eight at a time measured 2-5% slower for this kernel (kernel_bench
    // Q4_K avx2, 8 tokens), unlike the 32-block one.
    for r in 0..R {
        for t in 0..T {
            *p.out.add(t * p.ostride + r) = hsum(acc[r][t]);
        }
    }
}

/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn load_wf<const W: u8>(p: *const u8, i: usize) -> __m256 {
    match W {
        F32W => _mm256_loadu_ps(p.add(4 * i) as *const f32),
        F16W => _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i) as *const __m128i)),
        _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(
            p.add(2 * i) as *const __m128i
        )))),
    }
}

/// R rows x T tokens of a float weight type against f32 activations.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_f<const W: u8, const R: usize, const T: usize>(p: &Tile) {
    let k = p.nb;
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let mut i = 0;
    while i + 8 <= k {
        let mut wv = [_mm256_setzero_ps(); R];
        for r in 0..R {
            let row = p.w.add(r * p.rb);
            _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(4 * i + PF_DIST) as *const i8);
            wv[r] = load_wf::<W>(row, i);
        }
        for t in 0..T {
            let a = _mm256_loadu_ps(p.aq.add(t * p.astride + 4 * i) as *const f32);
            for r in 0..R {
                acc[r][t] = _mm256_fmadd_ps(wv[r], a, acc[r][t]);
            }
        }
        i += 8;
    }
    for r in 0..R {
        for t in 0..T {
            let mut s = hsum(acc[r][t]);
            let row = p.w.add(r * p.rb);
            let a = p.aq.add(t * p.astride);
            for j in i..k {
                let wv = match W {
                    F32W => (row.add(4 * j) as *const f32).read_unaligned(),
                    F16W => f16::from_bits((row.add(2 * j) as *const u16).read_unaligned()).to_f32(),
                    _ => f32::from_bits(((row.add(2 * j) as *const u16).read_unaligned() as u32) << 16),
                };
                s += wv * (a.add(4 * j) as *const f32).read_unaligned();
            }
            *p.out.add(t * p.ostride + r) = s;
        }
    }
}

/// # Safety
/// avx2 and fma must be available; `a.len() == b.len()`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i)), _mm256_loadu_ps(b.as_ptr().add(i)), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i + 8)), _mm256_loadu_ps(b.as_ptr().add(i + 8)), s1);
        i += 16;
    }
    let mut s = hsum(_mm256_add_ps(s0, s1));
    while i < n {
        s += a[i] * b[i];
        i += 1;
    }
    s
}

/// Quantizes one activation row to Q8_0 / Q8_1 / Q8_K, bit-identical to the reference.
///
/// # Safety
/// avx2 must be available; `dst` must hold exactly the bytes of `src.len()` elements of `ty`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn quantize_act(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    let sign = _mm256_set1_ps(-0.0);
    match ty {
        GgmlType::Q8_0 | GgmlType::Q8_1 => {
            let (bb, qo) = if ty == GgmlType::Q8_0 { (34, 2) } else { (36, 4) };
            for (x, y) in src.chunks_exact(32).zip(dst.chunks_exact_mut(bb)) {
                let v = [0, 1, 2, 3].map(|i| _mm256_loadu_ps(x.as_ptr().add(8 * i)));
                let mut m = _mm256_andnot_ps(sign, v[0]);
                for vi in &v[1..] {
                    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vi));
                }
                let amax = hmax(m);
                let d = amax / 127.0;
                let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                y[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                let idv = _mm256_set1_ps(id);
                // Round half to even (the default MXCSR mode), as ggml's x86 quantizer does.
                let q = v.map(|vi| _mm256_cvtps_epi32(_mm256_mul_ps(vi, idv)));
                let q16a = _mm256_packs_epi32(q[0], q[1]);
                let q16b = _mm256_packs_epi32(q[2], q[3]);
                let q8 = _mm256_packs_epi16(q16a, q16b);
                // packs interleave 128-bit lanes: restore element order.
                let q8 = _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256(y.as_mut_ptr().add(qo) as *mut __m256i, q8);
                if ty == GgmlType::Q8_1 {
                    let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
                    let s = hsum_i32(s);
                    y[2..4].copy_from_slice(&f16::from_f32(s as f32 * d).to_le_bytes());
                }
            }
        }
        _ => {
            for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(292)) {
                let mut m = _mm256_setzero_ps();
                for i in 0..32 {
                    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x.as_ptr().add(8 * i))));
                }
                let amax = hmax(m);
                if amax == 0.0 {
                    y.fill(0);
                    continue;
                }
                // NaN activations (a corrupt model) match no element: fall back to amax.
                let max = x.iter().position(|v| v.abs() == amax).map_or(amax, |i| x[i]);
                let iscale = -127.0f32 / max;
                let isv = _mm256_set1_ps(iscale);
                let lim = _mm256_set1_epi32(127);
                for g in 0..8 {
                    let q = [0, 1, 2, 3].map(|i| {
                        let v = _mm256_mul_ps(isv, _mm256_loadu_ps(x.as_ptr().add(32 * g + 8 * i)));
                        let r = _mm256_cvtps_epi32(_mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v));
                        _mm256_min_epi32(r, lim)
                    });
                    let q16a = _mm256_packs_epi32(q[0], q[1]);
                    let q16b = _mm256_packs_epi32(q[2], q[3]);
                    let q8 = _mm256_packs_epi16(q16a, q16b);
                    let q8 = _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                    _mm256_storeu_si256(y.as_mut_ptr().add(4 + 32 * g) as *mut __m256i, q8);
                    let s0 = hsum_i32(_mm256_add_epi32(q[0], q[1]));
                    let s1 = hsum_i32(_mm256_add_epi32(q[2], q[3]));
                    y[260 + 4 * g..262 + 4 * g].copy_from_slice(&(s0 as i16).to_le_bytes());
                    y[262 + 4 * g..264 + 4 * g].copy_from_slice(&(s1 as i16).to_le_bytes());
                }
                y[0..4].copy_from_slice(&(1.0f32 / iscale).to_le_bytes());
            }
        }
    }
}

/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn hmax(v: __m256) -> f32 {
    let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_max_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}
