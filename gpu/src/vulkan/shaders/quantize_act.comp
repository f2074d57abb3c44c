#version 450
// Rounds activation rows the way the CPU device quantizes them before a quantized matrix product
// (ggml's x86 quantizers): Q8_0/Q8_1 (blocks of 32, scale amax/127 stored as f16, values times
// 127/amax rounded half to even) for Q4_0, Q4_1 and Q8_0 weights; Q8_K (blocks of 256, scale -max/127 in f32,
// round half to even) for the K-quants. The devices then multiply the same activations, so Vulkan
// agrees with the CPU reference.
//
// Two outputs, by build: the rounded values as f32 (for the float kernels: one workgroup per 256
// elements of a row, one invocation per element, the block maximum a tree reduction that keeps
// the first element on ties, as the CPU's scan does), or (INT_OUT) the 8-bit quants themselves
// for the integer-dot-product kernels (quantize_lanes.glsl: one workgroup per INT_CHUNK elements
// of a row, eight per invocation), as one record per row: the quants at byte 0, then at
// `meta_offset` one (scale as f32 bits, sum of the 32 quants) pair per block of 32 (for Q8_K the
// super-block's scale repeated in each of its eight blocks).
#include "common.glsl"

#if defined(INT_OUT)
// Elements per workgroup (kernels.rs, int_quantize_groups): one Q8_K super-block, so a row of a
// 7B shape's FFN spreads over 74 workgroups. 32 invocations of eight elements each, or (COMBINE)
// 256 that merge one element each (a merge walks every split: at long contexts, 128 of them)
// and hand them to the first 32 through shared memory.
#define INT_CHUNK 256
#if defined(COMBINE)
#define WG 256
#else
#define WG 32
#endif
#else
#define WG 256
#endif
layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t x;
#ifdef SWIGLU
    uint64_t up;
    uint64_t swiglu_out;
#endif
#ifdef COMBINE
    uint64_t header;
    uint64_t combine_out;
#endif
    uint64_t out_;
    uint cols;
    uint stride;
    uint n_rows;
    uint out_stride;
    uint meta_offset;
#ifdef COMBINE
    uint head_dim;
#endif
#if defined(CHAINED)
    uint chain_expect;
    uint64_t chain;
#endif
#if defined(TAGGED_IN) && defined(COMBINE)
    // The split records as attention_decode.comp (TAGGED_OUT) wrote them, (bits, tag) pairs in
    // `x`, whose tag is the step's times 256 plus this (the layer's salt); the word that counts
    // waits that gave up.
    uint tag_salt;
    uint64_t give_ups;
#elif defined(TAGGED_IN)
    // The row as the product before wrote it, (bits, tag) per element (matvec_q.comp
    // TAGGED_OUT), the step header whose word 3 holds this step's tag, and the word that counts
    // waits that gave up.
    uint64_t tagged;
    uint64_t tag_header;
    uint64_t give_ups;
#endif
#if defined(NORM_W)
    // The RMSNorm, done as this quantization (NORM_W below): its weight, where each row's eps
    // and chunks' sums of squares go, and eps.
    uint64_t norm_w;
    uint64_t norm_partials;
    float eps;
#endif
} pc;
#if defined(NORM_W) && (!defined(INT_OUT) || defined(COMBINE) || defined(SWIGLU) || defined(CHAINED))
#error "the norm's chunks are the plain quantizer's, of a row or tagged"
#endif
#if defined(TAGGED_IN)
#if !defined(INT_OUT) || defined(SWIGLU) || defined(CHAINED) || defined(F64)
#error "the tagged quantizers are the fast INT_OUT builds, plain or merging"
#endif
#include "tagged.glsl"
#endif

#ifdef COMBINE
#if defined(TAGGED_IN)
#define MERGE_TAGGED
#endif
#include "attention_merge.glsl"
#endif

#if defined(ACT_Q8_K)
#define SEG 256
#else
#define SEG 32
#endif

layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };

#ifdef INT_OUT
#define QL_BLOCKS (WG * 8 / 32)
#include "quantize_lanes.glsl"
#if defined(NORM_W)
shared float norm_squares[WG];
#endif
#else
shared float sa[256];
shared float sv[256];
#endif

#if defined(COMBINE)
shared float merged[INT_CHUNK];

// Slot `slot`'s eight elements of token `row`'s attention output from the chunk at `first` (its
// head's split results merged; 0.0 past the row and for slots past the chunk), also written as
// f32: each invocation merges element first + tid, then takes its eight from shared memory.
void input_run(uint row, uint first, uint slot, out float v[8]) {
    uint tid = gl_LocalInvocationID.x;
    uint e = first + tid;
    float m = 0.0;
    if (e < pc.cols) {
        uint hd = pc.head_dim;
        uint n_splits = U32s(pc.header).v[0];
        uint base = (row * (pc.cols / hd) + e / hd) * n_splits * (hd + 2);
#if defined(TAGGED_IN)
        bool gave_up = false;
        m = merge_splits_tagged(pc.x, base, n_splits, hd, e % hd, split_records_tag(U32s(pc.header).v[3], pc.tag_salt), gave_up);
        if (gave_up) {
            atomicAdd(U32s(pc.give_ups).v[0], 1u);
        }
#else
        m = merge_splits(F32s(pc.x), base, n_splits, hd, e % hd);
#endif
        F32s(pc.combine_out).v[row * pc.stride + e] = m;
    }
    merged[tid] = m;
    barrier();
    uint at = 8 * slot;
    [[unroll]] for (uint k = 0; k < 8; k++) {
        v[k] = at < INT_CHUNK ? merged[at + k] : 0.0;
    }
}
#elif defined(SWIGLU)
// Slot `slot`'s eight elements of row `row`'s SwiGLU from the chunk at `first` (0.0 past the
// row), also written as f32.
void input_run(uint row, uint first, uint slot, out float v[8]) {
    uint e0 = first + 8 * slot;
    float g[8];
    float u[8];
    [[unroll]] for (uint k = 0; k < 8; k++) {
        bool in_row = e0 + k < pc.cols;
        g[k] = in_row ? F32s(pc.x).v[row * pc.stride + e0 + k] : 0.0;
        u[k] = in_row ? F32s(pc.up).v[row * pc.stride + e0 + k] : 0.0;
    }
    [[unroll]] for (uint k = 0; k < 8; k++) {
        v[k] = 0.0;
        if (e0 + k < pc.cols) {
            v[k] = ggml_silu(g[k]) * u[k];
            F32s(pc.swiglu_out).v[row * pc.stride + e0 + k] = v[k];
        }
    }
}
#elif defined(TAGGED_IN)
// The same from the tagged row, once all eight are this step's.
void input_run(uint row, uint first, uint slot, out float v[8]) {
    uint e0 = first + 8 * slot;
    uint tag = U32s(pc.tag_header).v[3];
    uint64_t at = pc.tagged + uint64_t(row * pc.stride) * 8;
    uvec4 raw[4];
    tagged_issue(at, e0, pc.cols, tag, raw);
    if (tagged_settle(at, e0, pc.cols, tag, raw)) {
        atomicAdd(U32s(pc.give_ups).v[0], 1u);
    }
    tagged_values(raw, v);
}
#elif defined(INT_OUT)
// Slot `slot`'s eight elements of row `row` from the chunk at `first` (0.0 past the row).
void input_run(uint row, uint first, uint slot, out float v[8]) {
    uint e0 = first + 8 * slot;
    [[unroll]] for (uint k = 0; k < 8; k++) {
        v[k] = e0 + k < pc.cols ? IN_F32S(pc.x).v[row * pc.stride + e0 + k] : 0.0;
    }
}
#endif

