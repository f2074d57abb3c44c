// The integer-dot-product kernel's unit of work ("item"): one 32-element block of a row, as 8 words
// of four 8-bit quants each, lined up with 8 words of the activation quants.
//   load_x: the activation words of the item and its block's (scale bits, quant sum);
//   load_w: the weight words (signed 8-bit, or 4-bit values 0..15, which read the same), their
//           f32 scales (ws) and integer sub-scales (wsc);
//   item_dot: the item's contribution in f32, from exact integer sums.
// Q6_K's item is not contiguous (its four 8-element groups lie 32 apart), so it has its own
// load_x.

const uint NIBBLES = 0x0F0F0F0Fu;

// The block's activation scale: Q8_K's f32 one, or Q8_0's rounded to f16 as it stores it.
float x_scale(uvec2 meta) {
#if defined(TYPE_Q4_K) || defined(TYPE_Q6_K)
    return uintBitsToFloat(meta.x);
#else
    // The device's own conversion (round to nearest even on lavapipe, not so on every GPU): a
    // last-bit difference from the CPU here is within this kernel's summation-order noise, and
    // common.glsl's exact rounding costs ~8% of 7B Q4_0 decode on the H200 in this hot loop.
    return float(float16_t(uintBitsToFloat(meta.x)));
#endif
}

// (Records are read through the cached views even in CHAINED builds, which have no pipeline
// barrier before them: a chained step writes each record to a slot of its own, which no earlier
// read in the step can have left in a cache; plan.rs, `ChainRecording::record_slot`.)
// The activation record's 8-byte words and block metadata: in device memory, or (NORM_PROLOGUE
// builds of matvec_q.comp) in the workgroup's own copy in shared memory, np_words / np_meta.
#if defined(NORM_PROLOGUE)
// (Pair i: words 2 (i % 4) and the next of item i / 4.)
#define X_PAIR(rec, i) uvec2(np_words[(2 * ((i) % 4)) * NP_ITEMS + (i) / 4], np_words[(2 * ((i) % 4) + 1) * NP_ITEMS + (i) / 4])
#define X_META(rec, i) np_meta[i]
#else
#define X_PAIR(rec, i) U32x2s(rec).v[i]
#define X_META(rec, i) U32x2s(rec).v[i]
#endif

#if !defined(TYPE_Q6_K) && defined(NORM_PROLOGUE)
void load_x(uint64_t rec, uint meta_offset, uint item, out uint xq[8], out uvec2 meta) {
    [[unroll]] for (uint k = 0; k < 8; k++) {
        xq[k] = np_words[k * NP_ITEMS + item];
    }
    meta = np_meta[item];
}
#elif !defined(TYPE_Q6_K)
void load_x(uint64_t rec, uint meta_offset, uint item, out uint xq[8], out uvec2 meta) {
    uvec4 a = U32x4s(rec).v[2 * item];
    uvec4 b = U32x4s(rec).v[2 * item + 1];
    xq[0] = a.x; xq[1] = a.y; xq[2] = a.z; xq[3] = a.w;
    xq[4] = b.x; xq[5] = b.y; xq[6] = b.z; xq[7] = b.w;
    meta = U32x2s(rec + meta_offset).v[item];
}
#endif

#if defined(TYPE_Q4_0) || defined(TYPE_Q4_1)
// A block's 16 bytes: low nibbles are elements 0..15, high nibbles 16..31.
void load_w(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out uint wq[8], out vec2 ws, out ivec4 wsc) {
    uint b = row * (cols / 32) + item;
    uvec4 qs = U32x4s(w).v[b];
    [[unroll]] for (uint k = 0; k < 4; k++) {
        wq[k] = qs[k] & NIBBLES;
        wq[k + 4] = (qs[k] >> 4) & NIBBLES;
    }
#if defined(TYPE_Q4_0)
    ws = vec2(float(F16s(aux).v[b]), 0.0);
#else
    ws = unpackHalf2x16(U32s(aux).v[b]);
#endif
    wsc = ivec4(0);
}

