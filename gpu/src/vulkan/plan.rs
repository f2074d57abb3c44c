//! The forward graph compiled for Vulkan: weights uploaded once, activation buffers sized for the
//! largest step, and one recorded command buffer per step shape (tokens, outputs) replayed step
//! after step. What varies between steps of one shape (token ids, positions, block tables, the
//! attention split) lives in a host-visible parameter buffer the shaders read, and the attention
//! dispatch is indirect, so a step is one submission with no host round trip per layer.

use std::collections::HashMap;
use std::sync::Arc;

use ash::vk;
use strata_io::gguf::GgufFile;
use strata_model::graph::{BufId, ForwardGraph, Op, Rows};
use strata_model::sampling::Candidate;
use strata_model::RopeStyle;

use super::context::VulkanContext;
use super::conv::{self, GpuLayout};
use super::kernels::{int_quantize_groups, top_k_candidates, ActRounding, ChainedKernel, FfnLayout, GemmTile, Kernel, Pipelines, ProductLayout, Push, Recorder, WeightFormat, TOP_K_MAX};
use super::memory::{Buffer, DeviceArena, MemoryKind, Slice, Timeline, Uploader, VulkanKvMemory};
use super::vk_error;
use crate::kv_memory::HostKvMemory;
use crate::{BatchLimits, DeviceError, ForwardPlan, StepBatch};

/// Options of a Vulkan plan.
#[derive(Clone, Debug)]
pub struct VulkanOptions {
    /// Most tokens one step may hold (the `ubatch`).
    pub max_batch_tokens: usize,
    /// Most rows of logits one step may return.
    pub max_outputs: usize,
    /// Cells per KV block.
    pub block_size: usize,
    /// Longest sequence (positions are below this).
    pub max_context: usize,
    /// Most sequences one step may hold.
    pub max_seqs: usize,
}

/// Decode steps of at most this many tokens use the matrix-vector kernel; larger ones the tiled
/// matrix kernel.
const MATVEC_MAX_TOKENS: usize = 8;
/// The kernel, push constants and workgroup counts of a product of a `rows`-row weight with
/// `n_tokens` activation rows, given the push constants every product kernel shares: the
/// matrix-vector kernels up to [`MATVEC_MAX_TOKENS`] tokens (which also take their rows per
/// workgroup), the tiled kernel (64 x 64 outputs per workgroup) beyond.
pub(crate) fn product_dispatch(ctx: &VulkanContext, format: WeightFormat, rows: usize, n_tokens: usize, push: Push) -> (Kernel, Push, [u32; 3]) {
    if n_tokens <= MATVEC_MAX_TOKENS {
        let (kernel, per_group) = matvec_kernel(ctx, format, n_tokens);
        (kernel, push.u32(per_group as u32), [rows.div_ceil(per_group) as u32, n_tokens.div_ceil(MATVEC_TOKENS_PER_GROUP) as u32, 1])
    } else {
        (Kernel::MatMul(format), push, [rows.div_ceil(64) as u32, n_tokens.div_ceil(64) as u32, 1])
    }
}

/// The matrix-vector kernel for `n_tokens` tokens and its rows per workgroup: each subgroup of
/// its 128 invocations owns 4 rows (one token) or 2 rows (more) (shaders/matvec.comp).
fn matvec_kernel(ctx: &VulkanContext, format: WeightFormat, n_tokens: usize) -> (Kernel, usize) {
    let subgroups = 128 / ctx.info.subgroup_size.clamp(1, 128) as usize;
    // The build's rows per subgroup of the one-token kernel (build.rs, STRATA_MATVEC1_ROWS).
    let rows1: usize = env!("STRATA_MATVEC1_ROWS").parse().unwrap_or(4);
    if n_tokens == 1 { (Kernel::MatVec1(format), subgroups * rows1) } else { (Kernel::MatVec(format), subgroups * 2) }
}
/// Tokens per matrix-vector pass.
const MATVEC_TOKENS_PER_GROUP: usize = 4;
/// Steps of at most this many tokens multiply quantized weights by the integer matrix-vector
/// kernels (which read the weights once per four tokens, and give a token the same bits whatever
/// else is in its step), run attention one workgroup per query head, and fuse the activation
/// quantization into the ops before the products. Above it (prefill chunks), the tiled kernels:
/// the integer one (matmul_q.comp) unless `STRATA_VULKAN_GEMM=off`.
const INT_MAX_TOKENS: usize = 32;

/// Whether a product of `format` weights with `n_tokens` activation rows multiplies 8-bit
/// activation quants by integer dot products (on a device that has them: decode steps, and
/// prefill chunks unless `STRATA_VULKAN_GEMM=off`).
pub(crate) fn uses_int_product(ctx: &VulkanContext, format: WeightFormat, n_tokens: usize) -> bool {
    format.has_int_kernel() && int_records(ctx, n_tokens)
}

/// Whether steps of `n_tokens` read their products' inputs as 8-bit records (every product of a
/// quantized weight then takes an integer kernel).
fn int_records(ctx: &VulkanContext, n_tokens: usize) -> bool {
    ctx.integer_dot_product && (n_tokens <= INT_MAX_TOKENS || int_gemm_tile().is_some())
}

/// The build of the integer product for prefill chunks (matmul_q.comp), or `None` for the f32
/// tiled kernel (matmul.comp, on activations rounded to f32): `STRATA_VULKAN_GEMM` = `off`,
/// `k2` or `k4` (2 or 4 items a step, no loads ahead) or `n8` (128 tokens a workgroup), a tuning
/// knob read once; by default 4 items a step with the next step's loads in flight.
fn int_gemm_tile() -> Option<GemmTile> {
    static TILE: std::sync::OnceLock<Option<GemmTile>> = std::sync::OnceLock::new();
    *TILE.get_or_init(|| match std::env::var("STRATA_VULKAN_GEMM").as_deref() {
        Ok("off") => None,
        Ok("k2") => Some(GemmTile::Items2),
        Ok("k4") => Some(GemmTile::Items4),
        Ok("n8") => Some(GemmTile::Tokens128),
        _ => Some(GemmTile::Items4Prefetch),
    })
}

/// The 8-bit activation record of one row of `cols` activations (quantize_act.comp, INT_OUT):
/// (bytes per record, byte offset of its block metadata).
pub(crate) fn int_act_record(cols: usize) -> (usize, usize) {
    let meta_offset = cols.next_multiple_of(16);
    ((meta_offset + cols / 32 * 8).next_multiple_of(16), meta_offset)
}

/// Output rows per lane group of the one-token gate/up kernel (MatVecIntSwiGluF32): for Q4_K 2
/// (each activation item read once for both: 7B Q4_K's gate+up 818 -> 798 us a token on the
/// H200), else 1 (7B Q4_0's went 781 -> 813); `STRATA_SWIGLU_PAIRS` (1 or 2) forces either, a
/// tuning knob read once.
fn swiglu_pairs(format: WeightFormat) -> u8 {
    static PAIRS: std::sync::OnceLock<Option<u8>> = std::sync::OnceLock::new();
    let knob = *PAIRS.get_or_init(|| std::env::var("STRATA_SWIGLU_PAIRS").ok().and_then(|v| v.parse().ok()).filter(|p| [1u8, 2].contains(p)));
    knob.unwrap_or(if format == WeightFormat::Q4_K { 2 } else { 1 })
}

/// The dispatches of the one-token gate/up product (MatVecIntSwiGluF32, `pairs` outputs a lane
/// group): (first output, outputs, outputs a lane group) each, recorded in this order with no
/// barrier between them. By default one. `STRATA_SWIGLU_TAIL=N` puts the last N outputs in
/// one-output units, so that the product's last wave ends in units half as long;
/// `STRATA_SWIGLU_SMALL_FIRST=N` the first N, so that an SM's first workgroups end at two
/// different times and its later ones do not all start and load at once (the two-output units
/// of one wave otherwise start, load and end together). Tuning knobs read at each recording (N
/// rounded to whole workgroups of two-output units). The tail is off by default; small units
/// first default to [`small_first_default`] outputs where the device tells its SM count, else
/// off (`=0` turns them off). Only where the units hold two outputs and the weights' rows lie
/// one after another with no aux region (Q4_K), so that a part's weights start at its first
/// row. The same bits: a row's arithmetic depends on the lanes a row only ([`ProductLayout`]),
/// not on the outputs a unit.
fn swiglu_parts(ctx: &VulkanContext, gate: &GpuWeight, up: &GpuWeight, pairs: u8, layout: ProductLayout) -> Vec<(usize, usize, u8)> {
    let knob = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    let contiguous = |w: &GpuWeight| w.layout.aux_bytes == 0 && w.layout.main_bytes.is_multiple_of(w.rows as u64) && (w.layout.main_bytes / w.rows as u64).is_multiple_of(16);
    let splittable = pairs == 2 && gate.rows == up.rows && gate.cols == up.cols && contiguous(gate) && contiguous(up);
    if !splittable {
        return vec![(0, gate.rows, pairs)];
    }
    let small_first = knob("STRATA_SWIGLU_SMALL_FIRST").unwrap_or_else(|| small_first_default(ctx.info.sm_count));
    split_two_output_units(gate.rows, layout.groups(), small_first, knob("STRATA_SWIGLU_TAIL").unwrap_or(0))
}

/// Gate/up's outputs in one-output units first by default: ten an SM, so that half of the
/// first wave's workgroups (an NVIDIA SM holds ten of Q4_K's: 48 registers, 128 invocations)
/// end early and the waves after it fall out of step. On an H100 (132 SMs) 1,320 gave 7B Q4_K
/// +0.6-0.9% a token in sessions 48, 49 and 53, and 1,000-1,660 all gained. Off where the
/// SM count is unknown (other vendors, lavapipe).
fn small_first_default(sm_count: Option<u32>) -> usize {
    sm_count.map_or(0, |sms| 10 * sms as usize)
}

/// [`swiglu_parts`] of `rows` outputs in two-output units, `groups` units a workgroup: the
/// first `small_first` and the last `small_last` outputs (rounded so that the two-output part
/// holds whole workgroups) in one-output units.
fn split_two_output_units(rows: usize, groups: usize, small_first: usize, small_last: usize) -> Vec<(usize, usize, u8)> {
    let whole = groups * 2;
    let first = (small_first / whole * whole).min(rows);
    let big_end = rows.saturating_sub(small_last).next_multiple_of(whole).min(rows).max(first);
    if (first == 0 && big_end == rows) || first == big_end {
        return vec![(0, rows, 2)];
    }
    [(0, first, 1), (first, big_end - first, 2), (big_end, rows - big_end, 1)].into_iter().filter(|p| p.1 > 0).collect()
}

/// Rows per workgroup of the one-token item kernel (matvec_q.comp) forced by
/// `STRATA_MATVEC_ROWS` (1, 2, 4 or 8), a tuning knob read once; by default
/// [`one_token_rows`] chooses.
fn int_rows_knob() -> Option<u8> {
    static ROWS: std::sync::OnceLock<Option<u8>> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| std::env::var("STRATA_MATVEC_ROWS").ok().and_then(|v| v.parse().ok()).filter(|r| [1u8, 2, 4, 8].contains(r)))
}

/// Rows per lane group of the one-token item kernel: for Q4_K, 4 where a row takes the whole
/// workgroup (128 lanes: long rows, as a 7B shape's down projection, whose activation record
/// each workgroup then reads once for four rows: 509 -> 474 us a token on the H200); 2 otherwise
/// (Q4_0's down projection went the other way, 427 -> 470 us).
fn one_token_rows(format: WeightFormat, layout: ProductLayout) -> u8 {
    int_rows_knob().unwrap_or(if format == WeightFormat::Q4_K && layout == ProductLayout::Lanes128 { 4 } else { 2 })
}

/// Whether the one-token product of long rows (128 lanes a row) loads two of a lane's items at
/// once: yes unless `STRATA_MATVEC_UNROLL_LONG=0`, a tuning knob read once (the same bits either
/// way). 7B Q4_K's down projection on the H200: 475 -> 443 us a token (its 896 workgroups are
/// one wave, so the extra registers cost no occupancy); with 2 rows a workgroup, 470.
fn unroll_long_rows() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STRATA_MATVEC_UNROLL_LONG").as_deref() != Ok("0"))
}

/// Blocks each lane of matvec_exact.comp loads ahead: `STRATA_MATVEC_UNROLL` (1, 2, 4 or 8) if
/// set, else more where few lanes share the product (long rows, few of them: each lane must
/// keep many loads in flight).
fn exact_unroll(lanes_total: usize, n_tokens: usize) -> u8 {
    static UNROLL: std::sync::OnceLock<Option<u8>> = std::sync::OnceLock::new();
    let knob = *UNROLL.get_or_init(|| std::env::var("STRATA_MATVEC_UNROLL").ok().and_then(|v| v.parse().ok()).filter(|r| [1u8, 2, 4, 8].contains(r)));
    let unroll = knob.unwrap_or(if lanes_total >= 1 << 17 { 2 } else { 8 });
    if n_tokens > 1 { unroll.min(2) } else { unroll }
}

/// The integer kernel and workgroup counts of a product of a `rows`-row weight with
/// `n_tokens` activation records (at most [`INT_MAX_TOKENS`]).
/// In the exact mode ([`VulkanContext::exact`]) the formats that have it take matvec_exact.comp
/// (the CPU's lane order), others matvec_q.comp.
pub(crate) fn int_product_dispatch(ctx: &VulkanContext, format: WeightFormat, rows: usize, cols: usize, n_tokens: usize, lone: bool) -> (Kernel, [u32; 3]) {
    if n_tokens > INT_MAX_TOKENS {
        // Prefill chunks: the tiled kernel (`uses_int_product` asks for it only with a tile).
        let tile = int_gemm_tile().unwrap_or(GemmTile::Items4Prefetch);
        (Kernel::MatMulInt(format, tile), [rows.div_ceil(tile.rows()) as u32, n_tokens.div_ceil(tile.tokens()) as u32, 1])
    } else if format.has_exact_kernel() && ctx.exact {
        // 128 invocations per workgroup, 8 lanes per row, or Q4_K's in the host CPU's order
        // (matvec_exact.comp).
        let k_order = ctx.exact_k_order();
        let lanes = if format == WeightFormat::Q4_K { k_order.lanes() } else { 8 };
        let nt = if n_tokens == 1 { 1 } else { 4 };
        let unroll = exact_unroll(rows * lanes, n_tokens);
        (Kernel::MatVecExact { format, nt, unroll, k_order }, [rows.div_ceil(128 / lanes) as u32, n_tokens.div_ceil(nt as usize) as u32, 1])
    } else if n_tokens > 1 {
        let layout = product_layout(ctx, rows, cols, lone);
        (Kernel::MatVecInt(format, layout), [rows.div_ceil(2 * layout.groups()) as u32, n_tokens.div_ceil(4) as u32, 1])
    } else {
        let layout = product_layout(ctx, rows, cols, lone);
        let per_group = one_token_rows(format, layout);
        let groups = [rows.div_ceil(per_group as usize * layout.groups()) as u32, 1, 1];
        if layout == ProductLayout::Lanes128 && matches!(per_group, 2 | 4) && unroll_long_rows() {
            return (Kernel::MatVecInt1Unrolled(format, per_group), groups);
        }
        (Kernel::MatVecInt1(format, per_group, layout), groups)
    }
}

/// The product kernels' workgroup layout for rows of `cols` elements (kernels.rs,
/// [`ProductLayout`]): 64 lanes a row for rows of up to 128 blocks of 32 (each lane then takes
/// one or two blocks in turn, and a workgroup serves twice the rows), 128 for longer rows (64
/// left too few workgroups to fill the GPU: 7B Q4_0's down projection 534 against 428 us a
/// token on the H200). `STRATA_MATVEC_LANES` (128, 64 or 32) forces one layout everywhere. 128
/// where the device's subgroups are wider than a lane group, or where `STRATA_MATVEC_ROWS` asks
/// for other than 2 rows (those builds have 128 lanes only). A function of the weight's shape,
/// so every kernel that multiplies a weight (one token, batched, fused) agrees on its bits.
/// `STRATA_MATVEC_LONE_128=1` (opt-in, read at each recording): 128 lanes also for a lone
/// projection (`lone`: the only output of its product op, as a 7B's output projection, not
/// Q/K/V or gate/up) of at most [`SHORT_PRODUCT_ROWS`] rows whose rows would take 64 lanes two
/// blocks a lane in turn: one wave of workgroups on a large GPU, whose time is then one round of
/// loads instead of two. (`lone` is the same for a weight in every step, so its bits do not
/// depend on the batch.) H200, 7B at context 512: the output projection 220 -> 193 us a token,
/// decode +1.3% (Q4_K) / +0.9% (Q4_1), but 8-sequence batches -1.5%: not the default.
pub(crate) fn product_layout(ctx: &VulkanContext, rows: usize, cols: usize, lone: bool) -> ProductLayout {
    static KNOB: std::sync::OnceLock<Option<ProductLayout>> = std::sync::OnceLock::new();
    let forced = *KNOB.get_or_init(|| std::env::var("STRATA_MATVEC_LANES").ok().and_then(|v| v.parse().ok()).and_then(ProductLayout::with_lanes));
    let blocks = cols / 32;
    let wide_short = lone && rows <= SHORT_PRODUCT_ROWS && blocks > 64 && std::env::var("STRATA_MATVEC_LONE_128").as_deref() == Ok("1");
    let wanted = forced.unwrap_or(if blocks <= 128 && !wide_short { ProductLayout::Lanes64 } else { ProductLayout::Lanes128 });
    if int_rows_knob().is_some_and(|r| r != 2) || ctx.info.subgroup_size > wanted.lanes_per_row() {
        return ProductLayout::Lanes128;
    }
    wanted
}

/// Each token's offset of its sequence's block table in `block_tables` laid end to end (the
/// `table_offsets` the kernels read: resolved on the host, a K/V cell is then two dependent
/// reads away, its table entry and the cell, instead of three), written to `out`.
///
/// # Errors
/// [`DeviceError::BadBatch`] for a token naming a sequence past `block_tables`.
pub(crate) fn token_table_offsets(block_tables: &[&[u32]], seq_of_token: &[u32], out: &mut [u32]) -> Result<(), DeviceError> {
    let starts: Vec<u32> = block_tables
        .iter()
        .scan(0u32, |at, t| {
            let start = *at;
            *at += t.len() as u32;
            Some(start)
        })
        .collect();
    for ((t, &s), offset) in seq_of_token.iter().enumerate().zip(out) {
        *offset = *starts.get(s as usize).ok_or_else(|| DeviceError::BadBatch(format!("token {t} names sequence {s}; there are {} block tables", starts.len())))?;
    }
    Ok(())
}

/// Rows at most of the lone products `STRATA_MATVEC_LONE_128=1` gives 128 lanes a row.
const SHORT_PRODUCT_ROWS: usize = 8192;

/// attention_exact.comp's scratch per (token, head), in floats: scores (then weights) for the
/// context, its 16-position chunk sums, 64 value rows of up to 128 dimensions. Returns (floats,
/// where the chunk sums start, where the rows start).
fn exact_scratch_layout(max_context: usize) -> (usize, usize, usize) {
    let rows_offset = max_context + max_context.div_ceil(16);
    (rows_offset + 64 * 128, max_context, rows_offset)
}

/// Whether attention_exact.comp takes a head of `head_dim` (multiples of 64 up to 128).
fn exact_attention_fits(head_dim: usize) -> bool {
    head_dim.is_multiple_of(64) && head_dim <= 128
}

/// Positions per attention split at least (a workgroup walks them in tiles of 128): 64, or
/// `STRATA_ATTENTION_SPLIT` (a power of two from 16 to 4,096), a tuning knob read once. Shorter
/// splits make more workgroups for one decoded token (H200, 7B shape at context 512, decode t/s:
/// 220 with 128, 228 with 64, 232 with 32 in the third session; 383-387 with 128, 400-403 with
/// 64, 392-395 with 32 in the twenty-fifth). Long ones leave a token one split per head, which
/// with `STRATA_VULKAN_FUSE_ATTENTION=1` makes decode attention one dispatch.
fn attention_split_min() -> usize {
    static SPLIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SPLIT.get_or_init(|| std::env::var("STRATA_ATTENTION_SPLIT").ok().and_then(|v| v.parse::<usize>().ok()).filter(|r| r.is_power_of_two() && (16..=4096).contains(r)).unwrap_or(64))
}
const ATTENTION_MAX_SPLITS: usize = 256;

/// Decode-sized steps use attention_decode.comp (a workgroup per query head and split) unless
/// `STRATA_VULKAN_ATTENTION=grouped` (attention.comp, a workgroup per KV head and split).
fn per_head_decode_attention() -> bool {
    static PER_HEAD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PER_HEAD.get_or_init(|| std::env::var("STRATA_VULKAN_ATTENTION").as_deref() != Ok("grouped"))
}
/// Limits of shaders/attention.comp.
const ATTENTION_MAX_GROUP: usize = 8;
const ATTENTION_MAX_HEAD_DIM: usize = 256;
const ATTENTION_MAX_Q: usize = 1024;
/// Command buffers kept for distinct step shapes.
const MAX_RECORDED_SHAPES: usize = 64;

/// A weight in device memory.
#[derive(Clone, Copy, Debug)]
struct GpuWeight {
    layout: GpuLayout,
    address: u64,
    rows: usize,
    cols: usize,
}

impl GpuWeight {
    fn aux(&self) -> u64 {
        if self.layout.aux_bytes == 0 { 0 } else { self.address + self.layout.aux_offset }
    }
}

/// Word offsets of the regions of the parameter buffer.
#[derive(Clone, Copy, Debug)]
struct ParamLayout {
    tokens: usize,
    positions: usize,
    seq_of_token: usize,
    output_rows: usize,
    /// Per token: the offset of its sequence's block table in `tables`.
    table_offsets: usize,
    tables: usize,
    /// Block-table entries a sequence may need (the context over the block size).
    blocks_per_seq: usize,
    total: usize,
}

/// Word offsets in the header: n_splits, split_len, then the indirect attention dispatch.
const HEADER_WORDS: usize = 16;
pub(crate) const HEADER_ATTENTION_ARGS: usize = 4;
/// Where the step header holds a one-token step's tag, which tagged outputs carry
/// (`STRATA_VULKAN_TAGGED_NORM`, `_QUANT`, `_MERGE`: [`tagged_knob`]).
pub(crate) const HEADER_STEP_TAG: usize = 3;
/// Where the step header holds the indirect dispatch of attention_decode.comp.
pub(crate) const HEADER_ATTENTION_DECODE_ARGS: usize = 8;
/// Where the step header holds the indirect dispatch of attention_decode_gqa.comp.
pub(crate) const HEADER_ATTENTION_GQA_ARGS: usize = 12;

