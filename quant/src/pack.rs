//! Activation repacking for the SIMD kernels: quantized activations in GGML block layout are
//! split once per `matmul` call into contiguous int8 values plus float (or i16) side arrays, so
//! the micro-kernels load 64 activation bytes with one instruction.

use crate::reference::{f16_at, f32_at, QK_K};
use crate::GgmlType;

/// Activations of `n_tokens` rows, repacked.
pub(crate) struct ActPack {
    /// `n_tokens * k` int8 values (as bytes), then 64 bytes of zero padding.
    pub qs: Vec<u8>,
    /// Per token, `stride` floats: the scale of each block (32-blocks or 256-super-blocks).
    pub d: Vec<f32>,
    /// 32-block weight types: `d` again, block-major (block `b` of token `t` at `b * n_tokens + t`),
    /// so that a micro-tile loads its tokens' scales of one block with one (masked) load.
    pub d_by_block: Vec<f32>,
    /// Q4_1 weights only: the Q8_1 `s` of each 32-block, block-major (block `b` of token `t` at
    /// `b * n_tokens + t`), then 4 floats of padding, so a micro-tile loads its tokens' `s` of
    /// one block with one 16-byte load.
    pub v_by_block: Vec<f32>,
    /// Per token and 32-block, 8 lane corrections `-offset * (sum of the lane's 4 values)`: added
    /// to the integer lane sums of unsigned weight bytes, they give exactly the signed products
    /// ggml sums per lane (Q4_0: offset 8; Q8_0: the kernel's `q8_0_offset`). Empty otherwise.
    pub corr: Vec<i32>,
    /// Per token and super-block, the 16 Q8_K sums of 16 values.
    pub bsums: Vec<i16>,
    /// Floats per token in `d`: the block count rounded up to 16, plus 16 of padding.
    pub stride: usize,
    /// The interleaved layout ([`crate::ProductOrder::Interleaved`]): `qs` in its order, and
    /// instead of the block-major arrays, per token (`stride` apart) `v` (Q4_1's `s`) and
    /// `corr_by_block` (one correction per block) beside `d`.
    pub interleaved: bool,
    /// Interleaved Q4_1 packs: per token and block, the Q8_1 `s`.
    pub v: Vec<f32>,
    /// Interleaved Q4_0 / Q8_0 packs: per token and block, `-offset * (sum of its 32 values)`.
    pub corr_by_block: Vec<i32>,
}

/// Floats per row of per-block side arrays: room for 16-wide loads past the last block.
pub(crate) fn side_stride(nb: usize) -> usize {
    nb.div_ceil(16) * 16 + 16
}

/// Raw views of an [`ActPack`]'s buffers, for filling it token by token from several threads.
#[derive(Clone, Copy)]
pub(crate) struct ActPackPtrs {
    qs: *mut u8,
    d: *mut f32,
    d_by_block: *mut f32,
    v_by_block: *mut f32,
    corr: *mut i32,
    bsums: *mut i16,
    v: *mut f32,
    corr_by_block: *mut i32,
    interleaved: bool,
    stride: usize,
    weight: GgmlType,
    k: usize,
    n_tokens: usize,
    offset: i32,
}

// SAFETY: the pointers are only written through `ActPackPtrs::fill_token`, whose contract gives
// each token's entries to one thread at a time; the pack they point into outlives their use (the
// holder borrows it mutably).
unsafe impl Send for ActPackPtrs {}
// SAFETY: as above.
unsafe impl Sync for ActPackPtrs {}

impl ActPack {
    /// Repacks activations for weights of type `weight`.
    ///
    /// `q8_0_offset` is the constant the kernel adds to Q8_0 weights to make them unsigned
    /// (128 on AVX-512 VNNI, 0 where a sign trick is used instead); `corr` then carries the
    /// matching lane corrections. Q4_0 nibbles are used unsigned (offset 8); for Q4_1,
    /// `v_by_block` holds the Q8_1 blocks' `s`. `interleaved` (32-block types only): the values
    /// in `crate::interleave`'s order, with `corr_by_block` and `v` in place of `corr` and
    /// `v_by_block`.
    pub(crate) fn new(weight: GgmlType, acts: &[u8], k: usize, n_tokens: usize, q8_0_offset: i32, interleaved: bool) -> ActPack {
        let mut pack = ActPack::zeroed(weight, k, n_tokens, q8_0_offset, interleaved);
        let ptrs = pack.ptrs(weight, k, n_tokens, q8_0_offset);
        let rb = ptrs.row_bytes();
        for t in 0..n_tokens {
            // SAFETY: t < n_tokens, one thread, and `pack` is not otherwise used meanwhile.
            unsafe { ptrs.fill_token(t, &acts[t * rb..(t + 1) * rb]) };
        }
        pack
    }

