//! Run-time selection of the kernel set and the public compute entry points.

use crate::reference::{self, QK_K};
use crate::{scalar, GgmlType, QuantError};
use half::f16;
use std::ops::Range;

/// An instruction-set level with its own kernel set.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SimdLevel {
    /// Portable Rust; the reference the other levels are tested against.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C (`vpmaddubsw` integer dots).
    Avx2,
    /// x86-64 AVX-512 F/BW/VL/DQ + VNNI (`vpdpbusd`, `vpdpwssd`), plus AVX2/FMA/F16C.
    Avx512Vnni,
}

impl SimdLevel {
    /// Whether the running CPU supports this level.
    pub fn is_available(self) -> bool {
        match self {
            SimdLevel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512Vnni => {
                SimdLevel::Avx2.is_available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512dq")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// The order in which products with Q4_0, Q4_1 and Q8_0 weights sum their terms.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ProductOrder {
    /// llama.cpp's x86 order: each block's 32 products in eight lanes, an FMA per block,
    /// `hsum_float_8`. Every level computes llama.cpp's bits.
    #[default]
    Ggml,
    /// Eight blocks a 32-bit lane, the weights repacked once ([`Kernels::repack_weights`]): one
    /// multiply and one FMA per eight blocks instead of an FMA per block, so batched products do
    /// about a third fewer floating-point operations. The same terms in another order: results
    /// differ from llama.cpp's in the last bits (still the same for every batch and thread
    /// count). AVX-512 VNNI only; other levels, and other weight types, keep ggml's order.
    Interleaved,
}

/// The kernel set for one [`SimdLevel`], chosen once. `Copy`; cheap to pass to worker threads.
///
/// Holding a `Kernels` of a SIMD level is the proof that the CPU supports it: the only
/// constructors check it at run time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Kernels {
    level: SimdLevel,
    order: ProductOrder,
    /// AVX-512 VNNI, ggml's order: 32-block products of more than four tokens two weight rows
    /// to a 512-bit register (see [`Kernels::with_wide_tiles`]).
    wide_tiles: bool,
}

/// Activations repacked once for many products ([`Kernels::pack_activations`]).
pub struct PackedActivations {
    weight: GgmlType,
    kernels: Kernels,
    k: usize,
    n_tokens: usize,
    /// None where the kernels read the activations as given (scalar level, float weights).
    pack: Option<crate::pack::ActPack>,
    q8_0_offset: i32,
}

impl PackedActivations {
    /// Whether this pack was made for weights of type `weight` and width `k`, `n_tokens` tokens,
    /// by `kernels` (level and product order).
    fn made_for(&self, weight: GgmlType, kernels: Kernels, k: usize, n_tokens: usize) -> bool {
        self.weight == weight && self.kernels == kernels && self.k == k && self.n_tokens == n_tokens
    }

    /// A handle that repacks tokens into this pack, from one thread or several: see
    /// [`ActivationPacker::pack_token`].
    pub fn packer(&mut self) -> ActivationPacker<'_> {
        let (weight, k, n_tokens, offset) = (self.weight, self.k, self.n_tokens, self.q8_0_offset);
        let ptrs = self.pack.as_mut().map(|p| p.ptrs(weight, k, n_tokens, offset));
        ActivationPacker { ptrs, row_bytes: activation_row_bytes(weight, k), n_tokens, _pack: std::marker::PhantomData }
    }
}

/// Fills a [`PackedActivations`] made by [`Kernels::packed_activations`] token by token; may be
/// shared between threads that pack different tokens.
pub struct ActivationPacker<'a> {
    ptrs: Option<crate::pack::ActPackPtrs>,
    row_bytes: usize,
    n_tokens: usize,
    _pack: std::marker::PhantomData<&'a mut PackedActivations>,
}

