//! The typed kernel index: every compute shader the build compiles (`build.rs`), its pipeline
//! (created on first use), and how a dispatch is recorded (push constants carry the device
//! addresses of the buffers, so no descriptor set is bound anywhere).

use std::collections::HashMap;
use std::sync::Arc;

use ash::vk;

use super::context::VulkanContext;
use super::vk_error;
use crate::DeviceError;

/// How a weight's bytes are read by the shaders (one compiled variant of each weight-reading
/// kernel per format).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    Q4_K,
    Q6_K,
}

/// Workgroups of an integer quantizer (quantize_act.comp INT_OUT builds: QuantizeActInt,
/// SwiGluInt, AttentionCombineInt) over `rows` rows of `cols` activations: one per 256 elements
/// of a row (its INT_CHUNK).
pub(crate) fn int_quantize_groups(rows: usize, cols: usize) -> [u32; 3] {
    [(rows * cols.div_ceil(256)) as u32, 1, 1]
}

/// Workgroups of embed.comp for `n_tokens` rows of `cols` columns: a token's units of 32 columns
/// spread over workgroups of 64 invocations (a decode step's one row then loads in one round).
pub(crate) fn embed_groups(n_tokens: usize, cols: usize) -> [u32; 3] {
    [n_tokens as u32, (cols.div_ceil(32 * 64) as u32).clamp(1, 65_535), 1]
}

/// Every kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Matrix-vector product for one token (decode of one sequence).
    MatVec1(WeightFormat),
    /// Matrix-vector product for up to a few tokens (batched decode).
    MatVec(WeightFormat),
    /// Matrix-vector product of 8-bit activation quants by integer dot products, one token, with
    /// this many rows per lane group (1, 2, 4 or 8; other than 2 with
    /// [`ProductLayout::Lanes128`] only). Quantized weight formats only.
    MatVecInt1(WeightFormat, u8, ProductLayout),
    /// MatVecInt1 with 128 lanes a row (2 or 4 rows a workgroup) that loads two of a lane's
    /// items at once: the same bits.
    MatVecInt1Unrolled(WeightFormat, u8),
    /// The same for up to four tokens per pass (batched decode).
    MatVecInt(WeightFormat, ProductLayout),
    /// MatVecInt1 for one of a layer's Q, K and V projections with RoPE and the K/V store in its
    /// epilogue (a lane group per rotation pair; one decoding token).
    MatVecIntRope(WeightFormat, ProductLayout),
    /// MatVecInt1 for a layer's gate and up projections (row i of each in a lane group) with
    /// SwiGLU and the quantization for the down projection in its epilogue (one decoding token;
    /// the quantization by the last workgroup of each chunk of 256 outputs: opt-in, slower).
    MatVecIntSwiGlu(WeightFormat, ActRounding, ProductLayout),
    /// MatVecIntSwiGlu that writes the f32 SwiGLU row only (no tickets; the quantization runs
    /// as a dispatch of its own): the default decode path. The last field: output rows a lane
    /// group (1 or 2), each activation item read once for all of them.
    MatVecIntSwiGluF32(WeightFormat, ProductLayout, u8),
    /// MatVecIntRope with the RMSNorm before it in its workgroups (each normalizes and quantizes
    /// the residual row into shared memory), a few resident workgroups taking every unit in turn.
    MatVecIntRopeNorm(WeightFormat, ProductLayout),
    /// MatVecIntSwiGluF32 with the RMSNorm before it likewise.
    MatVecIntSwiGluF32Norm(WeightFormat, ProductLayout, u8),
    /// A residual-adding one-token product ([`Kernel::MatVecInt1`] with 2 or 4 rows, or
    /// [`Kernel::MatVecInt1Unrolled`] when the flag is set) that also does the RMSNorm after the
    /// add: the last workgroup of each chunk of 256 rows quantizes the chunk's `x * weight` for
    /// the next product and leaves its sum of squares (matvec_q.comp NORM_EPILOGUE); the next
    /// product is a `...Scaled` kernel. Its records are rounded as this format's products read
    /// them.
    MatVecInt1NormOut(WeightFormat, u8, ProductLayout, bool),
    /// A residual-adding one-token product (the builds [`Kernel::MatVecInt1NormOut`] has) that
    /// also writes each output with the step's tag (matvec_q.comp TAGGED_OUT), for the
    /// [`Kernel::RmsNormIntTagged`] recorded after it without a pipeline barrier
    /// (`STRATA_VULKAN_TAGGED_NORM=1`).
    MatVecInt1TaggedOut(WeightFormat, u8, ProductLayout, bool),
    /// [`Kernel::MatVecIntSwiGluF32`] (128 or 64 lanes a row) that also writes the SwiGLU row
    /// tagged with the step, for the [`Kernel::QuantizeActIntTagged`] recorded after it without
    /// a pipeline barrier (`STRATA_VULKAN_TAGGED_QUANT=1`).
    MatVecIntSwiGluF32TaggedOut(WeightFormat, ProductLayout, u8),
    /// MatVecIntRope that also writes its outputs as (bits, tag) pairs, for the
    /// [`Kernel::AttentionDecodeTaggedIn`] split kernels recorded right after QKV without a
    /// pipeline barrier (`STRATA_VULKAN_TAGGED_ATTENTION`).
    MatVecIntRopeTaggedOut(WeightFormat, ProductLayout),
    /// MatVecIntRope whose input records hold `x * weight` of an RMSNorm done by a
    /// [`Kernel::MatVecInt1NormOut`]: it multiplies its outputs by the norm's scale.
    MatVecIntRopeScaled(WeightFormat, ProductLayout),
    /// MatVecIntSwiGluF32 likewise.
    MatVecIntSwiGluF32Scaled(WeightFormat, ProductLayout, u8),
    /// [`Kernel::MatVecInt`] (a batched step's product) whose input records hold `x * weight`
    /// of an RMSNorm done by a [`Kernel::NormQuantize`]: it multiplies each token's outputs by
    /// that token's scale where the fused one-token products do, so a token gets the bits it
    /// gets alone.
    MatVecIntScaled(WeightFormat, ProductLayout),
    /// [`Kernel::MatVecIntSwiGluF32Scaled`] that also writes the SwiGLU row tagged with the
    /// step, as [`Kernel::MatVecIntSwiGluF32TaggedOut`] does: after a
    /// [`Kernel::NormQuantizeTagged`], before the tagged quantization.
    MatVecIntSwiGluF32ScaledTaggedOut(WeightFormat, ProductLayout, u8),
    /// The integer kernel that computes the CPU device's bits (Q4_0, Q4_1, Q8_0, Q4_K): `nt`
    /// tokens per pass (1 or 4), each lane loading `unroll` blocks ahead (1, 2, 4 or 8; 1 or 2
    /// with 4 tokens); Q4_K in the lane order of `k_order`.
    MatVecExact { format: WeightFormat, nt: u8, unroll: u8, k_order: KQuantOrder },
    /// Tiled matrix product for many tokens (prefill).
    MatMul(WeightFormat),
    /// Tiled product of 8-bit activation records by integer dot products for many tokens
    /// (prefill chunks; quantized weight formats only), in a tile shape.
    MatMulInt(WeightFormat, GemmTile),
    /// Embedding-row gather.
    Embed(WeightFormat),
    RmsNorm,
    Rope,
    StoreKv,
    /// RoPE of Q and K and the K/V store in one dispatch.
    RopeStore,
    Attention,
    /// Attention for decode-sized steps: a workgroup per query head and split.
    AttentionDecode,
    /// Attention for decode-sized steps over long contexts: a workgroup per KV head and split,
    /// serving all its query heads at once.
    AttentionDecodeGqa,
    AttentionCombine,
    /// AttentionDecode writing its split records as (bits, tag) pairs for the
    /// [`Kernel::AttentionCombineIntTagged`] recorded after it without a pipeline barrier
    /// (`STRATA_VULKAN_TAGGED_MERGE=1`).
    AttentionDecodeTaggedOut,
    /// AttentionDecodeGqa writing its split records as (bits, tag) pairs, beside
    /// [`Kernel::AttentionDecodeTaggedOut`] (the merge after both reads them tagged).
    AttentionDecodeGqaTaggedOut,
    /// [`Kernel::AttentionDecodeTaggedOut`] that reads the layer's q and the new cell's K and V
    /// from the tagged row QKV wrote ([`Kernel::MatVecIntRopeTaggedOut`]), recorded right after
    /// QKV without a pipeline barrier.
    AttentionDecodeTaggedIn,
    /// [`Kernel::AttentionDecodeGqaTaggedOut`] likewise, beside [`Kernel::AttentionDecodeTaggedIn`].
    AttentionDecodeGqaTaggedIn,
    /// AttentionDecode whose last workgroup per chunk of 256 outputs merges the splits and
    /// quantizes them for the output projection (AttentionCombineInt's bits, one stage less).
    AttentionDecodeFused(ActRounding),
    /// Attention of one query per workgroup in the CPU device's arithmetic (the exact mode).
    AttentionExact,
    SwiGlu,
    Add,
    SelectRows,
    /// Each logits row's first largest position (a greedy step's token, argmax.comp).
    Argmax,
    /// Each logits row's [`TOP_K_MAX`] largest values with their positions, largest first (a
    /// sampling step's candidates, top_k.comp).
    TopK,
    ReadBandwidth,
    /// read_bandwidth.comp built with common.glsl's `TIMELINE` whatever the build: the workgroup
    /// timeline's test records it (needs a context with a timeline, `STRATA_VULKAN_TIMELINE`).
    ReadBandwidthTimeline,
    /// The rounding helpers of the device's build (common.glsl's div_rn, fma_once, sqrt_rn) on
    /// arrays of inputs, for tests (rounding_check.comp).
    RoundingCheck,
    /// Reads weight ranges into the L2 cache beside a latency-bound stage (prefetch_l2.comp).
    PrefetchL2,
    /// A decode step's memory pattern, for measuring stage boundaries (stage_chain.comp, probe.rs).
    StageChain,
    /// stage_chain.comp built again as is (0) or with 16 KiB more shared memory (1).
    StageChainOther(u8),
    /// Rounds activations as the CPU's 8-bit quantizer does (blocks of 32 or of 256).
    QuantizeAct(ActRounding),
    /// The same quantization, written as 8-bit quants with block scales and sums (the input of
    /// the integer-dot-product kernels).
    QuantizeActInt(ActRounding),
    /// RMSNorm that also writes the normalized rows as 8-bit records (QuantizeActInt's output).
    RmsNormInt(ActRounding),
    /// RmsNormInt of one row that a [`Kernel::MatVecInt1TaggedOut`] recorded right before it
    /// (no pipeline barrier between them) writes with the step's tag: it waits for this step's
    /// tags on every element itself (rms_norm_q.comp TAGGED_IN). Same bits as RmsNormInt.
    RmsNormIntTagged(ActRounding),
    /// QuantizeActInt of one row that a [`Kernel::MatVecIntSwiGluF32TaggedOut`] recorded right
    /// before it writes with the step's tag (quantize_act.comp TAGGED_IN). Same bits.
    QuantizeActIntTagged(ActRounding),
    /// The RMSNorm after a residual add that a [`Kernel::MatVecInt1TaggedOut`] recorded right
    /// before it writes tagged, in that row's chunks of 256 (one workgroup each, none waiting
    /// for the whole row): each quantizes its `x * weight` and leaves its sum of squares, as a
    /// [`Kernel::MatVecInt1NormOut`] does (quantize_act.comp NORM_W); the product after it is a
    /// `...Scaled` kernel. The same bits as that form (`STRATA_VULKAN_TAGGED_NORM_SCALE=1`).
    NormQuantizeTagged(ActRounding),
    /// [`Kernel::NormQuantizeTagged`] of rows written before it (a batched step's): each row's
    /// chunks and partials; the products after it are [`Kernel::MatVecIntScaled`].
    NormQuantize(ActRounding),
    /// SwiGLU that also writes its output as 8-bit records (QuantizeActInt's output).
    SwiGluInt(ActRounding),
    /// The merge of attention's split results that also writes them as 8-bit records.
    AttentionCombineInt(ActRounding),
    /// AttentionCombineInt reading the tagged split records of a
    /// [`Kernel::AttentionDecodeTaggedOut`] recorded right before it, waiting for this layer's
    /// tags itself. Same bits.
    AttentionCombineIntTagged(ActRounding),
    /// A decoding layer's feed-forward half for one token (RMSNorm with quantization, gate/up
    /// with SwiGLU, quantization, down added into the residual) in one dispatch of resident
    /// workgroups with grid barriers between the stages (ffn_persistent.comp): the staged
    /// kernels' bits, in their layouts.
    FfnPersistent(WeightFormat, FfnLayout),
    /// A one-token step's staged kernel in its chained build (shaders/chain.glsl): recorded
    /// without a pipeline barrier after the stage before, it waits for that stage's count of
    /// finished workgroups and counts itself in its own; its push constants end with the
    /// count it waits for and the address of that stage's word ([`Push::chain`]).
    Chained(ChainedKernel),
}