/// The step header: the step's splits per token and the shorter tokens' split length, the
/// long-context kernel's split count (word 2), then the indirect dispatches of attention.comp,
/// attention_decode.comp and attention_decode_gqa.comp for `n` tokens, `long` of them the last
/// kernel's; a decode kernel with no token of its own gets zero workgroups.
pub(crate) fn step_header(n_splits: usize, split_len: usize, n: usize, n_heads: usize, n_kv_heads: usize, long: usize) -> [u32; HEADER_WORDS] {
    let per_head_x = if long == n { 0 } else { n_heads as u32 };
    let gqa_x = if long == 0 { 0 } else { n_kv_heads as u32 };
    let (s, n) = (n_splits as u32, n as u32);
    [s, split_len as u32, gqa_splits() as u32, 0, n_kv_heads as u32, s, n, 0, per_head_x, s, n, 0, gqa_x, s, n, 0]
}

/// Whether a decoded token at `position` is attention_decode_gqa.comp's (`gqa_from` positions of
/// context and more).
fn is_long_context(position: u32, gqa_from: u32) -> bool {
    u64::from(position) + 1 >= u64::from(gqa_from)
}

/// The tokens at `positions` that attention_decode_gqa.comp takes: how many, and the most splits
/// one of them is cut into (by its own length, gqa_split_len).
pub(crate) fn long_context_tokens(positions: &[u32], gqa_from: u32) -> (usize, usize) {
    positions.iter().filter(|&&p| is_long_context(p, gqa_from)).fold((0, 0), |(count, splits), &p| {
        let len = p as usize + 1;
        (count + 1, splits.max(len.div_ceil(gqa_split_len(len, gqa_splits()))))
    })
}

/// The context length (positions) from which a decoded token's attention runs in
/// attention_decode_gqa.comp (a workgroup per KV head: each K/V row read once for the group)
/// instead of attention_decode.comp (a workgroup per query head: more workgroups for short
/// contexts). `STRATA_ATTENTION_GQA_FROM`: a number of positions, or `off`. H200, 7B Q4_K decode
/// (seven query heads a KV head): +14% at context 8192, +4% at 4096, even at 2048, -2% at 512.
const DEFAULT_GQA_FROM: u32 = 4096;

/// Positions per split of a token that attention_decode_gqa.comp takes: whole tiles of 64,
/// about `splits` of them (the shader computes the same from the step header's word 2).
fn gqa_split_len(len: usize, splits: usize) -> usize {
    len.div_ceil(splits * 64).max(1) * 64
}

/// The splits a long context's token is cut into (attention_decode_gqa.comp):
/// `STRATA_ATTENTION_GQA_SPLITS` (4-128), default 32, a tuning knob read once (H200, 7B at
/// context 8192: 16 splits 282, 32 splits 324, 64 splits 302 t/s).
fn gqa_splits() -> usize {
    static SPLITS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SPLITS.get_or_init(|| std::env::var("STRATA_ATTENTION_GQA_SPLITS").ok().and_then(|v| v.parse().ok()).filter(|s| (4..=128).contains(s)).unwrap_or(32))
}

/// Shared memory attention_decode_gqa.comp declares (26,976 bytes), rounded up.
const GQA_ATTENTION_SHARED_BYTES: u32 = 28 * 1024;

/// Whether the device can run attention_decode_gqa.comp: quad operations, its shared memory and
/// workgroups of 256.
pub(crate) fn gqa_attention_runs_on(info: &super::context::DeviceInfo) -> bool {
    info.subgroup_quads && info.max_shared_memory_bytes >= GQA_ATTENTION_SHARED_BYTES && info.max_workgroup_invocations >= 256
}

/// The threshold in effect for a model on a device: `u32::MAX` (never) where the kernel does not
/// fit the heads (a group of up to 8 query heads, head dimensions of 32, 64, 128 or 256), the
/// device lacks quad operations or the kernel's shared memory, or another decode attention was
/// asked for.
fn gqa_attention_from(ctx: &VulkanContext, n_heads: usize, n_kv_heads: usize, head_dim: usize) -> u32 {
    let fits = n_kv_heads > 0 && n_heads.is_multiple_of(n_kv_heads) && n_heads / n_kv_heads <= 8 && [32, 64, 128, 256].contains(&head_dim);
    let other = !per_head_decode_attention() || std::env::var("STRATA_VULKAN_FUSE_ATTENTION").as_deref() == Ok("1");
    if !fits || other || !gqa_attention_runs_on(&ctx.info) {
        return u32::MAX;
    }
    match std::env::var("STRATA_ATTENTION_GQA_FROM").as_deref() {
        Ok("off") => u32::MAX,
        Ok(v) => v.parse().unwrap_or(DEFAULT_GQA_FROM),
        Err(_) => DEFAULT_GQA_FROM,
    }
}

impl ParamLayout {
    fn new(max_tokens: usize, max_outputs: usize, max_seqs: usize, max_blocks_per_seq: usize) -> ParamLayout {
        let tokens = HEADER_WORDS;
        let positions = tokens + max_tokens;
        let seq_of_token = positions + max_tokens;
        let output_rows = seq_of_token + max_tokens;
        let table_offsets = output_rows + max_outputs;
        let tables = table_offsets + max_tokens;
        ParamLayout { tokens, positions, seq_of_token, output_rows, table_offsets, tables, blocks_per_seq: max_blocks_per_seq, total: tables + max_seqs * max_blocks_per_seq }
    }

    /// Words a step of `n` tokens reads, from the start: everything before the block tables, and
    /// the table entries of at most `n` sequences (write_params writes only the entries a step's
    /// positions reach, at most blocks_per_seq a sequence). A step copies only these to the
    /// device: the whole buffer of a server's long contexts is hundreds of KB a token across
    /// the bus (16 sequences of 128k positions: 512 KB).
    fn step_words(&self, n: usize) -> usize {
        (self.tables + n.saturating_mul(self.blocks_per_seq)).min(self.total)
    }
}

/// The forward graph compiled for one Vulkan device.
pub struct VulkanPlan {
    // Field order is drop order: command buffers and pipelines before the memory they use, and
    // the context last.
    commands: CommandCache,
    profiler: Option<Profiler>,
    pipelines: Pipelines,
    graph: ForwardGraph,
    weights: Vec<Option<GpuWeight>>,
    bufs: Vec<Slice>,
    partial: Slice,
    /// The fused epilogues' counters (one u32 per chunk of 256 outputs and token), zeroed at the
    /// start of each step; each chunk's last workgroup resets its own.
    counters: Slice,
    /// Chained steps' record slots ([`chain_record_slots`]) and the bytes of one.
    chain_records: Slice,
    chain_slot_bytes: u64,
    /// Tagged rows ([`tagged_knob`]): one slot per RMSNorm and SwiGLU of the graph, each
    /// element as (its bits, the step's tag), and the bytes of one.
    tagged_rows: Slice,
    tagged_slot_bytes: u64,
    /// The last one-token step's tag (header word [`HEADER_STEP_TAG`]; never 0, which the
    /// tagged rows start with).
    step_tag: u32,
    /// 8-bit records an epilogue writes while its kernel still reads `rounded` (fused SwiGLU).
    rounded_alt: Slice,
    rope_table: Slice,
    /// Rounded copies of a product's input, one per rounding (Q8_0-style, Q8_K-style).
    rounded: [Slice; 2],
    arena: DeviceArena,
    /// The step parameters as the host writes them, and their device-local copy that the kernels
    /// read (copied at the start of each step: a kernel's read then never crosses the bus).
    /// (One host buffer a slot, [`StepTail::slot`]: a greedy run writes one while the other's
    /// step runs.)
    params: [Buffer; 2],
    params_device: Buffer,
    param_layout: ParamLayout,
    readback: Buffer,
    kv: VulkanKvMemory,
    /// Keeps imported host memory alive as long as the device may touch it.
    _kv_host: Option<Arc<HostKvMemory>>,
    logits: Vec<f32>,
    split_budget: usize,
    /// Decoded tokens of at least this many positions take attention_decode_gqa.comp.
    gqa_from: u32,
    opts: VulkanOptions,
    weight_bytes: u64,
    /// Whether a recorded step has grid barriers (ffn_persistent.comp), and the give-ups its
    /// dispatches had counted when the last step was checked.
    grid_barriers: bool,
    give_ups_seen: u32,
    /// Chained stages (shaders/chain.glsl) of each recorded step shape: the workgroups each
    /// word counts by the step's end (word 0 none); empty for none. Its readback holds them.
    chain_words: HashMap<(usize, usize, StepTail), Vec<u32>>,
    /// One-token steps a greedy run's command buffers hold, after its first step: always
    /// (`greedy_steps_fixed`: set by `STRATA_VULKAN_GREEDY_STEPS` or the caller), or while a
    /// submission's steps take at most [`GREEDY_BURST_US`] (`greedy_step_us`: the last run's
    /// time a step, 0 before one).
    greedy_steps_per_submission: usize,
    greedy_steps_fixed: bool,
    greedy_step_us: f64,
    ctx: Arc<VulkanContext>,
}

/// What a step reads back: its logits, or only each output row's argmax or top-k (computed on
/// the GPU after the logits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum StepTail {
    Logits,
    Argmax,
    TopK,
    /// `steps` one-token steps of a greedy run after its first ([`VulkanPlan::decode_greedy`])
    /// in one command buffer, each reading its token where the step before left its argmax on
    /// the device, not from the parameters. The two slots (0, 1) alternate: each has its own
    /// host parameter buffer (a region a step) and place in the readback, so the host writes
    /// one submission's while the one before runs, and reads tokens that the one after cannot
    /// overwrite.
    ArgmaxFed { slot: u8, steps: u8 },
}

impl StepTail {
    /// Which host parameter buffer and readback place the step uses.
    fn slot(self) -> usize {
        match self {
            StepTail::ArgmaxFed { slot, .. } => usize::from(slot & 1),
            _ => 0,
        }
    }

    /// One-token steps the command buffer runs (one but for a greedy run's).
    fn steps(self) -> usize {
        match self {
            StepTail::ArgmaxFed { steps, .. } => usize::from(steps).max(1),
            _ => 1,
        }
    }
}

/// Most one-token steps of a greedy run one command buffer holds
/// ([`VulkanPlan::set_greedy_steps_per_submission`]).
pub const GREEDY_MAX_STEPS_PER_SUBMISSION: usize = 8;

/// Greedy steps a command buffer holds unless `STRATA_VULKAN_GREEDY_STEPS` (1 to
/// [`GREEDY_MAX_STEPS_PER_SUBMISSION`]) says otherwise.
const DEFAULT_GREEDY_STEPS_PER_SUBMISSION: usize = 4;

/// `STRATA_VULKAN_GREEDY_STEPS` (clamped to 1..=[`GREEDY_MAX_STEPS_PER_SUBMISSION`]), if set.
fn greedy_steps_from_env() -> Option<usize> {
    std::env::var("STRATA_VULKAN_GREEDY_STEPS").ok().and_then(|v| v.parse::<usize>().ok()).map(|k| k.clamp(1, GREEDY_MAX_STEPS_PER_SUBMISSION))
}

/// Longest a submission of several greedy steps may take by default: its tokens reach the host
/// (and a stream) together, so a slow model's stream would come in visible bursts, while the
/// start a submission saves (~40 us on an H200) is nothing beside its steps.
const GREEDY_BURST_US: f64 = 16_000.0;

/// Steps the next greedy submission holds: `configured` if `fixed`, or once a step was timed
/// (`step_us` above 0) and `configured` steps of `step_us` fit [`GREEDY_BURST_US`]; else one.
/// (Not before a step is timed: on a slow device a stop would first wait for up to 2K - 1
/// dropped steps, which a shutdown's grace may not hold.)
fn greedy_steps_for(configured: usize, fixed: bool, step_us: f64) -> usize {
    if fixed || (step_us > 0.0 && step_us * configured as f64 <= GREEDY_BURST_US) {
        configured
    } else {
        1
    }
}

/// Recorded command buffers by step shape, with the pool and the timeline semaphore each step
/// signals.
struct CommandCache {
    ctx: Arc<VulkanContext>,
    pool: vk::CommandPool,
    timeline: Timeline,
    /// (tokens, outputs, what the step reads back) -> its command buffer.
    recorded: HashMap<(usize, usize, StepTail), vk::CommandBuffer>,
}

impl CommandCache {
    fn new(ctx: &Arc<VulkanContext>) -> Result<CommandCache, DeviceError> {
        let name = ctx.name();
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(ctx.queue_family);
        // SAFETY: valid device and create info.
        let pool = unsafe { ctx.device.create_command_pool(&info, None) }.map_err(|e| vk_error(&name, "vkCreateCommandPool", e))?;
        Ok(CommandCache { ctx: ctx.clone(), pool, timeline: Timeline::for_steps(ctx)?, recorded: HashMap::new() })
    }

    /// Frees every recorded command buffer (the cache is full).
    ///
    /// # Safety
    /// No submission of any of them may be pending.
    unsafe fn forget_all(&mut self) {
        let cbs: Vec<vk::CommandBuffer> = self.recorded.drain().map(|(_, cb)| cb).collect();
        // SAFETY: the caller's contract: none of them is pending.
        unsafe { self.ctx.device.free_command_buffers(self.pool, &cbs) };
    }
}

impl Drop for CommandCache {
    fn drop(&mut self) {
        // The plan drops this first (field order): a submission whose wait ran out of time
        // finishes here, before its command buffers and the plan's memory are freed.
        self.timeline.drain();
        // SAFETY: every submission has finished; freeing the pool frees its command buffers.
        unsafe {
            self.ctx.device.destroy_command_pool(self.pool, None);
        }
    }
}

/// Per-op GPU time from timestamps written after every op (`STRATA_VULKAN_PROFILE=1`), summed
/// by op and printed when the plan is dropped. Queries: 0 the step's start, 1 + i after op i,
/// n_ops + 1 the step's end, n_ops + 2 + i inside op i where it has two stages (attention: after
/// its split kernels, before their merge), which adds the two stages' own rows.
struct Profiler {
    ctx: Arc<VulkanContext>,
    pool: vk::QueryPool,
    capacity: u32,
    n_ops: u32,
    /// Label of each op of the graph.
    labels: Vec<String>,
    /// (op, step class) -> label, where a recording gave an op's slot other work (the
    /// persistent feed-forward half starts at its RMSNorm's).
    relabeled: HashMap<(usize, usize), &'static str>,
    /// (label, step class) -> (total ns, samples); see [`step_class`].
    totals: HashMap<(String, usize), (f64, u64)>,
    steps: HashMap<usize, (f64, u64)>,
    /// step class -> (ns in forward(), ns of it submitting and waiting for the GPU).
    host: HashMap<usize, (f64, f64)>,
    /// `STRATA_VULKAN_PROFILE=steps`: a step's first and last timestamps only, so that the GPU's
    /// time per step is measured without the per-op timestamps' own cost.
    steps_only: bool,
}

/// The profile's step classes: the token count of decode-sized steps (each batch size apart),
/// 0 for larger steps (prompts).
fn step_class(n_tokens: usize) -> usize {
    if n_tokens <= INT_MAX_TOKENS {
        n_tokens
    } else {
        0
    }
}

impl Profiler {
    fn new(ctx: &Arc<VulkanContext>, graph: &ForwardGraph) -> Result<Profiler, DeviceError> {
        let n_ops = graph.ops.len() as u32;
        let capacity = 2 * n_ops + 2;
        let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(capacity);
        // SAFETY: valid device and create info.
        let pool = unsafe { ctx.device.create_query_pool(&info, None) }.map_err(|e| vk_error(&ctx.name(), "vkCreateQueryPool", e))?;
        let labels = graph
            .ops
            .iter()
            .map(|op| match op {
                Op::Embed { .. } => "embed".to_string(),
                Op::RmsNorm { .. } => "rms_norm".to_string(),
                Op::MatMul { input, outputs } => format!("matmul {} -> {}", graph.buffer(*input).name, outputs.iter().map(|p| graph.buffer(p.out).name).collect::<Vec<_>>().join("+")),
                Op::HeadNorm { .. } => "head_norm".to_string(),
                Op::Rope { .. } => "rope".to_string(),
                Op::StoreKv { .. } => "store_kv".to_string(),
                Op::Attention { .. } => "attention".to_string(),
                Op::SwiGlu { .. } => "swiglu".to_string(),
                Op::Add { .. } => "add".to_string(),
                Op::SelectRows { .. } => "select_rows".to_string(),
            })
            .collect();
        let steps_only = std::env::var("STRATA_VULKAN_PROFILE").as_deref() == Ok("steps");
        Ok(Profiler { ctx: ctx.clone(), pool, capacity, n_ops, labels, relabeled: HashMap::new(), totals: HashMap::new(), steps: HashMap::new(), host: HashMap::new(), steps_only })
    }

    fn collect(&mut self, class: usize) {
        // (value, availability) per query: the mid-op ones are written by some ops only.
        let mut pairs = vec![[0u64; 2]; self.capacity as usize];
        // SAFETY: the submission that wrote the queries has completed; every query was reset.
        let ok = unsafe { self.ctx.device.get_query_pool_results(self.pool, 0, &mut pairs, vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WITH_AVAILABILITY) };
        // NOT_READY: some query was not written (a mid-op one), as expected.
        if !matches!(ok, Ok(()) | Err(vk::Result::NOT_READY)) {
            return;
        }
        let ticks: Vec<u64> = pairs.iter().map(|p| p[0]).collect();
        let ns = self.ctx.info.timestamp_period_ns as f64;
        let per_op = if self.steps_only { 0 } else { self.labels.len() };
        for (i, label) in self.labels.iter().enumerate().take(per_op) {
            let mut add = |label: String, dt: f64| {
                let e = self.totals.entry((label, class)).or_default();
                e.0 += dt;
                e.1 += 1;
            };
            let label = self.relabeled.get(&(i, class)).map_or_else(|| label.clone(), |l| l.to_string());
            add(label.clone(), ticks[i + 1].saturating_sub(ticks[i]) as f64 * ns);
            let mid = pairs[self.n_ops as usize + 2 + i];
            if mid[1] != 0 {
                add(format!("{label} (split kernels)"), mid[0].saturating_sub(ticks[i]) as f64 * ns);
                add(format!("{label} (merge)"), ticks[i + 1].saturating_sub(mid[0]) as f64 * ns);
            }
        }
        let last = self.labels.len();
        let s = self.steps.entry(class).or_default();
        s.0 += ticks[last + 1].saturating_sub(ticks[0]) as f64 * ns;
        s.1 += 1;
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        let mut classes: Vec<usize> = self.steps.keys().copied().collect();
        // One-token steps first, then batches by size, then the larger steps.
        classes.sort_by_key(|&c| if c == 0 { usize::MAX } else { c });
        for class in classes {
            let Some(&(step_ns, steps)) = self.steps.get(&class) else { continue };
            let what = match class {
                0 => format!("steps of more than {INT_MAX_TOKENS} tokens"),
                1 => "one-token steps".to_string(),
                n => format!("{n}-token steps"),
            };
            eprintln!("Vulkan profile, {what}: {steps}, {:.1} us per step on the GPU", step_ns / steps as f64 / 1e3);
            if let Some(&(forward_ns, wait_ns)) = self.host.get(&class) {
                let per = |ns: f64| ns / steps as f64 / 1e3;
                eprintln!("  host: {:.1} us per step in forward(), {:.1} us of it submitting and waiting", per(forward_ns), per(wait_ns));
            }
            let mut rows: Vec<(&String, f64, u64)> = self.totals.iter().filter(|((_, c), _)| *c == class).map(|((l, _), &(t, n))| (l, t, n)).collect();
            rows.sort_by(|a, b| b.1.total_cmp(&a.1));
            for (label, total, n) in rows {
                eprintln!("  {label:<32} {:>10.1} us per step ({:>5.1}%), {n} runs", total / steps as f64 / 1e3, 100.0 * total / step_ns);
            }
        }
        // SAFETY: no submission uses the pool any more.
        unsafe { self.ctx.device.destroy_query_pool(self.pool, None) };
    }
}

/// Where the plan's KV arena comes from.
pub enum KvSource {
    /// Allocated by this device.
    Allocate(strata_kv::KvLayout),
    /// The CPU device's host memory, imported in place.
    ImportHost(Arc<HostKvMemory>),
    /// Already imported or allocated.
    Ready(VulkanKvMemory),
}

fn unsupported(ctx: &VulkanContext, what: String) -> DeviceError {
    DeviceError::Unsupported { device: ctx.name(), what }
}

