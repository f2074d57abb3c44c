//! AVX-512 VNNI kernels (`vpdpbusd` for 32-blocks, `vpmaddubsw` + `vpdpwssd` for K-quants).
//!
//! Every function here is compiled with the AVX-512 features enabled and must only be called
//! once `Kernels` has detected them at run time.

// Micro-tiles index their register arrays by (row, token); iterators would obscure them.
#![allow(clippy::needless_range_loop)]

use crate::avx2::store_lane_sums;
use crate::pack::{drive, drive_tiles, drive_with, side_stride, ActPack, Tile, TT8};
use crate::reference::{get_scale_min_k4, QK_K};
use crate::GgmlType;
use half::f16;
use std::arch::x86_64::*;

/// What this level adds to Q8_0 weight bytes to use them unsigned (see [`ActPack::new`]).
pub(crate) const Q8_0_OFFSET: i32 = 128;
const Q40: u8 = 0;
const Q41: u8 = 1;
const Q80: u8 = 2;
const Q4K: u8 = 4;
const Q5K: u8 = 5;
const Q6K: u8 = 6;
const F32W: u8 = 10;
/// Software prefetch distance in bytes for streamed weights (measured best 4-8 KiB on Zen). The
/// prefetches go to L2 (`_MM_HINT_T1`): into L1 they held L1's few miss buffers and capped a
/// decode pass (DRAM-bound) well below the core's read rate; `kernel_bench`'s SmolLM2 decode pass
/// on one thread went from 8.9-12.0 to 5.4-7.2 ms a token with the change.
pub(crate) const PF_DIST: usize = 8192;
const F16W: u8 = 11;
const BF16W: u8 = 12;

/// `out[t * out_stride + r] = dot(weight row rows.start + r, activation row t)`.
///
/// # Safety
/// The CPU must support avx512f, avx512bw, avx512vl, avx512vnni, avx2, fma and f16c; the
/// slices must have been validated by `Kernels::matmul` (lengths consistent with `ty`, `k`), and
/// `out` must be valid for writes of those elements, which no one else accesses meanwhile.
///
/// `interleaved`: Q4_0 / Q4_1 / Q8_0 `weights` are in the interleaved layout (see
/// `crate::interleave`) and are summed in that order; `packed`, when given, was made for it.
/// `wide`: ggml-order 32-block tiles of more than four tokens take two rows to a 512-bit
/// register ([`tile_b32_wide`]; the same bits).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn matmul(
    ty: GgmlType,
    weights: &[u8],
    k: usize,
    rows: std::ops::Range<usize>,
    acts: &[u8],
    n_tokens: usize,
    packed: Option<&ActPack>,
    interleaved: bool,
    wide: bool,
    out: *mut f32,
    out_stride: usize,
) {
    let rb = ty.row_bytes(k as u64).unwrap() as usize;
    let nrows = rows.len();
    let w0 = weights.as_ptr().add(rows.start * rb);
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            let wk = match ty {
                GgmlType::F32 => F32W,
                GgmlType::F16 => F16W,
                _ => BF16W,
            };
            drive(nrows, n_tokens, |r0, nr, t0, nt| {
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
                match wk {
                    F32W => dispatch_tile!(tile_f, F32W, nr, nt, &tile),
                    F16W => dispatch_tile!(tile_f, F16W, nr, nt, &tile),
                    _ => dispatch_tile!(tile_f, BF16W, nr, nt, &tile),
                }
            }, |_, _| {});
        }
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 if interleaved => {
            let mut slot = None;
            let pack = ActPack::given_or_new(packed, &mut slot, ty, acts, k, n_tokens, Q8_0_OFFSET, true);
            let nb = k / 32;
            let side = pack.stride;
            // One kernel for every token count, as below (batch invariance).
            let tile = |r0: usize, nr: usize, t0: usize, nt: usize| {
                let tile = Tile {
                    w: w0.add(r0 * rb),
                    rb,
                    nb,
                    side,
                    aq: pack.qs.as_ptr().add(t0 * k),
                    astride: k,
                    ad: pack.d.as_ptr().add(t0 * side),
                    adb: std::ptr::null(),
                    corr: if pack.corr_by_block.is_empty() { std::ptr::null() } else { pack.corr_by_block.as_ptr().add(t0 * side) },
                    vb: if pack.v.is_empty() { std::ptr::null() } else { pack.v.as_ptr().add(t0 * side) },
                    vb_stride: side,
                    bs: std::ptr::null(),
                    out: out.add(t0 * out_stride + r0),
                    ostride: out_stride,
                };
                match ty {
                    GgmlType::Q4_0 => interleaved_tile::<Q40>(nr, nt, wide, &tile),
                    GgmlType::Q4_1 => interleaved_tile::<Q41>(nr, nt, wide, &tile),
                    _ => interleaved_tile::<Q80>(nr, nt, wide, &tile),
                }
            };
            // Few tokens: four rows a tile keep more weight rows streaming (one-token decode is
            // bound by memory latency); more tokens: two rows by eight tokens, which fit the
            // registers. The shape does not change any (row, token)'s arithmetic.
            if n_tokens <= 2 {
                drive_tiles::<4, 2>(nrows, n_tokens, tile, |_, _| {});
            } else {
                drive_tiles::<2, 8>(nrows, n_tokens, tile, |_, _| {});
            }
        }
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => {
            let mut slot = None;
            let pack = ActPack::given_or_new(packed, &mut slot, ty, acts, k, n_tokens, Q8_0_OFFSET, false);
            // One kernel for every token count: each (row, token) result is then computed by the
            // same instructions in the same order whatever else is in the step, so a sequence's
            // output does not depend on its batch (batch invariance). Measured cost: Q4_1 prefill
            // loses the precomputed per-row scales.
            let nb = k / 32;
            let side = side_stride(nb);
            drive_with::<TT8>(
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
                    match (ty, wide) {
                        (GgmlType::Q4_0, false) => dispatch_tile8!(tile_b32, Q40, nr, nt, &tile),
                        (GgmlType::Q4_1, false) => dispatch_tile8!(tile_b32, Q41, nr, nt, &tile),
                        (_, false) => dispatch_tile8!(tile_b32, Q80, nr, nt, &tile),
                        (GgmlType::Q4_0, true) => dispatch_tile8!(tile_b32_wide, Q40, nr, nt, &tile),
                        (GgmlType::Q4_1, true) => dispatch_tile8!(tile_b32_wide, Q41, nr, nt, &tile),
                        (_, true) => dispatch_tile8!(tile_b32_wide, Q80, nr, nt, &tile),
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
            drive(nrows, n_tokens, |r0, nr, t0, nt| {
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
            }, |_, _| {});
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

/// Block `b` of one weight row as 32 unsigned bytes in ggml's element order (nibble types: the 16
/// low nibbles, then the 16 high ones; Q8_0: the signed bytes plus 128).
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// `row` must be valid for reads of block `b`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
unsafe fn load_w32<const W: u8>(row: *const u8, b: usize) -> __m256i {
    if W == Q80 {
        _mm256_xor_si256(_mm256_loadu_si256(row.add(b * 34 + 2) as *const __m256i), _mm256_set1_epi8(-128))
    } else {
        let (bb, qo) = if W == Q41 { (20, 4) } else { (18, 2) };
        let q = _mm256_broadcastsi128_si256(_mm_loadu_si128(row.add(b * bb + qo) as *const __m128i));
        _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0f))
    }
}

/// Blocks whose scale products a 32-block tile pass forms ahead of their dot products.
const SCALE_CHUNK: usize = 32;

/// R rows x T tokens of a 32-block weight type against its repacked 8-bit activations, in
/// ggml's arithmetic (`ggml_vec_dot_q4_0_q8_0` and friends on x86): per (row, token) eight
/// float lanes, each adding `d_w * d_a * (integer sum of its 4 products)` block after block with
/// one FMA, summed by `hsum_float_8`; Q4_1 adds its `m * s` terms on a chain of their own. Up to
/// 8 tokens (`TT8`) share each decoded weight block: a tile of more than 4 tokens runs as passes
/// of at most 16 (row, token) accumulators. Every (row, token) sees the same arithmetic whatever
/// R and T are (batch invariance).
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_b32<const W: u8, const R: usize, const T: usize>(p: &Tile) {
    const { assert!(R <= 4 && T <= 8, "tile_b32: at most 4 rows and 8 tokens") };
    if T <= 4 {
        tile_b32_pass::<W, R, T>(p, 0);
    } else if W == Q80 {
        // Q8_0 (lane corrections loaded per token, cheap weight decode): four rows share each
        // token's loads, in passes of four tokens (`kernel_bench` 8 tokens: 119.6 -> 111.7 us);
        // the nibble types decode each block once for all eight tokens in passes of two rows.
        tile_b32_pass::<W, R, 4>(p, 0);
        let q = Tile {
            aq: p.aq.add(4 * p.astride),
            adb: p.adb.add(4),
            vb: if p.vb.is_null() { p.vb } else { p.vb.add(4) },
            corr: if p.corr.is_null() { p.corr } else { p.corr.add(4 * p.nb * 8) },
            out: p.out.add(4 * p.ostride),
            ..*p
        };
        match T {
            8 => tile_b32_pass::<W, R, 4>(&q, 0),
            7 => tile_b32_pass::<W, R, 3>(&q, 0),
            6 => tile_b32_pass::<W, R, 2>(&q, 0),
            _ => tile_b32_pass::<W, R, 1>(&q, 0),
        }
    } else {
        match R {
            4 => {
                tile_b32_pass::<W, 2, T>(p, 0);
                tile_b32_pass::<W, 2, T>(p, 2);
            }
            3 => {
                tile_b32_pass::<W, 2, T>(p, 0);
                tile_b32_pass::<W, 1, T>(p, 2);
            }
            2 => tile_b32_pass::<W, 2, T>(p, 0),
            _ => tile_b32_pass::<W, 1, T>(p, 0),
        }
    }
}

/// [`tile_b32`] with the rows of a tile of more than four tokens ([`WIDE_MIN_TOKENS`]) taken two
/// at a time into 512-bit registers ([`tile_b32_pair_wide`]); fewer tokens, and a last odd row,
/// as [`tile_b32`]. The same bits as [`tile_b32`] for every (row, token).
/// # Safety
/// As [`tile_b32`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn tile_b32_wide<const W: u8, const R: usize, const T: usize>(p: &Tile) {
    const { assert!(R <= 4 && T <= 8, "tile_b32_wide: at most 4 rows and 8 tokens") };
    if T < WIDE_MIN_TOKENS {
        return tile_b32::<W, R, T>(p);
    }
    match R {
        4 => {
            tile_b32_pair_wide::<W, T>(p, 0);
            tile_b32_pair_wide::<W, T>(p, 2);
        }
        3 => {
            tile_b32_pair_wide::<W, T>(p, 0);
            tile_b32_pass::<W, 1, T>(p, 2);
        }
        2 => tile_b32_pair_wide::<W, T>(p, 0),
        _ => tile_b32_pass::<W, 1, T>(p, 0),
    }
}