float item_dot(uint wq[8], vec2 ws, ivec4 wsc, uint xq[8], uvec2 meta) {
    int isum = 0;
    [[unroll]] for (uint k = 0; k < 8; k++) {
        isum += DOT4(wq[k], xq[k]);
    }
    float dx = x_scale(meta);
#if defined(TYPE_Q4_0)
    // (q - 8) * x summed: the offset through the block's quant sum.
    isum -= 8 * int(meta.y);
    return float(isum) * ws.x * dx;
#else
    // Q8_1's stored sum: sum(q) * d with the unrounded d, rounded to f16.
    float sx = float(float16_t(float(int(meta.y)) * uintBitsToFloat(meta.x)));
    return (ws.x * dx) * float(isum) + ws.y * sx;
#endif
}
#elif defined(TYPE_Q8_0)
void load_w(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out uint wq[8], out vec2 ws, out ivec4 wsc) {
    uint b = row * (cols / 32) + item;
    uvec4 lo = U32x4s(w).v[2 * b];
    uvec4 hi = U32x4s(w).v[2 * b + 1];
    wq[0] = lo.x; wq[1] = lo.y; wq[2] = lo.z; wq[3] = lo.w;
    wq[4] = hi.x; wq[5] = hi.y; wq[6] = hi.z; wq[7] = hi.w;
    ws = vec2(float(F16s(aux).v[b]), 0.0);
    wsc = ivec4(0);
}

float item_dot(uint wq[8], vec2 ws, ivec4 wsc, uint xq[8], uvec2 meta) {
    int isum = 0;
    [[unroll]] for (uint k = 0; k < 8; k++) {
        isum += DOT4(wq[k], xq[k]);
    }
    return float(isum) * (ws.x * x_scale(meta));
}
#elif defined(TYPE_Q4_K)
// Sub-block j of a super-block: its 16 quant bytes (conv.rs's layout: elements 0..15 in the low
// nibbles, 16..31 in the high ones); its 6-bit scale and min from the header.
void load_w(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out uint wq[8], out vec2 ws, out ivec4 wsc) {
    uint sb = row * (cols / 256) + item / 8;
    uint j = item % 8;
    U32x4s blocks = U32x4s(w);
#if defined(Q4K_HEAD_SHUFFLE) && defined(ITEM_LANES_ALIGNED)
    // (An experiment, STRATA_SHADER_DEFINES=Q4K_HEAD_SHUFFLE at build time: the eight lanes of a
    // super-block's sub-blocks (lanes 8k .. 8k + 7 of a subgroup: the product kernels give lane i
    // item i + n * lanes, and Q4_K rows hold whole super-blocks, so whole groups of eight run
    // together) load one header word each, lane m word m % 4, and take the words they need from
    // each other: one register a row's loads in flight instead of four.)
    uvec4 head;
    if (gl_SubgroupSize >= 8u) {
        uint mine = U32s(w).v[sb * 36 + (gl_SubgroupInvocationID & 3u)];
        uint first = gl_SubgroupInvocationID & ~7u;
        head.x = subgroupShuffle(mine, first);
        head.y = subgroupShuffle(mine, first + 1u + j / 4u);
        head.z = head.y;
        head.w = subgroupShuffle(mine, first + 3u);
    } else {
        head = blocks.v[sb * 9];
    }
#elif defined(Q4K_HEAD_WORDS)
    // (An experiment, STRATA_SHADER_DEFINES=Q4K_HEAD_WORDS at build time: the three header words
    // the sub-block needs, not all four, so that a row's loads in flight hold one register less.)
    U32s words = U32s(w);
    uint scale_word = words.v[sb * 36 + 1 + j / 4];
    uvec4 head = uvec4(words.v[sb * 36], scale_word, scale_word, words.v[sb * 36 + 3]);
#else
    uvec4 head = blocks.v[sb * 9];
#endif
    uvec4 qs = blocks.v[sb * 9 + 1 + j];
    [[unroll]] for (uint k = 0; k < 4; k++) {
        wq[k] = qs[k] & NIBBLES;
        wq[k + 4] = (qs[k] >> 4) & NIBBLES;
    }
    // The sub-block's scale and min folded into the super-block's d and dmin once per row
    // item, so that each token's product (batched steps run many per row item) is two
    // conversions, a multiply and two FMAs.
    vec2 dm = unpackHalf2x16(head.x);
    uvec2 sm = q4k_scale_min(head.y, head.z, head.w, j);
    ws = dm * vec2(sm);
    wsc = ivec4(0);
}

