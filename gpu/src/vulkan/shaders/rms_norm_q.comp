#version 450
// RMSNorm of one row per workgroup (out = x / sqrt(mean(x^2) + eps) * weight) that also writes the
// normalized row as the 8-bit record the next product reads, quantized as quantize_act.comp does
// (ACT_Q8_0: blocks of 32; ACT_Q8_K: super-blocks of 256): the same quants, scales and sums.
//
// Built for latency, since a decode step runs it twice per layer on a single row: 512 invocations
// each hold RUNS runs of eight consecutive elements of the row in registers (every load of x and
// of the weight is issued at once), and the quantization's block maxima and sums are quad
// operations (quantize_lanes.glsl): two barriers in all. Rows of up to MAX_ROW elements, a
// multiple of 32 (of 256 for Q8_K).
#include "common.glsl"

#define WG 512
#define RUNS 2
#define MAX_ROW (WG * RUNS * 8)
#define QL_BLOCKS (MAX_ROW / 32)

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
#if defined(CHAINED)
    uint chain_expect;
    uint64_t chain;
#endif
#if defined(TAGGED_IN)
    // The row as the product before wrote it, (bits, tag) per element (matvec_q.comp
    // TAGGED_OUT), the step header whose word 3 holds this step's tag, and the word that counts
    // waits that gave up.
    uint64_t tagged;
    uint64_t tag_header;
    uint64_t give_ups;
#endif
} pc;
#if defined(TAGGED_IN) && (defined(CHAINED) || defined(F64))
#error "the tagged build is the fast one-token norm"
#endif

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };

#if defined(ACT_Q8_K)
#define SEG 256
#else
#define SEG 32
#endif
#include "quantize_lanes.glsl"

// The sum of squares' type: f64 as the CPU's in F64 builds.
#if defined(F64)
#define SUM_T double
#else
#define SUM_T float
#endif
shared SUM_T red[WG];

#if defined(CHAINED)
#define CHAIN_PC(name) pc.name
#include "chain.glsl"
#endif

#if defined(TAGGED_IN)
#include "tagged.glsl"
#endif

void main() {
#if defined(CHAINED)
    chain_wait();
#endif
    uint r = gl_WorkGroupID.x;
    uint slot = ql_slot();
    uint n_words = pc.width / 4;
    // Rows start at multiples of 4 elements (widths are multiples of 32).
    IN_VEC4S x = IN_VEC4S(pc.x + uint64_t(r * pc.in_stride) * 4);
    Vec4s w = Vec4s(pc.weight);
    Vec4s o = Vec4s(pc.out_ + uint64_t(r * pc.out_stride) * 4);
    // Run k: elements 8 * (slot + k * WG) .. + 7, words 2 * (slot + k * WG) and the next.
    vec4 xv[RUNS][2];
    vec4 wv[RUNS][2];
#if defined(TAGGED_IN)
    [[unroll]] for (uint k = 0; k < RUNS; k++) {
        [[unroll]] for (uint h = 0; h < 2; h++) {
            uint word = 2 * (slot + k * WG) + h;
            wv[k][h] = word < n_words ? w.v[word] : vec4(0.0);
        }
    }
    uint tag = U32s(pc.tag_header).v[3];
    uint64_t row = pc.tagged + uint64_t(r * pc.in_stride) * 8;
    uvec4 raw[RUNS][4];
    [[unroll]] for (uint k = 0; k < RUNS; k++) {
        tagged_issue(row, 8 * (slot + k * WG), pc.width, tag, raw[k]);
    }
    bool gave_up = false;
    [[unroll]] for (uint k = 0; k < RUNS; k++) {
        gave_up = tagged_settle(row, 8 * (slot + k * WG), pc.width, tag, raw[k]) || gave_up;
        float v[8];
        tagged_values(raw[k], v);
        xv[k][0] = vec4(v[0], v[1], v[2], v[3]);
        xv[k][1] = vec4(v[4], v[5], v[6], v[7]);
    }
    if (gave_up) {
        atomicAdd(U32s(pc.give_ups).v[0], 1u);
    }
#else
    [[unroll]] for (uint k = 0; k < RUNS; k++) {
        [[unroll]] for (uint h = 0; h < 2; h++) {
            uint word = 2 * (slot + k * WG) + h;
            xv[k][h] = word < n_words ? x.v[word] : vec4(0.0);
            wv[k][h] = word < n_words ? w.v[word] : vec4(0.0);
        }
    }
#endif
#if defined(F64)
    // As the CPU: each square rounded to f32, summed in f64 (in another order: the f64 sum then
    // rounds to the same f32 mean but in ~2^-28 of rows), the mean rounded to f32.
    double s = 0.0lf;
    [[unroll]] for (uint k = 0; k < RUNS; k++) {
        [[unroll]] for (uint h = 0; h < 2; h++) {
            [[unroll]] for (uint e = 0; e < 4; e++) {
                precise float sq = xv[k][h][e] * xv[k][h][e];
                s += double(sq);
            }
        }
    }
#else
    float s = 0.0;
    [[unroll]] for (uint k = 0; k < RUNS; k++) {
        [[unroll]] for (uint h = 0; h < 2; h++) {
            s += xv[k][h].x * xv[k][h].x + xv[k][h].y * xv[k][h].y + xv[k][h].z * xv[k][h].z + xv[k][h].w * xv[k][h].w;
        }
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
    float v[RUNS][QL_E];
    vec2 block[RUNS];
    [[unroll]] for (uint k = 0; k < RUNS; k++) {
        [[unroll]] for (uint h = 0; h < 2; h++) {
            uint word = 2 * (slot + k * WG) + h;
            precise vec4 scaled = xv[k][h] * scale;
            precise vec4 weighted = scaled * wv[k][h];
            // Past the row: zeros (the weight read as 0.0 there).
            [[unroll]] for (uint e = 0; e < 4; e++) {
                v[k][4 * h + e] = weighted[e];
            }
            if (word < n_words) {
                o.v[word] = weighted;
            }
        }
        block[k] = ql_block_max(v[k], slot + k * WG);
    }
#if SEG == 256
    barrier();
#endif
    uint64_t rec = pc.rec + uint64_t(r) * pc.record_bytes;
    [[unroll]] for (uint k = 0; k < RUNS; k++) {
        ql_write(v[k], block[k], slot + k * WG, 8 * (slot + k * WG), pc.width, rec, pc.meta_offset);
    }
#if defined(CHAINED)
    chain_signal();
#endif
}
