#version 450
// out[t][row] = dot(W[row], x[t]) (+ bias[row]) for up to NT tokens, with 8-bit activation
// records (quantize_act.comp, INT_OUT) and integer dot products, in the CPU device's arithmetic
// bit for bit (strata-quant's x86 kernels, which compute ggml's):
//   Q4_0, Q4_1, Q8_0: eight f32 lanes per (row, token); lane l takes elements 4l .. 4l + 3 of
//     every 32-element block in turn (the weights in ggml's order: a nibble block's 16 low
//     nibbles, then its 16 high ones) and adds fma(d_w * d_x, their integer dot, lane); then
//     ggml's hsum_float_8, plus Q4_1's m * s terms summed block after block;
//   Q4_K, in the lane order of the CPU device's kernels on the host (plan.rs): sixteen lanes
//     (the AVX-512 tile) or, with K_LANES8, eight (the AVX2 tile). Lane L takes elements
//     4 (L % 8) .. 4 (L % 8) + 3 of sub-blocks L / 8, L / 8 + LANES / 8, L / 8 + 2 LANES / 8, ... of every
//     super-block (16 lanes: two of each 64-element quarter; 8 lanes: all eight), sums
//     scale * dot over them in integers, and adds fma(sum, d * d_x, lane), then
//     fma(min * block sum, -dmin * d_x, lane) (lanes 0..7, sub-block L's); then the halving sum
//     of the 16 lanes, or ggml's hsum_float_8 of the 8.
// A workgroup of 128 invocations holds 128 / LANES rows, one invocation per lane. A lane's loop
// is a chain over the row's blocks (the CPU's order), so it keeps UNROLL blocks' loads in flight
// ahead of its arithmetic (long rows, few of them, need many in flight per lane). The arithmetic of a (row, token) does not
// depend on NT or UNROLL: a token's result is the same whatever else is in its decode batch.
#include "common.glsl"
#extension GL_EXT_spirv_intrinsics : require

// OpSDotKHR with the 4x8-bit packed format: the sum of the four signed 8-bit products.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int dot4_i8(uint a, uint b, spirv_literal int packed_vector_format);
#define DOT4(a, b) dot4_i8((a), (b), 0)

#ifndef NT
#define NT 1
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#define WG 128
#if defined(TYPE_Q4_K) && defined(K_LANES8)
#define LANES 8
#define BLOCK 256
#elif defined(TYPE_Q4_K)
#define LANES 16
#define BLOCK 256
#else
#define LANES 8
#define BLOCK 32
#endif
#define ROWS_PER_WG (WG / LANES)

layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t w;
    uint64_t aux;
    uint64_t x;
    uint64_t out_;
    uint64_t bias;
    uint rows;
    uint cols;
    uint n_tokens;
    // Bytes between two tokens' activation records, and where a record's block metadata starts.
    uint x_stride;
    uint out_stride;
    uint meta_offset;
    // Nonzero: add the product into `out_` (the residual stream) instead of writing it.
    uint accumulate;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };

const uint NIBBLES = 0x0F0F0F0Fu;


// One block's loads for one lane: the weight word(s), the weight scales, and per token the
// activation word(s) and the block's (scale bits, quant sum).
#if defined(TYPE_Q4_K)
// Words (of four elements) a lane takes from each super-block, and the sub-block of its word i.
#define K_WORDS (64 / LANES)
#define K_SUB(i, lane) ((i) * (LANES / 8) + (lane) / 8)
#endif

struct Loaded {
#if defined(TYPE_Q4_K)
    uint wq[K_WORDS];
    uvec4 head;
    uint xq[NT][K_WORDS];
    uvec2 meta[NT];
#else
    uint wq;
    uint ws;
    uint xq[NT];
    uvec2 meta[NT];
#endif
};

uint64_t record(uint t) {
    return pc.x + uint64_t(t) * pc.x_stride;
}