/// The kernels with chained builds: the one-token step's norms, products and quantizer (64 or
/// 128 lanes a row; the attention stages keep their pipeline barriers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChainedKernel {
    RmsNormInt(ActRounding),
    QuantizeActInt(ActRounding),
    /// [`Kernel::MatVecInt1`] (2 or 4 rows with 128 lanes a row, 2 with 64).
    MatVecInt1(WeightFormat, u8, ProductLayout),
    MatVecInt1Unrolled(WeightFormat, u8),
    MatVecIntRope(WeightFormat, ProductLayout),
    MatVecIntSwiGluF32(WeightFormat, ProductLayout, u8),
}

impl ChainedKernel {
    /// The chained build of `k`, where it has one.
    pub fn of(k: Kernel) -> Option<ChainedKernel> {
        let layout_ok = |l: ProductLayout| matches!(l, ProductLayout::Lanes128 | ProductLayout::Lanes64);
        match k {
            Kernel::RmsNormInt(r) => Some(ChainedKernel::RmsNormInt(r)),
            Kernel::QuantizeActInt(r) => Some(ChainedKernel::QuantizeActInt(r)),
            Kernel::MatVecInt1(f, rows, l) if f.has_int_kernel() && ((rows == 2 && layout_ok(l)) || (rows == 4 && l == ProductLayout::Lanes128)) => Some(ChainedKernel::MatVecInt1(f, rows, l)),
            Kernel::MatVecInt1Unrolled(f, rows) if f.has_int_kernel() && matches!(rows, 2 | 4) => Some(ChainedKernel::MatVecInt1Unrolled(f, rows)),
            Kernel::MatVecIntRope(f, l) if f.has_int_kernel() && layout_ok(l) => Some(ChainedKernel::MatVecIntRope(f, l)),
            Kernel::MatVecIntSwiGluF32(f, l, pairs) if f.has_int_kernel() && layout_ok(l) => Some(ChainedKernel::MatVecIntSwiGluF32(f, l, pairs)),
            _ => None,
        }
    }
}

/// A chained matvec_q.comp build in a layout (128 or 64 lanes a row).
macro_rules! per_layout_chained {
    ($f:expr, $layout:expr, $kernel:literal, $suffix:literal) => {
        match $layout {
            ProductLayout::Lanes64 => per_int_format!($f, $kernel, concat!($suffix, "_g2_chained")),
            _ => per_int_format!($f, $kernel, concat!($suffix, "_chained")),
        }
    };
}

