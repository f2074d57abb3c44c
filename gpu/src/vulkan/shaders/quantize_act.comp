#version 450
// Rounds activation rows the way the CPU device quantizes them before a quantized matrix product
// (ggml's reference quantizers), and writes the rounded values back as f32: Q8_0/Q8_1 (blocks of
// 32, scale amax/127 stored as f16, round half away from zero) for Q4_0, Q4_1 and Q8_0 weights;
// Q8_K (blocks of 256, scale -max/127 in f32, round half to even) for the K-quants. The devices
// then multiply the same activations, so Vulkan agrees with the CPU reference token for token.
// One invocation per block.
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint64_t x;
    uint64_t out_;
    uint cols;
    uint stride;
    uint n_rows;
} pc;

#if defined(ACT_Q8_K)
#define BLOCK 256
#else
#define BLOCK 32
#endif

void main() {
    uint gid = gl_GlobalInvocationID.x;
    uint per_row = pc.cols / BLOCK;
    if (gid >= per_row * pc.n_rows) {
        return;
    }
    uint base = (gid / per_row) * pc.stride + (gid % per_row) * BLOCK;
    F32s x = F32s(pc.x);
    F32s o = F32s(pc.out_);
#if defined(ACT_Q8_K)
    float amax = 0.0;
    float mx = 0.0;
    for (uint i = 0; i < BLOCK; i++) {
        float v = x.v[base + i];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    if (amax == 0.0) {
        for (uint i = 0; i < BLOCK; i++) {
            o.v[base + i] = 0.0;
        }
        return;
    }
    float iscale = -127.0 / mx;
    float d = 1.0 / iscale;
    for (uint i = 0; i < BLOCK; i++) {
        float q = min(roundEven(iscale * x.v[base + i]), 127.0);
        o.v[base + i] = d * q;
    }
#else
    float amax = 0.0;
    for (uint i = 0; i < BLOCK; i++) {
        amax = max(amax, abs(x.v[base + i]));
    }
    float d = amax / 127.0;
    float id = d != 0.0 ? 1.0 / d : 0.0;
    float d16 = float(float16_t(d));
    for (uint i = 0; i < BLOCK; i++) {
        float v = x.v[base + i] * id;
        float q = sign(v) * floor(abs(v) + 0.5);
        o.v[base + i] = q * d16;
    }
#endif
}
