#version 450
// RMSNorm of one row per workgroup (out = x / sqrt(mean(x^2) + eps) * weight) that also writes the
// normalized row as the 8-bit record the next product reads, quantized as quantize_act.comp does
// (ACT_Q8_0: blocks of 32; ACT_Q8_K: super-blocks of 256): the same quants, scales and sums.
//
// Built for latency, since a decode step runs it twice per layer on a single row: 512 invocations
// each hold three 4-element words of the row in registers (every load of x and of the weight is
// issued at once), the block maxima are found per word and then per block of eight words, and
// each invocation quantizes its own words. Rows of up to MAX_ROW elements, a multiple of 32
// (of 256 for Q8_K).
#include "common.glsl"

#define WG 512
#define MAX_ROW 6144
#define WORDS (MAX_ROW / 4 / WG)

layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t x;
    uint64_t weight;
    uint64_t out_;
    uint64_t rec;
    uint width;
    uint per_token;
    uint in_stride;
    uint out_stride;
    float eps;
    uint record_bytes;
    uint meta_offset;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };

// The sum of squares' type: f64 as the CPU's in F64 builds.
#if defined(F64)
#define SUM_T double
#else
#define SUM_T float
#endif
shared SUM_T red[WG];
// Per word: its first largest magnitude and that element's signed value; its quant sum.
shared float word_amax[MAX_ROW / 4];
shared float word_signed[MAX_ROW / 4];
shared int word_sum[MAX_ROW / 4];
shared float block_amax[MAX_ROW / 32];
shared float block_signed[MAX_ROW / 32];

void main() {
    uint r = gl_WorkGroupID.x;
    uint tid = gl_LocalInvocationID.x;
    uint n_words = pc.width / 4;
    uint n_blocks = pc.width / 32;
    // Rows start at multiples of 4 elements (widths are multiples of 32).
    Vec4s x = Vec4s(pc.x + uint64_t(r * pc.in_stride) * 4);
    Vec4s w = Vec4s(pc.weight);
    Vec4s o = Vec4s(pc.out_ + uint64_t(r * pc.out_stride) * 4);
    vec4 xv[WORDS];
    vec4 wv[WORDS];
    [[unroll]] for (uint k = 0; k < WORDS; k++) {
        uint word = tid + k * WG;
        xv[k] = word < n_words ? x.v[word] : vec4(0.0);
        wv[k] = word < n_words ? w.v[word] : vec4(0.0);
    }
#if defined(F64)
    // As the CPU: each square rounded to f32, summed in f64 (in another order: the f64 sum then
    // rounds to the same f32 mean but in ~2^-28 of rows), the mean rounded to f32.
    double s = 0.0lf;
    [[unroll]] for (uint k = 0; k < WORDS; k++) {
        [[unroll]] for (uint e = 0; e < 4; e++) {
            precise float sq = xv[k][e] * xv[k][e];
            s += double(sq);
        }
    }
#else
    float s = 0.0;
    [[unroll]] for (uint k = 0; k < WORDS; k++) {
        s += xv[k].x * xv[k].x + xv[k].y * xv[k].y + xv[k].z * xv[k].z + xv[k].w * xv[k].w;
    }
#endif
    s = subgroupAdd(s);
    if (subgroupElect()) {
        red[gl_SubgroupID] = s;
    }
    barrier();
    SUM_T total = SUM_T(0);
    for (uint k = 0; k < gl_NumSubgroups; k++) {
        total += red[k];
    }
    float mean = float(total / SUM_T(pc.width));
    precise float m_eps = mean + pc.eps;
    float scale = div_rn(1.0, sqrt_rn(m_eps));
    vec4 v[WORDS];
    [[unroll]] for (uint k = 0; k < WORDS; k++) {
        uint word = tid + k * WG;
        precise vec4 scaled = xv[k] * scale;
        precise vec4 weighted = scaled * wv[k];
        v[k] = weighted;
        if (word < n_words) {
            o.v[word] = v[k];
            // The word's first largest magnitude, in element order (the CPU quantizer's rule).
            float amax = 0.0;
            float signed_max = 0.0;
            [[unroll]] for (uint e = 0; e < 4; e++) {
                if (abs(v[k][e]) > amax) {
                    amax = abs(v[k][e]);
                    signed_max = v[k][e];
                }
            }
            word_amax[word] = amax;
            word_signed[word] = signed_max;
        }
    }
    barrier();
    for (uint b = tid; b < n_blocks; b += WG) {
        float amax = 0.0;
        float signed_max = 0.0;
        for (uint k = 0; k < 8; k++) {
            float a = word_amax[8 * b + k];
            if (a > amax) {
                amax = a;
                signed_max = word_signed[8 * b + k];
            }
        }
        block_amax[b] = amax;
        block_signed[b] = signed_max;
    }
    barrier();
    uint64_t rec = pc.rec + uint64_t(r) * pc.record_bytes;
    [[unroll]] for (uint k = 0; k < WORDS; k++) {
        uint word = tid + k * WG;
        if (word < n_words) {
            uint b = word / 8;
#if defined(ACT_Q8_K)
            // The super-block's first largest magnitude over its eight blocks, in order.
            uint first = b - b % 8;
            float amax = block_amax[first];
            float max_signed = block_signed[first];
            for (uint j = 1; j < 8; j++) {
                if (block_amax[first + j] > amax) {
                    amax = block_amax[first + j];
                    max_signed = block_signed[first + j];
                }
            }
            float iscale = amax == 0.0 ? 0.0 : div_rn(-127.0, max_signed);
#else
            float amax = block_amax[b];
            float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
#endif
            uint packed = 0;
            int isum = 0;
            [[unroll]] for (uint e = 0; e < 4; e++) {
#if defined(ACT_Q8_K)
                int q = amax == 0.0 ? 0 : int(min(roundEven(iscale * v[k][e]), 127.0));
#else
                int q = int(roundEven(v[k][e] * id));
#endif
                isum += q;
                packed |= (uint(q) & 0xFFu) << (8 * e);
            }
            U32s(rec).v[word] = packed;
            word_sum[word] = isum;
        }
    }
    barrier();
    for (uint b = tid; b < n_blocks; b += WG) {
#if defined(ACT_Q8_K)
        uint first = b - b % 8;
        float amax = block_amax[first];
        float max_signed = block_signed[first];
        for (uint j = 1; j < 8; j++) {
            if (block_amax[first + j] > amax) {
                amax = block_amax[first + j];
                max_signed = block_signed[first + j];
            }
        }
        float d = amax == 0.0 ? 0.0 : div_rn(1.0, div_rn(-127.0, max_signed));
#else
        float d = div_rn(block_amax[b], 127.0);
#endif
        int isum = 0;
        for (uint k = 0; k < 8; k++) {
            isum += word_sum[8 * b + k];
        }
        U32x2s(rec + pc.meta_offset).v[b] = uvec2(floatBitsToUint(d), uint(isum));
    }
}