    /// An all-zero pack of `n_tokens` tokens, to be filled through [`ActPack::ptrs`] (the
    /// arguments as for [`ActPack::new`]; `interleaved` only for the types
    /// `interleave::interleavable` names).
    pub(crate) fn zeroed(weight: GgmlType, k: usize, n_tokens: usize, q8_0_offset: i32, interleaved: bool) -> ActPack {
        let kblock = matches!(weight, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
        let nb = if kblock { k / QK_K } else { k / 32 };
        let stride = side_stride(nb);
        let offset_used = weight == GgmlType::Q4_0 || (weight == GgmlType::Q8_0 && q8_0_offset != 0);
        ActPack {
            qs: vec![0u8; n_tokens * k + 64],
            d: vec![0f32; n_tokens * stride],
            d_by_block: vec![0f32; if kblock || interleaved { 0 } else { nb * n_tokens }],
            v_by_block: vec![0f32; if weight == GgmlType::Q4_1 && !interleaved { nb * n_tokens + 4 } else { 0 }],
            corr: vec![0i32; if offset_used && !interleaved { n_tokens * nb * 8 } else { 0 }],
            bsums: vec![0i16; if kblock { n_tokens * nb * 16 } else { 0 }],
            stride,
            interleaved,
            v: vec![0f32; if weight == GgmlType::Q4_1 && interleaved { n_tokens * stride } else { 0 }],
            corr_by_block: vec![0i32; if offset_used && interleaved { n_tokens * stride } else { 0 }],
        }
    }

    /// Raw views for [`ActPackPtrs::fill_token`]; the arguments must be the ones the pack was
    /// made for by [`ActPack::zeroed`].
    pub(crate) fn ptrs(&mut self, weight: GgmlType, k: usize, n_tokens: usize, q8_0_offset: i32) -> ActPackPtrs {
        let offset = match weight {
            GgmlType::Q4_0 => 8,
            GgmlType::Q8_0 => q8_0_offset,
            _ => 0,
        };
        ActPackPtrs {
            qs: self.qs.as_mut_ptr(),
            d: self.d.as_mut_ptr(),
            d_by_block: self.d_by_block.as_mut_ptr(),
            v_by_block: self.v_by_block.as_mut_ptr(),
            corr: self.corr.as_mut_ptr(),
            bsums: self.bsums.as_mut_ptr(),
            v: self.v.as_mut_ptr(),
            corr_by_block: self.corr_by_block.as_mut_ptr(),
            interleaved: self.interleaved,
            stride: self.stride,
            weight,
            k,
            n_tokens,
            offset,
        }
    }
}

impl ActPackPtrs {
    /// Bytes of one token's quantized activation row.
    pub(crate) fn row_bytes(&self) -> usize {
        crate::activation_row_bytes(self.weight, self.k)
    }

