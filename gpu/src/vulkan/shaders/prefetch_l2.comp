#version 450
// Reads up to four ranges of device memory so that they sit in the L2 cache when a kernel after
// the next barrier reads them: recorded beside a latency-bound stage (attention, RMSNorm), it
// spends memory bandwidth that stage leaves idle on the weights the next products read.
// The loads feed a condition that decides a store, so they cannot be optimized away; the store
// itself practically never happens.
#include "common.glsl"

#define WG 256
#define UNROLL 8

layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t sink;
    uint64_t src[4];
    // 16-byte vectors of each range.
    uint n_vec4[4];
} pc;

void main() {
    uint total = pc.n_vec4[0] + pc.n_vec4[1] + pc.n_vec4[2] + pc.n_vec4[3];
    uint stride = gl_NumWorkGroups.x * WG;
    uvec4 acc = uvec4(0);
    for (uint i0 = gl_GlobalInvocationID.x; i0 < total; i0 += stride * UNROLL) {
        uvec4 v[UNROLL];
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            uint i = min(i0 + u * stride, total - 1);
            uint r = 0;
            [[unroll]] for (uint k = 0; k < 3; k++) {
                if (i >= pc.n_vec4[r]) {
                    i -= pc.n_vec4[r];
                    r++;
                }
            }
            v[u] = U32x4s(pc.src[r]).v[i];
        }
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            acc ^= v[u];
        }
    }
    if (acc == uvec4(0x9E3779B9u, 0x7F4A7C15u, 0x85EBCA6Bu, 0xC2B2AE35u)) {
        U32s(pc.sink).v[0] = gl_GlobalInvocationID.x;
    }
}