impl VulkanPlan {
    /// Compiles `graph` for the device: uploads the weights it reads from `file`, allocates the
    /// activations and sets up the KV arena.
    ///
    /// # Errors
    /// A graph outside the shaders' limits, out of device memory, or a KV arena that cannot be
    /// allocated or imported.
    pub fn compile(ctx: &Arc<VulkanContext>, graph: ForwardGraph, file: &GgufFile, kv: KvSource, opts: VulkanOptions) -> Result<VulkanPlan, DeviceError> {
        let hp = graph.hparams.clone();
        let group = hp.n_heads / hp.n_kv_heads.max(1);
        if group > ATTENTION_MAX_GROUP || hp.head_dim > ATTENTION_MAX_HEAD_DIM || !hp.head_dim.is_multiple_of(8) || group * hp.head_dim > ATTENTION_MAX_Q || !hp.n_heads.is_multiple_of(hp.n_kv_heads.max(1)) {
            return Err(unsupported(ctx, format!("attention with {} query heads per KV head of {} dimensions (the shader takes up to {ATTENTION_MAX_GROUP} heads of a multiple of 8 up to {ATTENTION_MAX_HEAD_DIM} dimensions)", group, hp.head_dim)));
        }
        let (kv, kv_host) = match kv {
            KvSource::Allocate(layout) => (VulkanKvMemory::allocate(ctx, &layout)?, None),
            KvSource::ImportHost(host) => {
                let export = host.export()?;
                let layout = export.layout().clone();
                // SAFETY: the plan keeps `host` alive (`_kv_host`) as long as the imported buffers.
                (unsafe { VulkanKvMemory::import(ctx, &layout, export)? }, Some(host))
            }
            KvSource::Ready(m) => (m, None),
        };
        if kv.layout.params.shape.n_layers as usize != hp.n_layers || (kv.layout.params.shape.n_kv_heads as usize * kv.layout.params.shape.head_dim as usize) != hp.kv_width() {
            return Err(unsupported(ctx, "the KV arena was laid out for another model".into()));
        }
        if kv.layout.params.block_size as usize != opts.block_size {
            return Err(unsupported(ctx, format!("KV blocks of {} cells, the plan was asked for {}", kv.layout.params.block_size, opts.block_size)));
        }

        // Weights: sizes first, then one upload pass through the staging buffer.
        let mut arena = DeviceArena::new(ctx, "weights and activations");
        let layouts: Vec<GpuLayout> = graph.weights.iter().map(|w| if w.rows == 1 { GpuLayout { format: WeightFormat::F32, main_bytes: w.cols as u64 * 4, aux_offset: 0, aux_bytes: 0 } } else { conv::layout_of(w.ty, w.rows, w.cols) }).collect();
        let sizes: Vec<u64> = layouts.iter().map(|l| l.total_bytes()).collect();
        let slices = arena.alloc_all(&sizes)?;
        let mut uploader = Uploader::new(ctx, 64 << 20)?;
        let mut weights = Vec::with_capacity(graph.weights.len());
        for ((w, layout), slice) in graph.weights.iter().zip(&layouts).zip(&slices) {
            let bad = || unsupported(ctx, format!("weight {} lies outside the model file", w.name));
            let start = usize::try_from(w.offset).map_err(|_| bad())?;
            let len = usize::try_from(w.bytes).map_err(|_| bad())?;
            let src = file.bytes().get(start..start.checked_add(len).ok_or_else(bad)?).ok_or_else(bad)?;
            let dst = arena.buffer(slice);
            if w.rows == 1 {
                let mut v = vec![0f32; w.cols];
                strata_quant::dequantize(w.ty, src, &mut v)?;
                uploader.upload(dst, slice.offset, &conv::f32_bytes(&v))?;
            } else {
                if layout.format == WeightFormat::F32 && w.ty != strata_quant::GgmlType::F32 {
                    tracing::warn!(weight = %w.name, ty = %w.ty, "no Vulkan shader reads this type; widened to f32");
                }
                let mut err = None;
                uploader.upload_with(dst, slice.offset, layout.total_bytes(), |staging| {
                    if let Err(e) = conv::convert(w.ty, src, w.rows, w.cols, staging) {
                        err = Some(e);
                    }
                })?;
                if let Some(e) = err {
                    return Err(e);
                }
            }
            weights.push(Some(GpuWeight { layout: *layout, address: slice.address, rows: w.rows, cols: w.cols }));
        }
        let weight_bytes = uploader.uploaded_bytes;

        // Activations, the attention scratch and the rope table.
        let rows_of = |r: Rows| match r {
            Rows::Tokens => opts.max_batch_tokens,
            Rows::Outputs => opts.max_outputs,
        };
        let split_budget = opts.max_batch_tokens.max(8192);
        let mut sizes: Vec<u64> = graph.buffers.iter().map(|b| (rows_of(b.rows) * b.width * 4) as u64).collect();
        // The split results of attention, or in the exact mode its scores (a context's length and
        // its 16-position chunk sums per token and head).
        let exact_scratch = if ctx.exact { opts.max_batch_tokens.min(INT_MAX_TOKENS) * hp.n_heads * exact_scratch_layout(opts.max_context).0 } else { 0 };
        sizes.push(((split_budget * hp.n_heads * (hp.head_dim + 2)).max(exact_scratch) * 4) as u64);
        let half = hp.rope_dims / 2;
        sizes.push((opts.max_context * 2 * half * 4) as u64);
        let widest_input = graph.ops.iter().filter_map(|op| if let Op::MatMul { input, .. } = op { Some(graph.buffer(*input).width) } else { None }).max().unwrap_or(0);
        let rows_max = opts.max_batch_tokens.max(opts.max_outputs);
        // Rounded activations: f32 rows, or 8-bit records for decode steps.
        let rounded_bytes = (rows_max * widest_input * 4).max(rows_max.min(INT_MAX_TOKENS) * int_act_record(widest_input).0) as u64;
        sizes.push(rounded_bytes);
        sizes.push(rounded_bytes);
        sizes.push(rounded_bytes);
        // The counters, then the L2 prefetch's sink word, then the grid barriers' words
        // (ffn_persistent.comp: arrivals, departures, give-ups), then the chained stages' words.
        sizes.push(counter_bytes(&graph) + 16 + GRID_SYNC_BYTES + chain_bytes());
        // Chained one-token steps' 8-bit records: a slot per record a step writes (see
        // `chain_record_slots`).
        let chain_slot_bytes = int_act_record(widest_input).0.next_multiple_of(256) as u64;
        sizes.push(chain_slot_bytes * chain_record_slots(&graph.ops) as u64);
        // Tagged rows: 8 bytes an element of the widest row an RMSNorm or a quantization reads,
        // or of a layer's q and new K and V rows.
        let tagged_row_width = graph
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::RmsNorm { input, .. } => Some(graph.buffer(*input).width),
                Op::SwiGlu { out, .. } => Some(graph.buffer(*out).width),
                Op::Attention { .. } => Some((hp.n_heads + 2 * hp.n_kv_heads) * hp.head_dim),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let tagged_slot_bytes = (tagged_row_width * 8).next_multiple_of(256) as u64;
        // (And one that no stage writes, for `tagged_fault`.)
        sizes.push(tagged_slot_bytes * (tagged_slot_count(&graph.ops) + 1) as u64);
        let mut slices = arena.alloc_all(&sizes)?;
        let tagged_rows = slices.pop().expect("allocated");
        let chain_records = slices.pop().expect("allocated");
        let counters = slices.pop().expect("allocated");
        let rounded_alt = slices.pop().expect("allocated");
        let rounded_k = slices.pop().expect("allocated");
        let rounded_0 = slices.pop().expect("allocated");
        let rope_table = slices.pop().expect("allocated");
        let partial = slices.pop().expect("allocated");
        let bufs = slices;
        let mut table = Vec::with_capacity(opts.max_context * 2 * half);
        for pos in 0..opts.max_context {
            let (c, s) = crate::cpu::ops::rope_angles(hp.rope_dims, hp.rope_base, pos as u32);
            table.extend(c);
            table.extend(s);
        }
        uploader.upload(arena.buffer(&rope_table), rope_table.offset, &conv::f32_bytes(&table))?;
        // The grid barriers count from zero (each dispatch leaves its counters at zero), and so
        // do the norm epilogue's tickets (each last workgroup resets its chunk's).
        uploader.upload(arena.buffer(&counters), counters.offset + counter_bytes(&graph) + 16, &[0u8; GRID_SYNC_BYTES as usize])?;
        uploader.upload(arena.buffer(&counters), counters.offset, &vec![0u8; counter_bytes(&graph) as usize])?;
        // Tagged rows start with tag 0, which no step has.
        uploader.upload(arena.buffer(&tagged_rows), tagged_rows.offset, &vec![0u8; tagged_rows.bytes as usize])?;
        uploader.flush()?;

        let max_blocks_per_seq = opts.max_context.div_ceil(opts.block_size);
        let max_seqs = opts.max_seqs.clamp(1, opts.max_batch_tokens);
        let param_layout = ParamLayout::new(opts.max_batch_tokens, opts.max_outputs, max_seqs, max_blocks_per_seq);
        // The largest step's parameters, or a greedy submission's regions of a one-token step.
        let params_bytes = (param_layout.total.max(GREEDY_MAX_STEPS_PER_SUBMISSION * param_layout.step_words(1)) * 4) as u64;
        let params = [
            Buffer::new(ctx, params_bytes, MemoryKind::HostVisible, "step parameters")?,
            Buffer::new(ctx, params_bytes, MemoryKind::HostVisible, "step parameters (second slot)")?,
        ];
        let params_device = Buffer::new(ctx, params_bytes, MemoryKind::DeviceLocal, "step parameters (device copy)")?;
        // The logits, then the grid barriers' give-up count, then the chained stages' words, then
        // the second slot's tokens of a greedy run.
        let readback = Buffer::new(ctx, fed_token_readback(opts.max_outputs, hp.vocab_size) + (GREEDY_MAX_STEPS_PER_SUBMISSION * 4).next_multiple_of(16) as u64, readback_kind(), "logits readback")?;
        tracing::info!(device = %ctx.name(), weights_mib = weight_bytes >> 20, device_mib = arena.allocated_bytes() >> 20, "Vulkan plan compiled");
        let greedy_steps_env = greedy_steps_from_env();
        Ok(VulkanPlan {
            commands: CommandCache::new(ctx)?,
            profiler: if std::env::var("STRATA_VULKAN_PROFILE").is_ok_and(|v| v == "1" || v == "steps") { Some(Profiler::new(ctx, &graph)?) } else { None },
            pipelines: Pipelines::new(ctx)?,
            graph,
            weights,
            bufs,
            partial,
            counters,
            chain_records,
            chain_slot_bytes,
            tagged_rows,
            tagged_slot_bytes,
            step_tag: 0,
            rounded_alt,
            rope_table,
            rounded: [rounded_0, rounded_k],
            arena,
            params,
            params_device,
            param_layout,
            readback,
            kv,
            _kv_host: kv_host,
            logits: Vec::new(),
            split_budget,
            gqa_from: gqa_attention_from(ctx, hp.n_heads, hp.n_kv_heads, hp.head_dim),
            opts: VulkanOptions { max_seqs, ..opts },
            weight_bytes,
            grid_barriers: false,
            give_ups_seen: 0,
            chain_words: HashMap::new(),
            greedy_steps_per_submission: greedy_steps_env.unwrap_or(DEFAULT_GREEDY_STEPS_PER_SUBMISSION),
            greedy_steps_fixed: greedy_steps_env.is_some(),
            greedy_step_us: 0.0,
            ctx: ctx.clone(),
        })
    }

    /// Sets how many one-token steps of a greedy run ([`ForwardPlan::decode_greedy`]) after its
    /// first go into one command buffer (clamped to 1..=[`GREEDY_MAX_STEPS_PER_SUBMISSION`]),
    /// whatever a step takes: more save each submission's start (its barrier against the one
    /// before, the parameter copy, the switch between command buffers) on fewer steps; the host
    /// reads a submission's tokens together, and a run stopped early has run up to
    /// `2 * steps - 1` steps whose tokens are dropped. The default is
    /// `STRATA_VULKAN_GREEDY_STEPS`, else 4 once four steps are timed at most 16 ms.
    pub fn set_greedy_steps_per_submission(&mut self, steps: usize) {
        self.greedy_steps_per_submission = steps.clamp(1, GREEDY_MAX_STEPS_PER_SUBMISSION);
        self.greedy_steps_fixed = true;
    }

    /// Bytes of weights uploaded.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// Bytes of device memory held for weights and activations (the KV arena not included).
    pub fn device_bytes(&self) -> u64 {
        self.arena.allocated_bytes()
    }

    /// The KV arena's memory.
    pub fn kv_memory(&self) -> &VulkanKvMemory {
        &self.kv
    }


    /// Where a step of `slot` leaves its argmax tokens in the readback.
    fn readback_of_slot(&self, slot: usize) -> u64 {
        if slot == 1 { fed_token_readback(self.opts.max_outputs, self.graph.hparams.vocab_size) } else { 0 }
    }

    /// Writes the step's parameters into the host buffer of `slot` ([`StepTail::slot`]), which
    /// no pending submission may read, at its `region` (a greedy submission's step; 0 else).
    fn write_params(&mut self, b: &StepBatch<'_>, slot: usize, region: usize) -> Result<(), DeviceError> {
        let pl = self.param_layout;
        let n = b.len();
        if region > 0 && (n != 1 || region >= GREEDY_MAX_STEPS_PER_SUBMISSION) {
            return Err(DeviceError::BadBatch(format!("parameter region {region} for a step of {n} tokens")));
        }
        let base = region * pl.step_words(n);
        let n_seqs = b.block_tables.len();
        if n_seqs > self.opts.max_seqs {
            return Err(DeviceError::BadBatch(format!("{n_seqs} sequences in a step; this plan takes up to {}", self.opts.max_seqs)));
        }
        if let Some(p) = b.positions.iter().find(|&&p| p as usize >= self.opts.max_context) {
            return Err(DeviceError::BadBatch(format!("position {p} is beyond the context of {}", self.opts.max_context)));
        }
        // Each sequence's table up to the last block its tokens reach (the shaders read no
        // further), so that a step's entries fit the words its command buffer copies.
        let bs = self.opts.block_size.max(1);
        let mut reach = vec![0usize; n_seqs];
        for (&seq, &pos) in b.seq_of_token.iter().zip(b.positions) {
            if let Some(r) = reach.get_mut(seq as usize) {
                *r = (*r).max(pos as usize / bs + 1);
            }
        }
        let used: Vec<&[u32]> = b.block_tables.iter().zip(&reach).map(|(t, &r)| &t[..r.min(t.len())]).collect();
        let table_words: usize = used.iter().map(|t| t.len()).sum();
        if pl.tables + table_words > pl.step_words(n) {
            return Err(DeviceError::BadBatch(format!("{table_words} block-table entries in a step of {n} tokens; this plan holds {}", pl.step_words(n) - pl.tables)));
        }
        // Splits of a fixed length, doubled only while the step's splits would overflow the
        // scratch: a token's attention is then summed in the same order whatever else is in the
        // step (batch invariance), for every decode batch.
        // Tokens that attention_decode_gqa.comp takes (`gqa_from` positions and more) have
        // splits of their own length's (gqa_split_len): about 32 whatever the batch.
        // (Decode-sized steps only: larger ones run attention.comp.)
        let gqa_from = if n <= INT_MAX_TOKENS { self.gqa_from } else { u32::MAX };
        let max_len = b.positions.iter().filter(|&&p| !is_long_context(p, gqa_from)).map(|&p| p as usize + 1).max().unwrap_or(1);
        let (long, long_splits) = long_context_tokens(b.positions, gqa_from);
        let mut split_len = attention_split_min();
        // (n * long_splits is at most 32 * 128, within the scratch.)
        while n * max_len.div_ceil(split_len) > self.split_budget || max_len.div_ceil(split_len) > ATTENTION_MAX_SPLITS {
            split_len *= 2;
        }
        let n_splits = max_len.div_ceil(split_len).max(long_splits);
        let hp = &self.graph.hparams;
        let mut header = step_header(n_splits, split_len, n, hp.n_heads, hp.n_kv_heads, long);
        if n == 1 {
            // Every one-token step gets a tag of its own, so that a tagged row left by an
            // earlier step never passes for this step's.
            self.step_tag = self.step_tag.wrapping_add(1).max(1);
            header[HEADER_STEP_TAG] = self.step_tag;
        }
        let bytes = self.params[slot].mapped_mut().ok_or_else(|| unsupported(&self.ctx, "the parameter buffer is not mapped".into()))?;
        // The buffer is host-coherent and no pending submission reads it: plain writes.
        let words: &mut [u32] = &mut bytemuck_words(bytes)[base..];
        words[..header.len()].copy_from_slice(&header);
        words[pl.tokens..pl.tokens + n].copy_from_slice(b.tokens);
        words[pl.positions..pl.positions + n].copy_from_slice(b.positions);
        words[pl.seq_of_token..pl.seq_of_token + n].copy_from_slice(b.seq_of_token);
        words[pl.output_rows..pl.output_rows + b.output_rows.len()].copy_from_slice(b.output_rows);
        let mut at = 0usize;
        for t in &used {
            words[pl.tables + at..pl.tables + at + t.len()].copy_from_slice(t);
            at += t.len();
        }
        token_table_offsets(&used, b.seq_of_token, &mut words[pl.table_offsets..pl.table_offsets + n])
    }