/// Tokens from which [`tile_b32_wide`] pairs rows. With 2-4 tokens a tile waits on its weight
/// rows more than on its arithmetic: pairing them there measured the same as 256-bit tiles
/// (`kernel_bench profile Q4_1 avx512 N`, 1536 x 576: 40-55 us either way), against 25-30%
/// less time for 8 tokens.
const WIDE_MIN_TOKENS: usize = 5;

/// Rows `r0` and `r0 + 1` of a [`tile_b32`] of T > 4 tokens in 512-bit registers: one per token,
/// row `r0`'s eight lanes in its low half and row `r0 + 1`'s in its high half. Each half runs
/// [`tile_b32_pass`]'s operations for its (row, token) in the same order (the dot from the
/// same start, its conversion, an FMA by the same exact `d_w * d_a`), so the sums are its
/// bits; per block and token one `vpdpbusd`, one conversion, one multiply (the two rows'
/// scales) and one FMA serve two (row, token) pairs, against three 256-bit operations for each
/// (where 512-bit operations run whole, about 1.7 times the pairs a cycle).
/// # Safety
/// As [`tile_b32`]; rows `r0` and `r0 + 1` exist.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn tile_b32_pair_wide<const W: u8, const T: usize>(p: &Tile, r0: usize) {
    let (bb, qo) = match W {
        Q40 => (18, 2),
        Q41 => (20, 4),
        _ => (34, 2),
    };
    let tmask: __mmask8 = ((1u16 << T) - 1) as u8;
    let row = |r: usize| p.w.add((r0 + r) * p.rb);
    // The two rows' header floats [d0, m0 (or quant bytes), d1, m1]: d0 to the low half's
    // lanes, d1 to the high half's.
    let d_of_half = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    // Nibble types: 128-bit lanes [row 0's bytes, again, row 1's, again], the second of each
    // pair shifted right by 4: low nibbles then high ones per row, as `load_w32` has them.
    let nibble_shift = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    let mut acc = [_mm512_setzero_ps(); T];
    let mut summs_rows = [_mm256_setzero_ps(); 2];
    for b in 0..p.nb {
        for r in 0..2 {
            // Stream ahead, as `tile_b32_pass` does.
            _mm_prefetch::<_MM_HINT_T1>(row(r).wrapping_add(b * bb + PF_DIST) as *const i8);
        }
        let wq = if W == Q80 {
            let lo = _mm256_loadu_si256(row(0).add(b * bb + qo) as *const __m256i);
            let hi = _mm256_loadu_si256(row(1).add(b * bb + qo) as *const __m256i);
            _mm512_xor_si512(_mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi), _mm512_set1_epi8(-128))
        } else {
            let q0 = _mm_loadu_si128(row(0).add(b * bb + qo) as *const __m128i);
            let q1 = _mm_loadu_si128(row(1).add(b * bb + qo) as *const __m128i);
            let both = _mm512_castsi256_si512(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(q0), q1));
            let spread = _mm512_shuffle_i64x2::<0b01_01_00_00>(both, both);
            _mm512_and_si512(_mm512_srlv_epi64(spread, nibble_shift), _mm512_set1_epi8(0x0f))
        };
        let hdr = |r: usize| (row(r).add(b * bb) as *const i32).read_unaligned();
        let dm = _mm_cvtph_ps(_mm_set_epi32(0, 0, hdr(1), hdr(0)));
        let d_w = _mm512_permutexvar_ps(d_of_half, _mm512_castps128_ps512(dm));
        if W == Q41 {
            // ggml's `summs += m * s`, as `tile_b32_pass` forms it for tiles of more than 4 tokens.
            let sv = _mm256_maskz_loadu_ps(tmask, p.vb.add(b * p.vb_stride));
            let m = _mm_movehdup_ps(dm);
            summs_rows[0] = _mm256_fmadd_ps(_mm256_broadcastss_ps(m), sv, summs_rows[0]);
            summs_rows[1] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehl_ps(m, m)), sv, summs_rows[1]);
        }
        let da = p.adb.add(b * p.vb_stride);
        for t in 0..T {
            let a = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.aq.add(t * p.astride + 32 * b) as *const __m256i));
            let init = if W == Q41 { _mm512_setzero_si512() } else { _mm512_broadcast_i64x4(_mm256_loadu_si256(p.corr.add((t * p.nb + b) * 8) as *const __m256i)) };
            let dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(init, wq, a));
            // d_w * d_a: two f16 values, so exact in f32 (the same value as the 256-bit table's).
            let scale = _mm512_mul_ps(d_w, _mm512_set1_ps(*da.add(t)));
            acc[t] = _mm512_fmadd_ps(scale, dot, acc[t]);
        }
    }
    let halves: [[__m256; T]; 2] = [
        std::array::from_fn(|t| _mm512_castps512_ps256(acc[t])),
        std::array::from_fn(|t| _mm512_extractf32x8_ps::<1>(acc[t])),
    ];
    let mut sm = [0f32; 16];
    _mm256_storeu_ps(sm.as_mut_ptr(), summs_rows[0]);
    _mm256_storeu_ps(sm.as_mut_ptr().add(8), summs_rows[1]);
    store_lane_sums::<2, T, true>(&halves, p.out.add(r0), p.ostride, |r, t| sm[r * 8 + t]);
}

