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
// An item is a whole 32-block: one 16-byte load of its quants; low nibbles are elements 0..15,
// high nibbles 16..31.
#define H 16
uint items_per_row(uint cols) { return cols / 32; }
void item_x(uint cols, uint item, out uint xi[2]) {
    xi[0] = item * 32;
    xi[1] = item * 32 + 16;
}
void load_item(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out float q[2][H], out vec2 so[2], out uint xi[2]) {
    uint b = row * (cols / 32) + item;
    uvec4 qs = U32x4s(w).v[b];
#if defined(TYPE_Q4_0)
    float d = float(F16s(aux).v[b]);
    vec2 s = vec2(d, 8.0 * d);
#else
    vec2 dm = unpackHalf2x16(U32s(aux).v[b]);
    vec2 s = vec2(dm.x, -dm.y);
#endif
    [[unroll]] for (uint wi = 0; wi < 4; wi++) {
        [[unroll]] for (uint i = 0; i < 4; i++) {
            uint byte = (qs[wi] >> (8 * i)) & 0xFFu;
            q[0][wi * 4 + i] = float(byte & 15u);
            q[1][wi * 4 + i] = float(byte >> 4);
        }
    }
    so[0] = s;
    so[1] = s;
    item_x(cols, item, xi);
}
#elif defined(TYPE_Q8_0)
// An item is a whole 32-block: two 16-byte loads of its quants.
#define H 16
uint items_per_row(uint cols) { return cols / 32; }
void item_x(uint cols, uint item, out uint xi[2]) {
    xi[0] = item * 32;
    xi[1] = item * 32 + 16;
}
void load_item(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out float q[2][H], out vec2 so[2], out uint xi[2]) {
    uint b = row * (cols / 32) + item;
    float d = float(F16s(aux).v[b]);
    [[unroll]] for (uint h = 0; h < 2; h++) {
        uvec4 qs = U32x4s(w).v[2 * b + h];
        [[unroll]] for (uint wi = 0; wi < 4; wi++) {
            [[unroll]] for (uint i = 0; i < 4; i++) {
                q[h][wi * 4 + i] = float(int(qs[wi] << (24 - 8 * i)) >> 24);
            }
        }
        so[h] = vec2(d, 0.0);
    }
    item_x(cols, item, xi);
}
#elif defined(TYPE_Q4_K)
// An item is one 32-element sub-block j of a 256-element super-block: its quants are its own 16
// bytes (conv.rs's layout: elements 0..15 in the low nibbles, 16..31 in the high ones; one
// 16-byte load), its scale and min come from the header.
#define H 16
uint items_per_row(uint cols) { return cols / 32; }
void item_x(uint cols, uint item, out uint xi[2]) {
    xi[0] = item * 32;
    xi[1] = item * 32 + 16;
}
void load_item(uint64_t w, uint64_t aux, uint cols, uint row, uint item, out float q[2][H], out vec2 so[2], out uint xi[2]) {
    uint sb = row * (cols / 256) + item / 8;
    uint j = item % 8;
    U32x4s blocks = U32x4s(w);
    uvec4 head = blocks.v[sb * 9];
    vec2 dmin = unpackHalf2x16(head.x);
    uvec2 sm = q4k_scale_min(head.y, head.z, head.w, j);
    vec2 s = vec2(dmin.x * float(sm.x), dmin.y * float(sm.y));
    uvec4 qs = blocks.v[sb * 9 + 1 + j];
    [[unroll]] for (uint h = 0; h < 2; h++) {
        [[unroll]] for (uint wi = 0; wi < 4; wi++) {
            [[unroll]] for (uint i = 0; i < 4; i++) {
                q[h][wi * 4 + i] = float((qs[wi] >> (8 * i + 4 * h)) & 15u);
            }
        }
        so[h] = s;
    }
    item_x(cols, item, xi);
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