    fn record(&mut self, n: usize, n_out: usize, tail: StepTail) -> Result<vk::CommandBuffer, DeviceError> {
        if let Some(&cb) = self.commands.recorded.get(&(n, n_out, tail)) {
            return Ok(cb);
        }
        let name = self.ctx.name();
        if self.commands.recorded.len() >= MAX_RECORDED_SHAPES {
            // SAFETY: no submission is pending: every forward waits for its own, and a greedy run
            // records its shapes before it submits (then finds them here).
            unsafe { self.commands.forget_all() };
        }
        let alloc = vk::CommandBufferAllocateInfo::default().command_pool(self.commands.pool).level(vk::CommandBufferLevel::PRIMARY).command_buffer_count(1);
        // SAFETY: the pool is live.
        let cb = unsafe { self.ctx.device.allocate_command_buffers(&alloc) }.map_err(|e| vk_error(&name, "vkAllocateCommandBuffers", e))?[0];
        // SAFETY: a fresh command buffer.
        unsafe { self.ctx.device.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()) }.map_err(|e| vk_error(&name, "vkBeginCommandBuffer", e))?;
        let ops = std::mem::take(&mut self.graph.ops);
        let result = self.record_ops(cb, &ops, n, n_out, tail).map(|(grid, chain_words)| {
            self.grid_barriers |= grid;
            self.chain_words.insert((n, n_out, tail), chain_words);
        });
        self.graph.ops = ops;
        // SAFETY: recording began above.
        let ended = unsafe { self.ctx.device.end_command_buffer(cb) };
        if let Err(e) = result.and(ended.map_err(|e| vk_error(&name, "vkEndCommandBuffer", e))) {
            // SAFETY: never submitted.
            unsafe { self.ctx.device.free_command_buffers(self.commands.pool, &[cb]) };
            return Err(e);
        }
        self.commands.recorded.insert((n, n_out, tail), cb);
        Ok(cb)
    }

    /// Records the step's ops into `cb`; returns whether it has grid barriers and how many
    /// chained stages' words it reads back.
    /// With [`StepTail::Argmax`] or [`StepTail::TopK`] the step ends in each output row's
    /// argmax or top-k on the GPU (argmax.comp, top_k.comp), and only those are read back (at
    /// the readback's start), not the logits.
    fn record_ops(&mut self, cb: vk::CommandBuffer, ops: &[Op], n: usize, n_out: usize, tail: StepTail) -> Result<(bool, Vec<u32>), DeviceError> {
        let hp = self.graph.hparams.clone();
        let pl = self.param_layout;
        // A greedy submission's steps (one else), each reading the parameters of its own region.
        let steps = tail.steps();
        let region_words = pl.step_words(n);
        let params_address = self.params_device.address();
        let rows_of = |g: &ForwardGraph, b: BufId| match g.buffer(b).rows {
            Rows::Tokens => n,
            Rows::Outputs => n_out,
        };
        let device = self.ctx.device.clone();
        let (graph, weights, bufs, kv, ctx) = (&self.graph, &self.weights, &self.bufs, &self.kv, &self.ctx);
        let (partial, rope_table, block_size, rounded, max_context) = (self.partial, self.rope_table, self.opts.block_size, self.rounded, self.opts.max_context);
        let (counters, rounded_alt, gqa_from) = (self.counters, self.rounded_alt, self.gqa_from);
        let counters_buffer = self.arena.buffer(&counters);
        // A step of one token and one output row: the ops after SelectRows read its input in
        // place (its only row is the output row), a dispatch and a barrier fewer a token.
        let elided_select = if n == 1 && n_out == 1 { elidable_select_rows(graph, ops) } else { None };
        let mut addresses: Vec<u64> = bufs.iter().map(|b| b.address).collect();
        if let Some((_, input, out)) = elided_select {
            addresses[out.0 as usize] = addresses[input.0 as usize];
        }
        let addr_of = |id: BufId| addresses[id.0 as usize];
        let params_buffer = self.params_device.buffer;
        let params_host = self.params[tail.slot()].buffer;
        let readback_at = self.readback_of_slot(tail.slot());
        let params_bytes = (steps * region_words * 4) as u64;
        // A greedy run's later step reads its token where the step before left its argmax.
        let fed = matches!(tail, StepTail::ArgmaxFed { .. });
        let tokens_offset = argmax_offset(graph);
        // (Greedy submissions of several steps are never profiled: their queries are a step's.)
        let profile_pool = self.profiler.as_ref().filter(|_| steps == 1).map(|p| (p.pool, p.capacity));
        // The per-op timestamps (not in the steps-only profile: only its first and last).
        let op_stamps = profile_pool.filter(|_| self.profiler.as_ref().is_some_and(|p| !p.steps_only));
        // (`ops` is the graph's op list, taken out of it while recording.)
        let n_graph_ops = ops.len() as u32;
        if let Some((pool, n)) = profile_pool {
            // SAFETY: recording; the pool has `n` queries.
            unsafe { device.cmd_reset_query_pool(cb, pool, 0, n) };
        }
        let mut rec = Recorder::new(&device, cb, &mut self.pipelines);
        if fed {
            // Submitted while the step before may still run: its reads of the parameters come
            // before the copy over them, its argmax before this step's embedding.
            rec.barrier_after_earlier_submissions();
        }
        rec.copy_in(params_host, params_buffer, params_bytes);
        let logits = &bufs[graph.logits.0 as usize];
        let zero_counters = ["STRATA_VULKAN_FUSE_SWIGLU_PRODUCT", "STRATA_VULKAN_FUSE_ATTENTION"].iter().any(|k| std::env::var(k).as_deref() == Ok("1"));
        if let Some((pool, _)) = profile_pool {
            rec.timestamp(pool, 0);
        }
        let norm_partials = counters.address + norm_partials_offset(graph);
        // Fused stages recorded (QKV with RoPE, gate/up with SwiGLU, attention with its merge).
        let mut fused = [0usize; 3];
        let prefetch = if n <= INT_MAX_TOKENS { prefetch_bytes() } else { 0 };
        let sink = counters.address + counter_bytes(graph);
        let grid_sync = sink + 16;
        let mut grid_barriers = false;
        let mut persistent_ffn_ops = Vec::new();
        // Chained stages: one-token steps of the fast kernels, opt-in.
        let chain_offset = counters.offset + counter_bytes(graph) + 16 + GRID_SYNC_BYTES;
        let mut chain = ChainRecording::new(if n == 1 && steps == 1 && !ctx.exact { chain_mode() } else { None }, grid_sync + GRID_SYNC_BYTES, CHAIN_LINE_WORDS as u32);
        // A test's forced give-up ([`wait_fault`]), the same for every step of the recording.
        let fault = wait_fault();
        chain.fault_pending = fault == Some(WaitFault::Chain);
        let mut record_slots = (0..chain_record_slots(ops) as u64).map(|i| self.chain_records.address + i * self.chain_slot_bytes);
        // Small stages recorded right after the stage before them, with no barrier between
        // them ([`tagged_knob`]; the one-token steps of the fast kernels).
        let tagged = n == 1 && !ctx.exact && !chain.enabled && op_stamps.is_none();
        let tagged_norms = tagged && tagged_knob("STRATA_VULKAN_TAGGED_NORM");
        let tagged_quants = tagged && tagged_knob("STRATA_VULKAN_TAGGED_QUANT");
        let tagged_merges = tagged && tagged_knob("STRATA_VULKAN_TAGGED_MERGE");
        // The split kernels recorded right after QKV (beside the tagged merge after them).
        let tagged_attention = tagged_merges && std::env::var("STRATA_VULKAN_TAGGED_ATTENTION").as_deref() == Ok("1");
        // The rounding of the merge after the split kernels of the attention at `at`, where it
        // reads their records tagged (with no barrier between them; one-token steps, both split
        // kernels tag) and quantizes for the output projection after it.
        let tagged_merge_at = |at: usize| -> Option<ActRounding> {
            let Some(Op::Attention { out, .. }) = ops.get(at) else { return None };
            fused_product_rounding(ctx, weights, ops.get(at + 1), *out, n, Some("STRATA_VULKAN_FUSE_COMBINE"))
                .filter(|_| tagged_merges && per_head_decode_attention() && prefetch == 0 && hp.n_layers < 256 && std::env::var("STRATA_VULKAN_FUSE_ATTENTION").as_deref() != Ok("1"))
        };
        let (tagged_rows, tagged_slot_bytes) = (self.tagged_rows.address, self.tagged_slot_bytes);
        if chain.enabled {
            rec.zero(counters_buffer, chain_offset, chain_bytes());
        }
        for step in 0..steps {
            let base = step * region_words;
            let param_addr = |word: usize| params_address + ((base + word) * 4) as u64;
            let (p_tokens, p_pos, p_seq, p_rows, p_toff, p_tables, p_header) =
                (param_addr(pl.tokens), param_addr(pl.positions), param_addr(pl.seq_of_token), param_addr(pl.output_rows), param_addr(pl.table_offsets), param_addr(pl.tables), param_addr(0));
            // Where the step's indirect dispatches are (its header's).
            let header_at = (base * 4) as u64;
            // A fed step k of a submission reads argmax word k (word 0: the submission before's
            // last token) and writes word k + 1, its last step word 0.
            let token_addr = if fed { counters.address + tokens_offset + (step * 4) as u64 } else { p_tokens };
            let argmax_word = if step + 1 < steps { step + 1 } else { 0 };
            // Only the opt-in fused epilogues count (a fill and a barrier per step otherwise saved).
            // Their counters and the norm partials, not the argmax words after them: a fed step
            // reads its token there.
            if zero_counters {
                rec.zero(counters_buffer, counters.offset, tokens_offset);
            }
            // Ops another op's dispatch did (fused) are skipped: a product whose output only feeds
            // the residual add that follows it adds into the residual stream itself (the integer
            // kernels); RoPE of Q and K and the K/V store are one dispatch.
            let mut skip_ops = 0usize;
            // Set by an RMSNorm that quantized its output for the product that follows.
            let mut prequantized: Option<u64> = None;
            // Set by an RMSNorm left to the product that follows (its input row, weight and eps).
            let mut norm_in_product: Option<(u64, u64, f32)> = None;
            // Set by a residual-adding product that did the RMSNorm after it (its partials' address,
            // shaders/matvec_q.comp NORM_EPILOGUE), for that norm's op; then for the product after
            // it, which scales its outputs by the norm.
            let mut norm_out_done: Option<u64> = None;
            let mut norm_scaled: Option<u64> = None;
            // Set by a residual-adding product that wrote its row tagged, for the RMSNorm after
            // it, recorded with no barrier between them: the row's slot, and the records the
            // product reads (which the norm, running beside it, must not overwrite: it writes
            // its own to the other records buffer, `tagged_records`).
            let mut tagged_norm_input: Option<(u64, u64)> = None;
            // Likewise for the SwiGLU row's quantization.
            let mut tagged_quant_input: Option<(u64, u64)> = None;
            // Set by QKV when it wrote q and the new cell tagged, for the split kernels after it,
            // recorded with no barrier between them: the tagged row's slot and where the merge
            // after them writes its records (not a buffer QKV reads: QKV may still be reading
            // when a merge of the first heads' splits is done).
            let mut tagged_attention_input: Option<(u64, u64)> = None;
            let tagged_records = |r: ActRounding, read: u64| if read == rounded_alt.address { rounded[r as usize].address } else { rounded_alt.address };
            // The last slot is never written: [`wait_fault`]'s.
            let fault_slot = tagged_rows + tagged_slot_count(ops) as u64 * tagged_slot_bytes;
            let mut norm_fault_pending = fault == Some(WaitFault::Norm);
            let mut merge_fault_pending = fault == Some(WaitFault::Merge);
            let mut grid_fault_pending = fault == Some(WaitFault::Grid);
            let mut tagged_slots = (0..tagged_slot_count(ops) as u64).map(|i| tagged_rows + i * tagged_slot_bytes);
            for (op_index, op) in ops.iter().enumerate() {
                if skip_ops > 0 {
                    skip_ops -= 1;
                    if let Some((pool, _)) = op_stamps {
                        rec.timestamp(pool, op_index as u32 + 1);
                    }
                    continue;
                }
                match op {
                    Op::Embed { table, out } => {
                        let w = weights[table.0 as usize].ok_or_else(|| unsupported(ctx, "embedding table not uploaded".into()))?;
                        let width = graph.buffer(*out).width;
                        let push = Push::new().addr(w.address).addr(w.aux()).addr(token_addr).addr(bufs[out.0 as usize].address).u32(w.cols as u32).u32(width as u32);
                        rec.dispatch(Kernel::Embed(w.layout.format), &push, crate::vulkan::kernels::embed_groups(n, w.cols))?;
                    }
                    Op::RmsNorm { input, weight, out } => {
                        let tagged_in = tagged_norm_input.take();
                        if let Some(partials) = norm_out_done.take() {
                            // Done by the product before (its records in the spare buffer).
                            prequantized = Some(rounded_alt.address);
                            norm_scaled = Some(partials);
                            if let Some((pool, _)) = op_stamps {
                                rec.timestamp(pool, op_index as u32 + 1);
                            }
                            continue;
                        }
                        let rows = rows_of(graph, *input);
                        let width = graph.buffer(*input).width as u32;
                        let w = weights[weight.0 as usize].map_or(0, |w| w.address);
                        if let Some(f) = persistent_ffn(ctx, graph, weights, ops, op_index, n) {
                            // The layer's feed-forward half in one dispatch (the norm, gate/up with
                            // SwiGLU, the quantization, down with the residual add).
                            let (g, u, d) = (f.gate, f.up, f.down);
                            let (_, x_meta) = int_act_record(width as usize);
                            let (_, act_meta) = int_act_record(g.rows);
                            let push = Push::new()
                                .addr(addr_of(*input))
                                .addr(w)
                                .addr(rounded[f.rounding as usize].address)
                                .addr(g.address)
                                .addr(g.aux())
                                .addr(u.address)
                                .addr(u.aux())
                                .addr(addr_of(f.act))
                                .addr(rounded_alt.address)
                                .addr(d.address)
                                .addr(d.aux())
                                .addr(f.down_bias)
                                .addr(grid_sync)
                                .u32(width)
                                .u32(g.rows as u32)
                                .u32(x_meta as u32)
                                .u32(act_meta as u32)
                                // (`STRATA_VULKAN_WAIT_FAULT=grid`, for tests: the step's first
                                // dispatch waits for a workgroup too many at its first barrier.)
                                .u32(GRID_SPIN_LIMIT | if std::mem::take(&mut grid_fault_pending) { GRID_FAULT } else { 0 })
                                .f32(hp.rms_eps);
                            rec.dispatch(Kernel::FfnPersistent(g.layout.format, f.layout), &push, [grid_groups(ctx) as u32, 1, 1])?;
                            PERSISTENT_FFN_RECORDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            persistent_ffn_ops.push(op_index);
                            // Gate/up, SwiGLU, down and the add.
                            skip_ops = 4;
                            grid_barriers = true;
                            rec.barrier();
                            if let Some((pool, _)) = op_stamps {
                                rec.timestamp(pool, op_index as u32 + 1);
                            }
                            continue;
                        }
                        if norm_prologue_fits(ctx, graph, weights, ops, op_index, n) {
                            // The product after it normalizes the row in its own workgroups: no
                            // stage, no barrier here.
                            norm_in_product = Some((addr_of(*input), w, hp.rms_eps));
                            if let Some((pool, _)) = op_stamps {
                                rec.timestamp(pool, op_index as u32 + 1);
                            }
                            continue;
                        }
                        let out_width = graph.buffer(*out).width as u32;
                        // Quantize for the product that follows, in the same dispatch, when it reads
                        // this output as 8-bit records.
                        let fused = fused_product_rounding(ctx, weights, ops.get(op_index + 1), *out, rows, None).filter(|&r| rms_norm_can_quantize(ctx, width as usize, r));
                        match fused {
                            Some(r) => {
                                let (record_bytes, meta_offset) = int_act_record(width as usize);
                                let records = match tagged_in {
                                    Some((_, read)) => tagged_records(r, read),
                                    None => chain.record_slot(&mut record_slots).unwrap_or(rounded[r as usize].address),
                                };
                                let push = Push::new().addr(addr_of(*input)).addr(w).addr(addr_of(*out)).addr(records).u32(width).u32(1).u32(width).u32(out_width).f32(hp.rms_eps).u32(record_bytes as u32).u32(meta_offset as u32);
                                // In the rows' chunks, the scale left to the products after it
                                // (quantize_act.comp NORM_W; tagged: one row, waiting for its chunk).
                                let chunked = chunked_norm(ctx, graph, weights, ops, op_index, n);
                                let chunk_push = Push::new().addr(addr_of(*input)).addr(records).u32(width).u32(width).u32(rows as u32).u32(record_bytes as u32).u32(meta_offset as u32);
                                let chunk_groups = int_quantize_groups(rows, width as usize);
                                match tagged_in {
                                    Some((row, _)) => {
                                        // (`STRATA_VULKAN_WAIT_FAULT=norm`, for tests: the step's first
                                        // tagged norm reads the slot no stage writes, and gives up.)
                                        let row = if std::mem::take(&mut norm_fault_pending) { fault_slot } else { row };
                                        if chunked {
                                            rec.dispatch(Kernel::NormQuantizeTagged(r), &chunk_push.tail_addrs(&[row, p_header, grid_sync + 8, w, norm_partials]).f32(hp.rms_eps), chunk_groups)?;
                                        } else {
                                            rec.dispatch(Kernel::RmsNormIntTagged(r), &push.tail_addrs(&[row, p_header, grid_sync + 8]), [rows as u32, 1, 1])?;
                                        }
                                        // (Its give-ups are counted where the grid barriers' are.)
                                        grid_barriers = true;
                                        TAGGED_NORMS_RECORDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    }
                                    None if chunked => rec.dispatch(Kernel::NormQuantize(r), &chunk_push.tail_addrs(&[w, norm_partials]).f32(hp.rms_eps), chunk_groups)?,
                                    None => chain.dispatch(&mut rec, Kernel::RmsNormInt(r), push, [rows as u32, 1, 1])?,
                                }
                                if chunked {
                                    norm_scaled = Some(norm_partials);
                                    TAGGED_NORM_SCALES_RECORDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                                prequantized = Some(records);
                            }
                            None => {
                                if tagged_in.is_some() {
                                    // (The product before wrote its row with no barrier after it.)
                                    rec.barrier();
                                }
                                let push = Push::new().addr(addr_of(*input)).addr(w).addr(addr_of(*out)).u32(width).u32(1).u32(width).u32(out_width).f32(hp.rms_eps);
                                rec.dispatch(Kernel::RmsNorm, &push, [rows as u32, 1, 1])?;
                            }
                        }
                    }
                    Op::HeadNorm { buf, weight, n_heads } => {
                        let width = graph.buffer(*buf).width as u32;
                        let w = weights[weight.0 as usize].map_or(0, |w| w.address);
                        let push = Push::new().addr(addr_of(*buf)).addr(w).addr(addr_of(*buf)).u32(hp.head_dim as u32).u32(*n_heads as u32).u32(width).u32(width).f32(hp.rms_eps);
                        rec.dispatch(Kernel::RmsNorm, &push, [(n * n_heads) as u32, 1, 1])?;
                    }
                    Op::MatMul { input, outputs } => {
                        let rows_in = rows_of(graph, *input);
                        let cols = graph.buffer(*input).width;
                        let x_stride = cols as u32;
                        let int = int_records(ctx, rows_in);
                        let (record_bytes, meta_offset) = int_act_record(cols);
                        // Round the input once per rounding its projections need, as the CPU does.
                        let mut roundings: Vec<ActRounding> = outputs.iter().filter_map(|p| weights[p.weight.0 as usize].and_then(|w| ActRounding::for_format(w.layout.format))).collect();
                        roundings.dedup();
                        // Where this product's 8-bit input records are, when an op before wrote them.
                        let records_at = prequantized.take();
                        let norm = norm_in_product.take();
                        if records_at.is_some() || norm.is_some() {
                            // The RMSNorm before wrote the records (and a barrier followed it), or
                            // the product computes them itself.
                            roundings.clear();
                        }
                        for r in &roundings {
                            let push = Push::new().addr(addr_of(*input)).addr(rounded[*r as usize].address).u32(cols as u32).u32(x_stride).u32(rows_in as u32).u32(record_bytes as u32).u32(meta_offset as u32);
                            let (kernel, groups) = if int { (Kernel::QuantizeActInt(*r), int_quantize_groups(rows_in, cols)) } else { (Kernel::QuantizeAct(*r), [(rows_in * cols.div_ceil(256)) as u32, 1, 1]) };
                            rec.dispatch(kernel, &push, groups)?;
                        }
                        if !roundings.is_empty() {
                            rec.barrier();
                        }
                        if let Some((act, r)) = fused_swiglu(ctx, weights, ops, op_index, n) {
                            // Gate and up with SwiGLU and the quantization for the down projection in
                            // the epilogue: one stage instead of two.
                            let [gate, up] = outputs.as_slice() else { unreachable!("checked by fused_swiglu") };
                            let (Some(g), Some(u)) = (weights[gate.weight.0 as usize], weights[up.weight.0 as usize]) else { unreachable!("checked by fused_swiglu") };
                            let (_, out_meta_offset) = int_act_record(g.rows);
                            let layout = product_layout(ctx, g.rows, g.cols, false);
                            // The products' input: the records, or with the RMSNorm in their own
                            // workgroups its input row (the norm's weight and eps then follow).
                            let x = match norm {
                                Some((x, _, _)) => x,
                                None => records_at.unwrap_or(rounded[ActRounding::for_format(g.layout.format).map_or(0, |r| r as usize)].address),
                            };
                            // (`norm_epilogue` leaves no scaled input to the ticket form below.)
                            let scaled = norm_scaled.take();
                            let push = Push::new().addr(g.address).addr(g.aux()).addr(u.address).addr(u.aux()).addr(x).addr(addr_of(act)).addr(rounded_alt.address).addr(counters.address);
                            let push = match (norm, scaled) {
                                (Some((_, norm_w, _)), _) => push.addr(norm_w),
                                (None, Some(partials)) => push.addr(partials),
                                (None, None) => push,
                            };
                            let push = push.u32(g.cols as u32).u32(meta_offset as u32).u32(g.rows as u32).u32(out_meta_offset as u32);
                            skip_ops = 1;
                            // (`norm_prologue_fits` leaves no norm to the ticket form below.)
                            if norm.is_some() || std::env::var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT").as_deref() != Ok("1") {
                                // The paired products write the f32 SwiGLU row; the quantization is
                                // a dispatch of its own (no tickets: faster on the H200).
                                let pairs = swiglu_pairs(g.layout.format);
                                let groups = g.rows.div_ceil(layout.groups() * pairs as usize);
                                match norm {
                                    Some((_, _, eps)) => rec.dispatch(Kernel::MatVecIntSwiGluF32Norm(g.layout.format, layout, pairs), &push.f32(eps), [groups.min(persistent_groups(ctx)) as u32, 1, 1])?,
                                    None => {
                                        // Scaled by the norm before (its partials), or not.
                                        let of_pairs = |pairs: u8| match scaled {
                                            Some(_) => Kernel::MatVecIntSwiGluF32Scaled(g.layout.format, layout, pairs),
                                            None => Kernel::MatVecIntSwiGluF32(g.layout.format, layout, pairs),
                                        };
                                        // The quantization after it reads its row tagged,
                                        // recorded with no barrier between them.
                                        let kernel = of_pairs(pairs);
                                        let tagged = tagged_quants.then(|| kernel.with_tagged_out()).flatten().and_then(|k| Some((k, tagged_slots.next()?)));
                                        // Outputs in one-output units, dispatches of their own
                                        // recorded beside the two-output one with no barrier
                                        // between them ([`swiglu_parts`]).
                                        let parts = if chain.enabled { vec![(0, g.rows, pairs)] } else { swiglu_parts(ctx, &g, &u, pairs, layout) };
                                        // (Q4_K rows are whole super-blocks, no aux: a row's
                                        // bytes start `main_bytes / rows` after the row before.)
                                        let part_push = |first: usize, rows: usize| {
                                            let skip = |w: &GpuWeight| (first as u64) * (w.layout.main_bytes / w.rows as u64);
                                            let (g_aux, u_aux) = if first == 0 { (g.aux(), u.aux()) } else { (0, 0) };
                                            let push = Push::new().addr(g.address + skip(&g)).addr(g_aux).addr(u.address + skip(&u)).addr(u_aux).addr(x).addr(addr_of(act) + first as u64 * 4).addr(rounded_alt.address).addr(counters.address);
                                            match scaled { Some(partials) => push.addr(partials), None => push }.u32(g.cols as u32).u32(meta_offset as u32).u32(rows as u32).u32(out_meta_offset as u32)
                                        };
                                        let part_groups = |rows: usize, part_pairs: u8| rows.div_ceil(layout.groups() * part_pairs as usize) as u32;
                                        if parts.len() > 1 {
                                            SWIGLU_SPLITS_RECORDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                        }
                                        match tagged {
                                            Some((_, row)) => {
                                                for &(first, rows, part_pairs) in &parts {
                                                    let Some(part_kernel) = of_pairs(part_pairs).with_tagged_out() else { unreachable!("both unit sizes have tagged builds") };
                                                    rec.dispatch(part_kernel, &part_push(first, rows).tail_addrs(&[row + first as u64 * 8, p_header]), [part_groups(rows, part_pairs), 1, 1])?;
                                                }
                                                tagged_quant_input = Some((row, x));
                                            }
                                            None => {
                                                // (One part, the whole product, when chained.)
                                                for &(first, rows, part_pairs) in &parts {
                                                    chain.dispatch(&mut rec, of_pairs(part_pairs), part_push(first, rows), [part_groups(rows, part_pairs), 1, 1])?;
                                                }
                                            }
                                        }
                                    }
                                }
                                let (record_bytes, meta) = int_act_record(g.rows);
                                let quantize = Push::new().addr(addr_of(act));
                                match tagged_quant_input.take() {
                                    Some((row, read)) => {
                                        let records = tagged_records(r, read);
                                        let quantize = quantize.addr(records).u32(g.rows as u32).u32(g.rows as u32).u32(1).u32(record_bytes as u32).u32(meta as u32);
                                        rec.dispatch(Kernel::QuantizeActIntTagged(r), &quantize.tail_addrs(&[row, p_header, grid_sync + 8]), int_quantize_groups(1, g.rows))?;
                                        // (Its give-ups are counted where the grid barriers' are.)
                                        grid_barriers = true;
                                        TAGGED_QUANTS_RECORDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                        prequantized = Some(records);
                                    }
                                    None => {
                                        chain.end_stage(&mut rec);
                                        let records = chain.record_slot(&mut record_slots).unwrap_or(rounded[r as usize].address);
                                        let quantize = quantize.addr(records).u32(g.rows as u32).u32(g.rows as u32).u32(1).u32(record_bytes as u32).u32(meta as u32);
                                        chain.dispatch(&mut rec, Kernel::QuantizeActInt(r), quantize, int_quantize_groups(1, g.rows))?;
                                        prequantized = Some(records);
                                    }
                                }
                            } else {
                                rec.dispatch(Kernel::MatVecIntSwiGlu(g.layout.format, r, layout), &push, [g.rows.div_ceil(layout.groups()) as u32, 1, 1])?;
                                // SwiGLU is done, and the down projection's input quantized (into the
                                // spare records: the products' own input is still being read).
                                prequantized = Some(rounded_alt.address);
                            }
                            fused[1] += 1;
                        } else if let Some((q_buf, layer)) = fused_qkv_rope(ctx, graph, weights, ops, op_index, n) {
                            // Q, K and V with RoPE and the K/V store in the products' epilogues: one
                            // stage instead of two (the rotation pairs of a head in one workgroup).
                            let (kc, vc, stride) = kv_addresses(ctx, kv, layer)?;
                            let scaled = norm_scaled.take();
                            // Each projection's weight and the records it reads.
                            let projections = outputs
                                .iter()
                                .map(|p| {
                                    let w = weights[p.weight.0 as usize].ok_or_else(|| unsupported(ctx, "weight not uploaded".into()))?;
                                    let rounding = ActRounding::for_format(w.layout.format).ok_or_else(|| unsupported(ctx, "fused QKV without 8-bit activations".into()))?;
                                    Ok((p, w, records_at.unwrap_or(rounded[rounding as usize].address)))
                                })
                                .collect::<Result<Vec<_>, DeviceError>>()?;
                            let reads: Vec<u64> = projections.iter().map(|&(_, _, records)| records).collect();
                            // Written tagged too, for the split kernels recorded right after it
                            // (`STRATA_VULKAN_TAGGED_ATTENTION=1`): the layer's slot of tagged rows
                            // and where the merge writes its records.
                            let tagged_out = if tagged_attention && norm.is_none() && scaled.is_none() && matches!(ops.get(op_index + 4), Some(Op::Attention { q, .. }) if *q == q_buf) {
                                tagged_merge_at(op_index + 4)
                                    .and_then(|r| [rounded[r as usize].address, rounded_alt.address].into_iter().find(|b| !reads.contains(b)))
                                    .and_then(|records| Some((tagged_slots.next()?, records)))
                            } else {
                                None
                            };
                            let (q_width, kv_width) = ((hp.n_heads * hp.head_dim) as u64, (hp.n_kv_heads * hp.head_dim) as u64);
                            for (mode, &(p, w, records)) in projections.iter().enumerate() {
                                let bias = p.bias.and_then(|b| weights[b.0 as usize]).map_or(0, |b| b.address);
                                let out = [addr_of(q_buf), kc, vc][mode];
                                let layout = product_layout(ctx, w.rows, w.cols, false);
                                let x = norm.map_or(records, |(x, _, _)| x);
                                let push = Push::new()
                                    .addr(w.address)
                                    .addr(w.aux())
                                    .addr(x)
                                    .addr(out)
                                    .addr(bias)
                                    .addr(rope_table.address)
                                    .addr(p_pos)
                                    .addr(p_header)
                                    .addr(p_toff)
                                    .addr(p_tables);
                                let push = match (norm, scaled) {
                                    (Some((_, norm_w, _)), _) => push.addr(norm_w),
                                    (None, Some(partials)) => push.addr(partials),
                                    (None, None) => push,
                                };
                                // (Tagged builds: the layer's tag salt rides in the mode word's high bits.)
                                let mode_word = mode as u32 | tagged_out.map_or(0, |_| (layer as u32 + 1) << 8);
                                let push = push
                                    .u32(w.cols as u32)
                                    .u32(meta_offset as u32)
                                    .u32(mode_word)
                                    .u32(hp.head_dim as u32)
                                    .u32((hp.rope_dims / 2) as u32)
                                    .u32(u32::from(graph.rope_style == RopeStyle::Neox))
                                    .u32((stride / 2) as u32)
                                    .u32(block_size as u32)
                                    .u32((w.rows / 2) as u32);
                                let groups = (w.rows / 2).div_ceil(layout.groups());
                                if let Some((slot, _)) = tagged_out {
                                    // q, then K, then V in the layer's tagged row.
                                    let part = [0, q_width, q_width + kv_width][mode] * 8;
                                    rec.dispatch(Kernel::MatVecIntRopeTaggedOut(w.layout.format, layout), &push.tail_addrs(&[slot + part]), [groups as u32, 1, 1])?;
                                    continue;
                                }
                                match (norm, scaled) {
                                    (Some((_, _, eps)), _) => rec.dispatch(Kernel::MatVecIntRopeNorm(w.layout.format, layout), &push.f32(eps), [groups.min(persistent_groups(ctx)) as u32, 1, 1])?,
                                    (None, Some(_)) => rec.dispatch(Kernel::MatVecIntRopeScaled(w.layout.format, layout), &push, [groups as u32, 1, 1])?,
                                    (None, None) => chain.dispatch(&mut rec, Kernel::MatVecIntRope(w.layout.format, layout), push, [groups as u32, 1, 1])?,
                                }
                            }
                            // Both RoPEs and the store.
                            skip_ops = 3;
                            fused[0] += 1;
                            tagged_attention_input = tagged_out;
                        } else {
                        // A batched step's products after a chunked norm scale their outputs.
                        let scaled = norm_scaled.take();
                        for p in outputs {
                            let w = weights[p.weight.0 as usize].ok_or_else(|| unsupported(ctx, "weight not uploaded".into()))?;
                            let bias = p.bias.and_then(|b| weights[b.0 as usize]).map_or(0, |b| b.address);
                            let rounding = ActRounding::for_format(w.layout.format);
                            let x = rounding.map_or(addr_of(*input), |r| records_at.unwrap_or(rounded[r as usize].address));
                            if rounding.is_some() && uses_int_product(ctx, w.layout.format, rows_in) {
                                // A lone projection whose output only feeds the next op's residual
                                // add is added into the residual stream by the product itself.
                                let (out, accumulate) = match ops.get(op_index + 1) {
                                    Some(Op::Add { acc, other }) if outputs.len() == 1 && *other == p.out && only_added(ops, p.out) => (*acc, 1),
                                    _ => (p.out, 0),
                                };
                                skip_ops = accumulate as usize;
                                let (kernel, groups) = int_product_dispatch(ctx, w.layout.format, w.rows, w.cols, rows_in, outputs.len() == 1);
                                let kernel = match scaled {
                                    Some(_) => kernel.with_norm_scale().ok_or_else(|| unsupported(ctx, format!("no scaled build of {kernel:?} after a chunked norm")))?,
                                    None => kernel,
                                };
                                // The RMSNorm after the add in this product's last workgroups.
                                let norm_out = (accumulate == 1)
                                    .then(|| norm_epilogue(ctx, graph, weights, ops, op_index + 2, n, out, w.layout.format, chain.enabled))
                                    .flatten()
                                    .and_then(|norm| Some((norm, kernel.with_norm_out()?)));
                                let push = Push::new().addr(w.address).addr(w.aux()).addr(x).addr(addr_of(out)).addr(bias);
                                let push = match (norm_out, scaled) {
                                    (Some(((norm_w, _), _)), _) => push.addr(norm_w).addr(rounded_alt.address).addr(counters.address).addr(norm_partials),
                                    (None, Some(partials)) => push.addr(partials),
                                    (None, None) => push,
                                };
                                let push = push
                                    .u32(w.rows as u32)
                                    .u32(w.cols as u32)
                                    .u32(rows_in as u32)
                                    .u32(record_bytes as u32)
                                    .u32(graph.buffer(out).width as u32)
                                    .u32(meta_offset as u32)
                                    .u32(accumulate);
                                match norm_out {
                                    Some(((_, eps), norm_kernel)) => {
                                        let (_, records_meta) = int_act_record(w.rows);
                                        rec.dispatch(norm_kernel, &push.u32(records_meta as u32).f32(eps), groups)?;
                                        norm_out_done = Some(norm_partials);
                                        NORM_EPILOGUES_RECORDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    }
                                    None => {
                                        // The RMSNorm after the add reads this product's row
                                        // tagged, recorded with no barrier between them.
                                        let tagged = (tagged_norms && accumulate == 1 && matches!(ops.get(op_index + 2), Some(Op::RmsNorm { input, .. }) if *input == out))
                                            .then(|| kernel.with_tagged_out())
                                            .flatten()
                                            .and_then(|k| Some((k, tagged_slots.next()?)));
                                        match tagged {
                                            Some((tagged_kernel, row)) => {
                                                rec.dispatch(tagged_kernel, &push.tail_addrs(&[row, p_header]), groups)?;
                                                tagged_norm_input = Some((row, x));
                                            }
                                            None => chain.dispatch(&mut rec, kernel, push, groups)?,
                                        }
                                    }
                                }
                            } else {
                                let push = Push::new().addr(w.address).addr(w.aux()).addr(x).addr(addr_of(p.out)).addr(bias).u32(w.rows as u32).u32(w.cols as u32).u32(rows_in as u32).u32(x_stride).u32(graph.buffer(p.out).width as u32);
                                let (kernel, push, groups) = product_dispatch(ctx, w.layout.format, w.rows, rows_in, push);
                                rec.dispatch(kernel, &push, groups)?;
                            }
                        }
                        }
                    }
                    Op::Rope { buf: q_buf, n_heads: n_q_heads } if matches!((ops.get(op_index + 1), ops.get(op_index + 2)), (Some(Op::Rope { buf: k1, .. }), Some(Op::StoreKv { k: k2, .. })) if k1 == k2 && k1 != q_buf) => {
                        let (Some(Op::Rope { buf: k_buf, n_heads: n_kv_heads }), Some(Op::StoreKv { layer, v, .. })) = (ops.get(op_index + 1), ops.get(op_index + 2)) else { unreachable!("matched above") };
                        let (kc, vc, stride) = kv_addresses(ctx, kv, *layer)?;
                        let half = hp.rope_dims / 2;
                        let kv_width = graph.buffer(*k_buf).width;
                        let total = n * (n_q_heads + n_kv_heads) * half + n * kv_width;
                        let push = Push::new()
                            .addr(addr_of(*q_buf))
                            .addr(addr_of(*k_buf))
                            .addr(addr_of(*v))
                            .addr(rope_table.address)
                            .addr(kc)
                            .addr(vc)
                            .addr(p_pos)
                            .addr(p_seq)
                            .addr(p_toff)
                            .addr(p_tables)
                            .u32(graph.buffer(*q_buf).width as u32)
                            .u32(*n_q_heads as u32)
                            .u32(*n_kv_heads as u32)
                            .u32(hp.head_dim as u32)
                            .u32(half as u32)
                            .u32(u32::from(graph.rope_style == RopeStyle::Neox))
                            .u32(n as u32)
                            .u32((stride / 2) as u32)
                            .u32(block_size as u32);
                        rec.dispatch(Kernel::RopeStore, &push, [total.div_ceil(64) as u32, 1, 1])?;
                        skip_ops = 2;
                    }
                    Op::Rope { buf, n_heads } => {
                        let half = hp.rope_dims / 2;
                        let total = n * n_heads * half;
                        let push = Push::new()
                            .addr(addr_of(*buf))
                            .addr(rope_table.address)
                            .addr(p_pos)
                            .u32(graph.buffer(*buf).width as u32)
                            .u32(*n_heads as u32)
                            .u32(hp.head_dim as u32)
                            .u32(half as u32)
                            .u32(u32::from(graph.rope_style == RopeStyle::Neox))
                            .u32(n as u32);
                        rec.dispatch(Kernel::Rope, &push, [total.div_ceil(64) as u32, 1, 1])?;
                    }
                    Op::StoreKv { layer, k, v } => {
                        let (kc, vc, stride) = kv_addresses(ctx, kv, *layer)?;
                        let width = hp.kv_width();
                        let push = Push::new()
                            .addr(addr_of(*k))
                            .addr(addr_of(*v))
                            .addr(kc)
                            .addr(vc)
                            .addr(p_pos)
                            .addr(p_seq)
                            .addr(p_toff)
                            .addr(p_tables)
                            .u32(width as u32)
                            .u32((stride / 2) as u32)
                            .u32(block_size as u32)
                            .u32(n as u32);
                        rec.dispatch(Kernel::StoreKv, &push, [(n * width).div_ceil(64) as u32, 1, 1])?;
                    }
                    Op::Attention { layer, q, out } if ctx.exact && n <= INT_MAX_TOKENS && exact_attention_fits(hp.head_dim) => {
                        // The CPU's arithmetic, written straight to `out` (the product after it
                        // quantizes its input itself).
                        let (kc, vc, stride) = kv_addresses(ctx, kv, *layer)?;
                        let (scratch_stride, chunk_offset, rows_offset) = exact_scratch_layout(max_context);
                        let push = attention_push(graph, *q, [addr_of(*q), partial.address, kc, vc, p_pos, p_seq, p_toff, p_tables, addr_of(*out)], stride, block_size)
                            .u32(graph.buffer(*out).width as u32)
                            .u32(n as u32)
                            .u32(scratch_stride as u32)
                            .u32(chunk_offset as u32)
                            .u32(rows_offset as u32);
                        // The scores, 128 positions per workgroup (one workgroup per head walked
                        // them all: 28 workgroups for a 7B token); softmax and weights; the value
                        // rows, 8 per workgroup; their reduction. Workgroups past a sequence's
                        // length return at once.
                        let score_groups = max_context.div_ceil(128) as u32;
                        for (i, (phase, groups)) in [(3u32, score_groups), (0, 1), (1, 8), (2, 1)].into_iter().enumerate() {
                            if i > 0 {
                                rec.barrier();
                            }
                            rec.dispatch(Kernel::AttentionExact, &push.clone().u32(phase), [hp.n_heads as u32, n as u32, groups])?;
                        }
                    }
                    Op::Attention { layer, q, out } => {
                        let (kc, vc, stride) = kv_addresses(ctx, kv, *layer)?;
                        let push = attention_push(graph, *q, [addr_of(*q), partial.address, kc, vc, p_pos, p_seq, p_toff, p_tables, p_header], stride, block_size);
                        // Opt-in (`STRATA_VULKAN_FUSE_ATTENTION=1`): on the H200 the merge in the last
                        // workgroups was slower than its own dispatch (7B Q4_K: 438 against 409 us a
                        // token at context 512, and 4.8 against 4.0 ms a token at 8192, where each
                        // last workgroup merges 128 splits of two heads alone).
                        // The rounding the output projection reads its input in, when the merge can
                        // quantize for it.
                        let combine_rounding = fused_product_rounding(ctx, weights, ops.get(op_index + 1), *out, n, Some("STRATA_VULKAN_FUSE_COMBINE"));
                        let fused_combine = combine_rounding.filter(|_| {
                            n <= INT_MAX_TOKENS
                                && per_head_decode_attention()
                                && 256usize.is_multiple_of(hp.head_dim)
                                && std::env::var("STRATA_VULKAN_FUSE_ATTENTION").as_deref() == Ok("1")
                                && !read_before_written(&ops[op_index + 2..], *out)
                        });
                        // The merge reading the split records tagged, recorded with no barrier
                        // between them (one-token steps; both split kernels tag).
                        let tagged_merge = tagged_merge_at(op_index);
                        // Also the split kernels reading q and the new cell tagged from QKV, with no
                        // barrier before them either.
                        let tagged_in = tagged_attention_input.take();
                        if tagged_in.is_some() && (tagged_merge.is_none() || fused_combine.is_some()) {
                            // (QKV decided by the same `tagged_merge_at`; never seen.)
                            return Err(unsupported(ctx, "QKV wrote its outputs tagged for split kernels recorded without the tagged merge".into()));
                        }
                        // The per-head kernel and (where it may run) the long-context one, for short
                        // and long contexts' tokens (each kernel returns for the other's): they
                        // write disjoint partial records, so no barrier between the two.
                        let record_split_kernels = |rec: &mut Recorder<'_>, [per_head, long_context]: [Kernel; 2], push: &Push| -> Result<(), DeviceError> {
                            rec.dispatch_indirect(per_head, push, params_buffer, header_at + (HEADER_ATTENTION_DECODE_ARGS * 4) as u64)?;
                            if gqa_from != u32::MAX {
                                rec.dispatch_indirect(long_context, push, params_buffer, header_at + (HEADER_ATTENTION_GQA_ARGS * 4) as u64)?;
                            }
                            Ok(())
                        };
                        if let Some(r) = fused_combine {
                            // The splits merged and quantized for the output projection by the last
                            // workgroup of each chunk: one stage instead of two. (The f32 output is
                            // not written: only the projection's records read it.)
                            let cols = hp.n_heads * hp.head_dim;
                            let (record_bytes, meta_offset) = int_act_record(cols);
                            let push = attention_push_with(graph, *q, &[addr_of(*q), partial.address, kc, vc, p_pos, p_seq, p_toff, p_tables, p_header, rounded[r as usize].address, counters.address], stride, block_size)
                                .u32(meta_offset as u32)
                                .u32(record_bytes as u32)
                                .u32(u32::MAX);
                            rec.dispatch_indirect(Kernel::AttentionDecodeFused(r), &push, params_buffer, header_at + (HEADER_ATTENTION_DECODE_ARGS * 4) as u64)?;
                            prequantized = Some(rounded[r as usize].address);
                            fused[2] += 1;
                        } else if let Some(r) = tagged_merge {
                            // (Each layer's records carry a tag of their own: they are rewritten
                            // every layer.)
                            let salt = *layer as u32 + 1;
                            let push = push.u32(gqa_from).u32(salt);
                            let records = match tagged_in {
                                Some((row, records)) => {
                                    record_split_kernels(&mut rec, [Kernel::AttentionDecodeTaggedIn, Kernel::AttentionDecodeGqaTaggedIn], &push.tail_addrs(&[row, grid_sync + 8]))?;
                                    TAGGED_ATTENTIONS_RECORDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    records
                                }
                                None => {
                                    record_split_kernels(&mut rec, [Kernel::AttentionDecodeTaggedOut, Kernel::AttentionDecodeGqaTaggedOut], &push)?;
                                    rounded[r as usize].address
                                }
                            };
                            let cols = hp.n_heads * hp.head_dim;
                            // (`STRATA_VULKAN_WAIT_FAULT=merge`, for tests: the step's first tagged
                            // merge waits for salt 0, which no layer's split kernels write.)
                            let merge_salt = if std::mem::take(&mut merge_fault_pending) { 0 } else { salt };
                            let push = quantizing_push(&[partial.address, p_header, addr_of(*out)], records, cols, graph.buffer(*out).width, n).u32(hp.head_dim as u32).u32(merge_salt);
                            rec.dispatch(Kernel::AttentionCombineIntTagged(r), &push.tail_addrs(&[grid_sync + 8]), int_quantize_groups(n, cols))?;
                            // (Its give-ups are counted where the grid barriers' are.)
                            grid_barriers = true;
                            TAGGED_MERGES_RECORDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            prequantized = Some(records);
                        } else {
                            if n <= INT_MAX_TOKENS && per_head_decode_attention() {
                                record_split_kernels(&mut rec, [Kernel::AttentionDecode, Kernel::AttentionDecodeGqa], &push.u32(gqa_from))?;
                            } else {
                                rec.dispatch_indirect(Kernel::Attention, &push, params_buffer, header_at + (HEADER_ATTENTION_ARGS * 4) as u64)?;
                            }
                            if prefetch > 0 {
                                record_prefetch(&mut rec, weights, &ops[op_index + 1..], prefetch, sink)?;
                            }
                            rec.barrier();
                            if let Some((pool, _)) = op_stamps {
                                rec.timestamp(pool, n_graph_ops + 2 + op_index as u32);
                            }
                            let out_width = graph.buffer(*out).width;
                            if let Some(r) = combine_rounding {
                                // The merge and the quantization for the product that follows.
                                let cols = hp.n_heads * hp.head_dim;
                                let push = quantizing_push(&[partial.address, p_header, addr_of(*out)], rounded[r as usize].address, cols, out_width, n).u32(hp.head_dim as u32);
                                rec.dispatch(Kernel::AttentionCombineInt(r), &push, int_quantize_groups(n, cols))?;
                                prequantized = Some(rounded[r as usize].address);
                            } else {
                                let push = Push::new().addr(partial.address).addr(addr_of(*out)).addr(p_header).u32(hp.n_heads as u32).u32(hp.head_dim as u32).u32(out_width as u32);
                                rec.dispatch(Kernel::AttentionCombine, &push, [hp.n_heads as u32, n as u32, 1])?;
                            }
                        }
                    }
                    Op::SwiGlu { gate, up, out } => {
                        let cols = graph.buffer(*out).width;
                        if let Some(r) = fused_product_rounding(ctx, weights, ops.get(op_index + 1), *out, n, Some("STRATA_VULKAN_FUSE_SWIGLU")) {
                            // SwiGLU and the quantization for the product that follows in one dispatch.
                            let push = quantizing_push(&[addr_of(*gate), addr_of(*up), addr_of(*out)], rounded[r as usize].address, cols, cols, n);
                            rec.dispatch(Kernel::SwiGluInt(r), &push, int_quantize_groups(n, cols))?;
                            prequantized = Some(rounded[r as usize].address);
                        } else {
                            let count = (n * cols) as u32;
                            let push = Push::new().addr(addr_of(*gate)).addr(addr_of(*up)).addr(addr_of(*out)).u32(count);
                            rec.dispatch(Kernel::SwiGlu, &push, [count.div_ceil(256), 1, 1])?;
                        }
                    }
                    Op::Add { acc, other } => {
                        let count = (rows_of(graph, *acc) * graph.buffer(*acc).width) as u32;
                        let push = Push::new().addr(addr_of(*acc)).addr(addr_of(*other)).u32(count);
                        rec.dispatch(Kernel::Add, &push, [count.div_ceil(256), 1, 1])?;
                    }
                    Op::SelectRows { .. } if elided_select.is_some_and(|(at, _, _)| at == op_index) => {}
                    Op::SelectRows { input, out } => {
                        let push = Push::new().addr(addr_of(*input)).addr(addr_of(*out)).addr(p_rows).u32(graph.buffer(*input).width as u32);
                        rec.dispatch(Kernel::SelectRows, &push, [n_out as u32, 1, 1])?;
                    }
                }
                if tagged_norm_input.is_none() && tagged_attention_input.is_none() {
                    chain.end_stage(&mut rec);
                }
                if let Some((pool, _)) = op_stamps {
                    rec.timestamp(pool, op_index as u32 + 1);
                }
            }
            // (Ordered after the logits by the last op's barrier.)
            match tail {
                StepTail::Logits => {}
                StepTail::Argmax | StepTail::ArgmaxFed { .. } => {
                    let push = Push::new().addr(logits.address).addr(counters.address + tokens_offset + (argmax_word * 4) as u64).u32(hp.vocab_size as u32);
                    rec.dispatch(Kernel::Argmax, &push, [n_out as u32, 1, 1])?;
                    if step + 1 < steps {
                        // Before the next step's embedding reads the token.
                        rec.barrier();
                    }
                }
                StepTail::TopK => {
                    let push = Push::new().addr(logits.address).addr(counters.address + top_k_offset(graph)).u32(hp.vocab_size as u32);
                    rec.dispatch(Kernel::TopK, &push, [n_out as u32, 1, 1])?;
                }
            }
        }
        tracing::debug!(tokens = n, fused_qkv = fused[0], fused_swiglu = fused[1], fused_attention = fused[2], "recorded a step");
        // (Before the copies by copy_to_host's barrier.)
        let mut copies = match tail {
            StepTail::Logits => vec![(self.arena.buffer(logits), logits.offset, 0, (n_out * hp.vocab_size * 4) as u64)],
            StepTail::Argmax | StepTail::ArgmaxFed { .. } if steps > 1 => vec![
                // Steps 0..steps - 1's tokens in words 1.., the last step's in word 0.
                (counters_buffer, counters.offset + tokens_offset + 4, readback_at, ((steps - 1) * 4) as u64),
                (counters_buffer, counters.offset + tokens_offset, readback_at + ((steps - 1) * 4) as u64, 4),
            ],
            StepTail::Argmax | StepTail::ArgmaxFed { .. } => vec![(counters_buffer, counters.offset + tokens_offset, readback_at, (n_out * 4) as u64)],
            StepTail::TopK => vec![(counters_buffer, counters.offset + top_k_offset(graph), 0, (n_out * TOP_K_MAX * 8) as u64)],
        };
        if grid_barriers {
            // The give-up count, after the largest step's logits.
            let give_ups = grid_sync + 8 - counters.address;
            copies.push((counters_buffer, counters.offset + give_ups, (self.opts.max_outputs * hp.vocab_size * 4) as u64, 4));
        }
        if !chain.counts.is_empty() {
            // The chained stages' words, after that: each line's used words, line after line.
            let used = chain.counts.len() as u64 * 4;
            for line in 0..CHAIN_LINES {
                copies.push((counters_buffer, chain_offset + line * CHAIN_LINE_WORDS * 4, (self.opts.max_outputs * hp.vocab_size * 4) as u64 + 4 + line * used, used));
            }
            CHAINED_STAGES_RECORDED.fetch_add(chain.counts.len() as u64 - 1, std::sync::atomic::Ordering::Relaxed);
        }
        rec.copy_to_host(&copies, self.readback.buffer);
        if let Some((pool, _)) = profile_pool {
            rec.timestamp(pool, n_graph_ops + 1);
        }
        if let Some(p) = &mut self.profiler {
            for i in persistent_ffn_ops {
                p.relabeled.insert((i, step_class(n)), "feed-forward half (one dispatch)");
            }
        }
        Ok((grid_barriers, chain.counts))
    }
}