/// Rows `r0..r0 + R` of [`tile_b32`]. The FMA's scale `d_w * d_a` (exact in f32: a product of
/// two f16) comes from a table formed a chunk of blocks ahead, 16 (row, token) products per
/// multiply, and is broadcast from memory into 256-bit FMAs: on Zen 4 the multiply per pair of
/// (row, token) lanes that a 512-bit form needs would share the pipes of the dot products and
/// FMAs, while broadcast loads use the load ports.
/// # Safety
/// As [`tile_b32`]; `R * T <= 16`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_b32_pass<const W: u8, const R: usize, const T: usize>(p: &Tile, r0: usize) {
    // Not a const assert: `tile_b32`'s branches name instances that its other branches make dead.
    debug_assert!(R * T <= 16 && R <= 4 && T <= 8, "tile_b32_pass: at most 16 (row, token) pairs");
    let bb = match W {
        Q40 => 18,
        Q41 => 20,
        _ => 34,
    };
    // Lane r * ts + t of the 16-lane scale (and Q4_1 `summs`) vectors is (row r, token t).
    let ts = if T <= 4 { 4 } else { 8 };
    let lane_row: [i32; 16] = std::array::from_fn(|l| (l / ts) as i32);
    let lane_row = _mm512_loadu_si512(lane_row.as_ptr() as *const _);
    // Indexes into the header floats [d0, m0, d1, m1, d2, m2, d3, m3].
    let d_idx = _mm512_add_epi32(lane_row, lane_row);
    let m_idx = _mm512_add_epi32(d_idx, _mm512_set1_epi32(1));
    let tmask: __mmask8 = ((1u16 << T) - 1) as u8;
    // The tile's T tokens' values of one block, repeated for each row's lanes.
    let by_token = |v: *const f32| -> __m512 {
        if T <= 4 {
            _mm512_broadcast_f32x4(_mm_maskz_loadu_ps(tmask, v))
        } else {
            _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_maskz_loadu_ps(tmask, v))))
        }
    };
    let row = |r: usize| p.w.add((r0 + r) * p.rb);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let mut summs = _mm512_setzero_ps();
    // Tiles of more than 4 tokens (at most 2 rows): one 256-bit chain per row.
    let mut summs_rows = [_mm256_setzero_ps(); 2];
    // Written before read, block by block (zeroing it was 8% of a tile pass).
    let mut scales = [const { std::mem::MaybeUninit::<__m512>::uninit() }; SCALE_CHUNK];
    let nb = p.nb;
    let mut c0 = 0;
    while c0 < nb {
        let cn = SCALE_CHUNK.min(nb - c0);
        for (i, sc) in scales.iter_mut().enumerate().take(cn) {
            let b = c0 + i;
            // The rows' block headers (d, then m or the first quant bytes) in one conversion.
            let hdr = |r: usize| if r < R { (row(r).add(b * bb) as *const i32).read_unaligned() } else { 0 };
            if T > 4 {
                // Two rows: 256-bit broadcasts and multiplies (single-pumped on Zen 4), not
                // 512-bit permutes.
                let dm = _mm_cvtph_ps(_mm_set_epi32(0, 0, hdr(1), hdr(0)));
                let da = _mm256_maskz_loadu_ps(tmask, p.adb.add(b * p.vb_stride));
                let half = sc.as_mut_ptr() as *mut f32;
                _mm256_storeu_ps(half, _mm256_mul_ps(_mm256_broadcastss_ps(dm), da));
                if R > 1 {
                    _mm256_storeu_ps(half.add(8), _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehl_ps(dm, dm)), da));
                }
                if W == Q41 {
                    // ggml's `summs += m * s` (f16 x f16 is exact in f32: fused or not alike).
                    let sv = _mm256_maskz_loadu_ps(tmask, p.vb.add(b * p.vb_stride));
                    let m = _mm_movehdup_ps(dm);
                    summs_rows[0] = _mm256_fmadd_ps(_mm256_broadcastss_ps(m), sv, summs_rows[0]);
                    if R > 1 {
                        summs_rows[1] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehl_ps(m, m)), sv, summs_rows[1]);
                    }
                }
                continue;
            }
            let dm = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_set_epi32(hdr(3), hdr(2), hdr(1), hdr(0))));
            sc.write(_mm512_mul_ps(_mm512_permutexvar_ps(d_idx, dm), by_token(p.adb.add(b * p.vb_stride))));
            if W == Q41 {
                // ggml's `summs += m * s` (f16 x f16 is exact in f32: fused or not alike).
                summs = _mm512_fmadd_ps(_mm512_permutexvar_ps(m_idx, dm), by_token(p.vb.add(b * p.vb_stride)), summs);
            }
        }
        for i in 0..cn {
            let b = c0 + i;
            let mut wv = [_mm256_setzero_si256(); R];
            for (r, w) in wv.iter_mut().enumerate() {
                // Stream ahead: decode is DRAM-bound and the hardware prefetcher alone leaves
                // too few misses in flight.
                _mm_prefetch::<_MM_HINT_T1>(row(r).wrapping_add(b * bb + PF_DIST) as *const i8);
                *w = load_w32::<W>(row(r), b);
            }
            let sc = scales.as_ptr().add(i) as *const f32;
            for t in 0..T {
                let a = _mm256_loadu_si256(p.aq.add(t * p.astride + 32 * b) as *const __m256i);
                for r in 0..R {
                    let init = if W == Q41 { _mm256_setzero_si256() } else { _mm256_loadu_si256(p.corr.add((t * nb + b) * 8) as *const __m256i) };
                    let dot = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(init, wv[r], a));
                    acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(*sc.add(r * ts + t)), dot, acc[r][t]);
                }
            }
        }
        c0 += cn;
    }
    let mut sm = [0f32; 16];
    if T > 4 {
        _mm256_storeu_ps(sm.as_mut_ptr(), summs_rows[0]);
        _mm256_storeu_ps(sm.as_mut_ptr().add(8), summs_rows[1]);
    } else {
        _mm512_storeu_ps(sm.as_mut_ptr(), summs);
    }
    store_lane_sums::<R, T, true>(&acc, p.out.add(r0), p.ostride, |r, t| sm[r * ts + t]);
}

/// [`tile_interleaved`] for a tile of `nr <= 4` rows and `nt <= 8` tokens.
/// # Safety
/// As [`tile_interleaved`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn interleaved_tile<const W: u8>(nr: usize, nt: usize, wide: bool, p: &Tile) {
    let wide = wide && nt >= WIDE_MIN_TOKENS;
    macro_rules! by_tokens {
        ($r:literal) => {
            match nt {
                8 => tile_interleaved::<W, $r, 8>(p, wide),
                7 => tile_interleaved::<W, $r, 7>(p, wide),
                6 => tile_interleaved::<W, $r, 6>(p, wide),
                5 => tile_interleaved::<W, $r, 5>(p, wide),
                4 => tile_interleaved::<W, $r, 4>(p, wide),
                3 => tile_interleaved::<W, $r, 3>(p, wide),
                2 => tile_interleaved::<W, $r, 2>(p, wide),
                _ => tile_interleaved::<W, $r, 1>(p, wide),
            }
        };
    }
    match nr {
        4 => by_tokens!(4),
        3 => by_tokens!(3),
        2 => by_tokens!(2),
        _ => by_tokens!(1),
    }
}

