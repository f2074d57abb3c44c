#version 450
// The exact mode's rounding helpers (common.glsl: div_rn, fma_once, sqrt_rn) applied to arrays
// of inputs, so that a test can compare each build's results with the CPU's IEEE operations bit
// for bit (the helpers exist because drivers may compute a / b, fma and f64 arithmetic in other
// ways than written).
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint64_t a;
    uint64_t b;
    uint64_t c;
    // Five results an input i: a / b, fma(a, b, c), sqrt(|a|), c / (a / b), and the chain
    // acc = fma(a[j], b[j], acc) over j = i .. i + 7 (mod n) from acc = c: every result
    // rounded to f32 before the next operation uses it, which a compiler keeping the f64 of the
    // helpers' f64 builds across the chain would skip.
    uint64_t out_;
    uint n;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n) {
        return;
    }
    float a = F32s(pc.a).v[i];
    float b = F32s(pc.b).v[i];
    float c = F32s(pc.c).v[i];
    F32s(pc.out_).v[5 * i] = div_rn(a, b);
    F32s(pc.out_).v[5 * i + 1] = fma_once(a, b, c);
    F32s(pc.out_).v[5 * i + 2] = sqrt_rn(abs(a));
    F32s(pc.out_).v[5 * i + 3] = div_rn(c, div_rn(a, b));
    float acc = c;
    [[unroll]] for (uint j = 0; j < 8; j++) {
        uint k = (i + j) % pc.n;
        acc = fma_once(F32s(pc.a).v[k], F32s(pc.b).v[k], acc);
    }
    F32s(pc.out_).v[5 * i + 4] = acc;
}