/// Bytes of the next products' weights read into the L2 cache beside the attention of a
/// decode-sized step: `STRATA_VULKAN_PREFETCH_MB`, 0 (off) by default. Attention leaves the
/// memory bus mostly idle; the products after the barrier then find the start of their weights
/// in the cache. (Beside RMSNorm too, it was slower on the H200: that stage's ~5 us window is
/// too short, and its barrier waited for the prefetch; 7B Q4_K 343.7 -> 329.0 / 312.6 / 271.6
/// t/s with 16 / 32 / 48 MB, though the products gained: gate+up 989 -> 936 / 907 us a token.)
fn prefetch_bytes() -> u64 {
    static MB: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MB.get_or_init(|| std::env::var("STRATA_VULKAN_PREFETCH_MB").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0).min(256)) << 20
}

/// Records a prefetch of the products after `ops[from..]`'s next stage: the start of each
/// product's weights, in order, up to `budget` bytes (a share of each weight's rows: main and
/// auxiliary bytes alike). No barrier: it runs beside the stage recorded just before it.
fn record_prefetch(rec: &mut Recorder<'_>, weights: &[Option<GpuWeight>], ops: &[Op], budget: u64, sink: u64) -> Result<(), DeviceError> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut left = budget;
    for op in ops {
        let Op::MatMul { outputs, .. } = op else { continue };
        let ws: Vec<GpuWeight> = outputs.iter().filter_map(|p| weights[p.weight.0 as usize]).collect();
        let share = left / ws.len().max(1) as u64;
        for w in &ws {
            let total = w.layout.total_bytes().max(1);
            let take = share.min(total);
            ranges.push((w.address, w.layout.main_bytes * take / total));
            if w.layout.aux_bytes > 0 {
                ranges.push((w.aux(), w.layout.aux_bytes * take / total));
            }
            left -= take;
        }
        if left < (1 << 20) {
            break;
        }
    }
    for chunk in ranges.chunks(4) {
        let mut push = Push::new().addr(sink);
        for k in 0..4 {
            push = push.addr(chunk.get(k).map_or(0, |r| r.0));
        }
        for k in 0..4 {
            push = push.u32(chunk.get(k).map_or(0, |r| (r.1 / 16) as u32));
        }
        // Two workgroups of 256 per SM of a large GPU, each lane with 8 loads in flight.
        rec.dispatch(Kernel::PrefetchL2, &push, [264, 1, 1])?;
    }
    Ok(())
}