/// One group's integer sums of two rows (group bytes at `g0`, `g1`, `hdr` header bytes first) for
/// T tokens, into `isum[0][t]` and `isum[1][t]` (overwritten): [`tile_interleaved`]'s `vpdpbusd`s
/// on 512-bit registers, row 0 in the low half. `act(t, u)` is token t's activation vector u of
/// the group broadcast to both halves; `corr` token 0's corrections of the group (`side` apart
/// per token; not read for Q4_1).
/// # Safety
/// As [`tile_interleaved`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn interleaved_group_pair_wide<const W: u8, const T: usize>(g0: *const u8, g1: *const u8, hdr: usize, act: impl Fn(usize, usize) -> __m512i, corr: *const i32, side: usize, isum: &mut [[__m256i; T]]) {
    let mut sums = [_mm512_setzero_si512(); T];
    if W != Q41 {
        for (t, s) in sums.iter_mut().enumerate() {
            *s = _mm512_broadcast_i64x4(_mm256_loadu_si256(corr.add(t * side) as *const __m256i));
        }
    }
    let both = |off: usize| {
        let (q0, q1) = (g0.add(hdr + off), g1.add(hdr + off));
        _mm_prefetch::<_MM_HINT_T1>(q0.wrapping_add(PF_DIST) as *const i8);
        _mm_prefetch::<_MM_HINT_T1>(q1.wrapping_add(PF_DIST) as *const i8);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm256_loadu_si256(q0 as *const __m256i)), _mm256_loadu_si256(q1 as *const __m256i))
    };
    if W == Q80 {
        for u in 0..8 {
            let wv = _mm512_xor_si512(both(32 * u), _mm512_set1_epi8(-128));
            for (t, s) in sums.iter_mut().enumerate() {
                *s = _mm512_dpbusd_epi32(*s, wv, act(t, u));
            }
        }
    } else {
        let nibbles = _mm512_set1_epi8(0x0f);
        for v in 0..4 {
            let raw = both(32 * v);
            let (lo, hi) = (_mm512_and_si512(raw, nibbles), _mm512_and_si512(_mm512_srli_epi16::<4>(raw), nibbles));
            for (t, s) in sums.iter_mut().enumerate() {
                *s = _mm512_dpbusd_epi32(*s, lo, act(t, 2 * v));
                *s = _mm512_dpbusd_epi32(*s, hi, act(t, 2 * v + 1));
            }
        }
    }
    for (t, s) in sums.iter().enumerate() {
        isum[0][t] = _mm512_castsi512_si256(*s);
        isum[1][t] = _mm512_extracti64x4_epi64::<1>(*s);
    }
}

/// R rows x T tokens of a 32-block type in the interleaved layout (`crate::interleave`): per
/// group of eight blocks, eight (Q8_0) or four (nibbles, two vectors each) `vpdpbusd` leave each
/// block's integer sum in its own lane of one accumulator per (row, token), started from the
/// blocks' offset corrections; one multiply forms the eight `d_w * d_a` and one FMA adds the
/// group (Q4_1: one more FMA for its `m * s`). The blocks after the last group go in pairs (two
/// `vpdpbusd`, a multiply and an FMA per pair, block A in lanes 0-3 and B in 4-7) and a last odd
/// block takes one `vpdpbusd` and one FMA, into the same lanes. Every (row, token) runs the same
/// instructions in the same order whatever R and T are (batch invariance).
///
/// `wide` (with R = 2): the groups' integer sums of both rows in one 512-bit register per token
/// (row 0 in the low half), half the `vpdpbusd`s; integer sums are exact, so the same bits.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn tile_interleaved<const W: u8, const R: usize, const T: usize>(p: &Tile, wide: bool) {
    let ty = match W {
        Q40 => GgmlType::Q4_0,
        Q41 => GgmlType::Q4_1,
        _ => GgmlType::Q8_0,
    };
    let (bb, hdr, phdr) = (ty.block_bytes(), crate::interleave::group_header_bytes(ty), crate::interleave::pair_header_bytes(ty));
    let (nb, side) = (p.nb, p.side);
    let (ng, pairs, _) = crate::interleave::row_parts(nb);
    let row = |r: usize| p.w.add(r * p.rb);
    let nibbles = _mm256_set1_epi8(0x0f);
    // The float accumulators stay in memory: they change once per group, while the integer
    // sums of an R x T tile take every register in the dot products.
    let mut acc_mem = [[[0f32; 8]; T]; R];
    let acc_ptr = std::hint::black_box(acc_mem.as_mut_ptr());
    let accp = |r: usize, t: usize| (*acc_ptr.add(r)).as_mut_ptr().add(t) as *mut f32;
    for g in 0..ng {
        let grp = |r: usize| row(r).add(g * 8 * bb);
        let mut isum = [[_mm256_setzero_si256(); T]; R];
        let pair_wide = wide && R == 2;
        // The wide pair starts its sums from the corrections itself.
        if W != Q41 && !pair_wide {
            for t in 0..T {
                let c = _mm256_loadu_si256(p.corr.add(t * side + 8 * g) as *const __m256i);
                for r in 0..R {
                    isum[r][t] = c;
                }
            }
        }
        let act = |t: usize, u: usize| _mm256_loadu_si256(p.aq.add(t * p.astride + 256 * g + 32 * u) as *const __m256i);
        if pair_wide {
            interleaved_group_pair_wide::<W, T>(grp(0), grp(1), hdr, |t, u| _mm512_broadcast_i64x4(act(t, u)), p.corr.wrapping_add(8 * g), side, &mut isum[..]);
        } else if W == Q80 {
            for u in 0..8 {
                let mut wv = [_mm256_setzero_si256(); R];
                for r in 0..R {
                    let q = grp(r).add(hdr + 32 * u);
                    _mm_prefetch::<_MM_HINT_T1>(q.wrapping_add(PF_DIST) as *const i8);
                    wv[r] = _mm256_xor_si256(_mm256_loadu_si256(q as *const __m256i), _mm256_set1_epi8(-128));
                }
                for t in 0..T {
                    let a = act(t, u);
                    for r in 0..R {
                        isum[r][t] = _mm256_dpbusd_epi32(isum[r][t], wv[r], a);
                    }
                }
            }
        } else {
            for v in 0..4 {
                let mut lo = [_mm256_setzero_si256(); R];
                let mut hi = [_mm256_setzero_si256(); R];
                for r in 0..R {
                    let q = grp(r).add(hdr + 32 * v);
                    _mm_prefetch::<_MM_HINT_T1>(q.wrapping_add(PF_DIST) as *const i8);
                    let raw = _mm256_loadu_si256(q as *const __m256i);
                    lo[r] = _mm256_and_si256(raw, nibbles);
                    hi[r] = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), nibbles);
                }
                for t in 0..T {
                    let (al, ah) = (act(t, 2 * v), act(t, 2 * v + 1));
                    for r in 0..R {
                        isum[r][t] = _mm256_dpbusd_epi32(isum[r][t], lo[r], al);
                        isum[r][t] = _mm256_dpbusd_epi32(isum[r][t], hi[r], ah);
                    }
                }
            }
        }
        let mut dw = [_mm256_setzero_ps(); R];
        let mut mw = [_mm256_setzero_ps(); R];
        for r in 0..R {
            dw[r] = _mm256_cvtph_ps(_mm_loadu_si128(grp(r) as *const __m128i));
            if W == Q41 {
                mw[r] = _mm256_cvtph_ps(_mm_loadu_si128(grp(r).add(16) as *const __m128i));
            }
        }
        for t in 0..T {
            let da = _mm256_loadu_ps(p.ad.add(t * side + 8 * g));
            let sa = if W == Q41 { _mm256_loadu_ps(p.vb.add(t * side + 8 * g)) } else { _mm256_setzero_ps() };
            for r in 0..R {
                let mut a = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), _mm256_cvtepi32_ps(isum[r][t]), _mm256_loadu_ps(accp(r, t)));
                if W == Q41 {
                    a = _mm256_fmadd_ps(mw[r], sa, a);
                }
                _mm256_storeu_ps(accp(r, t), a);
            }
        }
    }
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for r in 0..R {
        for t in 0..T {
            acc[r][t] = _mm256_loadu_ps(accp(r, t));
        }
    }
    // Pairs of blocks: block A in lanes 0-3, B in 4-7; each block's correction, `m` and `s` in
    // its first lane.
    let halves = _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0);
    let two_f32 = |ptr: *const f32| _mm256_castps128_ps256(_mm_castpd_ps(_mm_load_sd(ptr as *const f64)));
    for pi in 0..pairs {
        let b0 = ng * 8 + 2 * pi;
        let pair = |r: usize| row(r).add(b0 * bb);
        let mut wq = [[_mm256_setzero_si256(); 2]; R];
        let mut dw = [_mm256_setzero_ps(); R];
        let mut mw = [_mm256_setzero_ps(); R];
        for r in 0..R {
            let q = pair(r).add(phdr);
            // Every line of the row is prefetched a fixed distance ahead: a line left to the
            // hardware costs one-token decode a DRAM latency per row.
            _mm_prefetch::<_MM_HINT_T1>(pair(r).wrapping_add(PF_DIST) as *const i8);
            _mm_prefetch::<_MM_HINT_T1>(q.wrapping_add(PF_DIST + 32) as *const i8);
            wq[r] = if W == Q80 {
                let flip = _mm256_set1_epi8(-128);
                [_mm256_xor_si256(_mm256_loadu_si256(q as *const __m256i), flip), _mm256_xor_si256(_mm256_loadu_si256(q.add(32) as *const __m256i), flip)]
            } else {
                let raw = _mm256_loadu_si256(q as *const __m256i);
                [_mm256_and_si256(raw, nibbles), _mm256_and_si256(_mm256_srli_epi16::<4>(raw), nibbles)]
            };
            dw[r] = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(_mm_loadu_si32(pair(r)))), halves);
            if W == Q41 {
                mw[r] = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(_mm_loadu_si32(pair(r).add(4)))), halves);
            }
        }
        for t in 0..T {
            let a = p.aq.add(t * p.astride + 32 * b0);
            let (a0, a1) = (_mm256_loadu_si256(a as *const __m256i), _mm256_loadu_si256(a.add(32) as *const __m256i));
            let init = if W == Q41 {
                _mm256_setzero_si256()
            } else {
                _mm256_maskz_permutexvar_epi32(0x11, halves, _mm256_castsi128_si256(_mm_loadl_epi64(p.corr.add(t * side + b0) as *const __m128i)))
            };
            let da = _mm256_permutevar8x32_ps(two_f32(p.ad.add(t * side + b0)), halves);
            let sa = if W == Q41 { _mm256_maskz_permutexvar_ps(0x11, halves, two_f32(p.vb.add(t * side + b0))) } else { _mm256_setzero_ps() };
            for r in 0..R {
                let isum = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(init, wq[r][0], a0), wq[r][1], a1);
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), _mm256_cvtepi32_ps(isum), acc[r][t]);
                if W == Q41 {
                    acc[r][t] = _mm256_fmadd_ps(mw[r], sa, acc[r][t]);
                }
            }
        }
    }
    // A last odd block: a GGUF block, its `m * s` (Q4_1) in lane 0.
    for b in ng * 8 + 2 * pairs..nb {
        let mut wv = [_mm256_setzero_si256(); R];
        let mut dm = [[0f32; 2]; R];
        for r in 0..R {
            _mm_prefetch::<_MM_HINT_T1>(row(r).wrapping_add(b * bb + PF_DIST) as *const i8);
            wv[r] = load_w32::<W>(row(r), b);
            dm[r] = [h2f(row(r).add(b * bb)), if W == Q41 { h2f(row(r).add(b * bb + 2)) } else { 0.0 }];
        }
        for t in 0..T {
            let a = _mm256_loadu_si256(p.aq.add(t * p.astride + 32 * b) as *const __m256i);
            let da = *p.ad.add(t * side + b);
            let init = if W == Q41 { _mm256_setzero_si256() } else { _mm256_zextsi128_si256(_mm_cvtsi32_si128(*p.corr.add(t * side + b))) };
            let ms = if W == Q41 { _mm256_zextps128_ps256(_mm_set_ss(*p.vb.add(t * side + b))) } else { _mm256_setzero_ps() };
            for r in 0..R {
                let dot = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(init, wv[r], a));
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dm[r][0] * da), dot, acc[r][t]);
                if W == Q41 {
                    acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dm[r][1]), ms, acc[r][t]);
                }
            }
        }
    }
    store_lane_sums::<R, T, false>(&acc, p.out, p.ostride, |_, _| 0.0);
}