/// The down projection's layout in [`Kernel::FfnPersistent`] (gate/up always takes 64 lanes a
/// row, two output rows a group for Q4_K): that of the staged one-token kernel for the row length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FfnLayout {
    /// 128 lanes a row, two items in flight ([`Kernel::MatVecInt1Unrolled`]: four rows a
    /// workgroup for Q4_K, else two).
    LongRows,
    /// 64 lanes a row, two rows a group ([`Kernel::MatVecInt1`] with two rows,
    /// [`ProductLayout::Lanes64`]).
    ShortRows,
}

/// How activations are rounded before a product with a weight (the CPU device's activation
/// types).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActRounding {
    /// Blocks of 32, f16 scale (Q8_0 and Q8_1): for Q4_0, Q4_1 and Q8_0 weights.
    Q8_0,
    /// Blocks of 256, f32 scale: for the K-quants.
    Q8_K,
}

impl ActRounding {
    /// The rounding the CPU applies before multiplying a weight of this format, if any.
    pub fn for_format(f: WeightFormat) -> Option<ActRounding> {
        match f {
            WeightFormat::Q4_0 | WeightFormat::Q4_1 | WeightFormat::Q8_0 => Some(ActRounding::Q8_0),
            WeightFormat::Q4_K | WeightFormat::Q6_K => Some(ActRounding::Q8_K),
            WeightFormat::F32 | WeightFormat::F16 => None,
        }
    }

}

/// matmul_q.comp's builds (256 invocations, 64 rows a workgroup): 32-element items loaded per
/// step between two barriers, tokens a workgroup, and whether the next step's loads are in
/// flight while a step's products run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmTile {
    /// 4 items a step, 64 tokens, the next step's loads in flight.
    Items4Prefetch,
    Items2,
    Items4,
    /// 2 items a step, 128 tokens.
    Tokens128,
}

impl GemmTile {
    /// Rows of the weight a workgroup owns.
    pub fn rows(self) -> usize {
        64
    }

    /// Tokens a workgroup owns.
    pub fn tokens(self) -> usize {
        match self {
            GemmTile::Tokens128 => 128,
            _ => 64,
        }
    }
}

/// How matvec_q.comp lays out its 128-invocation workgroups: groups of 128, 64 or 32 lanes,
/// each group owning its rows, a lane taking every (lanes)-th 32-element block of them. A row's
/// arithmetic depends on the lanes per row, so every product kernel of a device (one token,
/// batched, fused) uses the same layout. Fewer lanes a row: more blocks per lane in turn and
/// fewer, longer-lived workgroups (H200, 7B Q4_K decode: 64 lanes 356 t/s, 128 lanes 336).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProductLayout {
    Lanes128,
    Lanes64,
    Lanes32,
}

impl ProductLayout {
    /// Lane groups per workgroup.
    pub fn groups(self) -> usize {
        128 / self.lanes_per_row() as usize
    }

    /// Lanes that share one row (a subgroup must fit in them).
    pub fn lanes_per_row(self) -> u32 {
        match self {
            ProductLayout::Lanes128 => 128,
            ProductLayout::Lanes64 => 64,
            ProductLayout::Lanes32 => 32,
        }
    }

    /// The layout with this many lanes a row (`STRATA_MATVEC_LANES`).
    pub fn with_lanes(lanes: u32) -> Option<ProductLayout> {
        match lanes {
            128 => Some(ProductLayout::Lanes128),
            64 => Some(ProductLayout::Lanes64),
            32 => Some(ProductLayout::Lanes32),
            _ => None,
        }
    }
}

/// A matvec_q.comp build in a layout: file suffix "" (128 lanes), "_g2" or "_g4" after the rest.
macro_rules! per_layout {
    ($f:expr, $layout:expr, $kernel:literal, $suffix:literal) => {
        match $layout {
            ProductLayout::Lanes128 => per_int_format!($f, $kernel, $suffix),
            ProductLayout::Lanes64 => per_int_format!($f, $kernel, concat!($suffix, "_g2")),
            ProductLayout::Lanes32 => per_int_format!($f, $kernel, concat!($suffix, "_g4")),
        }
    };
}

/// Bytes of push constants every kernel's layout declares (the minimum every device offers).
pub const PUSH_BYTES: u32 = 128;

/// Candidates a row of [`Kernel::TopK`] (top_k.comp's K_MAX).
pub const TOP_K_MAX: usize = 64;

/// The first `k` candidates of one row of [`Kernel::TopK`]'s output (`TOP_K_MAX` pairs of
/// position and value bits, largest first; position `u32::MAX` past the row's values).
pub fn top_k_candidates(row_words: &[u32], k: usize) -> Vec<strata_model::sampling::Candidate> {
    row_words
        .chunks_exact(2)
        .take(k)
        .take_while(|pair| pair[0] != u32::MAX)
        .map(|pair| strata_model::sampling::Candidate { token: pair[0], logit: f32::from_bits(pair[1]) })
        .collect()
}

macro_rules! spv {
    ($name:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".spv"))
    };
    ($name:literal, $suffix:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $name, $suffix, ".spv"))
    };
}

macro_rules! per_format {
    ($f:expr, $kernel:literal) => {
        match $f {
            WeightFormat::F32 => spv!($kernel, "_f32"),
            WeightFormat::F16 => spv!($kernel, "_f16"),
            WeightFormat::Q4_0 => spv!($kernel, "_q4_0"),
            WeightFormat::Q4_1 => spv!($kernel, "_q4_1"),
            WeightFormat::Q8_0 => spv!($kernel, "_q8_0"),
            WeightFormat::Q4_K => spv!($kernel, "_q4_k"),
            WeightFormat::Q6_K => spv!($kernel, "_q6_k"),
        }
    };
}

/// The integer-dot-product builds exist for the quantized formats only; others get no SPIR-V (and
/// so a pipeline error, never a wrong kernel).
macro_rules! per_int_format {
    ($f:expr, $kernel:literal) => {
        per_int_format!($f, $kernel, "")
    };
    ($f:expr, $kernel:literal, $suffix:expr) => {
        match $f {
            WeightFormat::Q4_0 => include_bytes!(concat!(env!("OUT_DIR"), "/", $kernel, "_q4_0", $suffix, ".spv")),
            WeightFormat::Q4_1 => include_bytes!(concat!(env!("OUT_DIR"), "/", $kernel, "_q4_1", $suffix, ".spv")),
            WeightFormat::Q8_0 => include_bytes!(concat!(env!("OUT_DIR"), "/", $kernel, "_q8_0", $suffix, ".spv")),
            WeightFormat::Q4_K => include_bytes!(concat!(env!("OUT_DIR"), "/", $kernel, "_q4_k", $suffix, ".spv")),
            WeightFormat::Q6_K => include_bytes!(concat!(env!("OUT_DIR"), "/", $kernel, "_q6_k", $suffix, ".spv")),
            WeightFormat::F32 | WeightFormat::F16 => &[],
        }
    };
}

