#version 450
// out[t][row] = dot(W[row], x[t]) (+ bias[row]) for many tokens (prefill chunks) with the
// activations as 8-bit records (quantize_act.comp, INT_OUT) and the weights' quants multiplied by
// integer dot products, item by item (matvec_q_items.glsl: one 32-element block of a row): the
// same exact integer block sums as the decode kernels and the CPU, scaled in f32.
//
// A workgroup owns BM rows x BN tokens. Each step, its invocations put KI items of every one of
// its rows and tokens into shared memory (neighbours taking neighbouring items of a row or
// record), then each invocation multiplies TM rows by TN tokens from there: rows tr + 16i and
// tokens tt + 16j, so that a subgroup reads 16 neighbouring rows' words (no bank conflicts) and
// broadcasts its two tokens' words. PREFETCH builds (the default: KI 4, 64 x 64) hold the next
// step's row item and token item in each invocation's registers while a step's products run;
// the others load a step's items after its first barrier. A (row, token)'s sum runs over the
// items in order, so it depends on neither the chunk's other tokens nor its tile.
#include "common.glsl"
#extension GL_EXT_spirv_intrinsics : require

// OpSDotKHR with the 4x8-bit packed format: the sum of the four signed 8-bit products.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int dot4_i8(uint a, uint b, spirv_literal int packed_vector_format);
#define DOT4(a, b) dot4_i8((a), (b), 0)

#define WG 256
#ifndef TM
#define TM 4
#endif
#ifndef TN
#define TN 4
#endif
#define BM (16 * TM)
#define BN (16 * TN)
#ifndef KI
#define KI 2
#endif

layout(local_size_x = WG) in;

// The integer matrix-vector kernels' push constants (matvec_q.comp), so that the plan passes the
// same ones to either.
layout(push_constant) uniform Push {
    uint64_t w;
    uint64_t aux;
    uint64_t x;
    uint64_t out_;
    uint64_t bias;
    uint rows;
    uint cols;
    uint n_tokens;
    // Bytes between two tokens' activation records, and where a record's block metadata starts.
    uint x_stride;
    uint out_stride;
    uint meta_offset;
    // Nonzero: add the product into `out_` (the residual stream) instead of writing it.
    uint accumulate;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };

#include "matvec_q_items.glsl"

// An item's eight quant words as two 16-byte halves, a row's (token's) next to its neighbour's:
// a subgroup's 16-byte reads of 16 neighbouring rows fall in distinct banks.
shared uvec4 w_quants[KI][2][BM];
shared vec2 w_scales[KI][BM];
#if defined(TYPE_Q6_K)
shared ivec4 w_sub_scales[KI][BM];
#endif
shared uvec4 x_quants[KI][2][BN];
shared uvec2 x_meta[KI][BN];

// Item k of the step, of row `at` (of the workgroup's) and of token `at`, into shared memory.
void put_row_item(uint k, uint at, uint wq[8], vec2 ws, ivec4 wsc) {
    w_quants[k][0][at] = uvec4(wq[0], wq[1], wq[2], wq[3]);
    w_quants[k][1][at] = uvec4(wq[4], wq[5], wq[6], wq[7]);
    w_scales[k][at] = ws;
#if defined(TYPE_Q6_K)
    w_sub_scales[k][at] = wsc;
#endif
}

void put_token_item(uint k, uint at, uint xq[8], uvec2 meta) {
    x_quants[k][0][at] = uvec4(xq[0], xq[1], xq[2], xq[3]);
    x_quants[k][1][at] = uvec4(xq[4], xq[5], xq[6], xq[7]);
    x_meta[k][at] = meta;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint row0 = gl_WorkGroupID.x * BM;
    uint tok0 = gl_WorkGroupID.y * BN;
    uint tr = tid % 16;
    uint tt = tid / 16;
    uint n_items = pc.cols / 32;
    float acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; i++) {
        [[unroll]] for (uint j = 0; j < TN; j++) {
            acc[i][j] = 0.0;
        }
    }
#if defined(PREFETCH)
    // Each invocation loads one item of a row (entry tid) and one of a token (entry tid + WG) a
    // step, the next step's while this one's products run.