Loaded load_block(uint row, uint b, uint lane, uint t0) {
    Loaded l;
    uint nb = pc.cols / BLOCK;
    uint blk = row * nb + b;
#if defined(TYPE_Q4_K)
    // Super-block: 16 header bytes (d, dmin, 12 scale bytes), then 16 quant bytes per sub-block
    // (conv.rs's layout: element e in byte e % 16, the low nibble for e < 16). Lane L takes
    // elements 4 (L % 8) .. 4 (L % 8) + 3 of sub-block K_SUB(i, L) for each i: word (L % 8) % 4
    // of it, whose high nibbles hold them for L % 8 >= 4 (nibble_shift below).
    l.head = U32x4s(pc.w).v[blk * 9];
    [[unroll]] for (uint i = 0; i < K_WORDS; i++) {
        l.wq[i] = U32s(pc.w).v[blk * 36 + 4 + 4 * K_SUB(i, lane) + (lane % 8) % 4];
    }
    [[unroll]] for (uint t = 0; t < NT; t++) {
        uint64_t rec = record(min(t0 + t, pc.n_tokens - 1));
        [[unroll]] for (uint i = 0; i < K_WORDS; i++) {
            l.xq[t][i] = U32s(rec).v[b * 64 + 8 * K_SUB(i, lane) + lane % 8];
        }
        // Lanes 0..7 add sub-block `lane`'s min times its 32-element quant sum.
        l.meta[t] = U32x2s(rec + pc.meta_offset).v[b * 8 + lane % 8];
    }
#else
#if defined(TYPE_Q8_0)
    l.wq = U32s(pc.w).v[blk * 8 + lane];
#else
    l.wq = (U32s(pc.w).v[blk * 4 + lane % 4] >> (4 * (lane / 4))) & NIBBLES;
#endif
#if defined(TYPE_Q4_1)
    l.ws = U32s(pc.aux).v[blk];
#else
    l.ws = floatBitsToUint(float(F16s(pc.aux).v[blk]));
#endif
    [[unroll]] for (uint t = 0; t < NT; t++) {
        uint64_t rec = record(min(t0 + t, pc.n_tokens - 1));
        l.xq[t] = U32s(rec).v[b * 8 + lane];
        l.meta[t] = U32x2s(rec + pc.meta_offset).v[b];
    }
#endif
    return l;
}