/// Bytes of the fused epilogues' counters: one u32 per chunk of 256 outputs of the widest
/// activation row, for each token of a decode-sized step; then the chunked norms' partials
/// (eps and a sum of squares per chunk of a row, for each token of such a step); then the tokens of a greedy step's argmax
/// (one per output row, up to [`INT_MAX_TOKENS`]); then a sampling step's top-k candidates
/// ([`TOP_K_MAX`] pairs of token and logit per output row).
fn counter_bytes(graph: &ForwardGraph) -> u64 {
    (top_k_offset(graph) + (INT_MAX_TOKENS * TOP_K_MAX * 8) as u64).next_multiple_of(16)
}

/// Where [`counter_bytes`]'s top-k candidates start.
fn top_k_offset(graph: &ForwardGraph) -> u64 {
    (argmax_offset(graph) + INT_MAX_TOKENS as u64 * 4).next_multiple_of(16)
}

/// Chunks of 256 in the widest activation row.
fn widest_chunks(graph: &ForwardGraph) -> u64 {
    graph.buffers.iter().map(|b| b.width).max().unwrap_or(0).div_ceil(256) as u64
}

/// Where [`counter_bytes`]'s norm partials start.
fn norm_partials_offset(graph: &ForwardGraph) -> u64 {
    INT_MAX_TOKENS as u64 * widest_chunks(graph) * 4
}

/// Where a greedy run's second slot leaves its token in the readback: after the largest
/// step's logits, the give-up count and the chained stages' words.
fn fed_token_readback(max_outputs: usize, vocab_size: usize) -> u64 {
    ((max_outputs * vocab_size * 4) as u64 + 4 + chain_bytes()).next_multiple_of(16)
}

/// Where [`counter_bytes`]'s argmax tokens start.
fn argmax_offset(graph: &ForwardGraph) -> u64 {
    norm_partials_offset(graph) + INT_MAX_TOKENS as u64 * (widest_chunks(graph) + 1) * 4
}

/// Whether the RMSNorm `ops[at]`, right after a one-token product of `producer` weights that
/// adds into its input `residual`, can be done in that product's last workgroups
/// ([`Kernel::MatVecInt1NormOut`]) with the fused QKV or gate/up product after it scaling its
/// outputs by the norm (their `...Scaled` builds): the fast integer kernels, the next product's
/// records rounded as the producer's build quantizes, whole blocks, a layout those builds have,
/// a normalized f32 row that nothing reads, no other form of the norm asked for (the norm
/// prologue, the persistent feed-forward half, chaining, the SwiGLU ticket form, which writes
/// the spare records these leave). Not the CPU's bits: the records hold `x * weight` rounded
/// before the scale, not after. `STRATA_VULKAN_NORM_EPILOGUE=1` turns it on (read at each
/// recording, so that a test can compare both paths). Returns the norm's weight and eps.
#[allow(clippy::too_many_arguments)]
fn norm_epilogue(ctx: &VulkanContext, graph: &ForwardGraph, weights: &[Option<GpuWeight>], ops: &[Op], at: usize, n: usize, residual: BufId, producer: WeightFormat, chained: bool) -> Option<(u64, f32)> {
    if std::env::var("STRATA_VULKAN_NORM_EPILOGUE").as_deref() != Ok("1") || n != 1 || chained {
        return None;
    }
    let rounding = scaled_norm_consumer(ctx, graph, weights, ops, at, true, true)?;
    let Some(Op::RmsNorm { input, weight, .. }) = ops.get(at) else { return None };
    if *input != residual || Some(rounding) != ActRounding::for_format(producer) {
        return None;
    }
    if persistent_ffn(ctx, graph, weights, ops, at, n).is_some() || norm_prologue_fits(ctx, graph, weights, ops, at, n) {
        return None;
    }
    let w = weights[weight.0 as usize]?;
    Some((w.address, graph.hparams.rms_eps))
}

/// Whether `ops[at]` (a [`Op::MatMul`]) is a layer's gate and up projections for one token,
/// followed by their SwiGLU and a product that reads it as 8-bit records, all of which
/// [`Kernel::MatVecIntSwiGlu`] does in one stage (the fast integer kernels; gate and up of one
/// format, without biases). Returns the SwiGLU buffer and the down projection's rounding.
/// By default the quantization is a dispatch of its own after the paired products (7B Q4_K on
/// the H200: 963 us a token for gate, up, SwiGLU and quantization against 1,007 unfused, +2.6%
/// decode); `STRATA_VULKAN_FUSE_SWIGLU_PRODUCT=1` quantizes in the last workgroup of each chunk
/// instead, which was slower (1,250 us: the device-scope fence and ticket each of the 18,944
/// workgroups takes before it may retire); `=0` turns the fusion off.
fn fused_swiglu(ctx: &VulkanContext, weights: &[Option<GpuWeight>], ops: &[Op], at: usize, n: usize) -> Option<(BufId, ActRounding)> {
    // Read at each recording (not once per process), so that a test can compare both paths.
    if std::env::var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT").as_deref() == Ok("0") || n != 1 || ctx.exact {
        return None;
    }
    let Some(Op::MatMul { outputs, .. }) = ops.get(at) else { return None };
    let [gate, up] = outputs.as_slice() else { return None };
    let Some(Op::SwiGlu { gate: sg, up: su, out }) = ops.get(at + 1) else { return None };
    if *sg != gate.out || *su != up.out || gate.bias.is_some() || up.bias.is_some() {
        return None;
    }
    let (g, u) = (weights[gate.weight.0 as usize]?, weights[up.weight.0 as usize]?);
    if g.layout.format != u.layout.format || g.rows != u.rows || g.cols != u.cols || ActRounding::for_format(g.layout.format).is_none() || !uses_int_product(ctx, g.layout.format, 1) {
        return None;
    }
    if read_before_written(&ops[at + 2..], gate.out) || read_before_written(&ops[at + 2..], up.out) {
        return None;
    }
    let r = fused_product_rounding(ctx, weights, ops.get(at + 2), *out, n, None)?;
    Some((*out, r))
}

/// Whether the products of `ops[at]` (a [`Op::MatMul`]) are a layer's Q, K and V for one token,
/// followed by the RoPE of Q and K and their store, all of which [`Kernel::MatVecIntRope`] does in
/// one stage: the fast integer kernels (not the exact mode), heads of an even width, Q, K and V
/// in a format with 8-bit activations. Returns the Q buffer and the layer.
/// `STRATA_VULKAN_FUSE_QKV=0` turns it off (for comparison).
fn fused_qkv_rope(ctx: &VulkanContext, graph: &ForwardGraph, weights: &[Option<GpuWeight>], ops: &[Op], at: usize, n: usize) -> Option<(BufId, usize)> {
    // Read at each recording (not once per process), so that a test can compare both paths.
    if std::env::var("STRATA_VULKAN_FUSE_QKV").as_deref() == Ok("0") {
        return None;
    }
    let hp = &graph.hparams;
    if n != 1 || ctx.exact || !hp.head_dim.is_multiple_of(2) || hp.rope_dims > hp.head_dim || !hp.rope_dims.is_multiple_of(2) {
        return None;
    }
    let Some(Op::MatMul { outputs, .. }) = ops.get(at) else { return None };
    let [q, k, v] = outputs.as_slice() else { return None };
    let (Some(Op::Rope { buf: rq, n_heads: nq }), Some(Op::Rope { buf: rk, n_heads: nk }), Some(Op::StoreKv { layer, k: sk, v: sv })) = (ops.get(at + 1), ops.get(at + 2), ops.get(at + 3)) else {
        return None;
    };
    if *rq != q.out || *rk != k.out || *sk != k.out || *sv != v.out || *nq != hp.n_heads || *nk != hp.n_kv_heads {
        return None;
    }
    // Nothing after the store may read the f32 K or V rows (the fused kernel writes only the
    // cache) before they are written again.
    if read_before_written(&ops[at + 4..], k.out) || read_before_written(&ops[at + 4..], v.out) {
        return None;
    }
    let formats: Vec<WeightFormat> = outputs.iter().filter_map(|p| weights[p.weight.0 as usize].map(|w| w.layout.format)).collect();
    let rounding = ActRounding::for_format(*formats.first()?)?;
    let same = formats.len() == 3 && formats.iter().all(|f| ActRounding::for_format(*f) == Some(rounding) && uses_int_product(ctx, *f, 1));
    let rows_ok = [(q, hp.n_heads), (k, hp.n_kv_heads), (v, hp.n_kv_heads)].iter().all(|(p, heads)| weights[p.weight.0 as usize].is_some_and(|w| w.rows == heads * hp.head_dim));
    (same && rows_ok).then_some((q.out, *layer))
}

/// Whether the RMSNorm `ops[at]` can be left to the fused QKV or gate/up product after it (their
/// NORM_PROLOGUE builds, shaders/matvec_q.comp): one decoding token, the fast integer kernels, a
/// row the workgroup's shared memory holds in whole blocks, a normalized row that nothing else
/// reads. `STRATA_VULKAN_NORM_PROLOGUE=1` turns it on (read at each recording, so that a test
/// can compare both paths); off by default until measured.
fn norm_prologue_fits(ctx: &VulkanContext, graph: &ForwardGraph, weights: &[Option<GpuWeight>], ops: &[Op], at: usize, n: usize) -> bool {
    if std::env::var("STRATA_VULKAN_NORM_PROLOGUE").as_deref() != Ok("1") || n != 1 || ctx.exact || !ctx.info.subgroup_quads {
        return false;
    }
    let Some(Op::RmsNorm { input, out, .. }) = ops.get(at) else { return false };
    let Some(Op::MatMul { input: product_input, outputs }) = ops.get(at + 1) else { return false };
    let width = graph.buffer(*input).width;
    let Some(rounding) = one_int_rounding(weights, outputs) else { return false };
    let block = if rounding == ActRounding::Q8_K { 256 } else { 32 };
    if product_input != out || width > NORM_PROLOGUE_MAX_ROW || !width.is_multiple_of(block) || ctx.info.max_shared_memory_bytes < NORM_PROLOGUE_SHARED_BYTES {
        return false;
    }
    let fused = fused_qkv_rope(ctx, graph, weights, ops, at + 1, n).is_some() || (fused_swiglu(ctx, weights, ops, at + 1, n).is_some() && std::env::var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT").as_deref() != Ok("1"));
    fused && !read_before_written(&ops[at + 2..], *out)
}

/// The widest row the norm prologue takes (matvec_q.comp, NP_MAX_COLS) and a bound on the
/// shared memory of those builds (the record copy, the reductions, the partial sums).
const NORM_PROLOGUE_MAX_ROW: usize = 8192;
const NORM_PROLOGUE_SHARED_BYTES: u32 = (NORM_PROLOGUE_MAX_ROW / 8 * 8 + NORM_PROLOGUE_MAX_ROW / 32 * 8 + 128 * 4 + 128 * 4 * 4 + 32 * 8) as u32;

/// Whether the RMSNorm `ops[at]` is done in its rows' chunks of 256 with its scale left to the
/// products after it ([`Kernel::NormQuantizeTagged`] after a tagged residual add,
/// [`Kernel::NormQuantize`] otherwise; then the fused QKV or gate/up product's `...Scaled` build
/// for one token, [`Kernel::MatVecIntScaled`] for a batched step). Each chunk quantizes its
/// `x * weight` and leaves its sum of squares; the products multiply their outputs by
/// `1 / sqrt(mean + eps)`. No workgroup waits for a whole row: the single-workgroup tagged norm
/// ended ~3 us after the product before it on an H200 (session 48's timeline), the chunked one
/// 1.45 us on an H100 (7B Q4_K decode +1.4%, Q4_1 -0.6%: session 49).
///
/// Decided alike for every step size up to [`INT_MAX_TOKENS`] (the one-token forms are checked
/// as for one token), so that a token gets the same bits alone and in a batch
/// (`vulkan_decode_steps_do_not_depend_on_the_batch`). By default for the K-quants' records
/// (Q8_K); `STRATA_VULKAN_TAGGED_NORM_SCALE=1` for every rounding, `=qkv` or `=ffn` only before
/// QKV or gate/up, `=0` never (read at each recording, so that a test can compare the paths).
fn chunked_norm(ctx: &VulkanContext, graph: &ForwardGraph, weights: &[Option<GpuWeight>], ops: &[Op], at: usize, n: usize) -> bool {
    let (before_qkv, before_ffn, any_rounding) = match std::env::var("STRATA_VULKAN_TAGGED_NORM_SCALE").as_deref() {
        Ok("0") => return false,
        Ok("1") => (true, true, true),
        Ok("qkv") => (true, false, true),
        Ok("ffn") => (false, true, true),
        _ => (true, true, false),
    };
    if n > INT_MAX_TOKENS || chain_mode().is_some() {
        return false;
    }
    let Some(rounding) = scaled_norm_consumer(ctx, graph, weights, ops, at, before_qkv, before_ffn) else { return false };
    let Some(Op::MatMul { outputs, .. }) = ops.get(at + 1) else { return false };
    let int_products = outputs.iter().all(|p| weights[p.weight.0 as usize].is_some_and(|w| uses_int_product(ctx, w.layout.format, n)));
    int_products && (any_rounding || rounding == ActRounding::Q8_K)
}

/// The rounding of the products after the RMSNorm `ops[at]` where they can take its scale
/// ([`chunked_norm`], [`norm_epilogue`]): the fast integer kernels, the norm's output read only
/// by one product of one integer rounding, in whole blocks and a layout with scaled builds, a
/// fused QKV (`before_qkv`) or gate/up (`before_ffn`) product for one token.
fn scaled_norm_consumer(ctx: &VulkanContext, graph: &ForwardGraph, weights: &[Option<GpuWeight>], ops: &[Op], at: usize, before_qkv: bool, before_ffn: bool) -> Option<ActRounding> {
    if ctx.exact || !ctx.info.subgroup_quads || std::env::var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT").as_deref() == Ok("1") {
        return None;
    }
    let Some(Op::RmsNorm { input, out, .. }) = ops.get(at) else { return None };
    let Some(Op::MatMul { input: product_input, outputs }) = ops.get(at + 1) else { return None };
    let width = graph.buffer(*input).width;
    let rounding = one_int_rounding(weights, outputs)?;
    let block = if rounding == ActRounding::Q8_K { 256 } else { 32 };
    if product_input != out || !width.is_multiple_of(block) || product_layout(ctx, usize::MAX, width, false) == ProductLayout::Lanes32 || read_before_written(&ops[at + 2..], *out) {
        return None;
    }
    let fused = (before_qkv && fused_qkv_rope(ctx, graph, weights, ops, at + 1, 1).is_some()) || (before_ffn && fused_swiglu(ctx, weights, ops, at + 1, 1).is_some());
    fused.then_some(rounding)
}

