// Dequantization of one 32-element unit of a weight row, one variant per weight type (chosen by a
// TYPE_* define). The layouts are the GPU layouts written by `vulkan/conv.rs`:
// - F32, F16: the row as is; units past `cols` read as zero (UNIT_TAIL).
// - Q4_0, Q4_1, Q8_0: the quants of each 32-block packed into 16 (32) aligned bytes at `w`, the
//   f16 scale (Q4_1: scale and min) of each block in a separate array at `aux`.
// - Q4_K: GGUF's own 144-byte super-blocks, read in place.
// - Q6_K: the 208 bytes of quants and scales of each super-block at `w`, its f16 d at `aux`.

#if defined(TYPE_F32)
#define UNIT_TAIL 1
void dequant_unit(uint64_t w, uint64_t aux, uint cols, uint row, uint u, out float v[32]) {
    F32s p = F32s(w);
    uint base = row * cols;
    [[unroll]] for (uint i = 0; i < 32; i++) {
        uint c = u * 32 + i;
        v[i] = c < cols ? p.v[base + c] : 0.0;
    }
}
#elif defined(TYPE_F16)
#define UNIT_TAIL 1
void dequant_unit(uint64_t w, uint64_t aux, uint cols, uint row, uint u, out float v[32]) {
    F16s p = F16s(w);
    uint base = row * cols;
    [[unroll]] for (uint i = 0; i < 32; i++) {
        uint c = u * 32 + i;
        v[i] = c < cols ? float(p.v[base + c]) : 0.0;
    }
}
#elif defined(TYPE_Q4_0)
void dequant_unit(uint64_t w, uint64_t aux, uint cols, uint row, uint u, out float v[32]) {
    uint b = row * (cols / 32) + u;
    uvec4 q = U32x4s(w).v[b];
    float d = float(F16s(aux).v[b]);
    [[unroll]] for (uint wi = 0; wi < 4; wi++) {
        [[unroll]] for (uint bi = 0; bi < 4; bi++) {
            uint byte = (q[wi] >> (8 * bi)) & 0xFFu;
            v[wi * 4 + bi] = d * (float(byte & 15u) - 8.0);
            v[wi * 4 + bi + 16] = d * (float(byte >> 4) - 8.0);
        }
    }
}
#elif defined(TYPE_Q4_1)
void dequant_unit(uint64_t w, uint64_t aux, uint cols, uint row, uint u, out float v[32]) {
    uint b = row * (cols / 32) + u;
    uvec4 q = U32x4s(w).v[b];
    vec2 dm = unpackHalf2x16(U32s(aux).v[b]);
    [[unroll]] for (uint wi = 0; wi < 4; wi++) {
        [[unroll]] for (uint bi = 0; bi < 4; bi++) {
            uint byte = (q[wi] >> (8 * bi)) & 0xFFu;
            v[wi * 4 + bi] = dm.x * float(byte & 15u) + dm.y;
            v[wi * 4 + bi + 16] = dm.x * float(byte >> 4) + dm.y;
        }
    }
}
#elif defined(TYPE_Q8_0)
void dequant_unit(uint64_t w, uint64_t aux, uint cols, uint row, uint u, out float v[32]) {
    uint b = row * (cols / 32) + u;
    float d = float(F16s(aux).v[b]);
    [[unroll]] for (uint h = 0; h < 2; h++) {
        uvec4 q = U32x4s(w).v[2 * b + h];
        [[unroll]] for (uint wi = 0; wi < 4; wi++) {
            [[unroll]] for (uint bi = 0; bi < 4; bi++) {
                int x = int(q[wi] << (24 - 8 * bi)) >> 24;
                v[h * 16 + wi * 4 + bi] = d * float(x);
            }
        }
    }
}
#elif defined(TYPE_Q4_K)
void dequant_unit(uint64_t w, uint64_t aux, uint cols, uint row, uint u, out float v[32]) {
    uint sb = row * (cols / 256) + u / 8;
    uint j = u % 8;
    U32x4s p = U32x4s(w);
    uvec4 head = p.v[sb * 9];
    vec2 dmin = unpackHalf2x16(head.x);
    uvec2 sm = q4k_scale_min(head.y, head.z, head.w, j);
    uint sc = sm.x;
    uint mn = sm.y;
    float d1 = dmin.x * float(sc);
    float m1 = dmin.y * float(mn);
    // Sub-block j's 16 bytes (conv.rs): element e in byte e % 16, low nibble for e < 16.
    uvec4 q = p.v[sb * 9 + 1 + j];
    [[unroll]] for (uint h = 0; h < 2; h++) {
        [[unroll]] for (uint wi = 0; wi < 4; wi++) {
            [[unroll]] for (uint bi = 0; bi < 4; bi++) {
                uint nib = (q[wi] >> (8 * bi + 4 * h)) & 15u;
                v[h * 16 + wi * 4 + bi] = d1 * float(nib) - m1;
            }
        }
    }
}
#elif defined(TYPE_Q6_K)
// Super-blocks repacked as 208 bytes (ql[128], qh[64], scales[16]) at `w`, the f16 d of each at
// `aux`.
void dequant_unit(uint64_t w, uint64_t aux, uint cols, uint row, uint u, out float v[32]) {
    uint sb = row * (cols / 256) + u / 8;
    uint g = u % 8;
    uint n = g / 4;
    uint gg = g % 4;
    U8s p = U8s(w);
    uint base = sb * 208;
    float d = float(F16s(aux).v[sb]);
    uint ql = base + n * 64 + (gg % 2) * 32;
    uint qh = base + 128 + n * 32;
    uint qshift = (gg / 2) * 4;
    uint hshift = gg * 2;
    [[unroll]] for (uint l = 0; l < 32; l++) {
        uint lo = (uint(p.v[ql + l]) >> qshift) & 15u;
        uint hi = (uint(p.v[qh + l]) >> hshift) & 3u;
        int q = int(lo | (hi << 4)) - 32;
        int sc = int(int8_t(p.v[base + 192 + n * 8 + l / 16 + 2 * gg]));
        v[l] = (d * float(sc)) * float(q);
    }
}
#else
#error "no TYPE_* defined"
#endif