impl ActivationPacker<'_> {
    /// Repacks token `t`'s quantized activation row, as [`Kernels::quantize_activations`] wrote
    /// it for the pack's weight type.
    ///
    /// # Errors
    /// `t` beyond the pack's tokens, or a row of the wrong length.
    ///
    /// # Safety
    /// No other thread may pack token `t` during the call (different tokens are fine).
    pub unsafe fn pack_token(&self, t: usize, row: &[u8]) -> Result<(), QuantError> {
        if t >= self.n_tokens {
            return Err(QuantError::Length { what: "token index (tokens in the pack)", expected: self.n_tokens, got: t });
        }
        if row.len() != self.row_bytes {
            return Err(QuantError::Length { what: "activation row bytes", expected: self.row_bytes, got: row.len() });
        }
        if let Some(p) = &self.ptrs {
            // SAFETY: t and the row length were checked; the packer borrows the pack mutably, so
            // nothing else touches it; the caller gives token t to this thread alone.
            unsafe { p.fill_token(t, row) };
        }
        Ok(())
    }
}

/// A supported weight type and a `k` that is a whole number of its blocks.
fn check_product(weight: GgmlType, k: usize) -> Result<(), QuantError> {
    if !matmul_supported(weight) {
        return Err(QuantError::Unsupported { ty: weight, op: "matmul" });
    }
    let block = match weight {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => QK_K,
        t => t.block_elems(),
    };
    if k == 0 || !k.is_multiple_of(block) {
        return Err(QuantError::NotBlockMultiple { ty: weight, elems: k, block });
    }
    Ok(())
}

/// Weight types [`Kernels::matmul`] computes with.
fn matmul_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q4_K | Q5_K | Q6_K)
}

/// Whether this CPU runs 512-bit integer dot products and FMAs at twice the work of 256-bit ones
/// a cycle, which makes [`Kernels::with_wide_tiles`]'s form pay. Zen 4 (AMD family 19h) splits
/// each 512-bit operation in two: there the 256-bit tiles were measured faster (the wide form's
/// extra multiply shares the pipes). Zen 5 (1Ah) and Intel's AVX-512 server cores run them
/// whole (on the 2-core Zen 5 here: 490 against 246 GMAC/s of `vpdpbusd`). The environment
/// variable `STRATA_CPU_WIDE_TILES=0` or `=1` decides instead (for measuring both).
pub fn wide_tiles_pay() -> bool {
    static PAYS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PAYS.get_or_init(|| match std::env::var("STRATA_CPU_WIDE_TILES").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => !double_pumps_512_bit_ops(),
    })
}

/// AMD's families up to 19h (Zen 4) execute 512-bit operations as two 256-bit halves.
#[cfg(target_arch = "x86_64")]
fn double_pumps_512_bit_ops() -> bool {
    let (vendor, signature) = (std::arch::x86_64::__cpuid(0), std::arch::x86_64::__cpuid(1).eax);
    let amd = [vendor.ebx, vendor.edx, vendor.ecx] == [u32::from_le_bytes(*b"Auth"), u32::from_le_bytes(*b"enti"), u32::from_le_bytes(*b"cAMD")];
    let base_family = (signature >> 8) & 0xf;
    let family = if base_family == 0xf { base_family + ((signature >> 20) & 0xff) } else { base_family };
    amd && family <= 0x19
}

#[cfg(not(target_arch = "x86_64"))]
fn double_pumps_512_bit_ops() -> bool {
    true
}

/// Weights from which [`Kernels::repack_weights`] uses every core.
const REPACK_THREADED_MIN_BYTES: usize = 16 << 20;

/// Bytes of one activation row of `k` elements quantized for weights of type `weight`
/// (see [`Kernels::activation_type`]); 0 when `k` is not a whole number of blocks.
pub fn activation_row_bytes(weight: GgmlType, k: usize) -> usize {
    let at = Kernels::activation_type(weight);
    at.row_bytes(k as u64).unwrap_or(0) as usize
}

impl Kernels {
    /// The fastest level this CPU supports.
    pub fn best() -> Kernels {
        for level in [SimdLevel::Avx512Vnni, SimdLevel::Avx2] {
            if let Some(k) = Kernels::with_level(level) {
                return k;
            }
        }
        Kernels { level: SimdLevel::Scalar, order: ProductOrder::Ggml, wide_tiles: false }
    }

    /// The kernels of `level` in ggml's product order, or `None` when this CPU lacks it.
    pub fn with_level(level: SimdLevel) -> Option<Kernels> {
        level.is_available().then_some(Kernels { level, order: ProductOrder::Ggml, wide_tiles: level == SimdLevel::Avx512Vnni && wide_tiles_pay() })
    }

