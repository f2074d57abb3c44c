#version 450
// Rounds activation rows the way the CPU device quantizes them before a quantized matrix product
// (ggml's x86 quantizers): Q8_0/Q8_1 (blocks of 32, scale amax/127 stored as f16, values times
// 127/amax rounded half to even) for Q4_0, Q4_1 and Q8_0 weights; Q8_K (blocks of 256, scale -max/127 in f32,
// round half to even) for the K-quants. The devices then multiply the same activations, so Vulkan
// agrees with the CPU reference. One workgroup per 256 elements of a row, one invocation per
// element; the block maximum is a tree reduction that keeps the first element on ties, as the
// CPU's scan does.
//
// Two outputs, by build: the rounded values as f32 (for the float kernels), or (INT_OUT) the
// 8-bit quants themselves for the integer-dot-product kernels, as one record per row: the quants
// at byte 0, then at `meta_offset` one (scale as f32 bits, sum of the 32 quants) pair per block of
// 32 (for Q8_K the super-block's scale repeated in each of its eight blocks).
#include "common.glsl"

layout(local_size_x = 256) in;

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
} pc;

#ifdef COMBINE
#include "attention_merge.glsl"

// Element e of token t's attention output: its head's split results merged.
float combined(uint t, uint e) {
    uint hd = pc.head_dim;
    uint n_splits = U32s(pc.header).v[0];
    uint base = (t * (pc.cols / hd) + e / hd) * n_splits * (hd + 2);
    return merge_splits(F32s(pc.x), base, n_splits, hd, e % hd);
}
#endif

#if defined(ACT_Q8_K)
#define SEG 256
#else
#define SEG 32
#endif

layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };

#ifdef INT_OUT
#define QC_WG 256
#include "quantize_chunk.glsl"
#else
shared float sa[256];
shared float sv[256];
#endif

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint chunks = (pc.cols + 255) / 256;
    uint row = gl_WorkGroupID.x / chunks;
    uint e = (gl_WorkGroupID.x % chunks) * 256 + tid;
    bool valid = e < pc.cols;
#ifdef SWIGLU
    float v = 0.0;
    if (valid) {
        float g = F32s(pc.x).v[row * pc.stride + e];
        v = ggml_silu(g) * F32s(pc.up).v[row * pc.stride + e];
        F32s(pc.swiglu_out).v[row * pc.stride + e] = v;
    }
#elif defined(COMBINE)
    float v = 0.0;
    if (valid) {
        v = combined(row, e);
        F32s(pc.combine_out).v[row * pc.stride + e] = v;
    }
#else
    float v = valid ? F32s(pc.x).v[row * pc.stride + e] : 0.0;
#endif
#ifdef INT_OUT
    float vs[1] = { v };
    quantize_chunk(tid, e - tid, vs, pc.cols, pc.out_ + uint64_t(row) * pc.out_stride, pc.meta_offset);
#else
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
