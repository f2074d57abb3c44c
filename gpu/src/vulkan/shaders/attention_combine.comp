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
    // Loads eight splits at a time before using them (memory latency), summing in split order.
    float mx = -1.0 / 0.0;
    float l = 0.0;
    for (uint s0 = 0; s0 < n_splits; s0 += 8) {
        float ms[8];
        [[unroll]] for (uint u = 0; u < 8; u++) {
            ms[u] = s0 + u < n_splits ? part.v[base + (s0 + u) * (hd + 2)] : -1.0 / 0.0;
        }
        [[unroll]] for (uint u = 0; u < 8; u++) {
            mx = max(mx, ms[u]);
        }
    }
    for (uint s0 = 0; s0 < n_splits; s0 += 8) {
        float ms[8];
        float ls[8];
        [[unroll]] for (uint u = 0; u < 8; u++) {
            bool in_range = s0 + u < n_splits;
            ms[u] = in_range ? part.v[base + (s0 + u) * (hd + 2)] : -1.0 / 0.0;
            ls[u] = in_range ? part.v[base + (s0 + u) * (hd + 2) + 1] : 0.0;
        }
        [[unroll]] for (uint u = 0; u < 8; u++) {
            if (s0 + u < n_splits) {
                l += ms[u] == -1.0 / 0.0 ? 0.0 : exp(ms[u] - mx) * ls[u];
            }
        }
    }
    for (uint d = gl_LocalInvocationID.x; d < hd; d += 128) {
        float o = 0.0;
        for (uint s0 = 0; s0 < n_splits; s0 += 8) {
            float ms[8];
            float vs[8];
            [[unroll]] for (uint u = 0; u < 8; u++) {
                bool in_range = s0 + u < n_splits;
                ms[u] = in_range ? part.v[base + (s0 + u) * (hd + 2)] : -1.0 / 0.0;
                vs[u] = in_range ? part.v[base + (s0 + u) * (hd + 2) + 2 + d] : 0.0;
            }
            [[unroll]] for (uint u = 0; u < 8; u++) {
                if (s0 + u < n_splits && ms[u] != -1.0 / 0.0) {
                    o += exp(ms[u] - mx) * vs[u];
                }
            }
        }
        F32s(pc.out_).v[t * pc.out_stride + h * hd + d] = o / l;
    }
}
