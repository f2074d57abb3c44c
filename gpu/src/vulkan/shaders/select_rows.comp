#version 450
// out[i] = x[rows[i]]: the rows whose logits are wanted. One workgroup per output row.
#include "common.glsl"

layout(local_size_x = 128) in;

layout(push_constant) uniform Push {
    uint64_t x;
    uint64_t out_;
    uint64_t rows;
    uint width;
} pc;

void main() {
    uint i = gl_WorkGroupID.x;
    uint r = U32s(pc.rows).v[i];
    for (uint c = gl_LocalInvocationID.x; c < pc.width; c += 128) {
        F32s(pc.out_).v[i * pc.width + c] = F32s(pc.x).v[r * pc.width + c];
    }
}