/// The CPU-exact builds exist for the 32-element block formats and Q4_K (Q4_K in both lane
/// orders, `$order`); each also in a build whose fused multiply-adds go through f64 (`$f64`).
macro_rules! per_exact_format {
    ($f:expr, $kernel:literal, $order:expr, $f64:expr) => {
        match ($f, $order, $f64) {
            (WeightFormat::Q4_0, _, false) => spv!($kernel, "_q4_0"),
            (WeightFormat::Q4_1, _, false) => spv!($kernel, "_q4_1"),
            (WeightFormat::Q8_0, _, false) => spv!($kernel, "_q8_0"),
            (WeightFormat::Q4_K, KQuantOrder::Lanes16, false) => spv!($kernel, "_q4_k"),
            (WeightFormat::Q4_K, KQuantOrder::Lanes8, false) => spv!($kernel, "_q4_k_l8"),
            (WeightFormat::Q4_0, _, true) => spv!($kernel, "_q4_0_f64fma"),
            (WeightFormat::Q4_1, _, true) => spv!($kernel, "_q4_1_f64fma"),
            (WeightFormat::Q8_0, _, true) => spv!($kernel, "_q8_0_f64fma"),
            (WeightFormat::Q4_K, KQuantOrder::Lanes16, true) => spv!($kernel, "_q4_k_f64fma"),
            (WeightFormat::Q4_K, KQuantOrder::Lanes8, true) => spv!($kernel, "_q4_k_l8_f64fma"),
            (WeightFormat::Q6_K | WeightFormat::F32 | WeightFormat::F16, _, _) => &[],
        }
    };
}

/// The lane order of the CPU device's K-quant products, which the exact mode's Q4_K products
/// follow: the CPU device's kernels sum Q4_K in 16 lanes at the AVX-512 level and in 8 at the
/// AVX2 one (their 32-element block formats compute the same bits at every level).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KQuantOrder {
    /// Sixteen lanes, `_mm512_reduce_add_ps` (strata-quant's AVX-512 VNNI level).
    Lanes16,
    /// Eight lanes, ggml's `hsum_float_8` (the AVX2 level).
    Lanes8,
}

impl KQuantOrder {
    /// The order of the kernels the CPU device picks on this host, or `None` on a CPU without
    /// AVX2 (whose portable kernels sum K-quants in another order that no build follows).
    pub fn of_this_host() -> Option<KQuantOrder> {
        use strata_quant::SimdLevel;
        if SimdLevel::Avx512Vnni.is_available() {
            Some(KQuantOrder::Lanes16)
        } else if SimdLevel::Avx2.is_available() {
            Some(KQuantOrder::Lanes8)
        } else {
            None
        }
    }

    /// Lanes a row.
    pub fn lanes(self) -> usize {
        match self {
            KQuantOrder::Lanes16 => 16,
            KQuantOrder::Lanes8 => 8,
        }
    }
}

/// Which build of a kernel a device runs, where a kernel has several (build.rs,
/// ROUNDING_BUILDS; shaders/common.glsl's `div_rn`, `sqrt_rn`, `fma_once`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShaderVariant {
    /// The shaders' own division, square root and `fma`.
    #[default]
    Native,
    /// Divisions and square roots through f64, rounded as the CPU's (the device has
    /// shaderFloat64).
    F64,
    /// Fused multiply-adds through f64 too (the device's `fma` rounds twice).
    F64Fma,
}

impl ShaderVariant {
    fn fma_via_f64(self) -> bool {
        self == ShaderVariant::F64Fma
    }
}

/// A kernel with rounding builds (`$name`, `$name` + "_f64", `$name` + "_f64fma").
macro_rules! rounding {
    ($name:literal, $v:expr) => {
        match $v {
            ShaderVariant::Native => spv!($name),
            ShaderVariant::F64 => spv!($name, "_f64"),
            ShaderVariant::F64Fma => spv!($name, "_f64fma"),
        }
    };
}

/// The chained build of a kernel with rounding builds.
macro_rules! rounding_chained {
    ($name:literal, $v:expr) => {
        match $v {
            ShaderVariant::Native => spv!($name, "_chained"),
            ShaderVariant::F64 => spv!($name, "_f64_chained"),
            ShaderVariant::F64Fma => spv!($name, "_f64fma_chained"),
        }
    };
}

impl WeightFormat {
    /// Whether the integer-dot-product kernels read this format.
    pub fn has_int_kernel(self) -> bool {
        !matches!(self, WeightFormat::F32 | WeightFormat::F16)
    }

    /// Whether matvec_exact.comp (the CPU's arithmetic) reads this format.
    pub fn has_exact_kernel(self) -> bool {
        matches!(self, WeightFormat::Q4_0 | WeightFormat::Q4_1 | WeightFormat::Q8_0 | WeightFormat::Q4_K)
    }
}

impl Kernel {
    /// The build of this one-token product that also does the RMSNorm after its residual add
    /// ([`Kernel::MatVecInt1NormOut`]), where there is one.
    pub fn with_norm_out(self) -> Option<Kernel> {
        match self {
            Kernel::MatVecInt1(f, 2, l @ (ProductLayout::Lanes128 | ProductLayout::Lanes64)) => Some(Kernel::MatVecInt1NormOut(f, 2, l, false)),
            Kernel::MatVecInt1(f, 4, ProductLayout::Lanes128) => Some(Kernel::MatVecInt1NormOut(f, 4, ProductLayout::Lanes128, false)),
            Kernel::MatVecInt1Unrolled(f, rows @ (2 | 4)) => Some(Kernel::MatVecInt1NormOut(f, rows, ProductLayout::Lanes128, true)),
            _ => None,
        }
    }

    /// The build of this batched product that multiplies each token's outputs by the scale of
    /// the chunked RMSNorm before it ([`Kernel::MatVecIntScaled`]), where there is one.
    pub fn with_norm_scale(self) -> Option<Kernel> {
        match self {
            Kernel::MatVecInt(f, l @ (ProductLayout::Lanes128 | ProductLayout::Lanes64)) if f.has_int_kernel() => Some(Kernel::MatVecIntScaled(f, l)),
            _ => None,
        }
    }

    /// The build of this one-token product that also writes its outputs tagged with the step
    /// ([`Kernel::MatVecInt1TaggedOut`]), where there is one.
    pub fn with_tagged_out(self) -> Option<Kernel> {
        match self {
            Kernel::MatVecIntSwiGluF32(f, l @ (ProductLayout::Lanes128 | ProductLayout::Lanes64), pairs) => Some(Kernel::MatVecIntSwiGluF32TaggedOut(f, l, pairs)),
            Kernel::MatVecIntSwiGluF32Scaled(f, l @ (ProductLayout::Lanes128 | ProductLayout::Lanes64), pairs) => Some(Kernel::MatVecIntSwiGluF32ScaledTaggedOut(f, l, pairs)),
            _ => match self.with_norm_out()? {
                Kernel::MatVecInt1NormOut(f, rows, l, unrolled) => Some(Kernel::MatVecInt1TaggedOut(f, rows, l, unrolled)),
                _ => None,
            },
        }
    }