#[inline]
fn idx_k(c: usize, q6: bool) -> [i16; 32] {
    let mut v = [0i16; 32];
    for (i, x) in v.iter_mut().enumerate() {
        *x = if q6 { (4 * c + i / 8) as i16 } else { (2 * c + i / 16) as i16 };
    }
    v
}

/// R rows x T tokens of a K-quant weight type against repacked Q8_K activations.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_k<const W: u8, const R: usize, const T: usize>(p: &Tile) {
    let bb = match W {
        Q4K => 144,
        Q5K => 176,
        _ => 210,
    };
    let idx: [__m512i; 4] = [0, 1, 2, 3].map(|c| {
        let a = idx_k(c, W == Q6K);
        _mm512_loadu_si512(a.as_ptr() as *const _)
    });
    let m0f = _mm512_set1_epi8(0x0f);
    let x30 = _mm512_set1_epi8(0x30);
    let sixteen = _mm512_set1_epi8(16);
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    for sb in 0..p.nb {
        let mut d = [0f32; R];
        let mut dmin = [0f32; R];
        let mut scv = [_mm512_setzero_si512(); R];
        let mut side16 = [_mm256_setzero_si256(); R];
        let mut hv = [_mm512_setzero_si512(); R];
        let mut blk = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            let bp = p.w.add(r * p.rb + sb * bb);
            blk[r] = bp;
            let bsl = std::slice::from_raw_parts(bp, bb);
            if W == Q6K {
                d[r] = h2f(bp.add(208));
                let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(bp.add(192) as *const __m128i));
                side16[r] = sc16;
                scv[r] = _mm512_zextsi256_si512(sc16);
            } else {
                d[r] = h2f(bp);
                dmin[r] = h2f(bp.add(2));
                let mut sc = [0u8; 16];
                let mut mm = [0u8; 16];
                for j in 0..8 {
                    let (s, m) = get_scale_min_k4(j, &bsl[4..16]);
                    sc[j] = s;
                    mm[2 * j] = m;
                    mm[2 * j + 1] = m;
                }
                scv[r] = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_loadu_si128(sc.as_ptr() as *const __m128i)));
                side16[r] = _mm256_cvtepu8_epi16(_mm_loadu_si128(mm.as_ptr() as *const __m128i));
                if W == Q5K {
                    hv[r] = _mm512_broadcast_i64x4(_mm256_loadu_si256(bp.add(16) as *const __m256i));
                }
            }
        }
        let mut iacc = [[_mm512_setzero_si512(); T]; R];
        for c in 0..4 {
            let mut wv = [_mm512_setzero_si512(); R];
            let mut scc = [_mm512_setzero_si512(); R];
            for r in 0..R {
                let bp = blk[r];
                _mm_prefetch::<_MM_HINT_T1>(bp.wrapping_add(64 * c + PF_DIST) as *const i8);
                wv[r] = match W {
                    Q6K => {
                        let n = c / 2;
                        let ql = _mm512_loadu_si512(bp.add(64 * n) as *const _);
                        let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(bp.add(128 + 32 * n) as *const __m256i));
                        if c % 2 == 0 {
                            let h = _mm512_sllv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4));
                            _mm512_or_si512(_mm512_and_si512(ql, m0f), _mm512_and_si512(h, x30))
                        } else {
                            let h = _mm512_srlv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0));
                            _mm512_or_si512(
                                _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m0f),
                                _mm512_and_si512(h, x30),
                            )
                        }
                    }
                    _ => {
                        let qo = if W == Q5K { 48 } else { 16 };
                        let q = _mm512_broadcast_i64x4(_mm256_loadu_si256(bp.add(qo + 32 * c) as *const __m256i));
                        let w = _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)), m0f);
                        if W == Q5K {
                            let sel = _mm512_inserti64x4::<1>(
                                _mm512_castsi256_si512(_mm256_set1_epi8((1u8 << (2 * c)) as i8)),
                                _mm256_set1_epi8((2u8 << (2 * c)) as i8),
                            );
                            let m = _mm512_test_epi8_mask(hv[r], sel);
                            _mm512_mask_add_epi8(w, m, w, sixteen)
                        } else {
                            w
                        }
                    }
                };
                scc[r] = _mm512_permutexvar_epi16(idx[c], scv[r]);
            }
            for t in 0..T {
                let a = _mm512_loadu_si512(p.aq.add(t * p.astride + sb * QK_K + 64 * c) as *const _);
                for r in 0..R {
                    let prod = _mm512_maddubs_epi16(wv[r], a);
                    iacc[r][t] = _mm512_dpwssd_epi32(iacc[r][t], prod, scc[r]);
                }
            }
        }
        for t in 0..T {
            let da = *p.ad.add(t * p.side + sb);
            let bs = _mm256_loadu_si256(p.bs.add((t * p.nb + sb) * 16) as *const __m256i);
            for r in 0..R {
                let s = _mm256_madd_epi16(bs, side16[r]);
                if W == Q6K {
                    let i = _mm512_sub_epi32(iacc[r][t], _mm512_zextsi256_si512(_mm256_slli_epi32::<5>(s)));
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(d[r] * da), acc[r][t]);
                } else {
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][t]), _mm512_set1_ps(d[r] * da), acc[r][t]);
                    acc[r][t] = _mm512_fmadd_ps(
                        _mm512_zextps256_ps512(_mm256_cvtepi32_ps(s)),
                        _mm512_set1_ps(-dmin[r] * da),
                        acc[r][t],
                    );
                }
            }
        }
    }
    for r in 0..R {
        for t in 0..T {
            *p.out.add(t * p.ostride + r) = _mm512_reduce_add_ps(acc[r][t]);
        }
    }
}

