#version 450
// Rounds activation rows the way the CPU device quantizes them before a quantized matrix product
// (ggml's reference quantizers), and writes the rounded values back as f32: Q8_0/Q8_1 (blocks of
// 32, scale amax/127 stored as f16, round half away from zero) for Q4_0, Q4_1 and Q8_0 weights;
// Q8_K (blocks of 256, scale -max/127 in f32, round half to even) for the K-quants. The devices
// then multiply the same activations, so Vulkan agrees with the CPU reference. One workgroup per
// 256 elements of a row, one invocation per element; the block maximum is a tree reduction that
// keeps the first element on ties, as the CPU's scan does.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint64_t x;
    uint64_t out_;
    uint cols;
    uint stride;
    uint n_rows;
} pc;

#if defined(ACT_Q8_K)
#define SEG 256
#else
#define SEG 32
#endif

shared float sa[256];
shared float sv[256];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint chunks = (pc.cols + 255) / 256;
    uint row = gl_WorkGroupID.x / chunks;
    uint e = (gl_WorkGroupID.x % chunks) * 256 + tid;
    bool valid = e < pc.cols;
    float v = valid ? F32s(pc.x).v[row * pc.stride + e] : 0.0;
    sa[tid] = abs(v);
    sv[tid] = v;
    for (uint s = SEG / 2; s > 0; s >>= 1) {
        barrier();
        if (tid % SEG < s && sa[tid + s] > sa[tid]) {
            sa[tid] = sa[tid + s];
            sv[tid] = sv[tid + s];
        }
    }
    barrier();
    uint first = tid - tid % SEG;
    float amax = sa[first];
    if (!valid) {
        return;
    }
    float r;
#if defined(ACT_Q8_K)
    if (amax == 0.0) {
        r = 0.0;
    } else {
        float iscale = -127.0 / sv[first];
        r = (1.0 / iscale) * min(roundEven(iscale * v), 127.0);
    }
#else
    float d = amax / 127.0;
    float id = d != 0.0 ? 1.0 / d : 0.0;
    float q = v * id;
    r = (sign(q) * floor(abs(q) + 0.5)) * float(float16_t(d));
#endif
    F32s(pc.out_).v[row * pc.stride + e] = r;
}