    /// The compiled SPIR-V of the build `v` selects.
    pub fn spirv(self, v: ShaderVariant) -> &'static [u8] {
        match self {
            Kernel::MatVec1(f) => per_format!(f, "matvec1"),
            Kernel::MatVec(f) => per_format!(f, "matvec"),
            Kernel::MatVecInt1(f, 1, _) => per_int_format!(f, "matvec_q1_r1"),
            Kernel::MatVecInt1(f, 4, _) => per_int_format!(f, "matvec_q1_r4"),
            Kernel::MatVecInt1(f, 8, _) => per_int_format!(f, "matvec_q1_r8"),
            Kernel::MatVecInt1(f, _, l) => per_layout!(f, l, "matvec_q1_r2", ""),
            Kernel::MatVecInt(f, l) => per_layout!(f, l, "matvec_q4", ""),
            Kernel::MatVecInt1Unrolled(f, 2) => per_int_format!(f, "matvec_q1_r2", "_u2"),
            Kernel::MatVecInt1Unrolled(f, _) => per_int_format!(f, "matvec_q1_r4", "_u2"),
            Kernel::MatVecIntRope(f, l) => per_layout!(f, l, "matvec_qkv", ""),
            Kernel::MatVecIntRopeTaggedOut(f, l) => per_layout!(f, l, "matvec_qkv_tagout", ""),
            Kernel::MatVecIntSwiGlu(f, ActRounding::Q8_0, l) => per_layout!(f, l, "matvec_swiglu", "_q8_0"),
            Kernel::MatVecIntSwiGlu(f, ActRounding::Q8_K, l) => per_layout!(f, l, "matvec_swiglu", "_q8_k"),
            Kernel::MatVecIntSwiGluF32(f, l, 2) => per_layout!(f, l, "matvec_swiglu", "_f32_p2"),
            Kernel::MatVecIntSwiGluF32(f, l, _) => per_layout!(f, l, "matvec_swiglu", "_f32"),
            Kernel::MatVecIntRopeNorm(f, l) => per_layout!(f, l, "matvec_qkv_norm", ""),
            Kernel::MatVecIntSwiGluF32Norm(f, l, 2) => per_layout!(f, l, "matvec_swiglu_norm", "_f32_p2"),
            Kernel::MatVecIntSwiGluF32Norm(f, l, _) => per_layout!(f, l, "matvec_swiglu_norm", "_f32"),
            Kernel::MatVecInt1NormOut(f, 2, ProductLayout::Lanes128, false) => per_int_format!(f, "matvec_q1_r2_normout"),
            Kernel::MatVecInt1NormOut(f, 2, ProductLayout::Lanes64, false) => per_int_format!(f, "matvec_q1_r2_normout", "_g2"),
            Kernel::MatVecInt1NormOut(f, 4, ProductLayout::Lanes128, false) => per_int_format!(f, "matvec_q1_r4_normout"),
            Kernel::MatVecInt1NormOut(f, 2, ProductLayout::Lanes128, true) => per_int_format!(f, "matvec_q1_r2_normout", "_u2"),
            Kernel::MatVecInt1NormOut(f, 4, ProductLayout::Lanes128, true) => per_int_format!(f, "matvec_q1_r4_normout", "_u2"),
            // (Not built: the host asks for the builds above only, `Kernel::with_norm_out`.)
            Kernel::MatVecInt1NormOut(..) => &[],
            Kernel::MatVecInt1TaggedOut(f, 2, ProductLayout::Lanes128, false) => per_int_format!(f, "matvec_q1_r2_tagout"),
            Kernel::MatVecInt1TaggedOut(f, 2, ProductLayout::Lanes64, false) => per_int_format!(f, "matvec_q1_r2_tagout", "_g2"),
            Kernel::MatVecInt1TaggedOut(f, 4, ProductLayout::Lanes128, false) => per_int_format!(f, "matvec_q1_r4_tagout"),
            Kernel::MatVecInt1TaggedOut(f, 2, ProductLayout::Lanes128, true) => per_int_format!(f, "matvec_q1_r2_tagout", "_u2"),
            Kernel::MatVecInt1TaggedOut(f, 4, ProductLayout::Lanes128, true) => per_int_format!(f, "matvec_q1_r4_tagout", "_u2"),
            Kernel::MatVecIntSwiGluF32TaggedOut(f, ProductLayout::Lanes128, 2) => per_int_format!(f, "matvec_swiglu_tagout", "_f32_p2"),
            Kernel::MatVecIntSwiGluF32TaggedOut(f, ProductLayout::Lanes64, 2) => per_int_format!(f, "matvec_swiglu_tagout", "_f32_p2_g2"),
            Kernel::MatVecIntSwiGluF32TaggedOut(f, ProductLayout::Lanes128, _) => per_int_format!(f, "matvec_swiglu_tagout", "_f32"),
            Kernel::MatVecIntSwiGluF32TaggedOut(f, ProductLayout::Lanes64, _) => per_int_format!(f, "matvec_swiglu_tagout", "_f32_g2"),
            // (Likewise, `Kernel::with_tagged_out`.)
            Kernel::MatVecInt1TaggedOut(..) | Kernel::MatVecIntSwiGluF32TaggedOut(..) => &[],
            Kernel::MatVecIntRopeScaled(f, ProductLayout::Lanes128) => per_int_format!(f, "matvec_qkv_scaled"),
            Kernel::MatVecIntRopeScaled(f, ProductLayout::Lanes64) => per_int_format!(f, "matvec_qkv_scaled", "_g2"),
            Kernel::MatVecIntSwiGluF32Scaled(f, ProductLayout::Lanes128, 2) => per_int_format!(f, "matvec_swiglu_scaled", "_f32_p2"),
            Kernel::MatVecIntSwiGluF32Scaled(f, ProductLayout::Lanes64, 2) => per_int_format!(f, "matvec_swiglu_scaled", "_f32_p2_g2"),
            Kernel::MatVecIntSwiGluF32Scaled(f, ProductLayout::Lanes128, _) => per_int_format!(f, "matvec_swiglu_scaled", "_f32"),
            Kernel::MatVecIntSwiGluF32Scaled(f, ProductLayout::Lanes64, _) => per_int_format!(f, "matvec_swiglu_scaled", "_f32_g2"),
            Kernel::MatVecIntScaled(f, ProductLayout::Lanes128) => per_int_format!(f, "matvec_q4_scaled"),
            Kernel::MatVecIntScaled(f, ProductLayout::Lanes64) => per_int_format!(f, "matvec_q4_scaled", "_g2"),
            Kernel::MatVecIntRopeScaled(_, ProductLayout::Lanes32) | Kernel::MatVecIntSwiGluF32Scaled(_, ProductLayout::Lanes32, _) | Kernel::MatVecIntScaled(_, ProductLayout::Lanes32) => &[],
            Kernel::MatVecIntSwiGluF32ScaledTaggedOut(f, ProductLayout::Lanes128, 2) => per_int_format!(f, "matvec_swiglu_scaled_tagout", "_f32_p2"),
            Kernel::MatVecIntSwiGluF32ScaledTaggedOut(f, ProductLayout::Lanes64, 2) => per_int_format!(f, "matvec_swiglu_scaled_tagout", "_f32_p2_g2"),
            Kernel::MatVecIntSwiGluF32ScaledTaggedOut(f, ProductLayout::Lanes128, _) => per_int_format!(f, "matvec_swiglu_scaled_tagout", "_f32"),
            Kernel::MatVecIntSwiGluF32ScaledTaggedOut(f, ProductLayout::Lanes64, _) => per_int_format!(f, "matvec_swiglu_scaled_tagout", "_f32_g2"),
            Kernel::MatVecIntSwiGluF32ScaledTaggedOut(_, ProductLayout::Lanes32, _) => &[],
            Kernel::AttentionDecodeFused(ActRounding::Q8_0) => spv!("attention_decode_fused_q8_0"),
            Kernel::AttentionDecodeFused(ActRounding::Q8_K) => spv!("attention_decode_fused_q8_k"),
            Kernel::MatVecExact { format: f, nt: 1, unroll: 1, k_order: o } => per_exact_format!(f, "matvec_exact_t1_u1", o, v.fma_via_f64()),
            Kernel::MatVecExact { format: f, nt: 1, unroll: 2, k_order: o } => per_exact_format!(f, "matvec_exact_t1_u2", o, v.fma_via_f64()),
            Kernel::MatVecExact { format: f, nt: 1, unroll: 4, k_order: o } => per_exact_format!(f, "matvec_exact_t1_u4", o, v.fma_via_f64()),
            Kernel::MatVecExact { format: f, nt: 1, k_order: o, .. } => per_exact_format!(f, "matvec_exact_t1_u8", o, v.fma_via_f64()),
            Kernel::MatVecExact { format: f, unroll: 1, k_order: o, .. } => per_exact_format!(f, "matvec_exact_t4_u1", o, v.fma_via_f64()),
            Kernel::MatVecExact { format: f, k_order: o, .. } => per_exact_format!(f, "matvec_exact_t4_u2", o, v.fma_via_f64()),
            Kernel::MatMul(f) => per_format!(f, "matmul"),
            Kernel::MatMulInt(f, GemmTile::Items4Prefetch) => per_int_format!(f, "matmul_q"),
            Kernel::MatMulInt(f, GemmTile::Items2) => per_int_format!(f, "matmul_q", "_k2"),
            Kernel::MatMulInt(f, GemmTile::Items4) => per_int_format!(f, "matmul_q", "_k4"),
            Kernel::MatMulInt(f, GemmTile::Tokens128) => per_int_format!(f, "matmul_q", "_n8"),
            Kernel::Embed(f) => per_format!(f, "embed"),
            Kernel::RmsNorm => spv!("rms_norm"),
            Kernel::Rope => rounding!("rope", v),
            Kernel::StoreKv => spv!("store_kv"),
            Kernel::RopeStore => rounding!("rope_store", v),
            Kernel::Attention => spv!("attention"),
            Kernel::AttentionDecode => spv!("attention_decode"),
            Kernel::AttentionDecodeTaggedOut => spv!("attention_decode_tagged"),
            Kernel::AttentionDecodeGqa => spv!("attention_decode_gqa"),
            Kernel::AttentionDecodeGqaTaggedOut => spv!("attention_decode_gqa_tagged"),
            Kernel::AttentionDecodeTaggedIn => spv!("attention_decode_tagged_in"),
            Kernel::AttentionDecodeGqaTaggedIn => spv!("attention_decode_gqa_tagged_in"),
            Kernel::AttentionCombine => spv!("attention_combine"),
            Kernel::AttentionExact => rounding!("attention_exact", v),
            Kernel::SwiGlu => spv!("swiglu"),
            Kernel::Add => spv!("add"),
            Kernel::SelectRows => spv!("select_rows"),
            Kernel::Argmax => spv!("argmax"),
            Kernel::TopK => spv!("top_k"),
            Kernel::ReadBandwidth => spv!("read_bandwidth"),
            Kernel::ReadBandwidthTimeline => spv!("read_bandwidth_timeline"),
            Kernel::RoundingCheck => rounding!("rounding_check", v),
            Kernel::PrefetchL2 => spv!("prefetch_l2"),
            Kernel::StageChain => spv!("stage_chain"),
            Kernel::StageChainOther(0) => spv!("stage_chain_copy"),
            Kernel::StageChainOther(_) => spv!("stage_chain_big_shared"),
            Kernel::FfnPersistent(f, FfnLayout::LongRows) => per_int_format!(f, "ffn_persistent", "_long"),
            Kernel::FfnPersistent(f, FfnLayout::ShortRows) => per_int_format!(f, "ffn_persistent", "_short"),
            Kernel::QuantizeAct(ActRounding::Q8_0) => rounding!("quantize_act_q8_0", v),
            Kernel::QuantizeAct(ActRounding::Q8_K) => rounding!("quantize_act_q8_k", v),
            Kernel::QuantizeActInt(ActRounding::Q8_0) => rounding!("quantize_act_int_q8_0", v),
            Kernel::QuantizeActInt(ActRounding::Q8_K) => rounding!("quantize_act_int_q8_k", v),
            Kernel::RmsNormInt(ActRounding::Q8_0) => rounding!("rms_norm_int_q8_0", v),
            Kernel::RmsNormInt(ActRounding::Q8_K) => rounding!("rms_norm_int_q8_k", v),
            // (The fast path's only: the host never records it in the exact mode.)
            Kernel::RmsNormIntTagged(ActRounding::Q8_0) => spv!("rms_norm_int_q8_0_tagged"),
            Kernel::RmsNormIntTagged(ActRounding::Q8_K) => spv!("rms_norm_int_q8_k_tagged"),
            Kernel::QuantizeActIntTagged(ActRounding::Q8_0) => spv!("quantize_act_int_q8_0_tagged"),
            Kernel::QuantizeActIntTagged(ActRounding::Q8_K) => spv!("quantize_act_int_q8_k_tagged"),
            Kernel::NormQuantizeTagged(ActRounding::Q8_0) => spv!("quantize_act_int_q8_0_tagged_norm"),
            Kernel::NormQuantizeTagged(ActRounding::Q8_K) => spv!("quantize_act_int_q8_k_tagged_norm"),
            Kernel::NormQuantize(ActRounding::Q8_0) => spv!("quantize_act_int_q8_0_norm"),
            Kernel::NormQuantize(ActRounding::Q8_K) => spv!("quantize_act_int_q8_k_norm"),
            Kernel::SwiGluInt(ActRounding::Q8_0) => rounding!("swiglu_quantize_int_q8_0", v),
            Kernel::SwiGluInt(ActRounding::Q8_K) => rounding!("swiglu_quantize_int_q8_k", v),
            Kernel::AttentionCombineInt(ActRounding::Q8_0) => rounding!("combine_quantize_int_q8_0", v),
            Kernel::AttentionCombineInt(ActRounding::Q8_K) => rounding!("combine_quantize_int_q8_k", v),
            Kernel::AttentionCombineIntTagged(ActRounding::Q8_0) => spv!("combine_quantize_int_q8_0_tagged"),
            Kernel::AttentionCombineIntTagged(ActRounding::Q8_K) => spv!("combine_quantize_int_q8_k_tagged"),
            Kernel::Chained(c) => match c {
                ChainedKernel::RmsNormInt(ActRounding::Q8_0) => rounding_chained!("rms_norm_int_q8_0", v),
                ChainedKernel::RmsNormInt(ActRounding::Q8_K) => rounding_chained!("rms_norm_int_q8_k", v),
                ChainedKernel::QuantizeActInt(ActRounding::Q8_0) => rounding_chained!("quantize_act_int_q8_0", v),
                ChainedKernel::QuantizeActInt(ActRounding::Q8_K) => rounding_chained!("quantize_act_int_q8_k", v),
                ChainedKernel::MatVecInt1(f, 4, _) => per_int_format!(f, "matvec_q1_r4", "_chained"),
                ChainedKernel::MatVecInt1(f, _, l) => per_layout_chained!(f, l, "matvec_q1_r2", ""),
                ChainedKernel::MatVecInt1Unrolled(f, 2) => per_int_format!(f, "matvec_q1_r2", "_u2_chained"),
                ChainedKernel::MatVecInt1Unrolled(f, _) => per_int_format!(f, "matvec_q1_r4", "_u2_chained"),
                ChainedKernel::MatVecIntRope(f, l) => per_layout_chained!(f, l, "matvec_qkv", ""),
                ChainedKernel::MatVecIntSwiGluF32(f, l, 2) => per_layout_chained!(f, l, "matvec_swiglu", "_f32_p2"),
                ChainedKernel::MatVecIntSwiGluF32(f, l, _) => per_layout_chained!(f, l, "matvec_swiglu", "_f32"),
            },
        }
    }
}

