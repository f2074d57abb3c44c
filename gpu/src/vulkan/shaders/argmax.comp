#version 450
// out[i] = the first position of the largest value of row i of x (rows of `width` f32; NaNs
// skipped; 0 when no value is above -inf), as strata_model::sampling::argmax computes it: a
// greedy step's next token without reading its logits back. One workgroup per row.
#include "common.glsl"

#define WG 1024
layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t x;
    uint64_t out_;
    uint width;
} pc;

shared float sg_best[WG];
shared uint sg_index[WG];

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };

void main() {
    uint row = gl_WorkGroupID.x;
    uint64_t base = pc.x + uint64_t(row) * pc.width * 4;
    // Each invocation's first position of its largest value (`v > best` skips NaNs and keeps
    // the first of equal values: an invocation visits its positions in increasing order).
    float best = uintBitsToFloat(0xFF800000u);
    uint index = 0xFFFFFFFFu;
    uint tid = gl_LocalInvocationID.x;
    // 16-byte loads where the row starts at a multiple of 16 bytes, four in flight a pass: a
    // single row of a large vocabulary is read by one workgroup, so its time is the passes'
    // round trips (a 152k vocabulary: 10 passes instead of 38 of 4-byte loads).
    uint n_vec = base % 16 == 0 ? pc.width / 4 : 0;
    Vec4s xv = Vec4s(base);
    uint c = tid;
    for (; c + 3 * WG < n_vec; c += 4 * WG) {
        vec4 v[4];
        [[unroll]] for (uint k = 0; k < 4; k++) {
            v[k] = xv.v[c + k * WG];
        }
        [[unroll]] for (uint k = 0; k < 4; k++) {
            [[unroll]] for (uint e = 0; e < 4; e++) {
                if (v[k][e] > best) {
                    best = v[k][e];
                    index = 4 * (c + k * WG) + e;
                }
            }
        }
    }
    for (; c < n_vec; c += WG) {
        vec4 v = xv.v[c];
        [[unroll]] for (uint e = 0; e < 4; e++) {
            if (v[e] > best) {
                best = v[e];
                index = 4 * c + e;
            }
        }
    }
    // The rest one by one (past every position of the vector loads).
    F32s x = F32s(base);
    for (uint i = 4 * n_vec + tid; i < pc.width; i += WG) {
        float v = x.v[i];
        if (v > best) {
            best = v;
            index = i;
        }
    }
    // The largest value, then the smallest position that holds it (each invocation's positions
    // of it start at its first).
    float m = subgroupMax(best);
    uint first = subgroupMin(best == m ? index : 0xFFFFFFFFu);
    if (subgroupElect()) {
        sg_best[gl_SubgroupID] = m;
        sg_index[gl_SubgroupID] = first;
    }
    barrier();
    if (gl_LocalInvocationID.x == 0) {
        float bm = sg_best[0];
        uint bi = sg_index[0];
        for (uint s = 1; s < gl_NumSubgroups; s++) {
            if (sg_best[s] > bm || (sg_best[s] == bm && sg_index[s] < bi)) {
                bm = sg_best[s];
                bi = sg_index[s];
            }
        }
        U32s(pc.out_).v[row] = bm > uintBitsToFloat(0xFF800000u) ? bi : 0u;
    }
}