#if (BM + BN) * KI != 2 * WG || BM != BN
#error "PREFETCH builds take one row item and one token item per invocation"
#endif
    uint pk = tid % KI;
    uint pat = tid / KI;
    uint pwq[8];
    vec2 pws;
    ivec4 pwsc;
    uint pxq[8];
    uvec2 pmeta;
    uint64_t prec = pc.x + uint64_t(min(tok0 + pat, pc.n_tokens - 1)) * pc.x_stride;
    uint prow = min(row0 + pat, pc.rows - 1);
    if (pk < n_items) {
        load_w(pc.w, pc.aux, pc.cols, prow, pk, pwq, pws, pwsc);
        load_x(prec, pc.meta_offset, pk, pxq, pmeta);
    }
#endif
    for (uint first = 0; first < n_items; first += KI) {
#if defined(PREFETCH)
        if (first + pk < n_items) {
            put_row_item(pk, pat, pwq, pws, pwsc);
            put_token_item(pk, pat, pxq, pmeta);
        }
        barrier();
        uint next = first + KI + pk;
        if (next < n_items) {
            load_w(pc.w, pc.aux, pc.cols, prow, next, pwq, pws, pwsc);
            load_x(prec, pc.meta_offset, next, pxq, pmeta);
        }
#else
        // Loads: entry l is item first + l % KI of row l / KI (the first BM * KI entries) or of
        // token l / KI - BM; a subgroup's entries are all rows or all tokens.
        for (uint l = tid; l < (BM + BN) * KI; l += WG) {
            uint k = l % KI;
            uint at = l / KI;
            uint item = first + k;
            if (item >= n_items) {
                continue;
            }
            if (at < BM) {
                uint wq[8];
                vec2 ws;
                ivec4 wsc;
                load_w(pc.w, pc.aux, pc.cols, min(row0 + at, pc.rows - 1), item, wq, ws, wsc);
                put_row_item(k, at, wq, ws, wsc);
            } else {
                uint t = at - BM;
                uint xq[8];
                uvec2 meta;
                load_x(pc.x + uint64_t(min(tok0 + t, pc.n_tokens - 1)) * pc.x_stride, pc.meta_offset, item, xq, meta);
                put_token_item(k, t, xq, meta);
            }
        }
        barrier();
#endif
        uint items_here = min(KI, n_items - first);
        for (uint k = 0; k < items_here; k++) {
            uint wq[TM][8];
            vec2 ws[TM];
            ivec4 wsc[TM];
            [[unroll]] for (uint i = 0; i < TM; i++) {
                uvec4 lo = w_quants[k][0][tr + 16 * i];
                uvec4 hi = w_quants[k][1][tr + 16 * i];
                wq[i] = uint[8](lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
                ws[i] = w_scales[k][tr + 16 * i];
#if defined(TYPE_Q6_K)
                wsc[i] = w_sub_scales[k][tr + 16 * i];
#else
                wsc[i] = ivec4(0);
#endif
            }
            [[unroll]] for (uint j = 0; j < TN; j++) {
                uvec4 lo = x_quants[k][0][tt + 16 * j];
                uvec4 hi = x_quants[k][1][tt + 16 * j];
                uint xq[8] = uint[8](lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
                uvec2 meta = x_meta[k][tt + 16 * j];
                [[unroll]] for (uint i = 0; i < TM; i++) {
                    acc[i][j] += item_dot(wq[i], ws[i], wsc[i], xq, meta);
                }
            }
        }
        barrier();
    }
    [[unroll]] for (uint i = 0; i < TM; i++) {
        uint row = row0 + tr + 16 * i;
        if (row >= pc.rows) {
            continue;
        }
        float b = pc.bias != 0 ? F32s(pc.bias).v[row] : 0.0;
        [[unroll]] for (uint j = 0; j < TN; j++) {
            uint token = tok0 + tt + 16 * j;
            if (token < pc.n_tokens) {
                uint at = token * pc.out_stride + row;
                // As the CPU: the projection (with its bias), then the residual add.
                float r = acc[i][j] + b;
                F32s(pc.out_).v[at] = pc.accumulate != 0 ? F32s(pc.out_).v[at] + r : r;
            }
        }
    }
}
