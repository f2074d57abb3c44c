#version 450
// out = x / sqrt(mean(x^2) + eps) * weight over rows of `width` elements. Row r lies at
// (r / per_token) * stride + (r % per_token) * width, so the same kernel normalizes whole rows
// (per_token = 1) and each head of a row in place (Qwen3's QK-norm).
#include "common.glsl"

layout(local_size_x = 128) in;

layout(push_constant) uniform Push {
    uint64_t x;
    uint64_t weight;
    uint64_t out_;
    uint width;
    uint per_token;
    uint in_stride;
    uint out_stride;
    float eps;
} pc;

shared float partial[128];

void main() {
    uint r = gl_WorkGroupID.x;
    uint tid = gl_LocalInvocationID.x;
    uint in_base = (r / pc.per_token) * pc.in_stride + (r % pc.per_token) * pc.width;
    uint out_base = (r / pc.per_token) * pc.out_stride + (r % pc.per_token) * pc.width;
    F32s x = F32s(pc.x);
    float s = 0.0;
    for (uint i = tid; i < pc.width; i += 128) {
        float v = x.v[in_base + i];
        s += v * v;
    }
    partial[tid] = s;
    for (uint k = 64; k > 0; k >>= 1) {
        barrier();
        if (tid < k) {
            partial[tid] += partial[tid + k];
        }
    }
    barrier();
    float scale = 1.0 / sqrt(partial[0] / float(pc.width) + pc.eps);
    F32s w = F32s(pc.weight);
    F32s o = F32s(pc.out_);
    for (uint i = tid; i < pc.width; i += 128) {
        o.v[out_base + i] = x.v[in_base + i] * scale * w.v[i];
    }
}