/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn load_wf<const W: u8>(p: *const u8, i: usize, m: __mmask16) -> __m512 {
    match W {
        F32W => _mm512_maskz_loadu_ps(m, p.add(4 * i) as *const f32),
        F16W => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p.add(2 * i) as *const i16)),
        _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
            m,
            p.add(2 * i) as *const i16,
        )))),
    }
}

/// R rows x T tokens of a float weight type against f32 activations.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute, and
/// every pointer must be valid for the reads and writes its arguments describe.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn tile_f<const W: u8, const R: usize, const T: usize>(p: &Tile) {
    let k = p.nb;
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    let mut i = 0;
    while i < k {
        let m: __mmask16 = if i + 16 <= k { 0xffff } else { (1u16 << (k - i)) - 1 };
        let mut wv = [_mm512_setzero_ps(); R];
        for r in 0..R {
            let row = p.w.add(r * p.rb);
            _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(4 * i + PF_DIST) as *const i8);
            wv[r] = load_wf::<W>(row, i, m);
        }
        for t in 0..T {
            let a = _mm512_maskz_loadu_ps(m, p.aq.add(t * p.astride + 4 * i) as *const f32);
            for r in 0..R {
                acc[r][t] = _mm512_fmadd_ps(wv[r], a, acc[r][t]);
            }
        }
        i += 16;
    }
    for r in 0..R {
        for t in 0..T {
            *p.out.add(t * p.ostride + r) = _mm512_reduce_add_ps(acc[r][t]);
        }
    }
}

#[inline]
fn tail_mask(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        (1u16 << n) - 1
    }
}

/// # Safety
/// avx512f must be available; `a.len() == b.len()`.
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i + 32 <= n {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a.as_ptr().add(i)), _mm512_loadu_ps(b.as_ptr().add(i)), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a.as_ptr().add(i + 16)), _mm512_loadu_ps(b.as_ptr().add(i + 16)), s1);
        i += 32;
    }
    while i < n {
        let m = tail_mask(n - i);
        s0 = _mm512_fmadd_ps(
            _mm512_maskz_loadu_ps(m, a.as_ptr().add(i)),
            _mm512_maskz_loadu_ps(m, b.as_ptr().add(i)),
            s0,
        );
        i += 16;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
}

/// ggml's `ggml_v_expf` (AVX-512 build), lane for lane [`crate::ggml_float::v_expf`].
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn v_expf(x: __m512) -> __m512 {
    let [shift, log2e, ln2_hi, ln2_lo, p5, p4, p3, p2, p1] = crate::ggml_float::EXP_CONSTS.map(|c| _mm512_set1_ps(c));
    let z = _mm512_fmadd_ps(x, log2e, shift);
    let n = _mm512_sub_ps(z, shift);
    let b = _mm512_fnmadd_ps(n, ln2_lo, _mm512_fnmadd_ps(n, ln2_hi, x));
    let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
    let u = _mm512_mul_ps(b, b);
    let j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(p5, b, p4), u, _mm512_fmadd_ps(p3, b, p2)),
        u,
        _mm512_fmadd_ps(p1, b, _mm512_set1_ps(1.0)),
    );
    let res = _mm512_scalef_ps(j, n);
    if big == 0 {
        return res;
    }
    let alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps()), _mm512_set1_ps(f32::INFINITY), _mm512_setzero_ps());
    _mm512_mask_blend_ps(big, res, alt)
}

/// GCC's `_mm512_reduce_add_ps` lane tree (see [`crate::ggml_float::reduce16`]).
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn reduce16(x: __m512) -> f32 {
    let r8 = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps::<1>(x));
    let r4 = _mm_add_ps(_mm256_castps256_ps128(r8), _mm256_extractf128_ps::<1>(r8));
    let r2 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
    _mm_cvtss_f32(_mm_add_ss(r2, _mm_movehdup_ps(r2)))
}

/// [`crate::ggml_float`]'s SwiGLU: `v_silu(gate) * up` in 16-lane chunks, the tail as ggml's
/// scalar `ggml_silu_f32` (libm `expf`).
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute; the slices
/// have equal lengths.
#[target_feature(enable = "avx512f,avx512dq")]
pub(crate) unsafe fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let n = out.len();
    let mut i = 0;
    while i + 16 <= n {
        let x = _mm512_loadu_ps(gate.as_ptr().add(i));
        let e = v_expf(_mm512_sub_ps(_mm512_setzero_ps(), x));
        let silu = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e));
        _mm512_storeu_ps(out.as_mut_ptr().add(i), _mm512_mul_ps(silu, _mm512_loadu_ps(up.as_ptr().add(i))));
        i += 16;
    }
    for j in i..n {
        out[j] = gate[j] / (1.0 + (-gate[j]).exp()) * up[j];
    }
}

/// Sixteen f16 at `p` as f32.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute; `p` is
/// valid for 32 bytes.
#[inline]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn load_h16(p: *const f16) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
}

/// Sixteen rows' lane vectors `x[r]` reduced at once: element `r` of the result is
/// [`reduce16`]`(x[r])`, bit for bit. Each stage adds the lane pairs of GCC's tree (i and i+8,
/// then i and i+4, i and i+2, i and i+1) for all rows, transposing as it goes: 30 shuffles
/// instead of sixteen reductions' 64.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn reduce16x16(x: &[__m512; 16]) -> __m512 {
    // Lanes i and i+8: y[k] holds rows 2k and 2k+1, eight lanes each.
    let y: [__m512; 8] = std::array::from_fn(|k| {
        let (a, b) = (x[2 * k], x[2 * k + 1]);
        _mm512_add_ps(_mm512_shuffle_f32x4::<0x44>(a, b), _mm512_shuffle_f32x4::<0xee>(a, b))
    });
    // Lanes i and i+4: quarter q of z[k] is row 4k + q.
    let z: [__m512; 4] = std::array::from_fn(|k| {
        let (c, d) = (y[2 * k], y[2 * k + 1]);
        _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(c, d), _mm512_shuffle_f32x4::<0xdd>(c, d))
    });
    // Lanes i and i+2: quarter q of w[k] is rows 8k + q and 8k + 4 + q, two lanes each.
    let w: [__m512; 2] = std::array::from_fn(|k| {
        let (e, f) = (z[2 * k], z[2 * k + 1]);
        _mm512_add_ps(_mm512_shuffle_ps::<0x44>(e, f), _mm512_shuffle_ps::<0xee>(e, f))
    });
    // Lanes i and i+1: element 4q + m is row 4m + q; a 4x4 transpose puts the rows in order.
    let r = _mm512_add_ps(_mm512_shuffle_ps::<0x88>(w[0], w[1]), _mm512_shuffle_ps::<0xdd>(w[0], w[1]));
    _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), r)
}

