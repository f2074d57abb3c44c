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
    // Eight loads in flight per invocation before their squares are summed, in the order a
    // plain loop over i = tid, tid + 128, ... would sum them (absent elements add +0).
    float s = 0.0;
    for (uint i0 = tid; i0 < pc.width; i0 += 128 * 8) {
        float v[8];
        [[unroll]] for (uint u = 0; u < 8; u++) {
            uint i = i0 + 128 * u;
            v[u] = i < pc.width ? x.v[in_base + i] : 0.0;
        }
        [[unroll]] for (uint u = 0; u < 8; u++) {
            s += v[u] * v[u];
        }
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
    for (uint i0 = tid; i0 < pc.width; i0 += 128 * 8) {
        float v[8];
        float wv[8];
        [[unroll]] for (uint u = 0; u < 8; u++) {
            uint i = i0 + 128 * u;
            v[u] = i < pc.width ? x.v[in_base + i] : 0.0;
            wv[u] = i < pc.width ? w.v[i] : 0.0;
        }
        [[unroll]] for (uint u = 0; u < 8; u++) {
            uint i = i0 + 128 * u;
            if (i < pc.width) {
                float r = v[u] * scale * wv[u];
                o.v[out_base + i] = r;
            }
        }
    }
}