    /// Repacks token `t`'s quantized activation row (`row_bytes()` bytes).
    ///
    /// # Safety
    /// `t < n_tokens`, `row.len() == row_bytes()`, the pack these pointers came from is alive and
    /// not otherwise accessed, and no other thread fills token `t` at the same time (other tokens'
    /// entries are disjoint from token `t`'s).
    pub(crate) unsafe fn fill_token(&self, t: usize, row: &[u8]) {
        let kblock = matches!(self.weight, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
        let (k, n_tokens, stride) = (self.k, self.n_tokens, self.stride);
        let nb = if kblock { k / QK_K } else { k / 32 };
        let (bb, qoff) = match self.weight {
            GgmlType::Q4_1 => (36, 4),
            GgmlType::Q4_0 | GgmlType::Q8_0 => (34, 2),
            _ => (292, 4),
        };
        let be = if kblock { QK_K } else { 32 };
        if self.interleaved {
            // SAFETY: as `fill_interleaved` requires, passed on from this function's contract.
            unsafe { self.fill_interleaved(t, row, nb, bb, qoff) };
            return;
        }
        for b in 0..nb {
            let blk = &row[b * bb..(b + 1) * bb];
            let vals = &blk[qoff..qoff + be];
            // SAFETY (every write below): token t's entries, inside the buffers `zeroed` sized
            // for n_tokens tokens; the caller gives token t to this thread alone.
            unsafe {
                std::ptr::copy_nonoverlapping(vals.as_ptr(), self.qs.add(t * k + b * be), be);
                if kblock {
                    *self.d.add(t * stride + b) = f32_at(blk, 0);
                    for i in 0..16 {
                        *self.bsums.add((t * nb + b) * 16 + i) = i16::from_le_bytes([blk[260 + 2 * i], blk[261 + 2 * i]]);
                    }
                } else {
                    let d = f16_at(blk, 0);
                    *self.d.add(t * stride + b) = d;
                    *self.d_by_block.add(b * n_tokens + t) = d;
                    if self.weight == GgmlType::Q4_1 {
                        *self.v_by_block.add(b * n_tokens + t) = f16_at(blk, 2);
                    }
                    if self.offset != 0 {
                        for (lane, four) in vals.chunks_exact(4).enumerate() {
                            let sum: i32 = four.iter().map(|&q| q as i8 as i32).sum();
                            *self.corr.add((t * nb + b) * 8 + lane) = -self.offset * sum;
                        }
                    }
                }
            }
        }
    }
}

impl ActPackPtrs {
    /// [`ActPackPtrs::fill_token`] for an interleaved pack of a 32-block type (`nb` blocks of
    /// `bb` bytes, values at `qoff`).
    ///
    /// # Safety
    /// As [`ActPackPtrs::fill_token`].
    unsafe fn fill_interleaved(&self, t: usize, row: &[u8], nb: usize, bb: usize, qoff: usize) {
        let (k, stride) = (self.k, self.stride);
        // SAFETY: token t's k values, inside `qs` (sized for n_tokens tokens); the caller gives
        // token t to this thread alone.
        let qs = unsafe { std::slice::from_raw_parts_mut(self.qs.add(t * k), k) };
        crate::interleave::interleave_activations(k, |b| &row[b * bb + qoff..b * bb + qoff + 32], qs);
        for b in 0..nb {
            let blk = &row[b * bb..(b + 1) * bb];
            // SAFETY (every write below): token t's entries (`stride` apart per token, b < nb <
            // stride), inside the buffers `zeroed` sized for n_tokens tokens.
            unsafe {
                *self.d.add(t * stride + b) = f16_at(blk, 0);
                if self.weight == GgmlType::Q4_1 {
                    *self.v.add(t * stride + b) = f16_at(blk, 2);
                }
                if self.offset != 0 {
                    let sum: i32 = blk[qoff..qoff + 32].iter().map(|&q| q as i8 as i32).sum();
                    *self.corr_by_block.add(t * stride + b) = -self.offset * sum;
                }
            }
        }
    }
}

impl ActPack {
    /// `packed` when the caller repacked beforehand, else a pack made now and kept in `slot`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn given_or_new<'a>(packed: Option<&'a ActPack>, slot: &'a mut Option<ActPack>, weight: GgmlType, acts: &[u8], k: usize, n_tokens: usize, q8_0_offset: i32, interleaved: bool) -> &'a ActPack {
        match packed {
            Some(p) => p,
            None => slot.insert(ActPack::new(weight, acts, k, n_tokens, q8_0_offset, interleaved)),
        }
    }
}

/// Rows per micro-tile.
pub(crate) const RT: usize = 4;
/// Tokens per micro-tile.
pub(crate) const TT: usize = 4;
/// Tokens per micro-tile of the AVX-512 32-block kernel (see [`drive_with`]).
pub(crate) const TT8: usize = 8;
/// Tokens per cache block (activations of one block stay in L2 while rows stream).
pub(crate) const TB: usize = 64;

macro_rules! dispatch_tile {
    ($f:ident, $w:expr, $nr:expr, $nt:expr, $($arg:expr),*) => {
        match ($nr, $nt) {
            (4, 4) => $f::<$w, 4, 4>($($arg),*),
            (4, 3) => $f::<$w, 4, 3>($($arg),*),
            (4, 2) => $f::<$w, 4, 2>($($arg),*),
            (4, 1) => $f::<$w, 4, 1>($($arg),*),
            (3, 4) => $f::<$w, 3, 4>($($arg),*),
            (3, 3) => $f::<$w, 3, 3>($($arg),*),
            (3, 2) => $f::<$w, 3, 2>($($arg),*),
            (3, 1) => $f::<$w, 3, 1>($($arg),*),
            (2, 4) => $f::<$w, 2, 4>($($arg),*),
            (2, 3) => $f::<$w, 2, 3>($($arg),*),
            (2, 2) => $f::<$w, 2, 2>($($arg),*),
            (2, 1) => $f::<$w, 2, 1>($($arg),*),
            (1, 4) => $f::<$w, 1, 4>($($arg),*),
            (1, 3) => $f::<$w, 1, 3>($($arg),*),
            (1, 2) => $f::<$w, 1, 2>($($arg),*),
            _ => $f::<$w, 1, 1>($($arg),*),
        }
    };
}

/// [`dispatch_tile`] for tiles of up to [`TT8`] tokens.
macro_rules! dispatch_tile8 {
    ($f:ident, $w:expr, $nr:expr, $nt:expr, $($arg:expr),*) => {
        match ($nr, $nt) {
            (4, 8) => $f::<$w, 4, 8>($($arg),*),
            (4, 7) => $f::<$w, 4, 7>($($arg),*),
            (4, 6) => $f::<$w, 4, 6>($($arg),*),
            (4, 5) => $f::<$w, 4, 5>($($arg),*),
            (3, 8) => $f::<$w, 3, 8>($($arg),*),
            (3, 7) => $f::<$w, 3, 7>($($arg),*),
            (3, 6) => $f::<$w, 3, 6>($($arg),*),
            (3, 5) => $f::<$w, 3, 5>($($arg),*),
            (2, 8) => $f::<$w, 2, 8>($($arg),*),
            (2, 7) => $f::<$w, 2, 7>($($arg),*),
            (2, 6) => $f::<$w, 2, 6>($($arg),*),
            (2, 5) => $f::<$w, 2, 5>($($arg),*),
            (1, 8) => $f::<$w, 1, 8>($($arg),*),
            (1, 7) => $f::<$w, 1, 7>($($arg),*),
            (1, 6) => $f::<$w, 1, 6>($($arg),*),
            (1, 5) => $f::<$w, 1, 5>($($arg),*),
            _ => dispatch_tile!($f, $w, $nr, $nt, $($arg),*),
        }
    };
}

/// Shared arguments of one micro-tile call.
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    /// First weight row of the tile.
    pub w: *const u8,
    /// Bytes per weight row.
    pub rb: usize,
    /// Blocks (32-blocks, super-blocks or elements for float types) per row.
    pub nb: usize,
    /// Floats per token in the activation side arrays (`ad`, `av`).
    pub side: usize,
    /// First token's activation values (bytes), `astride` bytes per token.
    pub aq: *const u8,
    pub astride: usize,
    /// First token's per-block activation scales, `side` floats per token.
    pub ad: *const f32,
    /// First token's entry of [`ActPack::d_by_block`] (block 0), `vb_stride` floats per block;
    /// null when none.
    pub adb: *const f32,
    /// First token's lane corrections (see [`ActPack::corr`]), `8 * nb` per token; interleaved
    /// packs: [`ActPack::corr_by_block`], `side` per token. Null when none.
    pub corr: *const i32,
    /// First token's entry of [`ActPack::v_by_block`] (block 0), `vb_stride` floats per block;
    /// interleaved packs: [`ActPack::v`], `side` floats per token. Null when none.
    pub vb: *const f32,
    /// Floats per block in `adb` and `vb` (the call's token count; `side` for interleaved packs).
    pub vb_stride: usize,
    /// First token's Q8_K block sums, `16 * nb` per token.
    pub bs: *const i16,
    /// Output of (row 0, token 0); `ostride` floats per token.
    pub out: *mut f32,
    pub ostride: usize,
}

