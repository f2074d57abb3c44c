// The matrix-vector kernel's unit of work per invocation ("item"): two halves of H consecutive
// elements of a weight row, each half with one scale and one offset, so that
//   dot(row[half], x[half]) = scale * sum(q * x) - offset * sum(x)
// and the quants are converted once per element. Items of a row are consecutive across the
// invocations of a subgroup, so both the weight and the activation reads coalesce.
// `load_item` returns the quants, the two (scale, offset) pairs and the x index of each half.

#if defined(TYPE_F32) || defined(TYPE_F16)
#define H 4
uint items_per_row(uint cols) { return (cols + 7) / 8; }
void item_x(uint cols, uint item, out uint xi[2]) {
    xi[0] = item * 8;
    xi[1] = item * 8 + 4;
}
void load_item(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out float q[2][H], out vec2 so[2], out uint xi[2]) {
    [[unroll]] for (uint h = 0; h < 2; h++) {
        xi[h] = item * 8 + h * 4;
        so[h] = vec2(1.0, 0.0);
        [[unroll]] for (uint i = 0; i < H; i++) {
            uint c = xi[h] + i;
#if defined(TYPE_F32)
            q[h][i] = c < cols ? F32s(w).v[row * cols + c] : 0.0;
#else
            q[h][i] = c < cols ? float(F16s(w).v[row * cols + c]) : 0.0;
#endif
        }
    }
}
#elif defined(TYPE_Q4_0) || defined(TYPE_Q4_1)
// A 32-block is 4 items: item k takes quant byte word k (bytes 4k..4k+3): its low nibbles are
// elements 4k..4k+3, its high nibbles elements 16+4k..16+4k+3.
#define H 4
uint items_per_row(uint cols) { return cols / 8; }
void item_x(uint cols, uint item, out uint xi[2]) {
    xi[0] = (item / 4) * 32 + 4 * (item % 4);
    xi[1] = xi[0] + 16;
}
void load_item(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out float q[2][H], out vec2 so[2], out uint xi[2]) {
    uint b = row * (cols / 32) + item / 4;
    uint k = item % 4;
    uint word = U32s(w).v[b * 4 + k];
#if defined(TYPE_Q4_0)
    float d = float(F16s(aux).v[b]);
    vec2 s = vec2(d, 8.0 * d);
#else
    vec2 dm = unpackHalf2x16(U32s(aux).v[b]);
    vec2 s = vec2(dm.x, -dm.y);
#endif
    uint x0 = (item / 4) * 32 + 4 * k;
    [[unroll]] for (uint i = 0; i < 4; i++) {
        uint byte = (word >> (8 * i)) & 0xFFu;
        q[0][i] = float(byte & 15u);
        q[1][i] = float(byte >> 4);
    }
    so[0] = s;
    so[1] = s;
    xi[0] = x0;
    xi[1] = x0 + 16;
}
#elif defined(TYPE_Q8_0)
// A 32-block is 4 items of 8 consecutive quants (two 32-bit words).
#define H 4
uint items_per_row(uint cols) { return cols / 8; }
void item_x(uint cols, uint item, out uint xi[2]) {
    xi[0] = (item / 4) * 32 + (item % 4) * 8;
    xi[1] = xi[0] + 4;
}
void load_item(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out float q[2][H], out vec2 so[2], out uint xi[2]) {
    uint b = row * (cols / 32) + item / 4;
    uint k = item % 4;
    float d = float(F16s(aux).v[b]);
    [[unroll]] for (uint h = 0; h < 2; h++) {
        uint word = U32s(w).v[b * 8 + k * 2 + h];
        [[unroll]] for (uint i = 0; i < 4; i++) {
            q[h][i] = float(int(word << (24 - 8 * i)) >> 24);
        }
        so[h] = vec2(d, 0.0);
        xi[h] = (item / 4) * 32 + k * 8 + h * 4;
    }
}
#elif defined(TYPE_Q4_K)
// A 256-element super-block is 16 items: item (p, c) for pair p (sub-blocks 2p, 2p+1) and chunk c
// of 8 quant bytes: low nibbles are elements 64p + 8c.., high nibbles 64p + 32 + 8c...
#define H 8
uint items_per_row(uint cols) { return cols / 16; }
void item_x(uint cols, uint item, out uint xi[2]) {
    uint p = (item % 16) / 4;
    xi[0] = (item / 16) * 256 + 64 * p + 8 * (item % 4);
    xi[1] = xi[0] + 32;
}
void load_item(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out float q[2][H], out vec2 so[2], out uint xi[2]) {
    uint sb = row * (cols / 256) + item / 16;
    uint p = (item % 16) / 4;
    uint c = item % 4;
    U32x4s blocks = U32x4s(w);
    uvec4 head = blocks.v[sb * 9];
    vec2 dmin = unpackHalf2x16(head.x);
    // The 6-bit scale and min of sub-blocks j = 2p and 2p + 1.
    [[unroll]] for (uint h = 0; h < 2; h++) {
        uvec2 sm = scale_min_k4(head.y, head.z, head.w, 2 * p + h);
        so[h] = vec2(dmin.x * float(sm.x), dmin.y * float(sm.y));
        xi[h] = (item / 16) * 256 + 64 * p + 32 * h + 8 * c;
    }
    // Quant bytes 32p + 8c .. +8 of the super-block's 128 (which start 16 bytes in).
    uint base = (sb * 144 + 16 + 32 * p + 8 * c) / 4;
    uint w0 = U32s(w).v[base];
    uint w1 = U32s(w).v[base + 1];
    [[unroll]] for (uint i = 0; i < 4; i++) {
        uint b0 = (w0 >> (8 * i)) & 0xFFu;
        uint b1 = (w1 >> (8 * i)) & 0xFFu;
        q[0][i] = float(b0 & 15u);
        q[0][i + 4] = float(b1 & 15u);
        q[1][i] = float(b0 >> 4);
        q[1][i + 4] = float(b1 >> 4);
    }
}
#elif defined(TYPE_Q6_K)
// A super-block (repacked: ql[128], qh[64], scales[16] at `w`, d at `aux`) is 16 items: item
// (n, g, c) for half n, group pair g (groups g and g + 2) and chunk c of 8 elements. Low nibbles
// of ql[64n + 32g + 8c ..] are group g, high nibbles group g + 2; qh[32n + 8c ..] holds the top
// two bits of all four groups.
#define H 8
uint items_per_row(uint cols) { return cols / 16; }
void item_x(uint cols, uint item, out uint xi[2]) {
    uint n = (item % 16) / 8;
    uint g = (item % 8) / 4;
    xi[0] = (item / 16) * 256 + 128 * n + 32 * g + 8 * (item % 4);
    xi[1] = xi[0] + 64;
}
void load_item(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out float q[2][H], out vec2 so[2], out uint xi[2]) {
    uint sb = row * (cols / 256) + item / 16;
    uint n = (item % 16) / 8;
    uint g = (item % 8) / 4;
    uint c = item % 4;
    float d = float(F16s(aux).v[sb]);
    uint base = sb * 208;
    uint l0 = base + 64 * n + 32 * g + 8 * c;
    uint h0 = base + 128 + 32 * n + 8 * c;
    uint ql0 = U32s(w).v[l0 / 4];
    uint ql1 = U32s(w).v[l0 / 4 + 1];
    uint qh0 = U32s(w).v[h0 / 4];
    uint qh1 = U32s(w).v[h0 / 4 + 1];
    U8s bytes = U8s(w);
    [[unroll]] for (uint h = 0; h < 2; h++) {
        uint grp = g + 2 * h;
        float sc = float(int(int8_t(bytes.v[base + 192 + 8 * n + c / 2 + 2 * grp])));
        so[h] = vec2(d * sc, 32.0 * d * sc);
        xi[h] = (item / 16) * 256 + 128 * n + 32 * grp + 8 * c;
        [[unroll]] for (uint i = 0; i < 4; i++) {
            uint lo0 = (ql0 >> (8 * i + 4 * h)) & 15u;
            uint lo1 = (ql1 >> (8 * i + 4 * h)) & 15u;
            uint hi0 = (qh0 >> (8 * i + 2 * grp)) & 3u;
            uint hi1 = (qh1 >> (8 * i + 2 * grp)) & 3u;
            q[h][i] = float(lo0 | (hi0 << 4));
            q[h][i + 4] = float(lo1 | (hi1 << 4));
        }
    }
}
#endif