float item_dot(uint wq[8], vec2 ws, ivec4 wsc, uint xq[8], uvec2 meta) {
    int isum = 0;
    [[unroll]] for (uint k = 0; k < 8; k++) {
        isum += DOT4(wq[k], xq[k]);
    }
    float dx = x_scale(meta);
    return dx * fma(ws.x, float(isum), -(ws.y * float(int(meta.y))));
}
#elif defined(TYPE_Q6_K)
// Item (n, c) of a super-block (8 items): half n, columns l = 8c .. 8c + 7 of its four groups of
// 32 (elements 128n + 32g + l), each 8 with one 8-bit scale. Repacked super-block: ql[128],
// qh[64], scales[16] at `w`, d at `aux`. Group g's 6-bit quants: the low or high nibble of
// ql[64n + l] (g = 0, 2) or ql[64n + 32 + l] (g = 1, 3), with bits 2g, 2g + 1 of qh[32n + l].
uint q6_item_offset(uint item, uint g) {
    uint n = (item % 8) / 4;
    uint c = item % 4;
    return (item / 8) * 256 + 128 * n + 32 * g + 8 * c;
}

void load_x(uint64_t rec, uint meta_offset, uint item, out uint xq[8], out uvec2 meta) {
    [[unroll]] for (uint g = 0; g < 4; g++) {
        uvec2 v = X_PAIR(rec, q6_item_offset(item, g) / 8);
        xq[2 * g] = v.x;
        xq[2 * g + 1] = v.y;
    }
    // The super-block's scale (every block of it stores the same).
    meta = X_META(rec + meta_offset, (item / 8) * 8);
}

// 6-bit values 0..63 in each byte, minus 32 as signed bytes, without borrows between bytes.
uint minus_32(uint b) {
    return ((b | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
}

void load_w(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out uint wq[8], out vec2 ws, out ivec4 wsc) {
    uint sb = row * (cols / 256) + item / 8;
    uint n = (item % 8) / 4;
    uint c = item % 4;
    U32x2s words = U32x2s(w);
    uint base = sb * 208;
    uvec2 qa = words.v[(base + 64 * n + 8 * c) / 8];
    uvec2 qb = words.v[(base + 64 * n + 32 + 8 * c) / 8];
    uvec2 qh = words.v[(base + 128 + 32 * n + 8 * c) / 8];
    [[unroll]] for (uint k = 0; k < 2; k++) {
        wq[k] = minus_32((qa[k] & NIBBLES) | ((qh[k] & 0x03030303u) << 4));
        wq[2 + k] = minus_32((qb[k] & NIBBLES) | (((qh[k] >> 2) & 0x03030303u) << 4));
        wq[4 + k] = minus_32(((qa[k] >> 4) & NIBBLES) | (((qh[k] >> 4) & 0x03030303u) << 4));
        wq[6 + k] = minus_32(((qb[k] >> 4) & NIBBLES) | (((qh[k] >> 6) & 0x03030303u) << 4));
    }
    // Scales of groups g: byte 8n + c / 2 + 2g of the 16.
    uint sw = U32x2s(w).v[(base + 192 + 8 * n) / 8][0];
    uint sw2 = U32x2s(w).v[(base + 192 + 8 * n) / 8][1];
    uint h = c / 2;
    // Bytes h, h + 2 are in the first word, h + 4, h + 6 in the second.
    wsc = ivec4(int(sw << (24 - 8 * h)) >> 24, int(sw << (8 - 8 * h)) >> 24, int(sw2 << (24 - 8 * h)) >> 24, int(sw2 << (8 - 8 * h)) >> 24);
    ws = vec2(float(F16s(aux).v[sb]), 0.0);
}

float item_dot(uint wq[8], vec2 ws, ivec4 wsc, uint xq[8], uvec2 meta) {
    int isum = 0;
    [[unroll]] for (uint g = 0; g < 4; g++) {
        isum += wsc[g] * (DOT4(wq[2 * g], xq[2 * g]) + DOT4(wq[2 * g + 1], xq[2 * g + 1]));
    }
    return (ws.x * x_scale(meta)) * float(isum);
}
#endif
