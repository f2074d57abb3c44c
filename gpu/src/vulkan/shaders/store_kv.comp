#version 450
// Writes each token's K and V rows (f32) into its KV cell (f16), found through its sequence's
// block table: one invocation per (token, element).
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint64_t k;
    uint64_t v;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t positions;
    uint64_t seq_of_token;
    // Per token: where its sequence's block table starts in `tables` (resolved by the host, so
    // a cell is two dependent reads away, not three).
    uint64_t table_offsets;
    uint64_t tables;
    uint width;
    uint row_stride;
    uint block_size;
    uint n_tokens;
} pc;

void main() {
    uint gid = gl_GlobalInvocationID.x;
    if (gid >= pc.n_tokens * pc.width) {
        return;
    }
    uint t = gid / pc.width;
    uint e = gid % pc.width;
    uint pos = U32s(pc.positions).v[t];
    uint cell = kv_cell(U32s(pc.tables), U32s(pc.table_offsets).v[t], pos, pc.block_size);
    F16s(pc.k_cache).v[cell * pc.row_stride + e] = float16_t(f16_rne(F32s(pc.k).v[t * pc.width + e]));
    F16s(pc.v_cache).v[cell * pc.row_stride + e] = float16_t(f16_rne(F32s(pc.v).v[t * pc.width + e]));
}