static TAGGED_NORM_SCALES_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// RMSNorms recorded in their rows' chunks ([`Kernel::NormQuantizeTagged`],
/// [`Kernel::NormQuantize`]) in this process ([`chunked_norm`]):
/// for tests that must know the path was taken.
pub fn tagged_norm_scales_recorded() -> u64 {
    TAGGED_NORM_SCALES_RECORDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// RMSNorms recorded in the product before them ([`Kernel::MatVecInt1NormOut`]) in this process.
static NORM_EPILOGUES_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many RMSNorms this process has recorded in the residual-adding product before them
/// (`STRATA_VULKAN_NORM_EPILOGUE=1`): for tests that must know the path was taken.
pub fn norm_epilogues_recorded() -> u64 {
    NORM_EPILOGUES_RECORDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Feed-forward halves recorded as one dispatch ([`Kernel::FfnPersistent`]) in this process.
static PERSISTENT_FFN_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many layers' feed-forward halves this process has recorded as one dispatch with grid
/// barriers (`STRATA_VULKAN_PERSISTENT_FFN=1`): for tests that must know the path was taken.
pub fn persistent_ffn_recorded() -> u64 {
    PERSISTENT_FFN_RECORDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// chain.glsl's layout of the chained stages' words: each stage counts in CHAIN_LINES words
/// CHAIN_LINE_WORDS apart (stage s's line l is word l * CHAIN_LINE_WORDS + s; word 0 of each
/// line is a stage that never counts), so a step chains at most CHAIN_LINE_WORDS - 1 stages.
const CHAIN_LINES: u64 = 16;
const CHAIN_LINE_WORDS: u64 = 1024;

/// Whether one-token steps record a small stage right after the product before it with no
/// pipeline barrier between them (the default; `=0` turns one off; read at each recording):
/// `STRATA_VULKAN_TAGGED_NORM` each RMSNorm after a residual add, `STRATA_VULKAN_TAGGED_QUANT`
/// the SwiGLU row's quantization, `STRATA_VULKAN_TAGGED_MERGE` the attention merge (and its
/// quantization) after
/// the split kernels ([`Kernel::AttentionDecodeTaggedOut`] and [`Kernel::AttentionDecodeGqaTaggedOut`],
/// [`Kernel::AttentionCombineIntTagged`]). The product also writes its row with the step's tag
/// ([`Kernel::MatVecInt1TaggedOut`], [`Kernel::MatVecIntSwiGluF32TaggedOut`]), and the small
/// stage, whose workgroups the driver may start while the product still runs, waits for this
/// step's tags itself ([`Kernel::RmsNormIntTagged`], [`Kernel::QuantizeActIntTagged`]): its
/// start and the barrier's gap overlap the product's end. Not with the other opt-in forms of
/// those stages. The same bits as the staged path; on an H100 (7B at context 512) +7.7% for
/// Q4_K and +5.9% for Q4_1, since a product's end and the small stage's start overlap. A device that
/// never ran the product beside a waiting stage would fail the step after the wait's give-up,
/// with an error naming these settings.
fn tagged_knob(knob: &str) -> bool {
    std::env::var(knob).as_deref() != Ok("0")
        // (The ticket form of gate/up, `STRATA_VULKAN_FUSE_SWIGLU_PRODUCT=1`, writes its records
        // to the spare buffer, where a tagged norm before it leaves the records it reads.)
        && !["STRATA_VULKAN_NORM_EPILOGUE", "STRATA_VULKAN_NORM_PROLOGUE", "STRATA_VULKAN_PERSISTENT_FFN", "STRATA_VULKAN_FUSE_SWIGLU_PRODUCT"].iter().any(|k| std::env::var(k).as_deref() == Ok("1"))
}

/// Tagged-row slots a step can use: one per RMSNorm, SwiGLU and attention of the graph.
fn tagged_slot_count(ops: &[Op]) -> usize {
    ops.iter().filter(|op| matches!(op, Op::RmsNorm { .. } | Op::SwiGlu { .. } | Op::Attention { .. })).count()
}

/// Which bounded wait [`wait_fault`] makes give up, for tests of the give-up path: the step then
/// fails with the give-up error, never hangs and never passes its tokens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WaitFault {
    /// Each one-token step's first tagged RMSNorm reads a tagged row that no stage writes.
    Norm,
    /// Each step's first tagged attention merge waits for a tag that no split kernel writes.
    Merge,
    /// Each step's first persistent feed-forward dispatch waits at its first grid barrier for one
    /// workgroup more than it has.
    Grid,
    /// Each chained step's first waiting stage waits for one workgroup more than the stage
    /// before has.
    Chain,
}

/// `STRATA_VULKAN_WAIT_FAULT=norm|merge|grid|chain` (`1` is `norm`), read at each recording.
fn wait_fault() -> Option<WaitFault> {
    match std::env::var("STRATA_VULKAN_WAIT_FAULT").as_deref() {
        Ok("1" | "norm") => Some(WaitFault::Norm),
        Ok("merge") => Some(WaitFault::Merge),
        Ok("grid") => Some(WaitFault::Grid),
        Ok("chain") => Some(WaitFault::Chain),
        _ => None,
    }
}

/// QKV products recorded writing q and the new cell tagged for the split kernels after them
/// (`STRATA_VULKAN_TAGGED_ATTENTION=1`) in this process.
static TAGGED_ATTENTIONS_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many split kernels reading q and the new cell tagged this process has recorded.
pub fn tagged_attentions_recorded() -> u64 {
    TAGGED_ATTENTIONS_RECORDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// SwiGLU rows' quantizations recorded reading a tagged row (`STRATA_VULKAN_TAGGED_QUANT=1`)
/// in this process.
static TAGGED_QUANTS_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Attention merges recorded reading tagged split records (`STRATA_VULKAN_TAGGED_MERGE=1`) in
/// this process.
static TAGGED_MERGES_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many attention merges reading tagged split records this process has recorded.
pub fn tagged_merges_recorded() -> u64 {
    TAGGED_MERGES_RECORDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Gate/up products recorded with some outputs in dispatches of one-output units
/// ([`swiglu_parts`]) in this process: for tests that must know the path was taken.
static SWIGLU_SPLITS_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many gate/up products this process has recorded with some outputs in one-output units.
pub fn swiglu_splits_recorded() -> u64 {
    SWIGLU_SPLITS_RECORDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// How many quantizations reading a tagged row this process has recorded.
pub fn tagged_quants_recorded() -> u64 {
    TAGGED_QUANTS_RECORDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// RMSNorms recorded reading a tagged row (`STRATA_VULKAN_TAGGED_NORM=1`) in this process: for
/// tests that must know the path was taken.
static TAGGED_NORMS_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many RMSNorms reading a tagged row this process has recorded.
pub fn tagged_norms_recorded() -> u64 {
    TAGGED_NORMS_RECORDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Record slots a chained step can use: one per RMSNorm and SwiGLU of the graph (each writes the
/// records of the product after it), and a spare.
fn chain_record_slots(ops: &[Op]) -> usize {
    ops.iter().filter(|op| matches!(op, Op::RmsNorm { .. } | Op::SwiGlu { .. })).count() + 1
}

/// chain.glsl's bit above a stage's expected count: this stage does not count its workgroups.
const CHAIN_NO_COUNT: u32 = 0x8000_0000;

/// Bytes of the chained stages' words.
fn chain_bytes() -> u64 {
    CHAIN_LINES * CHAIN_LINE_WORDS * 4
}

static FED_STEPS_SUBMITTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many greedy steps this process has submitted before the host read the token they
/// decode ([`StepTail::ArgmaxFed`]: two submissions in flight).
pub fn fed_steps_submitted() -> u64 {
    FED_STEPS_SUBMITTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Chained stages recorded in this process (`STRATA_VULKAN_CHAIN=1`): for tests that must know
/// the path was taken.
static CHAINED_STAGES_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many chained stages (shaders/chain.glsl) this process has recorded.
pub fn chained_stages_recorded() -> u64 {
    CHAINED_STAGES_RECORDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// chain.glsl's mark of a wait that gave up.
const CHAIN_GAVE_UP: u32 = 0x8000_0000;

/// Which of a one-token step's stages are chained (read at each recording): off by default.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ChainMode {
    /// `STRATA_VULKAN_CHAIN=1`: the RMSNorms, the products and the SwiGLU row's quantization.
    All,
    /// `STRATA_VULKAN_CHAIN=small`: only the boundaries after the one-workgroup-per-row stages
    /// (an RMSNorm, the SwiGLU row's quantization): the product after one starts, loads its
    /// first weights and waits on the small stage's count; every product still ends with a
    /// pipeline barrier, runs in its usual number of workgroups and does not count them. Slower
    /// on the H200 (7B Q4_K at context 512: 360-364 against 392-403 t/s): each workgroup's wait
    /// costs the short-lived product workgroups more than the barrier it saves.
    Small,
}

fn chain_mode() -> Option<ChainMode> {
    match std::env::var("STRATA_VULKAN_CHAIN").as_deref() {
        Ok("1") => Some(ChainMode::All),
        Ok("small") => Some(ChainMode::Small),
        _ => None,
    }
}

/// Workgroups of a chained product at most, each taking units in turn: `STRATA_VULKAN_CHAIN_GROUPS`,
/// else 1,056 (eight of 128 invocations an SM of an H200) with every stage chained and no cap in
/// small mode (its products keep their usual workgroups).
fn chain_groups(mode: ChainMode) -> Option<u32> {
    let knob = std::env::var("STRATA_VULKAN_CHAIN_GROUPS").ok().and_then(|v| v.parse().ok()).filter(|&g| g > 0);
    match mode {
        ChainMode::All => Some(knob.unwrap_or(1056)),
        ChainMode::Small => knob,
    }
}

/// The chained stages of a step being recorded (shaders/chain.glsl). A stage is the dispatches
/// between two stage ends (a layer's Q, K and V products are one); a stage of chained builds
/// only gets a word, counts its workgroups into it, and leaves its pipeline barrier to the next
/// command that needs one: a chained stage right after it waits on its word instead.
struct ChainRecording {
    enabled: bool,
    mode: ChainMode,
    /// Device address of word 0.
    base: u64,
    capacity: u32,
    next_word: u32,
    /// The stage being recorded.
    current: Option<ChainStage>,
    /// The last stage, chained and with no barrier after it: (word, workgroups).
    open: Option<(u32, u32)>,
    /// The workgroups each word counts by the step's end (word 0: none); empty while no stage
    /// is chained.
    counts: Vec<u32>,
    /// [`WaitFault::Chain`]: the next waiting dispatch waits for one workgroup too many.
    fault_pending: bool,
}

/// A stage being recorded with chained dispatches.
#[derive(Clone, Copy)]
struct ChainStage {
    word: u32,
    /// Workgroups of its chained dispatches so far.
    workgroups: u32,
    /// The count of the stage before that they wait for.
    expect: u32,
    /// Whether a dispatch without a chained build joined it (it then ends with a barrier: that
    /// dispatch counts nowhere).
    mixed: bool,
    /// Whether it is a one-workgroup-per-row stage (an RMSNorm, a quantization).
    small: bool,
}

impl ChainRecording {
    fn new(mode: Option<ChainMode>, base: u64, capacity: u32) -> ChainRecording {
        ChainRecording { enabled: mode.is_some(), mode: mode.unwrap_or(ChainMode::All), base, capacity, next_word: 1, current: None, open: None, counts: Vec::new(), fault_pending: false }
    }

    /// Records `k`: its chained build where chaining is on and it has one (the push constants
    /// then get their tail), else as it is.
    fn dispatch(&mut self, rec: &mut Recorder, k: Kernel, push: Push, groups: [u32; 3]) -> Result<(), DeviceError> {
        let chained = if self.enabled { ChainedKernel::of(k) } else { None };
        let chained = chained.filter(|_| !groups.contains(&0) && (self.current.is_some() || self.next_word < self.capacity));
        let small = matches!(chained, Some(ChainedKernel::RmsNormInt(_) | ChainedKernel::QuantizeActInt(_)));
        // Small mode: a product is chained only right after a chained small stage (or as a
        // later dispatch of such a stage, Q/K/V).
        let chained = chained.filter(|_| self.mode == ChainMode::All || small || self.current.map_or(self.open.is_some(), |s| !s.small));
        let Some(chained) = chained else {
            if let Some(stage) = &mut self.current {
                // Ordered after the stage before by a barrier (the chained dispatches before it
                // in this stage paid none).
                stage.mixed = true;
                rec.barrier();
            }
            return rec.dispatch(k, &push, groups);
        };
        // Products take units in turn in at most this many workgroups (matvec_q.comp's chained
        // builds; the same bits with any count).
        let groups = match (chained, chain_groups(self.mode)) {
            (ChainedKernel::RmsNormInt(_) | ChainedKernel::QuantizeActInt(_), _) | (_, None) => groups,
            (_, Some(cap)) => [groups[0].min(cap), groups[1], groups[2]],
        };
        let stage = match self.current {
            Some(stage) => stage,
            None => {
                let word = self.next_word;
                self.next_word += 1;
                let expect = match self.open {
                    Some((w, count)) if w + 1 == word => count,
                    _ => 0,
                };
                ChainStage { word, workgroups: 0, expect, mixed: false, small }
            }
        };
        let no_count = if self.barrier_after(small) { CHAIN_NO_COUNT } else { 0 };
        // (`STRATA_VULKAN_WAIT_FAULT=chain`, for tests: the step's first wait gives up.)
        let fault = u32::from(stage.expect > 0 && std::mem::take(&mut self.fault_pending));
        let push = push.chain((stage.expect + fault) | no_count, self.base + 4 * u64::from(stage.word - 1));
        if stage.expect > 0 {
            rec.dispatch_chained(Kernel::Chained(chained), &push, groups)?;
        } else {
            // (After an unchained stage: its pipeline barrier orders this one.)
            rec.dispatch(Kernel::Chained(chained), &push, groups)?;
        }
        self.current = Some(ChainStage { workgroups: stage.workgroups + groups[0] * groups[1] * groups[2], ..stage });
        Ok(())
    }

    /// Where the next chained stage that writes 8-bit records writes them: a slot of its own
    /// for the step, so that a chained product reads its input through its cached views, which
    /// no line of an earlier read of the same address in this step can serve stale (the step
    /// starts with a barrier that invalidates them). With chaining off, or out of slots (the
    /// rest of the step is then recorded unchained), None: the shared records.
    fn record_slot(&mut self, slots: &mut impl Iterator<Item = u64>) -> Option<u64> {
        if !self.enabled {
            return None;
        }
        let slot = slots.next();
        if slot.is_none() {
            self.enabled = false;
        }
        slot
    }

    /// Whether a chained stage (`small`: an RMSNorm or a quantization) ends with a pipeline
    /// barrier all the same: small mode's products. Nothing waits on their count, so they do
    /// not count their workgroups.
    fn barrier_after(&self, small: bool) -> bool {
        self.mode == ChainMode::Small && !small
    }

    /// Ends the stage: a chained one leaves its barrier to the next command that needs it,
    /// any other records it.
    fn end_stage(&mut self, rec: &mut Recorder) {
        if let Some(stage) = self.current {
            self.counts.resize(stage.word as usize + 1, 0);
            self.counts[stage.word as usize] = if self.barrier_after(stage.small) { 0 } else { stage.workgroups };
        }
        match self.current.take() {
            Some(stage) if !stage.mixed && !self.barrier_after(stage.small) => {
                self.open = Some((stage.word, stage.workgroups));
                rec.defer_barrier();
            }
            _ => {
                self.open = None;
                rec.barrier();
            }
        }
    }
}

/// Bytes of the grid barriers' words (arrivals, departures, give-ups, and one that the
/// prefetches' loads feed but practically never write).
const GRID_SYNC_BYTES: u64 = 16;
/// Polls of a grid barrier's counter before it gives up (a device that does not keep every
/// workgroup resident would otherwise hang): far beyond any wait of a resident dispatch.
const GRID_SPIN_LIMIT: u32 = 1 << 18;
/// A bit of the spin limit's word: the dispatch's first grid barrier waits for one workgroup
/// more than it has, and gives up ([`WaitFault::Grid`]).
const GRID_FAULT: u32 = 0x8000_0000;

/// A layer's feed-forward half that [`Kernel::FfnPersistent`] runs in one dispatch.
struct PersistentFfn {
    gate: GpuWeight,
    up: GpuWeight,
    down: GpuWeight,
    /// Down's bias (its address), or 0.
    down_bias: u64,
    /// The f32 SwiGLU row.
    act: BufId,
    /// The 8-bit records' rounding (of the norm's row and of the SwiGLU row).
    rounding: ActRounding,
    layout: FfnLayout,
}

/// Whether the RMSNorm `ops[at]` begins a feed-forward half that one dispatch of
/// [`Kernel::FfnPersistent`] can run with the staged kernels' bits: one decoding token, the fast
/// integer kernels, the norm quantizing its row for gate/up (whose f32 output nothing reads), the
/// fused gate/up with SwiGLU in its default form, the down projection added into the norm's
/// input, all three weights of one format, in the layouts ffn_persistent.comp is built for.
/// `STRATA_VULKAN_PERSISTENT_FFN=1` turns it on (read at each recording, so a test can compare
/// both paths); off by default (it needs every workgroup resident, which only a count chosen for
/// the device guarantees).
fn persistent_ffn(ctx: &VulkanContext, graph: &ForwardGraph, weights: &[Option<GpuWeight>], ops: &[Op], at: usize, n: usize) -> Option<PersistentFfn> {
    if std::env::var("STRATA_VULKAN_PERSISTENT_FFN").as_deref() != Ok("1") || n != 1 || ctx.exact || !ctx.info.subgroup_quads || std::env::var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT").as_deref() == Ok("1") {
        return None;
    }
    let Some(Op::RmsNorm { input, out, .. }) = ops.get(at) else { return None };
    let Some(Op::MatMul { input: gate_up_input, outputs }) = ops.get(at + 1) else { return None };
    let (act, rounding) = fused_swiglu(ctx, weights, ops, at + 1, n)?;
    let Some(Op::MatMul { input: down_input, outputs: downs }) = ops.get(at + 3) else { return None };
    let Some(Op::Add { acc, other }) = ops.get(at + 4) else { return None };
    let ([gate, up], [down]) = (outputs.as_slice(), downs.as_slice()) else { return None };
    if gate_up_input != out || *down_input != act || acc != input || *other != down.out || !only_added(ops, down.out) || read_before_written(&ops[at + 2..], *out) {
        return None;
    }
    let (g, u, d) = (weights[gate.weight.0 as usize]?, weights[up.weight.0 as usize]?, weights[down.weight.0 as usize]?);
    let format = g.layout.format;
    let width = graph.buffer(*input).width;
    if u.layout.format != format || d.layout.format != format || ActRounding::for_format(format) != Some(rounding) || !rms_norm_can_quantize(ctx, width, rounding) || d.rows != width || d.cols != g.rows {
        return None;
    }
    let block = if rounding == ActRounding::Q8_K { 256 } else { 32 };
    let q4k = format == WeightFormat::Q4_K;
    if !g.rows.is_multiple_of(block) || product_layout(ctx, g.rows, g.cols, false) != ProductLayout::Lanes64 || swiglu_pairs(format) != if q4k { 2 } else { 1 } {
        return None;
    }
    let layout = match int_product_dispatch(ctx, format, d.rows, d.cols, 1, true).0 {
        Kernel::MatVecInt1Unrolled(_, rows) if rows == if q4k { 4 } else { 2 } => FfnLayout::LongRows,
        Kernel::MatVecInt1(_, 2, ProductLayout::Lanes64) => FfnLayout::ShortRows,
        _ => return None,
    };
    let down_bias = match down.bias {
        Some(b) => weights[b.0 as usize]?.address,
        None => 0,
    };
    Some(PersistentFfn { gate: g, up: u, down: d, down_bias, act, rounding, layout })
}

/// Workgroups of a dispatch with grid barriers: every one must be resident at once. One on a
/// CPU device (lavapipe runs a dispatch's workgroups on a few threads, not all at once); else
/// [`persistent_groups`].
fn grid_groups(ctx: &VulkanContext) -> usize {
    if ctx.info.is_cpu() { 1 } else { persistent_groups(ctx) }
}

/// Workgroups of a product with the norm prologue: each normalizes the row once, then takes
/// units in turn. `STRATA_VULKAN_PERSISTENT_GROUPS` (1-65535), else 528 (four of 128
/// invocations per SM of an H200); 8 on a CPU device.
fn persistent_groups(ctx: &VulkanContext) -> usize {
    static KNOB: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let knob = *KNOB.get_or_init(|| std::env::var("STRATA_VULKAN_PERSISTENT_GROUPS").ok().and_then(|v| v.parse().ok()).filter(|g| (1..=65535).contains(g)));
    knob.unwrap_or(if ctx.info.is_cpu() { 8 } else { 528 })
}

/// Host-cached memory for the logits unless `STRATA_VULKAN_READBACK=uncached` (for comparison).
fn readback_kind() -> MemoryKind {
    match std::env::var("STRATA_VULKAN_READBACK").as_deref() {
        Ok("uncached") => MemoryKind::HostVisible,
        _ => MemoryKind::HostRead,
    }
}

/// Elements per row at most of the RMSNorm that also quantizes (shaders/rms_norm_q.comp, MAX_ROW),
/// and the shared memory it declares.
const RMS_NORM_INT_MAX_ROW: usize = 8192;
const RMS_NORM_INT_SHARED_BYTES: u32 = 512 * 8 + RMS_NORM_INT_MAX_ROW as u32 / 32 * 8;

/// Whether the quantizing RMSNorm (shaders/rms_norm_q.comp) takes rows of `width` elements
/// rounded as `r`: a row its registers and shared memory hold, whole blocks, a 512-wide workgroup.
fn rms_norm_can_quantize(ctx: &VulkanContext, width: usize, r: ActRounding) -> bool {
    let block = if r == ActRounding::Q8_K { 256 } else { 32 };
    width <= RMS_NORM_INT_MAX_ROW && width.is_multiple_of(block) && ctx.info.max_shared_memory_bytes >= RMS_NORM_INT_SHARED_BYTES && ctx.info.max_workgroup_invocations >= 512
}

/// Push constants of a quantize_act.comp build that computes its input (SWIGLU, COMBINE) and
/// writes the 8-bit records of `n` rows of `cols` activations (row stride `stride`) for the
/// product that follows: the input addresses, the records' address, then the sizes.
fn quantizing_push(inputs: &[u64], records: u64, cols: usize, stride: usize, n: usize) -> Push {
    let (record_bytes, meta_offset) = int_act_record(cols);
    inputs.iter().fold(Push::new(), |p, &a| p.addr(a)).addr(records).u32(cols as u32).u32(stride as u32).u32(n as u32).u32(record_bytes as u32).u32(meta_offset as u32)
}

/// The activation rounding all of `outputs` share when every one has an integer kernel.
fn one_int_rounding(weights: &[Option<GpuWeight>], outputs: &[strata_model::graph::Projection]) -> Option<ActRounding> {
    let mut found: Option<ActRounding> = None;
    for p in outputs {
        let w = weights[p.weight.0 as usize]?;
        let r = ActRounding::for_format(w.layout.format)?;
        if !w.layout.format.has_int_kernel() || found.is_some_and(|f| f != r) {
            return None;
        }
        found = Some(r);
    }
    found
}

/// The activation rounding with which an op writing `out` (RMSNorm, SwiGLU, attention's merge)
/// also quantizes for `next`, the product reading `out`: integer kernels, a decode-sized step,
/// every projection of one rounding, and the fusion not turned off by its `switch`=0 (for
/// comparison), if it has one.
fn fused_product_rounding(ctx: &VulkanContext, weights: &[Option<GpuWeight>], next: Option<&Op>, out: BufId, n: usize, switch: Option<&str>) -> Option<ActRounding> {
    let switched_off = switch.is_some_and(|name| std::env::var(name).as_deref() == Ok("0"));
    match next {
        Some(Op::MatMul { input, outputs }) if *input == out && ctx.integer_dot_product && n <= INT_MAX_TOKENS && !switched_off => one_int_rounding(weights, outputs),
        _ => None,
    }
}

/// Whether `buf` is read by nothing but residual adds of it (a projection's output that only
/// joins the residual stream).
fn only_added(ops: &[Op], buf: BufId) -> bool {
    ops.iter().all(|op| match op {
        Op::Add { acc, .. } => *acc != buf,
        _ => !reads(op, buf),
    })
}

/// Whether an op of `ops` reads `buf` before one overwrites it.
fn read_before_written(ops: &[Op], buf: BufId) -> bool {
    for op in ops {
        if reads(op, buf) {
            return true;
        }
        if writes(op, buf) {
            return false;
        }
    }
    false
}

/// The SelectRows op whose output the ops after it can read at its input's address in a step of
/// one token and one output row: (its index, input, output). Nothing after it may change the
/// input or write the output, and rows of both must be as wide.
fn elidable_select_rows(graph: &ForwardGraph, ops: &[Op]) -> Option<(usize, BufId, BufId)> {
    let (at, input, out) = ops.iter().enumerate().find_map(|(i, op)| match op {
        Op::SelectRows { input, out } => Some((i, *input, *out)),
        _ => None,
    })?;
    let changes = |op: &Op, buf: BufId| {
        writes(op, buf)
            || match op {
                Op::Add { acc, .. } => *acc == buf,
                Op::HeadNorm { buf: b, .. } | Op::Rope { buf: b, .. } => *b == buf,
                _ => false,
            }
    };
    let later = &ops[at + 1..];
    let ok = input != out && graph.buffer(input).width == graph.buffer(out).width && !later.iter().any(|op| changes(op, input) || changes(op, out) || matches!(op, Op::SelectRows { .. }));
    ok.then_some((at, input, out))
}

/// Whether `op` writes all of `buf` (without reading it).
fn writes(op: &Op, buf: BufId) -> bool {
    match op {
        Op::MatMul { outputs, .. } => outputs.iter().any(|p| p.out == buf),
        Op::Embed { out, .. } | Op::RmsNorm { out, .. } | Op::Attention { out, .. } | Op::SwiGlu { out, .. } | Op::SelectRows { out, .. } => *out == buf,
        Op::Add { .. } | Op::HeadNorm { .. } | Op::Rope { .. } | Op::StoreKv { .. } => false,
    }
}

/// Whether `op` reads `buf`.
fn reads(op: &Op, buf: BufId) -> bool {
    match op {
        Op::Add { acc, other } => *acc == buf || *other == buf,
        Op::RmsNorm { input, .. } | Op::MatMul { input, .. } | Op::SelectRows { input, .. } => *input == buf,
        Op::HeadNorm { buf: b, .. } | Op::Rope { buf: b, .. } => *b == buf,
        Op::StoreKv { k, v, .. } => *k == buf || *v == buf,
        Op::Attention { q, .. } => *q == buf,
        Op::SwiGlu { gate, up, .. } => *gate == buf || *up == buf,
        Op::Embed { .. } => false,
    }
}

/// The push constants every attention kernel starts with: `addresses` (the query, its scratch —
/// split results or scores —, K, V, the step's positions, sequences, table offsets and block
/// tables, then one address of the kernel's own), then the attention geometry.
fn attention_push(graph: &ForwardGraph, q: BufId, addresses: [u64; 9], kv_row_bytes: u64, block_size: usize) -> Push {
    attention_push_with(graph, q, &addresses, kv_row_bytes, block_size)
}

/// [`attention_push`] with more addresses of the kernel's own after the first nine.
fn attention_push_with(graph: &ForwardGraph, q: BufId, addresses: &[u64], kv_row_bytes: u64, block_size: usize) -> Push {
    let hp = &graph.hparams;
    addresses
        .iter()
        .fold(Push::new(), |p, &a| p.addr(a))
        .u32(hp.n_heads as u32)
        .u32(hp.n_kv_heads as u32)
        .u32(hp.head_dim as u32)
        .u32(graph.buffer(q).width as u32)
        .u32((kv_row_bytes / 2) as u32)
        .u32(block_size as u32)
        .f32(graph.attention_scale)
}

/// Device addresses of `layer`'s K and V tensors in the arena, and their row stride in bytes.
pub(crate) fn kv_addresses(ctx: &VulkanContext, kv: &VulkanKvMemory, layer: usize) -> Result<(u64, u64, u64), DeviceError> {
    let (k, stride) = kv.tensor_address(layer as u32, false).ok_or_else(|| unsupported(ctx, format!("no K tensor for layer {layer}")))?;
    let (v, _) = kv.tensor_address(layer as u32, true).ok_or_else(|| unsupported(ctx, format!("no V tensor for layer {layer}")))?;
    Ok((k, v, stride))
}

/// The mapped parameter bytes as u32 words (the buffer is allocated in whole words and mapped at
/// an address aligned for any type).
fn bytemuck_words(bytes: &mut [u8]) -> &mut [u32] {
    let (head, words, _) = {
        // SAFETY: u32 has no invalid bit patterns; align_to_mut returns only the aligned middle.
        unsafe { bytes.align_to_mut::<u32>() }
    };
    debug_assert!(head.is_empty(), "mapped memory is aligned");
    words
}

impl VulkanPlan {
    /// Fails unless the give-up count that steps with waits between workgroups copy into the
    /// readback (grid barriers, tagged small stages) is the one seen before: a wait that gave up
    /// read values that were not this step's. The count only grows, so a submission still in
    /// flight that copies it again cannot hide one.
    ///
    /// # Errors
    /// [`DeviceError::Unsupported`] naming the settings that turn those waits off.
    fn check_give_ups(&mut self) -> Result<(), DeviceError> {
        if !self.grid_barriers {
            return Ok(());
        }
        let at = self.opts.max_outputs * self.graph.hparams.vocab_size * 4;
        let bytes = self.readback.mapped().ok_or_else(|| unsupported(&self.ctx, "the readback buffer is not mapped".into()))?;
        let give_ups = bytes.get(at..at + 4).map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        if give_ups == self.give_ups_seen {
            return Ok(());
        }
        self.give_ups_seen = give_ups;
        Err(unsupported(
            &self.ctx,
            format!(
                "a wait for another workgroup's results gave up: the persistent feed-forward dispatch's {} workgroups were not all resident at once (set STRATA_VULKAN_PERSISTENT_GROUPS lower or unset STRATA_VULKAN_PERSISTENT_FFN), or a tagged small stage never saw the stage before it finish (set STRATA_VULKAN_TAGGED_NORM=0, STRATA_VULKAN_TAGGED_QUANT=0 and STRATA_VULKAN_TAGGED_MERGE=0)",
                grid_groups(&self.ctx)
            ),
        ))
    }

    /// Runs one step (its logits, or only what `tail` asks of them, then in the readback
    /// buffer) and checks what the step's opt-in forms report.
    fn run_step(&mut self, b: &StepBatch<'_>, tail: StepTail) -> Result<(), DeviceError> {
        let started = std::time::Instant::now();
        let cb = self.prepare_step(b, tail)?;
        let (n, n_out) = (b.len(), b.output_rows.len());
        let submitted = std::time::Instant::now();
        self.commands.timeline.submit_and_wait(cb)?;
        let waited_ns = submitted.elapsed().as_nanos() as f64;
        if let Some(p) = &mut self.profiler {
            p.collect(step_class(n));
            let host = p.host.entry(step_class(n)).or_default();
            host.0 += started.elapsed().as_nanos() as f64;
            host.1 += waited_ns;
        }
        self.check_give_ups()?;
        let vocab = self.graph.hparams.vocab_size;
        let bytes = self.readback.mapped().ok_or_else(|| unsupported(&self.ctx, "the readback buffer is not mapped".into()))?;
        if let Some(counts) = self.chain_words.get(&(n, n_out, tail)).filter(|c| !c.is_empty()) {
            // Every chained stage counted each of its workgroups, and no wait gave up.
            let at = self.opts.max_outputs * vocab * 4 + 4;
            let words = bytes.get(at..at + 4 * counts.len() * CHAIN_LINES as usize).unwrap_or_default();
            let word_at = |line: usize, stage: usize| {
                let at = 4 * (line * counts.len() + stage);
                words.get(at..at + 4).map_or(0, |c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            };
            for (word, &want) in counts.iter().enumerate() {
                let lines: Vec<u32> = (0..CHAIN_LINES as usize).map(|l| word_at(l, word)).collect();
                if lines.iter().any(|w| w & CHAIN_GAVE_UP != 0) {
                    return Err(unsupported(&self.ctx, format!("chained stage {word}'s wait for the stage before gave up (the device started a dispatch's workgroups before the one before had all started); unset STRATA_VULKAN_CHAIN")));
                }
                let got: u32 = lines.iter().sum();
                if got != want {
                    return Err(unsupported(&self.ctx, format!("chained stage {word} counted {got} of its {want} workgroups (a kernel that does not count every workgroup); unset STRATA_VULKAN_CHAIN")));
                }
            }
        }
        Ok(())
    }

    /// Checks the batch against the plan's limits and writes its parameters into `region` of the
    /// host buffer of `slot` ([`VulkanPlan::write_params`]).
    fn check_and_write_params(&mut self, b: &StepBatch<'_>, slot: usize, region: usize) -> Result<(), DeviceError> {
        let limits = BatchLimits {
            max_tokens: self.opts.max_batch_tokens,
            max_outputs: self.opts.max_outputs,
            vocab_size: self.graph.hparams.vocab_size,
            block_size: self.opts.block_size,
            n_blocks: self.kv.layout.params.n_blocks() as usize,
        };
        limits.check(b)?;
        self.write_params(b, slot, region)
    }

    /// Checks the batch, writes its parameters into the host buffer of `tail`'s slot (which no
    /// pending submission may read) and returns the step's command buffer, recorded or cached.
    fn prepare_step(&mut self, b: &StepBatch<'_>, tail: StepTail) -> Result<vk::CommandBuffer, DeviceError> {
        self.check_and_write_params(b, tail.slot(), 0)?;
        self.record(b.len(), b.output_rows.len(), tail)
    }

    /// Whether this plan's argmax runs on the GPU for a vocabulary of `vocab_size` and
    /// `n_out` rows.
    fn argmax_on_gpu(&self, vocab_size: usize, n_out: usize) -> bool {
        static ON_HOST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        // `STRATA_VULKAN_ARGMAX=host`: the logits read back and their argmax taken on the host
        // (for comparison).
        let on_host = *ON_HOST.get_or_init(|| std::env::var("STRATA_VULKAN_ARGMAX").as_deref() == Ok("host"));
        !on_host && n_out <= INT_MAX_TOKENS && vocab_size == self.graph.hparams.vocab_size && self.ctx.info.max_workgroup_invocations >= 1024
    }

    /// Whether greedy runs submit each step before the host reads the step before's token:
    /// the argmax on the GPU, no profile (its queries are per submission) and not
    /// `STRATA_VULKAN_GREEDY_PIPELINE=off` (one step at a time, for comparison).
    fn greedy_runs_pipelined(&self, vocab_size: usize) -> bool {
        static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let off = *OFF.get_or_init(|| std::env::var("STRATA_VULKAN_GREEDY_PIPELINE").as_deref() == Ok("off"));
        !off && self.profiler.is_none() && self.argmax_on_gpu(vocab_size, 1)
    }

    /// How the submission of a greedy run that starts at step `at` (the run's `index`-th) ends:
    /// the run's first step alone (its token from the host), then submissions of `steps` fed
    /// steps ([`StepTail::ArgmaxFed`]) in alternating slots, and single fed steps for the rest
    /// (a few shapes, recorded once).
    fn greedy_tail_at(at: usize, index: usize, n_steps: usize, steps: usize) -> StepTail {
        let slot = (index % 2) as u8;
        if at == 0 {
            StepTail::Argmax
        } else if steps > 1 && n_steps.saturating_sub(at) >= steps {
            StepTail::ArgmaxFed { slot, steps: steps as u8 }
        } else {
            StepTail::ArgmaxFed { slot, steps: 1 }
        }
    }

    /// The shapes [`VulkanPlan::greedy_tail_at`] uses for `steps`.
    fn greedy_tails(steps: usize) -> Vec<StepTail> {
        let mut tails = vec![StepTail::Argmax, StepTail::ArgmaxFed { slot: 0, steps: 1 }, StepTail::ArgmaxFed { slot: 1, steps: 1 }];
        if steps > 1 {
            tails.extend((0..2).map(|slot| StepTail::ArgmaxFed { slot, steps: steps as u8 }));
        }
        tails
    }

    /// [`ForwardPlan::decode_greedy`] with two submissions in flight: submission i + 2 is
    /// submitted as soon as submission i's tokens are read, while submission i + 1 runs (and
    /// reads submission i's last token on the device). See [`VulkanPlan::greedy_tail_at`]; each
    /// submission's length is chosen when it is submitted ([`greedy_steps_for`]).
    fn decode_greedy_pipelined(&mut self, first_token: u32, start_pos: u32, block_table: &[u32], n_steps: usize, keep_going: &mut dyn FnMut(u32) -> bool) -> Result<Vec<u32>, DeviceError> {
        let tables = [block_table];
        let submit = |plan: &mut VulkanPlan, (first, tail): (usize, StepTail)| -> Result<u64, DeviceError> {
            for k in 0..tail.steps() {
                let position = crate::greedy_position(start_pos, first + k)?;
                // (A fed step's token is read on the device; `first_token` only fills its place.)
                let batch = StepBatch { tokens: &[first_token], positions: &[position], seq_of_token: &[0], block_tables: &tables, output_rows: &[0] };
                plan.check_and_write_params(&batch, tail.slot(), k)?;
            }
            let cb = plan.record(1, 1, tail)?;
            let value = plan.commands.timeline.submit(cb)?;
            if first > 0 {
                FED_STEPS_SUBMITTED.fetch_add(tail.steps() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(value)
        };
        // The next submission's first step and its index in the run.
        let (mut next_at, mut next_index) = (0usize, 0usize);
        let mut submit_next = |plan: &mut VulkanPlan| -> Result<Option<(u64, StepTail)>, DeviceError> {
            if next_at >= n_steps {
                return Ok(None);
            }
            let steps = greedy_steps_for(plan.greedy_steps_per_submission, plan.greedy_steps_fixed, plan.greedy_step_us);
            let tail = Self::greedy_tail_at(next_at, next_index, n_steps, steps);
            let value = submit(plan, (next_at, tail))?;
            next_at += tail.steps();
            next_index += 1;
            Ok(Some((value, tail)))
        };
        let mut pending = std::collections::VecDeque::with_capacity(2);
        for _ in 0..2 {
            if let Some(sub) = submit_next(self)? {
                pending.push_back(sub);
            }
        }
        let mut picked = Vec::with_capacity(n_steps.min(1 << 16));
        // When the submission before finished: the GPU ran the next one from there (two are
        // in flight), so the time to its end over its steps is a step's time.
        let mut finished_before: Option<std::time::Instant> = None;
        'run: while let Some((value, tail)) = pending.pop_front() {
            self.commands.timeline.wait(value)?;
            let now = std::time::Instant::now();
            if let Some(before) = finished_before {
                self.greedy_step_us = now.duration_since(before).as_secs_f64() * 1e6 / tail.steps() as f64;
            }
            finished_before = Some(now);
            self.check_give_ups()?;
            let at = self.readback_of_slot(tail.slot()) as usize;
            let bytes = self.readback.mapped().ok_or_else(|| unsupported(&self.ctx, "the readback buffer is not mapped".into()))?;
            let words = bytes.get(at..at + 4 * tail.steps()).ok_or_else(|| unsupported(&self.ctx, "the readback buffer is too small".into()))?;
            for token in conv::u32_from_bytes(words) {
                picked.push(token);
                if !keep_going(token) {
                    break 'run;
                }
            }
            if let Some(sub) = submit_next(self)? {
                pending.push_back(sub);
            }
        }
        // A submission after the one that stopped the run finishes before anything reuses its
        // buffers; its tokens are dropped.
        if let Some(&(last, _)) = pending.back() {
            self.commands.timeline.wait(last)?;
        }
        Ok(picked)
    }
}

impl ForwardPlan for VulkanPlan {
    fn forward(&mut self, b: &StepBatch<'_>) -> Result<&[f32], DeviceError> {
        self.run_step(b, StepTail::Logits)?;
        let vocab = self.graph.hparams.vocab_size;
        let n_out = b.output_rows.len();
        let bytes = self.readback.mapped().ok_or_else(|| unsupported(&self.ctx, "the readback buffer is not mapped".into()))?;
        let bytes = &bytes[..n_out * vocab * 4];
        // The logits are read where the GPU wrote them (host-coherent memory, mapped at an
        // alignment of at least 64 bytes) instead of converted into a vector of their own: a
        // pass over every logit less per step (H200 host, 32 sequences of a 152k vocabulary:
        // 4.3 -> 0.2 ms of forward() outside the GPU's work; decode 948 -> 1,087 t/s).
        // SAFETY: every bit pattern is a valid f32; `align_to` only yields correctly aligned
        // elements; the memory is not written again before the next submission, which needs
        // `&mut self` (this borrow's end).
        let (head, floats, tail) = unsafe { bytes.align_to::<f32>() };
        if cfg!(target_endian = "little") && head.is_empty() && tail.is_empty() {
            return Ok(floats);
        }
        self.logits.clear();
        self.logits.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        Ok(&self.logits)
    }

    /// The argmax on the GPU: the host then reads a token a row instead of the row's logits
    /// (the H200 host took ~125-150 us a token to read a 152k vocabulary's logits back from
    /// mapped memory, ~6% of a 7B decode step).
    fn forward_argmax(&mut self, b: &StepBatch<'_>, vocab_size: usize) -> Result<Vec<u32>, DeviceError> {
        let n_out = b.output_rows.len();
        if !self.argmax_on_gpu(vocab_size, n_out) {
            return Ok(self.forward(b)?.chunks(vocab_size.max(1)).map(strata_model::sampling::argmax).collect());
        }
        self.run_step(b, StepTail::Argmax)?;
        let bytes = self.readback.mapped().ok_or_else(|| unsupported(&self.ctx, "the readback buffer is not mapped".into()))?;
        Ok(conv::u32_from_bytes(&bytes[..n_out * 4]))
    }

    /// Two submissions of greedy steps in flight (see [`VulkanPlan::decode_greedy_pipelined`])
    /// where the argmax runs on the GPU and the recorded steps have no opt-in form whose reports
    /// the host must check after each step (grid barriers, chained stages); otherwise one step at
    /// a time.
    fn decode_greedy(&mut self, first_token: u32, start_pos: u32, block_table: &[u32], n_steps: usize, vocab_size: usize, keep_going: &mut dyn FnMut(u32) -> bool) -> Result<Vec<u32>, DeviceError> {
        if n_steps < 2 || !self.greedy_runs_pipelined(vocab_size) {
            return crate::greedy_steps_one_by_one(self, first_token, start_pos, block_table, n_steps, vocab_size, keep_going);
        }
        // Every shape is recorded before anything is submitted: recording may free cached command
        // buffers (never a pending one, then).
        let tails = Self::greedy_tails(self.greedy_steps_per_submission);
        if tails.iter().any(|t| !self.commands.recorded.contains_key(&(1, 1, *t))) && self.commands.recorded.len() + tails.len() > MAX_RECORDED_SHAPES {
            // SAFETY: no submission is pending (every step before this one was waited for).
            unsafe { self.commands.forget_all() };
        }
        for &tail in &tails {
            self.record(1, 1, tail)?;
        }
        // (Chained steps' counts are checked step by step; give-ups, which only grow, after
        // each submission of the pipelined run.)
        let reports = tails.iter().any(|t| self.chain_words.get(&(1, 1, *t)).is_some_and(|c| !c.is_empty()));
        if reports {
            return crate::greedy_steps_one_by_one(self, first_token, start_pos, block_table, n_steps, vocab_size, keep_going);
        }
        let result = self.decode_greedy_pipelined(first_token, start_pos, block_table, n_steps, keep_going);
        if result.is_err() {
            // Nothing may stay pending past this call (buffers are reused, the plan may drop).
            let _ = self.commands.timeline.wait(self.commands.timeline.last_submitted());
            // A give-up in the submission that was still in flight belongs to this failed run,
            // not to the next step.
            let _ = self.check_give_ups();
        }
        result
    }

    /// The top-k on the GPU (top_k.comp, up to [`TOP_K_MAX`]): the host reads 512 bytes a row
    /// instead of the row's logits.
    fn forward_top_k(&mut self, b: &StepBatch<'_>, vocab_size: usize, k: usize) -> Result<Vec<Vec<Candidate>>, DeviceError> {
        let n_out = b.output_rows.len();
        static ON_HOST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        // `STRATA_VULKAN_TOP_K=host`: the logits read back and their top-k taken on the host
        // (for comparison).
        let on_host = *ON_HOST.get_or_init(|| std::env::var("STRATA_VULKAN_TOP_K").as_deref() == Ok("host"));
        if on_host || k > TOP_K_MAX || n_out > INT_MAX_TOKENS || vocab_size != self.graph.hparams.vocab_size || self.ctx.info.max_workgroup_invocations < 1024 {
            return Ok(self.forward(b)?.chunks(vocab_size.max(1)).map(|row| strata_model::sampling::top_k(row, k)).collect());
        }
        self.run_step(b, StepTail::TopK)?;
        let bytes = self.readback.mapped().ok_or_else(|| unsupported(&self.ctx, "the readback buffer is not mapped".into()))?;
        Ok(conv::u32_from_bytes(&bytes[..n_out * TOP_K_MAX * 8]).chunks_exact(TOP_K_MAX * 2).map(|row| top_k_candidates(row, k)).collect())
    }

    fn device_name(&self) -> String {
        self.ctx.name()
    }

    fn max_batch_tokens(&self) -> usize {
        self.opts.max_batch_tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_up_splits_cover_every_output_once_in_whole_workgroups() {
        // Small units first by default only where the SM count is known: ten outputs an SM.
        assert_eq!(small_first_default(None), 0);
        assert_eq!(small_first_default(Some(132)), 1_320);
        // Off: one dispatch.
        assert_eq!(split_two_output_units(18_944, 2, 0, 0), vec![(0, 18_944, 2)]);
        // The 7B shape with half a wave first (1,320 outputs) and a tail.
        assert_eq!(split_two_output_units(18_944, 2, 1_320, 0), vec![(0, 1_320, 1), (1_320, 17_624, 2)]);
        assert_eq!(split_two_output_units(18_944, 2, 0, 2_640), vec![(0, 16_304, 2), (16_304, 2_640, 1)]);
        // Whatever is asked: the parts follow each other from 0 to the end, and the two-output
        // part starts on a whole workgroup (its units' outputs are where the kernel expects).
        for rows in [1usize, 3, 4, 5, 100, 4_865, 18_944] {
            for groups in [1usize, 2, 4] {
                for first in [0usize, 1, 3, 4, 7, 100, 4_864, 100_000] {
                    for last in [0usize, 1, 3, 4, 99, 4_866, 100_000] {
                        let parts = split_two_output_units(rows, groups, first, last);
                        let mut at = 0;
                        for &(start, n, pairs) in &parts {
                            assert_eq!(start, at, "{rows} {groups} {first} {last}: {parts:?}");
                            assert!(n > 0 && (pairs == 1 || start % (2 * groups) == 0), "{rows} {groups} {first} {last}: {parts:?}");
                            at += n;
                        }
                        assert_eq!(at, rows, "{rows} {groups} {first} {last}: {parts:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn greedy_submissions_hold_several_steps_only_while_they_are_short() {
        // Not yet timed: one. Four steps within the burst: four.
        assert_eq!(greedy_steps_for(4, false, 0.0), 1);
        assert_eq!(greedy_steps_for(4, false, 2_200.0), 4);
        assert_eq!(greedy_steps_for(4, false, GREEDY_BURST_US / 4.0), 4);
        // A slow model's steps: one a submission, so its stream is not bursty.
        assert_eq!(greedy_steps_for(4, false, GREEDY_BURST_US / 4.0 + 1.0), 1);
        assert_eq!(greedy_steps_for(4, false, 50_000.0), 1);
        // Set by the caller or the environment: whatever a step takes.
        assert_eq!(greedy_steps_for(4, true, 50_000.0), 4);
        assert_eq!(greedy_steps_for(1, false, 0.0), 1);
    }

    #[test]
    fn a_greedy_run_is_its_first_step_then_alternating_submissions_of_recorded_shapes() {
        for steps in 1..=GREEDY_MAX_STEPS_PER_SUBMISSION {
            for n_steps in 1..40 {
                let shapes = VulkanPlan::greedy_tails(steps);
                let (mut at, mut index) = (0, 0);
                while at < n_steps {
                    let tail = VulkanPlan::greedy_tail_at(at, index, n_steps, steps);
                    assert!(shapes.contains(&tail), "{tail:?} is not recorded for {steps} steps");
                    assert_eq!(tail == StepTail::Argmax, at == 0, "only the first step takes its token from the host");
                    if at > 0 {
                        assert_eq!(tail.slot(), index % 2, "submissions alternate between the slots");
                    }
                    at += tail.steps();
                    index += 1;
                }
                assert_eq!(at, n_steps, "a run of {n_steps} with {steps} a submission runs exactly its steps");
            }
        }
    }
}