/// Walks the (rows x tokens) output in cache blocks of `TB` tokens and micro-tiles of
/// `RT x TT`, calling `prep(r0, nr)` once per row tile and block before its tiles.
#[inline(always)]
pub(crate) fn drive(nrows: usize, n_tokens: usize, tile: impl FnMut(usize, usize, usize, usize), prep: impl FnMut(usize, usize)) {
    drive_with::<TT>(nrows, n_tokens, tile, prep)
}

/// [`drive`] with micro-tiles of `RT x T`: a kernel with room in its registers for more tokens
/// decodes each weight block once for all of them.
#[inline(always)]
pub(crate) fn drive_with<const T: usize>(nrows: usize, n_tokens: usize, tile: impl FnMut(usize, usize, usize, usize), prep: impl FnMut(usize, usize)) {
    drive_tiles::<RT, T>(nrows, n_tokens, tile, prep)
}

/// [`drive`] with micro-tiles of `R x T`.
#[inline(always)]
pub(crate) fn drive_tiles<const R: usize, const T: usize>(
    nrows: usize,
    n_tokens: usize,
    mut tile: impl FnMut(usize, usize, usize, usize),
    mut prep: impl FnMut(usize, usize),
) {
    let mut tb = 0;
    while tb < n_tokens {
        let te = (tb + TB).min(n_tokens);
        let mut r0 = 0;
        while r0 < nrows {
            let nr = R.min(nrows - r0);
            prep(r0, nr);
            let mut t0 = tb;
            while t0 < te {
                let nt = T.min(te - t0);
                tile(r0, nr, t0, nt);
                t0 += nt;
            }
            r0 += nr;
        }
        tb = te;
    }
}

