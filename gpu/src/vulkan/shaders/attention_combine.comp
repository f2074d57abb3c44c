#version 450
// Merges the per-split partial results of attention.comp: one workgroup per (head, token).
#include "common.glsl"
#include "attention_merge.glsl"

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
    uint base = (t * pc.n_heads + h) * n_splits * (hd + 2);
    // Each invocation merges its own dimensions (the weights' sums in the same order everywhere).
    for (uint d = gl_LocalInvocationID.x; d < hd; d += 128) {
        F32s(pc.out_).v[t * pc.out_stride + h * hd + d] = merge_splits(F32s(pc.partial), base, n_splits, hd, d);
    }
}
