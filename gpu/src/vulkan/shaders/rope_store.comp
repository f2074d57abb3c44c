#version 450
// RoPE of a step's Q and K rows and the K/V store into the arena, in one dispatch (rope.comp and
// store_kv.comp fused, with the same arithmetic): invocations [0, nq) rotate a pair of a Q head,
// [nq, nq + nk) a pair of a K head and store both rotated values, the rest store one V element
// (and the K element when it lies past the rotated dimensions).
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint64_t q;
    uint64_t k;
    uint64_t v;
    uint64_t table;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t positions;
    uint64_t seq_of_token;
    // Per token: where its sequence's block table starts in `tables` (resolved by the host, so
    // a cell is two dependent reads away, not three).
    uint64_t table_offsets;
    uint64_t tables;
    uint q_stride;
    uint n_q_heads;
    uint n_kv_heads;
    uint head_dim;
    uint half_dims;
    uint neox;
    uint n_tokens;
    uint row_stride;
    uint block_size;
} pc;

uint cell_of(uint t) {
    uint pos = U32s(pc.positions).v[t];
    return kv_cell(U32s(pc.tables), U32s(pc.table_offsets).v[t], pos, pc.block_size);
}

void main() {
    uint gid = gl_GlobalInvocationID.x;
    uint kv_width = pc.n_kv_heads * pc.head_dim;
    uint nq = pc.n_tokens * pc.n_q_heads * pc.half_dims;
    uint nk = pc.n_tokens * pc.n_kv_heads * pc.half_dims;
    if (gid < nq + nk) {
        bool is_k = gid >= nq;
        uint g = is_k ? gid - nq : gid;
        uint n_heads = is_k ? pc.n_kv_heads : pc.n_q_heads;
        uint stride = is_k ? kv_width : pc.q_stride;
        uint i = g % pc.half_dims;
        uint h = (g / pc.half_dims) % n_heads;
        uint t = g / (pc.half_dims * n_heads);
        uint pos = U32s(pc.positions).v[t];
        F32s tab = F32s(pc.table);
        float c = tab.v[pos * 2 * pc.half_dims + i];
        float s = tab.v[pos * 2 * pc.half_dims + pc.half_dims + i];
        F32s x = F32s(is_k ? pc.k : pc.q);
        uint base = t * stride + h * pc.head_dim;
        uint oa = pc.neox != 0 ? i : 2 * i;
        uint ob = pc.neox != 0 ? i + pc.half_dims : 2 * i + 1;
        float a = x.v[base + oa];
        float b = x.v[base + ob];
        // The CPU device's (and ggml's x86) fusing of the rotation.
        precise float ra = fma_once(a, c, -(b * s));
        precise float rb = fma_once(a, s, b * c);
        x.v[base + oa] = ra;
        x.v[base + ob] = rb;
        if (is_k) {
            uint at = cell_of(t) * pc.row_stride + h * pc.head_dim;
            F16s(pc.k_cache).v[at + oa] = float16_t(f16_rne(ra));
            F16s(pc.k_cache).v[at + ob] = float16_t(f16_rne(rb));
        }
        return;
    }
    uint g = gid - nq - nk;
    if (g >= pc.n_tokens * kv_width) {
        return;
    }
    uint t = g / kv_width;
    uint e = g % kv_width;
    uint at = cell_of(t) * pc.row_stride + e;
    F16s(pc.v_cache).v[at] = float16_t(f16_rne(F32s(pc.v).v[t * kv_width + e]));
    if (e % pc.head_dim >= 2 * pc.half_dims) {
        F16s(pc.k_cache).v[at] = float16_t(f16_rne(F32s(pc.k).v[t * kv_width + e]));
    }
}
