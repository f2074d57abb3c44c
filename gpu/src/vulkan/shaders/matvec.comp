#version 450
// out[t][row] = dot(W[row], x[t]) (+ bias[row]) for up to NT tokens: the decode-step product,
// bound by the weights' read bandwidth. Each subgroup owns ROWS rows at a time; its invocations
// take consecutive items of the rows (matvec_items.glsl), so weight and activation reads coalesce;
// an item's activations are loaded once for all the rows, and a subgroup sum finishes each dot
// product (no shared memory, no barrier). Built with NT=1 (one token: four rows per subgroup) and
// NT=4 (a few tokens: two rows).
#include "common.glsl"
#include "matvec_items.glsl"

#ifndef NT
#define NT 4
#endif
#if NT == 1
#ifdef ROWS1
#define ROWS ROWS1
#else
#define ROWS 4
#endif
#else
#define ROWS 2
#endif

layout(local_size_x = 128) in;

layout(push_constant) uniform Push {
    uint64_t w;
    uint64_t aux;
    uint64_t x;
    uint64_t out_;
    uint64_t bias;
    uint rows;
    uint cols;
    uint n_tokens;
    uint x_stride;
    uint out_stride;
    uint rows_per_group;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4s { vec4 v[]; };

void main() {
    uint lane = gl_SubgroupInvocationID;
    uint sgs = gl_SubgroupSize;
    uint t0 = gl_WorkGroupID.y * NT;
    uint n_items = items_per_row(pc.cols);
    F32s x = F32s(pc.x);
    for (uint r0 = gl_SubgroupID * ROWS; r0 < pc.rows_per_group; r0 += gl_NumSubgroups * ROWS) {
        uint row0 = gl_WorkGroupID.x * pc.rows_per_group + r0;
        float acc[ROWS][NT];
        [[unroll]] for (uint r = 0; r < ROWS; r++) {
            [[unroll]] for (uint t = 0; t < NT; t++) {
                acc[r][t] = 0.0;
            }
        }
        // Loops over the register arrays are unrolled with uniform conditions instead of early
        // exits, so the arrays stay in registers.
        for (uint item = lane; item < n_items; item += sgs) {
            // This item's activations for every token, and their sums per half.
            float xv[NT][2][H];
            float sx[NT][2];
            uint xi[2];
            item_x(pc.cols, item, xi);
            [[unroll]] for (uint t = 0; t < NT; t++) {
                uint xb = min(t0 + t, pc.n_tokens - 1) * pc.x_stride;
                [[unroll]] for (uint h = 0; h < 2; h++) {
#if defined(TYPE_F32) || defined(TYPE_F16)
                    [[unroll]] for (uint i = 0; i < H; i++) {
                        xv[t][h][i] = xi[h] + i < pc.cols ? x.v[xb + xi[h] + i] : 0.0;
                    }
#else
                    [[unroll]] for (uint i = 0; i < H; i += 4) {
                        vec4 v = V4s(pc.x).v[(xb + xi[h] + i) / 4];
                        xv[t][h][i] = v.x;
                        xv[t][h][i + 1] = v.y;
                        xv[t][h][i + 2] = v.z;
                        xv[t][h][i + 3] = v.w;
                    }
#endif
                    float s = 0.0;
                    [[unroll]] for (uint i = 0; i < H; i++) {
                        s += xv[t][h][i];
                    }
                    sx[t][h] = s;
                }
            }
            [[unroll]] for (uint r = 0; r < ROWS; r++) {
                uint row = min(row0 + r, pc.rows - 1);
                float q[2][H];
                vec2 so[2];
                load_item(pc.w, pc.aux, pc.cols, row, item, q, so, xi);
                [[unroll]] for (uint t = 0; t < NT; t++) {
                    [[unroll]] for (uint h = 0; h < 2; h++) {
                        float sq = 0.0;
                        [[unroll]] for (uint i = 0; i < H; i++) {
                            sq += q[h][i] * xv[t][h][i];
                        }
                        acc[r][t] += so[h].x * sq - so[h].y * sx[t][h];
                    }
                }
            }
        }
        [[unroll]] for (uint r = 0; r < ROWS; r++) {
            uint row = row0 + r;
            [[unroll]] for (uint t = 0; t < NT; t++) {
                float s = subgroupAdd(acc[r][t]);
                if (lane == 0 && row < pc.rows && t0 + t < pc.n_tokens) {
                    float b = pc.bias != 0 ? F32s(pc.bias).v[row] : 0.0;
                    F32s(pc.out_).v[(t0 + t) * pc.out_stride + row] = s + b;
                }
            }
        }
    }
}
