#version 450
// out[t][row] = dot(W[row], x[t]) (+ bias[row]) for up to NT tokens, with the activations as 8-bit
// quants (quantize_act.comp, INT_OUT) and the weights' integer quants multiplied by integer dot
// products (four 8-bit products and their sum in one instruction), as the CPU device does: each
// 32-element block's integer sum is exact, then scaled in f32.
//
// A workgroup of 128 invocations owns ROWS rows; invocation i takes items (32-element blocks)
// i, i + 128, ... of those rows, so a row is read by the whole workgroup at once (many loads in
// flight, few iterations each), and an item's activations are loaded once for all the rows. The
// partial sums are added within each subgroup and then across subgroups in a fixed order.
// The arithmetic of a (row, token) does not depend on NT or ROWS: a token's result is the same
// whatever else is in its decode batch.
#include "common.glsl"
#extension GL_EXT_spirv_intrinsics : require

// OpSDotKHR with the 4x8-bit packed format: the sum of the four signed 8-bit products.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int dot4_i8(uint a, uint b, spirv_literal int packed_vector_format);
#define DOT4(a, b) dot4_i8((a), (b), 0)

#ifndef NT
#define NT 1
#endif
#ifndef ROWS
#define ROWS 2
#endif
#define WG 128

layout(local_size_x = WG) in;

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

shared float partials[WG][ROWS * NT];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint row0 = gl_WorkGroupID.x * ROWS;
    uint t0 = gl_WorkGroupID.y * NT;
    uint n_items = pc.cols / 32;
    float acc[ROWS][NT];
    [[unroll]] for (uint r = 0; r < ROWS; r++) {
        [[unroll]] for (uint t = 0; t < NT; t++) {
            acc[r][t] = 0.0;
        }
    }
    for (uint item = tid; item < n_items; item += WG) {
        uint xq[NT][8];
        uvec2 meta[NT];
        [[unroll]] for (uint t = 0; t < NT; t++) {
            uint64_t rec = pc.x + uint64_t(min(t0 + t, pc.n_tokens - 1)) * pc.x_stride;
            load_x(rec, pc.meta_offset, item, xq[t], meta[t]);
        }
        [[unroll]] for (uint r = 0; r < ROWS; r++) {
            uint row = min(row0 + r, pc.rows - 1);
            uint wq[8];
            vec2 ws;
            ivec4 wsc;
            load_w(pc.w, pc.aux, pc.cols, row, item, wq, ws, wsc);
            [[unroll]] for (uint t = 0; t < NT; t++) {
                acc[r][t] += item_dot(wq, ws, wsc, xq[t], meta[t]);
            }
        }
    }
    [[unroll]] for (uint r = 0; r < ROWS; r++) {
        [[unroll]] for (uint t = 0; t < NT; t++) {
            float s = subgroupAdd(acc[r][t]);
            if (subgroupElect()) {
                partials[gl_SubgroupID][r * NT + t] = s;
            }
        }
    }
    barrier();
    if (tid < ROWS * NT) {
        uint row = row0 + tid / NT;
        uint token = t0 + tid % NT;
        float s = 0.0;
        for (uint sg = 0; sg < gl_NumSubgroups; sg++) {
            s += partials[sg][tid];
        }
        if (row < pc.rows && token < pc.n_tokens) {
            float b = pc.bias != 0 ? F32s(pc.bias).v[row] : 0.0;
            uint at = token * pc.out_stride + row;
            // As the CPU: the projection (with its bias), then the residual add.
            float r = s + b;
            F32s(pc.out_).v[at] = pc.accumulate != 0 ? F32s(pc.out_).v[at] + r : r;
        }
    }
}
