#version 450
// Rotary position embedding in place: one invocation per (token, head, pair). The angles come from
// a table of cos and sin per position computed on the host (the CPU device's exact values).
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint64_t x;
    uint64_t table;
    uint64_t positions;
    uint stride;
    uint n_heads;
    uint head_dim;
    uint half_dims;
    uint neox;
    uint n_tokens;
} pc;

void main() {
    uint gid = gl_GlobalInvocationID.x;
    uint total = pc.n_tokens * pc.n_heads * pc.half_dims;
    if (gid >= total) {
        return;
    }
    uint i = gid % pc.half_dims;
    uint h = (gid / pc.half_dims) % pc.n_heads;
    uint t = gid / (pc.half_dims * pc.n_heads);
    uint pos = U32s(pc.positions).v[t];
    F32s tab = F32s(pc.table);
    float c = tab.v[pos * 2 * pc.half_dims + i];
    float s = tab.v[pos * 2 * pc.half_dims + pc.half_dims + i];
    F32s x = F32s(pc.x);
    uint base = t * pc.stride + h * pc.head_dim;
    uint ia = pc.neox != 0 ? base + i : base + 2 * i;
    uint ib = pc.neox != 0 ? base + i + pc.half_dims : base + 2 * i + 1;
    float a = x.v[ia];
    float b = x.v[ib];
    // The CPU device's (and ggml's x86) fusing of the rotation.
    precise float ra = fma_once(a, c, -(b * s));
    precise float rb = fma_once(a, s, b * c);
    x.v[ia] = ra;
    x.v[ib] = rb;
}