/// Push constants: device addresses first, then 32-bit values, as every shader declares them.
#[derive(Default, Clone, Debug)]
pub struct Push {
    bytes: Vec<u8>,
    words_started: bool,
}

impl Push {
    pub fn new() -> Push {
        Push::default()
    }

    /// A device address (all of them come before any 32-bit value).
    pub fn addr(mut self, a: u64) -> Push {
        debug_assert!(!self.words_started, "addresses come first");
        self.bytes.extend_from_slice(&a.to_le_bytes());
        self
    }

    pub fn u32(mut self, v: u32) -> Push {
        self.words_started = true;
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn f32(mut self, v: f32) -> Push {
        self.words_started = true;
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// The tail of a tagged build's push constants (matvec_q.comp TAGGED_OUT, rms_norm_q.comp
    /// TAGGED_IN): device addresses after the 32-bit values, each aligned to 8 bytes as the
    /// shader's block lays it out.
    pub fn tail_addrs(mut self, addrs: &[u64]) -> Push {
        while !self.bytes.len().is_multiple_of(8) {
            self.bytes.push(0);
        }
        for a in addrs {
            self.bytes.extend_from_slice(&a.to_le_bytes());
        }
        self
    }

    /// The tail of a chained build's push constants (shaders/chain.glsl): the count of the
    /// stage before's workgroups to wait for (0: none) and the address of that stage's word,
    /// aligned to 8 bytes as the shader's block lays it out.
    pub fn chain(self, expect: u32, word: u64) -> Push {
        self.u32(expect).tail_addrs(&[word])
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Pipelines, created on first use, and the one pipeline layout (push constants only).
pub struct Pipelines {
    ctx: Arc<VulkanContext>,
    layout: vk::PipelineLayout,
    pipelines: HashMap<Kernel, (vk::ShaderModule, vk::Pipeline)>,
}

impl Pipelines {
    /// # Errors
    /// A Vulkan failure creating the layout.
    pub fn new(ctx: &Arc<VulkanContext>) -> Result<Pipelines, DeviceError> {
        let ranges = [vk::PushConstantRange { stage_flags: vk::ShaderStageFlags::COMPUTE, offset: 0, size: PUSH_BYTES }];
        let info = vk::PipelineLayoutCreateInfo::default().push_constant_ranges(&ranges);
        // SAFETY: valid device and create info.
        let layout = unsafe { ctx.device.create_pipeline_layout(&info, None) }.map_err(|e| vk_error(&ctx.name(), "vkCreatePipelineLayout", e))?;
        Ok(Pipelines { ctx: ctx.clone(), layout, pipelines: HashMap::new() })
    }

    /// The pipeline of `k`, created now if it was not yet.
    ///
    /// # Errors
    /// The driver refuses the shader.
    pub fn get(&mut self, k: Kernel) -> Result<vk::Pipeline, DeviceError> {
        if let Some(&(_, p)) = self.pipelines.get(&k) {
            return Ok(p);
        }
        let spirv = k.spirv(self.ctx.shader_variant());
        if spirv.is_empty() {
            return Err(DeviceError::Unsupported { device: self.ctx.name(), what: format!("no build of {k:?}") });
        }
        // SAFETY: glslc's output at build time.
        let (module, pipeline) = unsafe { self.create(spirv, &format!("{k:?}")) }?;
        self.pipelines.insert(k, (module, pipeline));
        if let Some(line) = self.statistics(pipeline) {
            eprintln!("pipeline {k:?}:{line}");
        }
        Ok(pipeline)
    }

    /// A compute pipeline of `spirv` (entry point `main`) with the one layout.
    ///
    /// # Safety
    /// `spirv` must be valid SPIR-V of a compute shader (Vulkan does not promise to reject
    /// invalid modules).
    unsafe fn create(&self, spirv: &[u8], what: &str) -> Result<(vk::ShaderModule, vk::Pipeline), DeviceError> {
        let name = self.ctx.name();
        let words = ash::util::read_spv(&mut std::io::Cursor::new(spirv)).map_err(|e| DeviceError::Unsupported { device: name.clone(), what: format!("SPIR-V of {what}: {e}") })?;
        let d = &self.ctx.device;
        // SAFETY: valid SPIR-V, as the caller promised.
        let module = unsafe { d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None) }.map_err(|e| vk_error(&name, "vkCreateShaderModule", e))?;
        // Workgroup timeline builds read their record buffer and kernel id from constants
        // 240-243 (constants a module lacks are ignored).
        let timeline_constants = self.ctx.workgroup_timeline.as_ref().map(|t| t.constants(what));
        let entries: Vec<vk::SpecializationMapEntry> = (0..4u32).map(|i| vk::SpecializationMapEntry { constant_id: 240 + i, offset: 4 * i, size: 4 }).collect();
        let data: Vec<u8> = timeline_constants.iter().flatten().flat_map(|w| w.to_le_bytes()).collect();
        let specialization = vk::SpecializationInfo::default().map_entries(&entries).data(&data);
        let mut stage = vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(module).name(c"main");
        if timeline_constants.is_some() {
            stage = stage.specialization_info(&specialization);
        }
        let mut info = vk::ComputePipelineCreateInfo::default().stage(stage).layout(self.layout);
        if self.ctx.pipeline_stats.is_some() {
            info = info.flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR);
        }
        // SAFETY: the module and layout are live; the create info outlives the call.
        let created = unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) };
        match created {
            Ok(p) => Ok((module, p[0])),
            Err((_, e)) => {
                // SAFETY: the module is not used by any pipeline.
                unsafe { d.destroy_shader_module(module, None) };
                Err(vk_error(&name, "vkCreateComputePipelines", e))
            }
        }
    }

