#version 450
// Reads the K and V cells a decode step's attention is about to read into the L2 cache:
// recorded beside a layer's Q/K/V products (no barrier between them), so that the attention
// after the next barrier finds its cells, its block-table words and its positions in the cache
// instead of behind a DRAM round trip each. A short context's cells are a few MB a layer, read
// a step apart while gigabytes of weights stream through the cache, so they are never there on
// their own; the products beside this leave the bus time to spare for them.
//
// Each token's cells 0 .. pos - 1 (its own new cell is being written beside this, and attention
// will find it in the cache anyway), whole rows (every KV head), up to `max_positions`
// positions: a token with a longer context is skipped (its attention is bound by the bytes, not
// by a round trip, and reading megabytes more beside the products would slow them).
//
// The loads feed a condition that decides a store, so they cannot be optimized away; the store
// itself practically never happens.
#include "common.glsl"

#define WG 256
#define UNROLL 4

layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t sink;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t positions;
    uint64_t table_offsets;
    uint64_t tables;
    // 16-byte vectors of a cell's row, and cells a block.
    uint row_vec4;
    uint block_size;
    uint n_tokens;
    uint max_positions;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * WG;
    uvec4 acc = uvec4(0);
    U32s tables = U32s(pc.tables);
    for (uint t = 0; t < pc.n_tokens; t++) {
        uint cells = U32s(pc.positions).v[t];
        if (cells > pc.max_positions) {
            continue;
        }
        uint table_offset = U32s(pc.table_offsets).v[t];
        // K's vectors, then V's: cell j's vector e at index j * row_vec4 + e of its half.
        uint half_vec4 = cells * pc.row_vec4;
        uint total = 2 * half_vec4;
        for (uint i0 = gl_GlobalInvocationID.x; i0 < total; i0 += stride * UNROLL) {
            uvec4 v[UNROLL];
            [[unroll]] for (uint u = 0; u < UNROLL; u++) {
                uint i = i0 + u * stride;
                if (i < total) {
                    bool is_v = i >= half_vec4;
                    uint k = is_v ? i - half_vec4 : i;
                    uint cell = kv_cell(tables, table_offset, k / pc.row_vec4, pc.block_size);
                    uint64_t base = is_v ? pc.v_cache : pc.k_cache;
                    v[u] = U32x4s(base).v[cell * pc.row_vec4 + k % pc.row_vec4];
                } else {
                    v[u] = uvec4(0);
                }
            }
            [[unroll]] for (uint u = 0; u < UNROLL; u++) {
                acc ^= v[u];
            }
        }
    }
    if (acc == uvec4(0x9E3779B9u, 0x7F4A7C15u, 0x85EBCA6Bu, 0xC2B2AE35u)) {
        U32s(pc.sink).v[0] = gl_GlobalInvocationID.x;
    }
}
