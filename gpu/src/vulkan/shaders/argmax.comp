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

void main() {
    uint row = gl_WorkGroupID.x;
    F32s x = F32s(pc.x + uint64_t(row) * pc.width * 4);
    // Each invocation's first position of its largest value (`v > best` skips NaNs and keeps
    // the first of equal values); four loads in flight a pass.
    float best = uintBitsToFloat(0xFF800000u);
    uint index = 0xFFFFFFFFu;
    uint c = gl_LocalInvocationID.x;
    for (; c + 3 * WG < pc.width; c += 4 * WG) {
        float v[4];
        [[unroll]] for (uint k = 0; k < 4; k++) {
            v[k] = x.v[c + k * WG];
        }
        [[unroll]] for (uint k = 0; k < 4; k++) {
            if (v[k] > best) {
                best = v[k];
                index = c + k * WG;
            }
        }
    }
    for (; c < pc.width; c += WG) {
        float v = x.v[c];
        if (v > best) {
            best = v;
            index = c;
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