    /// The compiler's statistics of the pipeline of `spirv` (registers, ...: " name=value" for
    /// each), compiled with this layout and then dropped; `None` where the context does not
    /// capture them (it does with `STRATA_VULKAN_PROFILE=1` and the driver's
    /// `VK_KHR_pipeline_executable_properties`).
    ///
    /// # Safety
    /// `spirv` must be valid SPIR-V of a compute shader (as glslc writes it).
    ///
    /// # Errors
    /// The driver refuses the shader.
    pub unsafe fn statistics_of(&self, spirv: &[u8], what: &str) -> Result<Option<String>, DeviceError> {
        // SAFETY: as this function's caller promised.
        let (module, pipeline) = unsafe { self.create(spirv, what) }?;
        let line = self.statistics(pipeline);
        // SAFETY: never bound to a command buffer.
        unsafe {
            self.ctx.device.destroy_pipeline(pipeline, None);
            self.ctx.device.destroy_shader_module(module, None);
        }
        Ok(line)
    }

    /// The compiler's statistics of a pipeline (registers, ...), when profiling asked for them.
    fn statistics(&self, pipeline: vk::Pipeline) -> Option<String> {
        let ext = self.ctx.pipeline_stats.as_ref()?;
        let info = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(0);
        // SAFETY: a live pipeline created with CAPTURE_STATISTICS.
        let stats = unsafe { ext.get_pipeline_executable_statistics(&info) }.ok()?;
        let mut line = String::new();
        for s in &stats {
            let name = s.name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
            // SAFETY: the union member read matches the statistic's declared format.
            let value = unsafe {
                match s.format {
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32 => format!("{}", s.value.b32),
                    vk::PipelineExecutableStatisticFormatKHR::INT64 => format!("{}", s.value.i64),
                    vk::PipelineExecutableStatisticFormatKHR::UINT64 => format!("{}", s.value.u64),
                    _ => format!("{}", s.value.f64),
                }
            };
            line.push_str(&format!(" {name}={value}"));
        }
        Some(line)
    }

    /// The pipeline layout.
    pub fn layout(&self) -> vk::PipelineLayout {
        self.layout
    }
}

impl Drop for Pipelines {
    fn drop(&mut self) {
        // SAFETY: owners drop pipelines after their submissions completed.
        unsafe {
            for (_, (m, p)) in self.pipelines.drain() {
                self.ctx.device.destroy_pipeline(p, None);
                self.ctx.device.destroy_shader_module(m, None);
            }
            self.ctx.device.destroy_pipeline_layout(self.layout, None);
        }
    }
}

/// The memory dependency between two stages of a step: every earlier shader write visible to
/// every later shader access ([`Recorder::barrier`]'s, and the stage probe's event waits').
pub(crate) fn shader_writes_visible() -> vk::MemoryBarrier<'static> {
    vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::SHADER_WRITE).dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)
}

/// Records dispatches into one command buffer.
pub struct Recorder<'a> {
    pub(crate) device: &'a ash::Device,
    pub(crate) cb: vk::CommandBuffer,
    pub(crate) pipelines: &'a mut Pipelines,
    /// A pipeline barrier [`Recorder::defer_barrier`] left to the next command that needs it
    /// (any but a dispatch that [`Recorder::dispatch_chained`] orders itself).
    pub(crate) owed_barrier: bool,
}

