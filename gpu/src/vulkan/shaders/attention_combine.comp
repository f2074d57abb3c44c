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
    float mx = -1.0 / 0.0;
    for (uint s = 0; s < n_splits; s++) {
        mx = max(mx, part.v[base + s * (hd + 2)]);
    }
    float l = 0.0;
    for (uint s = 0; s < n_splits; s++) {
        float ms = part.v[base + s * (hd + 2)];
        l += ms == -1.0 / 0.0 ? 0.0 : exp(ms - mx) * part.v[base + s * (hd + 2) + 1];
    }
    for (uint d = gl_LocalInvocationID.x; d < hd; d += 128) {
        float o = 0.0;
        for (uint s = 0; s < n_splits; s++) {
            float ms = part.v[base + s * (hd + 2)];
            if (ms != -1.0 / 0.0) {
                o += exp(ms - mx) * part.v[base + s * (hd + 2) + 2 + d];
            }
        }
        F32s(pc.out_).v[t * pc.out_stride + h * hd + d] = o / l;
    }
}
