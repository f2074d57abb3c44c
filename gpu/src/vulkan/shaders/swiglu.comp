#version 450
// out = silu(gate) * up, element-wise.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint64_t gate;
    uint64_t up;
    uint64_t out_;
    uint count;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count) {
        return;
    }
    float g = F32s(pc.gate).v[i];
    F32s(pc.out_).v[i] = ggml_silu(g) * F32s(pc.up).v[i];
}
