#version 450
// Reads a buffer once (16 bytes per load, grid-stride) and writes one word per invocation so the
// loads cannot be optimized away: the device's read bandwidth, for the roofline.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint64_t src;
    uint64_t dst;
    uint n_vec4;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * 256;
    uvec4 acc = uvec4(0);
    U32x4s s = U32x4s(pc.src);
    for (uint i = gl_GlobalInvocationID.x; i < pc.n_vec4; i += stride) {
        acc ^= s.v[i];
    }
    U32s(pc.dst).v[gl_GlobalInvocationID.x] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