#if defined(CHAINED)
#if !defined(INT_OUT) || defined(SWIGLU) || defined(COMBINE)
#error "the chained quantizer is the plain INT_OUT build"
#endif
#define CHAIN_PC(name) pc.name
#include "chain.glsl"
#endif

void main() {
#if defined(CHAINED)
    chain_wait();
#endif
#ifdef INT_OUT
    uint chunks = (pc.cols + INT_CHUNK - 1) / INT_CHUNK;
    uint row = gl_WorkGroupID.x / chunks;
    uint first = (gl_WorkGroupID.x % chunks) * INT_CHUNK;
    uint slot = ql_slot();
    float v[8];
    input_run(row, first, slot, v);
    // (COMBINE: slots past the chunk hold zeros and write nothing.)
    uint e0 = slot < INT_CHUNK / 8 ? first + 8 * slot : pc.cols;
#if defined(NORM_W)
    // The RMSNorm in the chunks' workgroups instead of one a row: 8-bit quantization is
    // scale-invariant but for rounding, so each chunk quantizes its x * weight and leaves its
    // sum of squares, and the products after it (NORM_SCALE) multiply their outputs by
    // 1 / sqrt(mean + eps). The arithmetic of matvec_q_units.glsl's NORM_EPILOGUE, so the same
    // bits; no workgroup waits for the whole row (TAGGED_IN: the row the residual add before
    // it is still writing). Each row's partials: eps, then its chunks' sums.
    float g[8];
    [[unroll]] for (uint k = 0; k < 8; k++) {
        g[k] = e0 + k < pc.cols ? F32s(pc.norm_w).v[e0 + k] : 0.0;
    }
    float squares = ql_norm_run(v, g);
    ql_quantize(v, slot, e0, pc.cols, pc.out_ + uint64_t(row) * pc.out_stride, pc.meta_offset);
    norm_squares[slot] = squares;
    barrier();
    if (gl_LocalInvocationID.x == 0) {
        float total = 0.0;
        for (uint k = 0; k < 32; k++) {
            total += norm_squares[k];
        }
        F32s p = F32s(pc.norm_partials);
        uint at = row * (1 + chunks);
        p.v[at + 1 + first / INT_CHUNK] = total;
        if (first == 0) {
            p.v[at] = pc.eps;
        }
    }
#else
    ql_quantize(v, slot, e0, pc.cols, pc.out_ + uint64_t(row) * pc.out_stride, pc.meta_offset);
#endif
#if defined(CHAINED)
    chain_signal();
#endif
#else
    uint tid = gl_LocalInvocationID.x;
    uint chunks = (pc.cols + 255) / 256;
    uint row = gl_WorkGroupID.x / chunks;
    uint e = (gl_WorkGroupID.x % chunks) * 256 + tid;
    bool valid = e < pc.cols;
    float v = valid ? F32s(pc.x).v[row * pc.stride + e] : 0.0;
    sa[tid] = abs(v);
    sv[tid] = v;
    for (uint s = SEG / 2; s > 0; s >>= 1) {
        barrier();
        if (tid % SEG < s && sa[tid + s] > sa[tid]) {
            sa[tid] = sa[tid + s];
            sv[tid] = sv[tid + s];
        }
    }
    barrier();
    uint first = tid - tid % SEG;
    float amax = sa[first];
    // The rounded value: the quant times the scale its block stores.
    int q;
    float d;
#if defined(ACT_Q8_K)
    if (amax == 0.0) {
        q = 0;
        d = 0.0;
    } else {
        float iscale = div_rn(-127.0, sv[first]);
        q = int(min(roundEven(iscale * v), 127.0));
        d = div_rn(1.0, iscale);
    }
#else
    float dd = div_rn(amax, 127.0);
    float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    q = int(roundEven(v * id));
    d = f16_rne(dd);
#endif
    if (valid) {
        F32s(pc.out_).v[row * pc.stride + e] = float(q) * d;
    }
#endif
}
