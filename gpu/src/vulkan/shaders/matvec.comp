#version 450
// out[t][row] = dot(W[row], x[t]) (+ bias[row]) for up to a few tokens: the decode-step product,
// bound by the weights' read bandwidth. Each subgroup owns ROWS rows at a time; its invocations
// take consecutive items of the rows (matvec_items.glsl), so weight and activation reads coalesce,
// and a subgroup sum finishes each dot product (no shared memory, no barrier).
#include "common.glsl"
#include "matvec_items.glsl"

#define ROWS 2
#define NT 4

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
            [[unroll]] for (uint r = 0; r < ROWS; r++) {
                uint row = min(row0 + r, pc.rows - 1);
                float q[2][H];
                vec2 so[2];
                uint xi[2];
                load_item(pc.w, pc.aux, pc.cols, row, item, q, so, xi);
                [[unroll]] for (uint t = 0; t < NT; t++) {
                    if (t0 + t >= pc.n_tokens) {
                        continue;
                    }
                    uint xb = (t0 + t) * pc.x_stride;
                    [[unroll]] for (uint h = 0; h < 2; h++) {
                        float sq = 0.0;
                        float sx = 0.0;
                        [[unroll]] for (uint i = 0; i < H; i++) {
#if defined(TYPE_F32) || defined(TYPE_F16)
                            float xv = xi[h] + i < pc.cols ? x.v[xb + xi[h] + i] : 0.0;
#else
                            float xv = x.v[xb + xi[h] + i];
#endif
                            sq += q[h][i] * xv;
                            sx += xv;
                        }
                        acc[r][t] += so[h].x * sq - so[h].y * sx;
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
