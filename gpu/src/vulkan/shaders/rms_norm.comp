#version 450
// out = x / sqrt(mean(x^2) + eps) * weight over rows of `width` elements. Row r lies at
// (r / per_token) * stride + (r % per_token) * width, so the same kernel normalizes whole rows
// (per_token = 1) and each head of a row in place (Qwen3's QK-norm).
//
// Built with INT_OUT (and ACT_Q8_0 or ACT_Q8_K), it also quantizes each normalized row as
// quantize_act.comp does (the same quants, scales and sums, bit for bit) into the 8-bit record the
// next product reads, saving that product a dispatch and a barrier. Rows of up to MAX_ROW elements,
// a multiple of the block.
#include "common.glsl"

layout(local_size_x = 128) in;

layout(push_constant) uniform Push {
    uint64_t x;
    uint64_t weight;
    uint64_t out_;
#ifdef INT_OUT
    uint64_t rec;
#endif
    uint width;
    uint per_token;
    uint in_stride;
    uint out_stride;
    float eps;
#ifdef INT_OUT
    uint record_bytes;
    uint meta_offset;
#endif
} pc;

shared float partial[128];

#ifdef INT_OUT
#define MAX_ROW 6144
shared float row_values[MAX_ROW];
// Per 32-element block: its largest magnitude and the signed value of the first element that
// has it.
shared float block_amax[MAX_ROW / 32];
shared float block_signed[MAX_ROW / 32];
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };
#endif

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
#ifdef INT_OUT
                row_values[i] = r;
#endif
            }
        }
    }
#ifdef INT_OUT
    barrier();
    // One invocation per 32-element block: the first largest magnitude by a scan in element
    // order (the CPU quantizer's rule on ties).
    uint n_blocks = pc.width / 32;
    for (uint b = tid; b < n_blocks; b += 128) {
        float amax = 0.0;
        float signed_max = 0.0;
        for (uint k = 0; k < 32; k++) {
            float v = row_values[32 * b + k];
            if (abs(v) > amax) {
                amax = abs(v);
                signed_max = v;
            }
        }
        block_amax[b] = amax;
        block_signed[b] = signed_max;
    }
    barrier();
    uint64_t rec = pc.rec + uint64_t(r) * pc.record_bytes;
    for (uint b = tid; b < n_blocks; b += 128) {
        float amax = block_amax[b];
#if defined(ACT_Q8_K)
        // The super-block's first largest magnitude over its eight blocks, in order.
        uint first = b - b % 8;
        float max_signed = block_signed[first];
        amax = block_amax[first];
        for (uint k = 1; k < 8; k++) {
            if (block_amax[first + k] > amax) {
                amax = block_amax[first + k];
                max_signed = block_signed[first + k];
            }
        }
        float iscale = amax == 0.0 ? 0.0 : -127.0 / max_signed;
        float d = amax == 0.0 ? 0.0 : 1.0 / iscale;
#else
        float dd = amax / 127.0;
        float id = dd != 0.0 ? 1.0 / dd : 0.0;
        float d = dd;
#endif
        int isum = 0;
        [[unroll]] for (uint w = 0; w < 8; w++) {
            uint word = 0;
            [[unroll]] for (uint k = 0; k < 4; k++) {
                float v = row_values[32 * b + 4 * w + k];
#if defined(ACT_Q8_K)
                int q = amax == 0.0 ? 0 : int(min(roundEven(iscale * v), 127.0));
#else
                float qf = v * id;
                int q = int(sign(qf) * floor(abs(qf) + 0.5));
#endif
                isum += q;
                word |= (uint(q) & 0xFFu) << (8 * k);
            }
            U32s(rec).v[8 * b + w] = word;
        }
        U32x2s(rec + pc.meta_offset).v[b] = uvec2(floatBitsToUint(d), uint(isum));
    }
#endif
}