impl<'a> Recorder<'a> {
    pub fn new(device: &'a ash::Device, cb: vk::CommandBuffer, pipelines: &'a mut Pipelines) -> Recorder<'a> {
        Recorder { device, cb, pipelines, owed_barrier: false }
    }

    /// Asks for a pipeline barrier before the next command unless that command is a chained
    /// dispatch (shaders/chain.glsl), which waits for the stage before by itself.
    pub fn defer_barrier(&mut self) {
        self.owed_barrier = true;
    }

    fn pay_barrier(&mut self) {
        if self.owed_barrier {
            self.barrier();
        }
    }

    /// A dispatch of a chained build that waits for the stage before itself: no pipeline
    /// barrier is recorded before it, even if one was deferred.
    ///
    /// # Errors
    /// A pipeline that cannot be created.
    pub fn dispatch_chained(&mut self, k: Kernel, push: &Push, groups: [u32; 3]) -> Result<(), DeviceError> {
        if groups.contains(&0) {
            return Ok(());
        }
        self.owed_barrier = false;
        self.bind(k, push)?;
        // SAFETY: the command buffer is recording; the pipeline and push constants are bound.
        unsafe { self.device.cmd_dispatch(self.cb, groups[0], groups[1], groups[2]) };
        Ok(())
    }

    /// A dispatch of `groups` workgroups.
    ///
    /// # Errors
    /// A pipeline that cannot be created.
    pub fn dispatch(&mut self, k: Kernel, push: &Push, groups: [u32; 3]) -> Result<(), DeviceError> {
        if groups.contains(&0) {
            return Ok(());
        }
        self.pay_barrier();
        self.bind(k, push)?;
        // SAFETY: the command buffer is recording; the pipeline and push constants are bound.
        unsafe { self.device.cmd_dispatch(self.cb, groups[0], groups[1], groups[2]) };
        Ok(())
    }

    /// A dispatch whose workgroup counts are read from `buffer` at `offset` when it runs.
    ///
    /// # Errors
    /// A pipeline that cannot be created.
    pub fn dispatch_indirect(&mut self, k: Kernel, push: &Push, buffer: vk::Buffer, offset: u64) -> Result<(), DeviceError> {
        self.pay_barrier();
        self.bind(k, push)?;
        // SAFETY: as above; the buffer has INDIRECT_BUFFER usage and holds 3 u32 at `offset`.
        unsafe { self.device.cmd_dispatch_indirect(self.cb, buffer, offset) };
        Ok(())
    }

    fn bind(&mut self, k: Kernel, push: &Push) -> Result<(), DeviceError> {
        let p = self.pipelines.get(k)?;
        debug_assert!(push.bytes().len() <= PUSH_BYTES as usize);
        // SAFETY: recording; the push constant bytes fit the layout's range.
        unsafe {
            self.device.cmd_bind_pipeline(self.cb, vk::PipelineBindPoint::COMPUTE, p);
            self.device.cmd_push_constants(self.cb, self.pipelines.layout(), vk::ShaderStageFlags::COMPUTE, 0, push.bytes());
        }
        Ok(())
    }

    /// Makes every earlier shader write visible to every later shader read.
    pub fn barrier(&mut self) {
        self.owed_barrier = false;
        let mb = shader_writes_visible();
        // SAFETY: recording.
        unsafe { self.device.cmd_pipeline_barrier(self.cb, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::COMPUTE_SHADER, vk::DependencyFlags::empty(), &[mb], &[], &[]) };
    }

    /// Orders every earlier dispatch before later ones without a memory barrier (the probe's
    /// question: what the barrier's cache work costs; shaders must then order their own data).
    pub fn execution_barrier(&mut self) {
        self.pay_barrier();
        // SAFETY: recording.
        unsafe { self.device.cmd_pipeline_barrier(self.cb, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::COMPUTE_SHADER, vk::DependencyFlags::empty(), &[], &[], &[]) };
    }

    /// Orders every earlier shader access before later transfer writes (a fill of a buffer that
    /// shaders were still updating).
    pub fn barrier_before_transfer(&mut self) {
        self.pay_barrier();
        let mb = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE).dst_access_mask(vk::AccessFlags::TRANSFER_WRITE);
        // SAFETY: recording.
        unsafe { self.device.cmd_pipeline_barrier(self.cb, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &[mb], &[], &[]) };
    }

    /// Orders everything submitted to the queue before this command buffer (shader and transfer
    /// accesses alike) before everything after this point: a step submitted while the step
    /// before still runs.
    pub fn barrier_after_earlier_submissions(&mut self) {
        self.pay_barrier();
        let stages = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::DRAW_INDIRECT;
        let mb = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::INDIRECT_COMMAND_READ,
        );
        // SAFETY: recording.
        unsafe { self.device.cmd_pipeline_barrier(self.cb, stages, stages, vk::DependencyFlags::empty(), &[mb], &[], &[]) };
    }

    /// Copies `bytes` from `src` to `dst` at the start of a step, before every later shader and
    /// indirect-dispatch read (the host's writes to `src` are visible to the submission).
    pub fn copy_in(&mut self, src: vk::Buffer, dst: vk::Buffer, bytes: u64) {
        self.pay_barrier();
        let after = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::INDIRECT_COMMAND_READ);
        // SAFETY: recording; both buffers are live and hold `bytes`.
        unsafe {
            self.device.cmd_copy_buffer(self.cb, src, dst, &[vk::BufferCopy { src_offset: 0, dst_offset: 0, size: bytes }]);
            self.device.cmd_pipeline_barrier(self.cb, vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::DRAW_INDIRECT, vk::DependencyFlags::empty(), &[after], &[], &[]);
        }
    }

    /// Zeroes `bytes` of `dst` from `offset` before every later shader access (the fused
    /// epilogues' counters start each step at zero).
    pub fn zero(&mut self, dst: vk::Buffer, offset: u64, bytes: u64) {
        self.pay_barrier();
        let after = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE);
        // SAFETY: recording; the region lies inside `dst` and is a multiple of 4 bytes.
        unsafe {
            self.device.cmd_fill_buffer(self.cb, dst, offset, bytes, 0);
            self.device.cmd_pipeline_barrier(self.cb, vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::COMPUTE_SHADER, vk::DependencyFlags::empty(), &[after], &[], &[]);
        }
    }

    /// Writes a timestamp into `pool` at `index` once every earlier command has completed.
    pub fn timestamp(&mut self, pool: vk::QueryPool, index: u32) {
        self.pay_barrier();
        // SAFETY: recording; the pool holds `index` and was reset in this command buffer.
        unsafe { self.device.cmd_write_timestamp(self.cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, index) };
    }

    /// Copies regions (source buffer, source offset, destination offset, bytes) to a
    /// host-readable `dst`, after every earlier shader write.
    pub fn copy_to_host(&mut self, copies: &[(vk::Buffer, u64, u64, u64)], dst: vk::Buffer) {
        self.pay_barrier();
        let before = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::SHADER_WRITE).dst_access_mask(vk::AccessFlags::TRANSFER_READ);
        // (Shader writes too: a workgroup timeline's records, which the host reads after the step.)
        let after = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_WRITE).dst_access_mask(vk::AccessFlags::HOST_READ);
        // SAFETY: recording; both buffers are live and the region lies inside both.
        unsafe {
            self.device.cmd_pipeline_barrier(self.cb, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &[before], &[], &[]);
            for &(src, src_offset, dst_offset, size) in copies {
                self.device.cmd_copy_buffer(self.cb, src, dst, &[vk::BufferCopy { src_offset, dst_offset, size }]);
            }
            self.device.cmd_pipeline_barrier(self.cb, vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &[after], &[], &[]);
        }
    }
}