    /// These kernels with ggml-order 32-block products of more than four tokens (batched decode,
    /// prefill) computed two weight rows to a 512-bit register (`true`) or one row to a 256-bit
    /// one (`false`). The results are the same bits either way: each (row, token) runs the same
    /// operations in its own eight lanes. Only the AVX-512 VNNI level has the wide form. The
    /// default is [`wide_tiles_pay`]'s answer for this CPU.
    pub fn with_wide_tiles(self, wide: bool) -> Kernels {
        Kernels { wide_tiles: wide && self.level == SimdLevel::Avx512Vnni, ..self }
    }

    /// Whether batched 32-block products use 512-bit registers (see [`Kernels::with_wide_tiles`]).
    pub fn wide_tiles(&self) -> bool {
        self.wide_tiles
    }

    /// These kernels summing products in `order` (which only the AVX-512 VNNI level has other
    /// than ggml's; see [`ProductOrder`]).
    pub fn with_order(self, order: ProductOrder) -> Kernels {
        Kernels { order, ..self }
    }

    /// The level these kernels run at.
    pub fn level(&self) -> SimdLevel {
        self.level
    }

    /// The product order asked for (see [`Kernels::interleaves`] for where it applies).
    pub fn order(&self) -> ProductOrder {
        self.order
    }

    /// Whether products with `weight` run in the interleaved order, on weights repacked by
    /// [`Kernels::repack_weights`].
    pub fn interleaves(&self, weight: GgmlType) -> bool {
        self.order == ProductOrder::Interleaved && self.level == SimdLevel::Avx512Vnni && crate::interleave::interleavable(weight)
    }

