#version 450
// acc += other, element-wise (the residual stream).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint64_t acc;
    uint64_t other;
    uint count;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count) {
        return;
    }
    F32s a = F32s(pc.acc);
    a.v[i] = a.v[i] + F32s(pc.other).v[i];
}