/// Asks for the cache lines of the `bytes` at `p` (a KV row, every KV head's columns) ahead of
/// use, into L2: a paged cache's blocks are scattered, so the hardware prefetcher misses them
/// and each row would wait on DRAM. L2 rather than L1 because L1's few miss buffers capped such
/// prefetches at about half of a core's read bandwidth here (whole-row scattered blocks: ~9.6
/// against ~17 GB/s with `_MM_HINT_T1`); the kernels then load from L2 with the core's usual
/// look-ahead. Zero bytes: nothing.
#[inline]
#[target_feature(enable = "sse")]
fn prefetch_row(p: *const f16, bytes: usize) {
    if bytes == 0 {
        return;
    }
    // Every line the row touches, whether or not it starts on one.
    let (first, last) = (p as usize & !63, (p as usize + bytes - 1) & !63);
    for line in (first..=last).step_by(64) {
        _mm_prefetch::<_MM_HINT_T1>(line as *const i8);
    }
}

/// The pass of query heads starting at `h0`: its KV head `h0 / group` and how many heads it
/// takes (at most `max`, none past that KV head's last or past `heads`).
#[inline]
fn head_pass(h0: usize, heads: usize, group: usize, max: usize) -> (usize, usize) {
    let g = h0 / group;
    (g, (heads.min((g + 1) * group) - h0).min(max))
}

/// [`crate::Kernels::attn_dots_f16`], bit-identical to [`crate::ggml_float::dot`]; row `r` of K
/// starts at `row(r)`, query head `h` reads its columns `(h / group) * hd..` (heads of a KV
/// head share it), and the first `row_bytes` of each row are prefetched (its KV heads' columns).
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute; `hd` is a
/// multiple of 64; `group` is at least 1; every `row(r)`, `r < n_rows`, is valid for
/// `qs.len() / hd / group * hd` reads (and `row_bytes` may be prefetched); `qs` and `out` hold
/// what `Kernels::attn_dots_f16` checks.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512dq,fma,f16c")]
pub(crate) unsafe fn attn_dots_f16(row: &impl Fn(usize) -> *const f16, n_rows: usize, qs: &[f32], hd: usize, group: usize, row_bytes: usize, order: crate::AttnOrder, out: &mut [f32], out_stride: usize) {
    match hd {
        64 => dots_nc::<4>(row, n_rows, qs, group, row_bytes, order, out, out_stride),
        128 => dots_nc::<8>(row, n_rows, qs, group, row_bytes, order, out, out_stride),
        256 => dots_nc::<16>(row, n_rows, qs, group, row_bytes, order, out, out_stride),
        _ => {
            let heads = qs.len() / hd;
            for r in 0..n_rows {
                for h in 0..heads {
                    let kp = row(r).add(h / group * hd);
                    let qp = qs.as_ptr().add(h * hd);
                    let s = match order {
                        crate::AttnOrder::Prefill | crate::AttnOrder::Sequential => {
                            let mut acc = _mm512_setzero_ps();
                            for c in (0..hd).step_by(16) {
                                acc = _mm512_fmadd_ps(load_h16(kp.add(c)), _mm512_loadu_ps(qp.add(c)), acc);
                            }
                            reduce16(acc)
                        }
                        crate::AttnOrder::Decode => {
                            let mut acc = [_mm512_setzero_ps(); 4];
                            for c in (0..hd).step_by(64) {
                                for (j, a) in acc.iter_mut().enumerate() {
                                    *a = _mm512_fmadd_ps(load_h16(kp.add(c + 16 * j)), _mm512_loadu_ps(qp.add(c + 16 * j)), *a);
                                }
                            }
                            reduce16(_mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3])))
                        }
                    };
                    *out.get_unchecked_mut(h * out_stride + r) = s;
                }
            }
        }
    }
}

/// [`attn_dots_f16`] for `hd = 16 * NC`: each KV head's columns of a K row converted once into
/// registers for its query heads, each head's lane sums of 16 rows reduced together
/// ([`reduce16x16`]).
/// # Safety
/// As [`attn_dots_f16`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512dq,fma,f16c")]
unsafe fn dots_nc<const NC: usize>(row: &impl Fn(usize) -> *const f16, n_rows: usize, qs: &[f32], group: usize, row_bytes: usize, order: crate::AttnOrder, out: &mut [f32], out_stride: usize) {
    // Heads per pass: their lane sums of a 16-row tile wait in `sums` (8 KiB, in L1).
    const HT: usize = 8;
    let hd = 16 * NC;
    let heads = qs.len() / hd;
    let mut sums = [[_mm512_setzero_ps(); 16]; HT];
    // Rows are fetched PF rows ahead of their use (the first PF before starting).
    const PF: usize = 32;
    for r in 0..n_rows.min(PF) {
        prefetch_row(row(r), row_bytes);
    }
    for t0 in (0..n_rows).step_by(16) {
        let tn = (n_rows - t0).min(16);
        // Passes of at most HT query heads, each within one KV head (the tile's rows stay in L1
        // across the passes).
        let mut h0 = 0;
        while h0 < heads {
            let (g, hn) = head_pass(h0, heads, group, HT);
            for r in 0..tn {
                if h0 == 0 && t0 + r + PF < n_rows {
                    prefetch_row(row(t0 + r + PF), row_bytes);
                }
                let kp = row(t0 + r).add(g * hd);
                let k: [__m512; NC] = std::array::from_fn(|c| load_h16(kp.add(16 * c)));
                for h in 0..hn {
                    let qp = qs.as_ptr().add((h0 + h) * hd);
                    let q = |c: usize| _mm512_loadu_ps(qp.add(16 * c));
                    sums[h][r] = match order {
                        crate::AttnOrder::Prefill | crate::AttnOrder::Sequential => {
                            let mut acc = _mm512_setzero_ps();
                            for c in 0..NC {
                                acc = _mm512_fmadd_ps(k[c], q(c), acc);
                            }
                            acc
                        }
                        crate::AttnOrder::Decode => {
                            // Chunk c of 16 goes to ggml's accumulator c % 4 (chunks of 64).
                            let mut acc = [_mm512_setzero_ps(); 4];
                            for c in 0..NC {
                                acc[c % 4] = _mm512_fmadd_ps(k[c], q(c), acc[c % 4]);
                            }
                            _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]))
                        }
                    };
                }
            }
            for (h, s) in sums.iter().enumerate().take(hn) {
                // Rows past `tn` hold an earlier tile's sums; their lanes are not stored.
                _mm512_mask_storeu_ps(out.as_mut_ptr().add((h0 + h) * out_stride + t0), tail_mask(tn), reduce16x16(s));
            }
            h0 += hn;
        }
    }
}