    /// The weights as these kernels' products read them: `Some` repacked copy of `weights`
    /// (`rows` rows of `k` elements; the same length) where [`Kernels::interleaves`] `weight`,
    /// `None` where they read GGUF's layout. Products then take the copy in place of the GGUF
    /// bytes; anything else (an embedding lookup) keeps reading the GGUF bytes.
    ///
    /// # Errors
    /// `k` not a whole number of blocks, or `weights` not `rows` rows long.
    pub fn repack_weights(&self, weight: GgmlType, k: usize, rows: usize, weights: &[u8]) -> Result<Option<Vec<u8>>, QuantError> {
        if !self.interleaves(weight) {
            return Ok(None);
        }
        check_product(weight, k)?;
        let rb = weight.row_bytes(k as u64).unwrap_or(0) as usize;
        let expected = rows.saturating_mul(rb);
        if weights.len() != expected {
            return Err(QuantError::Length { what: "weight bytes", expected, got: weights.len() });
        }
        let mut out = vec![0u8; weights.len()];
        let repack = |src: &[u8], dst: &mut [u8]| {
            for (s, d) in src.chunks_exact(rb).zip(dst.chunks_exact_mut(rb)) {
                crate::interleave::repack_row(weight, k, s, d);
            }
        };
        // ~0.7 GB/s a thread: a large model's weights are spread over the cores at load.
        let threads = if weights.len() < REPACK_THREADED_MIN_BYTES { 1 } else { std::thread::available_parallelism().map_or(1, |n| n.get()) };
        if threads == 1 {
            repack(weights, &mut out);
            return Ok(Some(out));
        }
        let rows_each = rows.div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            for (src, dst) in weights.chunks(rows_each * rb).zip(out.chunks_mut(rows_each * rb)) {
                scope.spawn(move || repack(src, dst));
            }
        });
        Ok(Some(out))
    }

    /// The type activations are quantized to before a [`Kernels::matmul`] with `weight`:
    /// Q4_0/Q8_0 → Q8_0, Q4_1 → Q8_1, K-quants → Q8_K, float types → F32.
    pub fn activation_type(weight: GgmlType) -> GgmlType {
        use GgmlType::*;
        match weight {
            Q4_0 | Q8_0 | Q5_0 => Q8_0,
            Q4_1 | Q5_1 => Q8_1,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K => Q8_K,
            _ => F32,
        }
    }

    /// Quantizes activation rows `src` (a whole number of blocks; normally one row of `k`)
    /// into `dst`, which must be exactly `activation_row_bytes(weight, src.len())` bytes.
    ///
    /// Every level produces the same bytes: ggml's x86 quantizers for Q8_0/Q8_1 (see
    /// `reference::quantize_activations_q8`), its reference quantizer for Q8_K.
    pub fn quantize_activations(&self, weight: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
        if !matmul_supported(weight) {
            return Err(QuantError::Unsupported { ty: weight, op: "quantize_activations" });
        }
        let at = Kernels::activation_type(weight);
        let block = if at == GgmlType::F32 { weight.block_elems() } else { at.block_elems() };
        if !src.len().is_multiple_of(block) {
            return Err(QuantError::NotBlockMultiple { ty: weight, elems: src.len(), block });
        }
        let expected = activation_row_bytes(weight, src.len());
        if dst.len() != expected {
            return Err(QuantError::Length { what: "activation bytes", expected, got: dst.len() });
        }
        match (self.level, at) {
            (_, GgmlType::F32) => reference::quantize(at, src, dst),
            #[cfg(target_arch = "x86_64")]
            (SimdLevel::Avx2 | SimdLevel::Avx512Vnni, _) => {
                // SAFETY: a Kernels of these levels exists only after AVX2 was detected
                // (`with_level`); lengths were checked above.
                unsafe { crate::avx2::quantize_act(at, src, dst) };
                Ok(())
            }
            (_, GgmlType::Q8_0 | GgmlType::Q8_1) => {
                reference::quantize_activations_q8(at, src, dst);
                Ok(())
            }
            _ => reference::quantize(at, src, dst),
        }
    }

    /// Multiplies weight rows `rows` by `n_tokens` activation rows:
    /// `out[t * rows.len() + (r - rows.start)] = dot(weight row r, activation row t)`.
    ///
    /// `weights` holds all rows, row-major, each `k` elements of `weight`, in the layout these
    /// kernels read: where [`Kernels::interleaves`] `weight`, as [`Kernels::repack_weights`]
    /// returned them (GGUF's bytes would give wrong results, not an error: both have the same
    /// length); `acts` holds exactly `n_tokens` rows produced by
    /// [`Kernels::quantize_activations`] for `weight`; `out` is exactly `n_tokens * rows.len()`
    /// floats. Single-threaded: callers split `rows`.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        weight: GgmlType,
        weights: &[u8],
        k: usize,
        rows: Range<usize>,
        acts: &[u8],
        n_tokens: usize,
        out: &mut [f32],
    ) -> Result<(), QuantError> {
        Self::check_out(out.len(), n_tokens, rows.len())?;
        // SAFETY: `out` is an exclusive slice of exactly n_tokens x rows.len() floats.
        unsafe { self.matmul_impl(weight, weights, k, rows.clone(), acts, n_tokens, None, out.as_mut_ptr(), rows.len()) }
    }

    fn check_out(len: usize, n_tokens: usize, n_rows: usize) -> Result<(), QuantError> {
        if len != n_tokens * n_rows {
            return Err(QuantError::Length { what: "output floats", expected: n_tokens * n_rows, got: len });
        }
        Ok(())
    }

    /// Repacks `n_tokens` activation rows (as [`Kernels::matmul`] takes them) once, for any
    /// number of [`Kernels::matmul_packed`] calls on weights of type `weight`: a product split
    /// into many row blocks then repacks nothing per block.
    ///
    /// # Errors
    /// As [`Kernels::matmul`], for the activation arguments.
    pub fn pack_activations(&self, weight: GgmlType, acts: &[u8], k: usize, n_tokens: usize) -> Result<PackedActivations, QuantError> {
        if !matmul_supported(weight) {
            return Err(QuantError::Unsupported { ty: weight, op: "matmul" });
        }
        let arb = activation_row_bytes(weight, k);
        if arb == 0 || acts.len() != n_tokens * arb {
            return Err(QuantError::Length { what: "activation bytes", expected: n_tokens * arb, got: acts.len() });
        }
        let mut packed = self.packed_activations(weight, k, n_tokens)?;
        let packer = packed.packer();
        for (t, row) in acts.chunks_exact(arb).enumerate() {
            // SAFETY: one thread packs every token.
            unsafe { packer.pack_token(t, row) }?;
        }
        Ok(packed)
    }

    /// An empty repack of `n_tokens` activation rows for weights of type `weight`, to be filled
    /// token by token through [`PackedActivations::packer`] (from several threads if wanted, e.g.
    /// each right after quantizing its tokens) before it is used; once every token is packed it
    /// equals [`Kernels::pack_activations`]'s.
    ///
    /// # Errors
    /// An unsupported weight type, or `k` not a whole number of its blocks.
    pub fn packed_activations(&self, weight: GgmlType, k: usize, n_tokens: usize) -> Result<PackedActivations, QuantError> {
        check_product(weight, k)?;
        let offset = self.q8_0_offset();
        let quantized = !matches!(weight, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        let interleaved = self.interleaves(weight);
        let pack = offset.filter(|_| quantized).map(|off| crate::pack::ActPack::zeroed(weight, k, n_tokens, off, interleaved));
        Ok(PackedActivations { weight, kernels: *self, k, n_tokens, pack, q8_0_offset: offset.unwrap_or(0) })
    }

    /// [`Kernels::packed_activations`], taking a pack made earlier for the same arguments out of
    /// `spare` when there is one instead of allocating (and zeroing) a new one: packing a token
    /// rewrites every entry of that token, and the padding past the last block stays zero, so a
    /// spare pack, once every token is packed again, equals a new one.
    ///
    /// # Errors
    /// As [`Kernels::packed_activations`].
    pub fn reuse_packed_activations(&self, spare: &mut Vec<PackedActivations>, weight: GgmlType, k: usize, n_tokens: usize) -> Result<PackedActivations, QuantError> {
        match spare.iter().position(|p| p.made_for(weight, *self, k, n_tokens)) {
            Some(i) => Ok(spare.swap_remove(i)),
            None => self.packed_activations(weight, k, n_tokens),
        }
    }

    /// What this level adds to Q8_0 weight bytes (see `ActPack::new`); None where the kernels
    /// read activations unpacked.
    fn q8_0_offset(&self) -> Option<i32> {
        match self.level {
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512Vnni => Some(crate::avx512::Q8_0_OFFSET),
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx2 => Some(crate::avx2::Q8_0_OFFSET),
            _ => None,
        }
    }

    /// [`Kernels::matmul`] with the activations repacked beforehand by
    /// [`Kernels::pack_activations`] (same `weight`, `k`, `n_tokens` and kernel level).
    ///
    /// # Errors
    /// As [`Kernels::matmul`]; a `packed` made for other arguments is a length error.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_packed(
        &self,
        weight: GgmlType,
        weights: &[u8],
        k: usize,
        rows: Range<usize>,
        acts: &[u8],
        n_tokens: usize,
        packed: &PackedActivations,
        out: &mut [f32],
    ) -> Result<(), QuantError> {
        Self::check_out(out.len(), n_tokens, rows.len())?;
        // SAFETY: `out` is an exclusive slice of exactly n_tokens x rows.len() floats.
        unsafe { self.matmul_packed_into(weight, weights, k, rows.clone(), acts, n_tokens, packed, out.as_mut_ptr(), rows.len()) }
    }

    /// [`Kernels::matmul_packed`] writing row `r`'s result for token `t` at
    /// `out[t * out_stride + r]` (`r` counted from `rows.start`): straight into a wider output
    /// whose other columns other threads compute meanwhile, with no copy.
    ///
    /// # Errors
    /// As [`Kernels::matmul_packed`]; an `out_stride` below `rows.len()` is a length error.
    ///
    /// # Safety
    /// `out` must be valid for writes of `out[t * out_stride + r]` for every `t < n_tokens` and
    /// `r < rows.len()`, and nothing else may read or write those elements during the call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn matmul_packed_into(
        &self,
        weight: GgmlType,
        weights: &[u8],
        k: usize,
        rows: Range<usize>,
        acts: &[u8],
        n_tokens: usize,
        packed: &PackedActivations,
        out: *mut f32,
        out_stride: usize,
    ) -> Result<(), QuantError> {
        if !packed.made_for(weight, *self, k, n_tokens) {
            return Err(QuantError::Length { what: "packed activations (made for another product)", expected: n_tokens * k, got: packed.n_tokens * packed.k });
        }
        if out_stride < rows.len() {
            return Err(QuantError::Length { what: "output stride", expected: rows.len(), got: out_stride });
        }
        // SAFETY: the caller's contract covers `out`.
        unsafe { self.matmul_impl(weight, weights, k, rows, acts, n_tokens, packed.pack.as_ref(), out, out_stride) }
    }

    /// # Safety
    /// `out` must be valid for writes of `out[t * out_stride + r]` for `t < n_tokens`,
    /// `r < rows.len()`, which no one else accesses during the call; `out_stride >= rows.len()`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn matmul_impl(
        &self,
        weight: GgmlType,
        weights: &[u8],
        k: usize,
        rows: Range<usize>,
        acts: &[u8],
        n_tokens: usize,
        packed: Option<&crate::pack::ActPack>,
        out: *mut f32,
        out_stride: usize,
    ) -> Result<(), QuantError> {
        check_product(weight, k)?;
        let rb = weight.row_bytes(k as u64).unwrap_or(u64::MAX) as usize;
        if rows.start > rows.end || rows.end.checked_mul(rb).is_none_or(|n| n > weights.len()) {
            return Err(QuantError::RowsOutOfRange {
                start: rows.start,
                end: rows.end,
                available: weights.len() / rb,
            });
        }
        let arb = activation_row_bytes(weight, k);
        if acts.len() != n_tokens * arb {
            return Err(QuantError::Length { what: "activation bytes", expected: n_tokens * arb, got: acts.len() });
        }
        if rows.is_empty() || n_tokens == 0 {
            return Ok(());
        }
        match self.level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: this level exists only once its features were detected (`with_level`);
            // all lengths were validated above; `out` is the caller's contract.
            SimdLevel::Avx512Vnni => unsafe { crate::avx512::matmul(weight, weights, k, rows, acts, n_tokens, packed, self.interleaves(weight), self.wide_tiles, out, out_stride) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above, for AVX2/FMA/F16C.
            SimdLevel::Avx2 => unsafe { crate::avx2::matmul(weight, weights, k, rows, acts, n_tokens, packed, out, out_stride) },
            _ => {
                for t in 0..n_tokens {
                    let a = &acts[t * arb..(t + 1) * arb];
                    for (i, r) in rows.clone().enumerate() {
                        // SAFETY: t < n_tokens and i < rows.len(): the caller's contract.
                        unsafe { *out.add(t * out_stride + i) = scalar::dot_row(weight, &weights[r * rb..(r + 1) * rb], a, k) };
                    }
                }
            }
        }
        Ok(())
    }

    /// `sum a[i] * b[i]`. Panics when the lengths differ.
    pub fn dot_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len(), "dot_f32 length mismatch");
        match self.level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX-512F was detected when this Kernels was made; lengths are equal.
            SimdLevel::Avx512Vnni => unsafe { crate::avx512::dot_f32(a, b) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX2/FMA were detected when this Kernels was made; lengths are equal.
            SimdLevel::Avx2 => unsafe { crate::avx2::dot_f32(a, b) },
            _ => scalar::dot_f32(a, b),
        }
    }

    /// Whether the ggml-exact float ops below run on AVX-512 here (else portable, same bits).
    fn exact_simd(&self) -> bool {
        self.level == SimdLevel::Avx512Vnni
    }

    /// `out = silu(gate) * up` in ggml's arithmetic ([`crate::ggml_float`]). Panics when the
    /// lengths differ.
    pub fn swiglu(&self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        assert!(gate.len() == out.len() && up.len() == out.len(), "swiglu length mismatch");
        #[cfg(target_arch = "x86_64")]
        if self.exact_simd() {
            // SAFETY: an Avx512Vnni Kernels exists only after AVX-512 was detected; lengths checked.
            unsafe { crate::avx512::swiglu(gate, up, out) };
            return;
        }
        let whole = out.len() - out.len() % 16;
        for i in 0..out.len() {
            let g = gate[i];
            let silu = if i < whole { crate::ggml_float::v_silu(g) } else { g / (1.0 + (-g).exp()) };
            out[i] = silu * up[i];
        }
    }

    /// Attention scores of `qs.len() / hd` query heads (back to back, already rounded to f16)
    /// against `n_rows` f16 rows (row `r` at `rows[r * stride..]`, `hd` elements):
    /// `out[h * out_stride + r] = q_h . row_r` in `order` ([`crate::ggml_float::dot`]). Panics
    /// on short slices.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_dots_f16(&self, rows: &[f16], stride: usize, n_rows: usize, qs: &[f32], hd: usize, order: crate::AttnOrder, out: &mut [f32], out_stride: usize) {
        assert!(n_rows == 0 || rows.len() >= (n_rows - 1) * stride + hd, "attn_dots_f16: rows too short");
        self.attn_dots_with(n_rows, |r| &rows[r * stride..r * stride + hd], qs, hd, 1, order, out, out_stride);
    }

    /// [`Kernels::attn_dots_f16`] against rows given one slice each, as a paged KV cache holds
    /// them, for the query heads of `kv_heads` KV heads: row `r` holds the KV heads' columns
    /// back to back (`kv_heads * hd` elements or more), and the `qs.len() / hd` query heads (a
    /// multiple of `kv_heads`) are split evenly among them in order (grouped-query attention).
    /// Panics on short slices or heads that do not split evenly.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_dots_f16_rows(&self, rows: &[&[f16]], qs: &[f32], hd: usize, kv_heads: usize, order: crate::AttnOrder, out: &mut [f32], out_stride: usize) {
        assert!(rows.iter().all(|r| r.len() >= kv_heads * hd), "attn_dots_f16_rows: a row is too short");
        self.attn_dots_with(rows.len(), |r| rows[r], qs, hd, kv_heads, order, out, out_stride);
    }

    /// The attention scores with row `r` at `row(r)` (at least `kv_heads * hd` elements).
    #[allow(clippy::too_many_arguments)]
    fn attn_dots_with<'a>(&self, n_rows: usize, row: impl Fn(usize) -> &'a [f16], qs: &[f32], hd: usize, kv_heads: usize, order: crate::AttnOrder, out: &mut [f32], out_stride: usize) {
        let heads = qs.len() / hd;
        let group = query_group(heads, kv_heads, "attn_dots_f16");
        assert!(heads == 0 || (out_stride >= n_rows && out.len() >= (heads - 1) * out_stride + n_rows), "attn_dots_f16: out too short");
        #[cfg(target_arch = "x86_64")]
        if self.exact_simd() && hd.is_multiple_of(64) {
            // SAFETY: AVX-512 detected (see `exact_simd`); `hd` a multiple of 64; `heads / group`
            // KV heads; every row holds their `kv_heads * hd` elements (its slice is at least that
            // long), which is also what is prefetched; `out` checked above.
            unsafe { crate::avx512::attn_dots_f16(&|r| row(r).as_ptr(), n_rows, qs, hd, group, 2 * kv_heads * hd, order, out, out_stride) };
            return;
        }
        let mut buf = vec![0f32; hd];
        for r in 0..n_rows {
            for h in 0..heads {
                // Each KV head's columns converted once for its query heads.
                if h % group == 0 {
                    let cols = h / group * hd;
                    for (d, s) in buf.iter_mut().zip(&row(r)[cols..cols + hd]) {
                        *d = s.to_f32();
                    }
                }
                out[h * out_stride + r] = crate::ggml_float::dot(&buf, &qs[h * hd..(h + 1) * hd], order);
            }
        }
    }

    /// [`crate::ggml_float::softmax_f16`]: scaled softmax of one row, weights rounded to f16.
    pub fn softmax_f16(&self, scores: &mut [f32], scale: f32) {
        #[cfg(target_arch = "x86_64")]
        if self.exact_simd() {
            // SAFETY: AVX-512 (and F16C, part of the AVX2 level it implies) detected.
            unsafe { crate::avx512::softmax_f16(scores, scale) };
            return;
        }
        crate::ggml_float::softmax_f16(scores, scale);
    }

    /// [`crate::ggml_float::accumulate_values`] for several heads sharing f16 value rows: head
    /// `h` adds `weights[h * w_stride + i]` times row `i` (at `rows[i * stride..]`, position
    /// `first + i`) to its accumulators `acc[h * lanes * hd..]`. Panics on short slices.
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate_values_f16(&self, acc: &mut [f32], hd: usize, order: crate::AttnOrder, first: usize, weights: &[f32], w_stride: usize, n_rows: usize, rows: &[f16], stride: usize) {
        assert!(n_rows == 0 || rows.len() >= (n_rows - 1) * stride + hd, "accumulate_values_f16: rows too short");
        self.values_with::<true>(acc, hd, 1, order, first, weights, w_stride, n_rows, |i| &rows[i * stride..i * stride + hd]);
    }

    /// The value accumulators of positions `0..rows.len()`, as a paged KV cache holds them (row
    /// `j` one slice holding `kv_heads` KV heads' columns back to back, `kv_heads * hd` elements
    /// or more; the query heads split evenly among the KV heads in order, as in
    /// [`Kernels::attn_dots_f16_rows`]): sets `acc` to what [`Kernels::accumulate_values_f16`]
    /// adds to zeroed accumulators, so `acc` need not be cleared first.
    #[allow(clippy::too_many_arguments)]
    pub fn values_f16_rows(&self, acc: &mut [f32], hd: usize, kv_heads: usize, order: crate::AttnOrder, weights: &[f32], w_stride: usize, rows: &[&[f16]]) {
        assert!(rows.iter().all(|r| r.len() >= kv_heads * hd), "values_f16_rows: a row is too short");
        self.values_with::<false>(acc, hd, kv_heads, order, 0, weights, w_stride, rows.len(), |i| rows[i]);
    }

    /// The value sums with row `i` at `row(i)` (at least `kv_heads * hd` elements), added to
    /// `acc` with `LOAD`, else written over it.
    #[allow(clippy::too_many_arguments)]
    fn values_with<'a, const LOAD: bool>(&self, acc: &mut [f32], hd: usize, kv_heads: usize, order: crate::AttnOrder, first: usize, weights: &[f32], w_stride: usize, n_rows: usize, row: impl Fn(usize) -> &'a [f16]) {
        let per_head = order.value_lanes() * hd;
        let heads = acc.len() / per_head;
        assert!(heads == 0 || (w_stride >= n_rows && weights.len() >= (heads - 1) * w_stride + n_rows), "accumulate_values_f16: weights too short");
        let group = query_group(heads, kv_heads, "accumulate_values_f16");
        #[cfg(target_arch = "x86_64")]
        if self.exact_simd() && hd.is_multiple_of(16) {
            // SAFETY: AVX-512 detected; `hd` a multiple of 16; `heads / group` KV heads; every row
            // holds their `kv_heads * hd` elements (its slice is at least that long), which is also
            // what is prefetched; `acc` and `weights` checked above.
            unsafe { crate::avx512::accumulate_values_f16::<LOAD>(acc, hd, group, 2 * kv_heads * hd, order, first, weights, w_stride, n_rows, &|i| row(i).as_ptr()) };
            return;
        }
        if !LOAD {
            acc[..heads * per_head].fill(0.0);
        }
        let mut buf = vec![0f32; hd];
        for i in 0..n_rows {
            for h in 0..heads {
                if h % group == 0 {
                    let cols = h / group * hd;
                    for (d, s) in buf.iter_mut().zip(&row(i)[cols..cols + hd]) {
                        *d = s.to_f32();
                    }
                }
                let w = weights[h * w_stride + i];
                crate::ggml_float::accumulate_values(&mut acc[h * per_head..(h + 1) * per_head], hd, order, first + i, &[w], &buf);
            }
        }
    }

    /// [`crate::ggml_float::finish_values`]. Panics on short slices.
    pub fn finish_values(&self, acc: &[f32], hd: usize, order: crate::AttnOrder, out: &mut [f32]) {
        assert!(acc.len() >= order.value_lanes() * hd && out.len() >= hd, "finish_values: slices too short");
        #[cfg(target_arch = "x86_64")]
        if self.exact_simd() && hd.is_multiple_of(16) {
            // SAFETY: AVX-512 detected; `hd` a multiple of 16; lengths checked.
            unsafe { crate::avx512::finish_values(acc, hd, order, out) };
            return;
        }
        crate::ggml_float::finish_values(acc, hd, order, out);
    }
}

/// Query heads per KV head when `heads` query heads split evenly among `kv_heads` KV heads (1
/// when there are none). Panics, naming `op`, when they do not split.
fn query_group(heads: usize, kv_heads: usize, op: &str) -> usize {
    assert!(kv_heads >= 1 && heads.is_multiple_of(kv_heads), "{op}: {heads} query heads do not split among {kv_heads} KV heads");
    (heads / kv_heads).max(1)
}
