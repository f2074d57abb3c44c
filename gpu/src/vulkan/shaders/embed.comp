#version 450
// out[t] = table[token[t]], dequantized: workgroups (t, y) take units of 32 columns y, y + Y, ...
// (Y workgroups a token, so that a decode step's one row is not one workgroup's serial loads).
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint64_t w;
    uint64_t aux;
    uint64_t tokens;
    uint64_t out_;
    uint cols;
    uint out_stride;
} pc;

void main() {
    uint t = gl_WorkGroupID.x;
    uint tok = U32s(pc.tokens).v[t];
    uint n_units = (pc.cols + 31) / 32;
    F32s o = F32s(pc.out_);
    for (uint u = gl_WorkGroupID.y * 64 + gl_LocalInvocationID.x; u < n_units; u += 64 * gl_NumWorkGroups.y) {
        float wv[32];
        dequant_unit(pc.w, pc.aux, pc.cols, tok, u, wv);
        for (uint i = 0; i < 32; i++) {
            uint c = u * 32 + i;
            if (c < pc.cols) {
                o.v[t * pc.out_stride + c] = wv[i];
            }
        }
    }
}