/// [`crate::ggml_float::softmax_f16`], bit for bit.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute.
#[target_feature(enable = "avx512f,avx512dq,f16c")]
pub(crate) unsafe fn softmax_f16(scores: &mut [f32], scale: f32) {
    let n = scores.len();
    let p = scores.as_mut_ptr();
    let sv = _mm512_set1_ps(scale);
    let mut maxv = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < n {
        let m = tail_mask(n - i);
        let x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p.add(i)), sv);
        _mm512_mask_storeu_ps(p.add(i), m, x);
        maxv = _mm512_mask_max_ps(maxv, m, maxv, x);
        i += 16;
    }
    let max = _mm512_reduce_max_ps(maxv);
    let mut sum = 0f64;
    let mut i = 0;
    while i < n {
        let m = tail_mask(n - i);
        let e = _mm512_maskz_mov_ps(m, v_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(i)), _mm512_set1_ps(max))));
        _mm512_mask_storeu_ps(p.add(i), m, e);
        sum += reduce16(e) as f64;
        i += 16;
    }
    let inv = _mm512_set1_ps((1.0 / sum) as f32);
    let mut i = 0;
    while i < n {
        let m = tail_mask(n - i);
        let y = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p.add(i)), inv);
        let h = _mm512_cvtph_ps(_mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y));
        _mm512_mask_storeu_ps(p.add(i), m, h);
        i += 16;
    }
}

/// [`crate::Kernels::accumulate_values_f16`], bit-identical to
/// [`crate::ggml_float::accumulate_values`]: row `i` (position `first + i`) starts at `row(i)`.
/// With `LOAD` the sums are added to `acc`; without, `acc` is set to them (every lane written,
/// as if it had been zero).
///
/// Accumulator lane `l` is a chain of its own over the positions `j = l mod lanes` in increasing
/// order, so the lanes are taken one at a time, a lane's row of each head in registers across
/// its positions, each V chunk converted once for the heads: the same FMAs in the same order as
/// row by row, with one load and store per accumulator row instead of one per position.
///
/// Query head `h` reads the columns `(h / group) * hd..` of each row. The KV heads are taken one
/// after the other; the first pass prefetches each row's first `row_bytes` (every KV head's
/// columns), so the later passes read L2.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute; `hd` is a
/// multiple of 16; `group` is at least 1; every `row(i)`, `i < n_rows`, is valid for
/// `heads / group * hd` reads (and `row_bytes` may be prefetched); `acc` and `weights` hold what
/// `Kernels::accumulate_values_f16` checks.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,fma,f16c")]
pub(crate) unsafe fn accumulate_values_f16<const LOAD: bool>(acc: &mut [f32], hd: usize, group: usize, row_bytes: usize, order: crate::AttnOrder, first: usize, weights: &[f32], w_stride: usize, n_rows: usize, row: &impl Fn(usize) -> *const f16) {
    let lanes = order.value_lanes();
    let heads = acc.len() / (lanes * hd);
    // Heads per pass and 16-element chunks per register row: at most 16 accumulators.
    let nc = hd / 16;
    let mut h0 = 0;
    while h0 < heads {
        let (g, hn) = head_pass(h0, heads, group, 8);
        let pf_bytes = if h0 == 0 { row_bytes } else { 0 };
        let row = |i: usize| row(i).add(g * hd);
        let ch = if hn <= 4 && nc.is_multiple_of(4) {
            4
        } else if nc.is_multiple_of(2) {
            2
        } else {
            1
        };
        let a = acc.as_mut_ptr().add(h0 * lanes * hd);
        let w = weights.as_ptr().add(h0 * w_stride);
        macro_rules! pass {
            ($(($h:literal, $c:literal)),*) => {
                match (hn, ch) {
                    $(($h, $c) => values_lanes::<$h, $c, LOAD>(a, hd, lanes, first, n_rows, &row, pf_bytes, w, w_stride),)*
                    _ => unreachable!("heads per pass are 1..=8, chunks 1, 2 or 4"),
                }
            };
        }
        pass!(
            (1, 4), (2, 4), (3, 4), (4, 4),
            (1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (6, 2), (7, 2), (8, 2),
            (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1)
        );
        h0 += hn;
    }
}

/// [`accumulate_values_f16`] for `H` heads of one KV head (accumulators at
/// `acc + h * lanes * hd`, weights at `w + h * w_stride`), `CH` chunks of 16 elements at a time,
/// prefetching `pf_bytes` of each row.
/// # Safety
/// As [`accumulate_values_f16`]; `CH * 16` divides `hd`.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,fma,f16c")]
unsafe fn values_lanes<const H: usize, const CH: usize, const LOAD: bool>(acc: *mut f32, hd: usize, lanes: usize, first: usize, n_rows: usize, row: &impl Fn(usize) -> *const f16, pf_bytes: usize, w: *const f32, w_stride: usize) {
    // Row i0 is the first of lane (first + i0) % lanes; lanes without rows only need zeros.
    let last = if LOAD { lanes.min(n_rows) } else { lanes };
    // Rows are fetched PF lanes ahead of their use (the first PF lanes' before starting).
    const PF: usize = 16;
    // One lane (AttnOrder::Sequential) walks the positions in order: rows are prefetched PF
    // positions ahead inside that walk instead.
    if pf_bytes > 0 && lanes == 1 {
        for i in 0..PF.min(n_rows) {
            prefetch_row(row(i), pf_bytes);
        }
    } else if pf_bytes > 0 {
        for i0 in 0..PF.min(n_rows) {
            for i in (i0..n_rows).step_by(lanes) {
                prefetch_row(row(i), pf_bytes);
            }
        }
    }
    for i0 in 0..last {
        if pf_bytes > 0 && i0 + PF < lanes.min(n_rows) {
            for i in (i0 + PF..n_rows).step_by(lanes) {
                prefetch_row(row(i), pf_bytes);
            }
        }
        let lane = acc.add((first + i0) % lanes * hd);
        for d in (0..hd).step_by(16 * CH) {
            let at = |h: usize, c: usize| lane.add(h * lanes * hd + d + 16 * c);
            let mut a = [[_mm512_setzero_ps(); CH]; H];
            if LOAD {
                for h in 0..H {
                    for c in 0..CH {
                        a[h][c] = _mm512_loadu_ps(at(h, c));
                    }
                }
            }
            let mut i = i0;
            while i < n_rows {
                if lanes == 1 && pf_bytes > 0 && d == 0 && i + PF < n_rows {
                    prefetch_row(row(i + PF), pf_bytes);
                }
                let vp = row(i);
                let v: [__m512; CH] = std::array::from_fn(|c| load_h16(vp.add(d + 16 * c)));
                for h in 0..H {
                    let wv = _mm512_set1_ps(*w.add(h * w_stride + i));
                    for c in 0..CH {
                        a[h][c] = _mm512_fmadd_ps(wv, v[c], a[h][c]);
                    }
                }
                i += lanes;
            }
            for h in 0..H {
                for c in 0..CH {
                    _mm512_storeu_ps(at(h, c), a[h][c]);
                }
            }
        }
    }
}

/// [`crate::ggml_float::finish_values`], bit for bit, 16 output elements at a time.
/// # Safety
/// The CPU must have the features in this function's `target_feature` attribute; `hd` is a
/// multiple of 16; `acc` holds `order.value_lanes() * hd` floats and `out` `hd`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn finish_values(acc: &[f32], hd: usize, order: crate::AttnOrder, out: &mut [f32]) {
    let lane = |r: usize, d: usize| _mm512_loadu_ps(acc.as_ptr().add(r * hd + d));
    for d in (0..hd).step_by(16) {
        let x: [__m512; 16] = match order {
            crate::AttnOrder::Decode => std::array::from_fn(|l| {
                _mm512_add_ps(_mm512_add_ps(lane(l, d), lane(32 + l, d)), _mm512_add_ps(lane(16 + l, d), lane(48 + l, d)))
            }),
            crate::AttnOrder::Prefill => std::array::from_fn(|l| lane(l, d)),
            crate::AttnOrder::Sequential => {
                _mm512_storeu_ps(out.as_mut_ptr().add(d), lane(0, d));
                continue;
            }
        };
        let r8: [__m512; 8] = std::array::from_fn(|i| _mm512_add_ps(x[i], x[i + 8]));
        let r4: [__m512; 4] = std::array::from_fn(|i| _mm512_add_ps(r8[i], r8[i + 4]));
        _mm512_storeu_ps(out.as_mut_ptr().add(d), _mm512_add_ps(_mm512_add_ps(r4[0], r4[2]), _mm512_add_ps(r4[1], r4[3])));
    }
}