#if defined(TYPE_Q4_0)
// q - 8 as signed bytes (q in 0..15), without borrows between bytes.
uint minus_8(uint q) {
    return ((q | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
}
#endif

// The block's contribution to this lane of each token: acc (the lane) and, for Q4_1, summs.
void add_block(Loaded l, uint lane, inout float acc[NT], inout float summs[NT]) {
#if defined(TYPE_Q4_K)
    vec2 dd = unpackHalf2x16(l.head.x);
    int sc[K_WORDS];
    [[unroll]] for (uint i = 0; i < K_WORDS; i++) {
        sc[i] = int(q4k_scale_min(l.head.y, l.head.z, l.head.w, K_SUB(i, lane)).x);
    }
    int mn = int(q4k_scale_min(l.head.y, l.head.z, l.head.w, lane % 8).y);
    uint nibble_shift = 4 * ((lane % 8) / 4);
    [[unroll]] for (uint t = 0; t < NT; t++) {
        int isum = 0;
        [[unroll]] for (uint i = 0; i < K_WORDS; i++) {
            isum += sc[i] * DOT4((l.wq[i] >> nibble_shift) & NIBBLES, l.xq[t][i]);
        }
        float dx = uintBitsToFloat(l.meta[t].x);
        int s = lane < 8 ? mn * int(l.meta[t].y) : 0;
        precise float d = dd.x * dx;
        precise float m = -(dd.y * dx);
        acc[t] = fma_once(float(s), m, fma_once(float(isum), d, acc[t]));
    }
#else
#if defined(TYPE_Q4_1)
    vec2 dm = unpackHalf2x16(l.ws);
    float dw = dm.x;
#else
    float dw = uintBitsToFloat(l.ws);
#endif
#if defined(TYPE_Q4_0)
    uint wq = minus_8(l.wq);
#else
    uint wq = l.wq;
#endif
    [[unroll]] for (uint t = 0; t < NT; t++) {
        // Q8_0 / Q8_1 store their scale as f16.
        float dx = f16_rne(uintBitsToFloat(l.meta[t].x));
        precise float d = dw * dx;
        acc[t] = fma_once(d, float(DOT4(wq, l.xq[t])), acc[t]);
#if defined(TYPE_Q4_1)
        // Q8_1's stored sum: sum(q) * d with the unrounded d, rounded to f16.
        float sx = f16_rne(float(int(l.meta[t].y)) * uintBitsToFloat(l.meta[t].x));
        // m * s is exact in f32 (two f16 values): fused or not alike.
        precise float ms = dm.y * sx;
        precise float s = summs[t] + ms;
        summs[t] = s;
#endif
    }
#endif
}

shared float lanes_of[WG][NT];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % LANES;
    uint row_in_group = tid / LANES;
    uint row = min(gl_WorkGroupID.x * ROWS_PER_WG + row_in_group, pc.rows - 1);
    uint t0 = gl_WorkGroupID.y * NT;
    uint nb = pc.cols / BLOCK;
    float acc[NT];
    float summs[NT];
    [[unroll]] for (uint t = 0; t < NT; t++) {
        acc[t] = 0.0;
        summs[t] = 0.0;
    }
    // A ring of UNROLL blocks' loads: block b + UNROLL is requested before block b is used, so
    // UNROLL blocks stay in flight along the lane's chain (a compiler does not move a load
    // across the loop's back edge). Loads past the row's end re-read its last block, unused.
    Loaded ring[UNROLL];
    [[unroll]] for (uint u = 0; u < UNROLL; u++) {
        ring[u] = load_block(row, min(u, nb - 1), lane, t0);
    }
    uint b = 0;
    for (; b + UNROLL <= nb; b += UNROLL) {
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            Loaded cur = ring[u];
            ring[u] = load_block(row, min(b + u + UNROLL, nb - 1), lane, t0);
            add_block(cur, lane, acc, summs);
        }
    }
    [[unroll]] for (uint u = 0; u < UNROLL; u++) {
        if (b + u < nb) {
            add_block(ring[u], lane, acc, summs);
        }
    }
    [[unroll]] for (uint t = 0; t < NT; t++) {
        lanes_of[tid][t] = acc[t];
    }
    barrier();
    if (lane < NT) {
        uint t = lane;
        uint token = t0 + t;
        uint base = row_in_group * LANES;
        float s;
#if LANES == 16
        // The CPU's _mm512_reduce_add_ps: halves, quarters, then pairs.
        float h[8];
        [[unroll]] for (uint i = 0; i < 8; i++) {
            h[i] = lanes_of[base + i][t] + lanes_of[base + i + 8][t];
        }
        s = ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
#else
        // ggml's hsum_float_8, then Q4_1's m * s terms (every lane carries the same chain).
        float a[8];
        [[unroll]] for (uint i = 0; i < 8; i++) {
            a[i] = lanes_of[base + i][t];
        }
        s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
#if !defined(TYPE_Q4_K)
        s += summs[t];
#endif
#endif
        uint out_row = gl_WorkGroupID.x * ROWS_PER_WG + row_in_group;
        if (out_row < pc.rows && token < pc.n_tokens) {
            float bias = pc.bias != 0 ? F32s(pc.bias).v[out_row] : 0.0;
            uint at = token * pc.out_stride + out_row;
            // As the CPU: the projection (with its bias), then the residual add.
            float r = s + bias;
            F32s(pc.out_).v[at] = pc.accumulate != 0 ? F32s(pc.out_).v[at] + r : r;
        }
    }
}
