#version 450
// Merges the per-split partial results of attention.comp: one workgroup per (head, token).
#include "common.glsl"

layout(local_size_x = 128) in;

layout(push_constant) uniform Push {
    uint64_t partial;
    uint64_t out_;
    uint64_t header;
    uint n_heads;
    uint head_dim;
    uint out_stride;
} pc;

void main() {
    uint h = gl_WorkGroupID.x;
    uint t = gl_WorkGroupID.y;
    uint n_splits = U32s(pc.header).v[0];
    uint hd = pc.head_dim;
    F32s part = F32s(pc.partial);
    uint base = (t * pc.n_heads + h) * n_splits * (hd + 2);
    // Sixteen splits' loads in flight at a time (memory latency); sums in split order. Each
    // invocation sums the weights itself (the same order everywhere), with its own values.
    float mx = -1.0 / 0.0;
    for (uint s0 = 0; s0 < n_splits; s0 += 16) {
        float ms[16];
        [[unroll]] for (uint u = 0; u < 16; u++) {
            ms[u] = s0 + u < n_splits ? part.v[base + (s0 + u) * (hd + 2)] : -1.0 / 0.0;
        }
        [[unroll]] for (uint u = 0; u < 16; u++) {
            mx = max(mx, ms[u]);
        }
    }
    for (uint d0 = 0; d0 < hd; d0 += 128) {
        uint d = d0 + gl_LocalInvocationID.x;
        bool has_d = d < hd;
        float l = 0.0;
        float o = 0.0;
        for (uint s0 = 0; s0 < n_splits; s0 += 16) {
            float ms[16];
            float ls[16];
            float vs[16];
            [[unroll]] for (uint u = 0; u < 16; u++) {
                bool in_range = s0 + u < n_splits;
                uint rec = base + (s0 + u) * (hd + 2);
                ms[u] = in_range ? part.v[rec] : -1.0 / 0.0;
                ls[u] = in_range ? part.v[rec + 1] : 0.0;
                vs[u] = in_range && has_d ? part.v[rec + 2 + d] : 0.0;
            }
            [[unroll]] for (uint u = 0; u < 16; u++) {
                if (s0 + u < n_splits && ms[u] != -1.0 / 0.0) {
                    float f = exp(ms[u] - mx);
                    l += f * ls[u];
                    o += f * vs[u];
                }
            }
        }
        if (has_d) {
            F32s(pc.out_).v[t * pc.out_stride + h * hd + d] = o / l;
        }
    }
}
