#version 450
// Attention of one query (token t, head h) per workgroup in the CPU device's arithmetic bit for
// bit (strata-quant's ggml_float, which is ggml's x86 attention): the query rounded to f16; the
// scores in the order of the sequence's step (ggml_vec_dot_f16's four 16-lane accumulators over
// chunks of 64 when the step holds one token of the sequence, tinyBLAS's one 16-lane
// accumulator over chunks of 16 when it holds several); ggml's softmax (its expf, the
// exponentials' 16-wide chunk sums added in f64 in order, the weights rounded to f16); the
// values summed into 64 (or 16) accumulator rows, position j into row j % rows, reduced as the
// CPU does. Four dispatches (`phase`): the scores, a workgroup per (token, head, 128 positions),
// each score one invocation's (3); softmax and weights per (token, head) (0); the value rows, a
// workgroup per (token, head, 8 rows), each row a chain over its positions in order (1); their
// reduction into the output (2). Scores, weights, chunk sums and rows live in a scratch area per
// (token, head). Head dimensions: multiples of 64, at most 128.
#include "common.glsl"

#define WG 128
#define MAX_HD 128

layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t q;
    uint64_t scratch;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t positions;
    uint64_t seq_of_token;
    // Per token: where its sequence's block table starts in `tables` (resolved by the host, so
    // a cell is two dependent reads away, not three).
    uint64_t table_offsets;
    uint64_t tables;
    uint64_t out_;
    uint n_heads;
    uint n_kv_heads;
    uint head_dim;
    uint q_stride;
    uint row_stride;
    uint block_size;
    float scale;
    uint out_stride;
    uint n_tokens;
    // Floats of scratch per (token, head), and where its chunk sums and value rows start.
    uint scratch_stride;
    uint chunk_offset;
    uint rows_offset;
    // 3: scores (a workgroup per 128 positions); 0: softmax, weights; 1: the value rows (a
    // workgroup per group of 8 rows); 2: the rows' reduction into the output.
    uint phase;
} pc;

shared float qs[MAX_HD];
shared float red[WG];
shared float inv_sum;

// GCC's _mm512_reduce_add_ps: halves, quarters, then pairs.
float reduce16(float x[16]) {
    float h[8];
    [[unroll]] for (uint i = 0; i < 8; i++) {
        h[i] = x[i] + x[i + 8];
    }
    return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

// Position j's score, scaled: ggml_vec_dot_f16's order (one token of the sequence in the step)
// or tinyBLAS's (several).
float score_of(uint j, U32s tables, uint table_offset, uint kvh, uint hd, bool prefill) {
    U32x4s kc = U32x4s(pc.k_cache);
    uint cell = kv_cell(tables, table_offset, j, pc.block_size);
    uint kb = (cell * pc.row_stride + kvh * hd) / 8;
    float x[16];
    if (prefill) {
        float acc[16];
        [[unroll]] for (uint l = 0; l < 16; l++) {
            acc[l] = 0.0;
        }
        for (uint c = 0; c < hd; c += 16) {
            uvec4 k0 = kc.v[kb + c / 8];
            uvec4 k1 = kc.v[kb + c / 8 + 1];
            uint kw[8] = uint[8](k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w);
            [[unroll]] for (uint l = 0; l < 16; l++) {
                float k = unpackHalf2x16(kw[l / 2])[l % 2];
                // f16 times f16 is exact in f32: fused or not alike.
                precise float a = qs[c + l] * k + acc[l];
                acc[l] = a;
            }
        }
        x = acc;
    } else {
        float acc[4][16];
        [[unroll]] for (uint k = 0; k < 4; k++) {
            [[unroll]] for (uint l = 0; l < 16; l++) {
                acc[k][l] = 0.0;
            }
        }
        for (uint c = 0; c < hd; c += 64) {
            [[unroll]] for (uint k = 0; k < 4; k++) {
                uvec4 k0 = kc.v[kb + (c + 16 * k) / 8];
                uvec4 k1 = kc.v[kb + (c + 16 * k) / 8 + 1];
                uint kw[8] = uint[8](k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w);
                [[unroll]] for (uint l = 0; l < 16; l++) {
                    float kv = unpackHalf2x16(kw[l / 2])[l % 2];
                    precise float a = qs[c + 16 * k + l] * kv + acc[k][l];
                    acc[k][l] = a;
                }
            }
        }
        [[unroll]] for (uint l = 0; l < 16; l++) {
            x[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
        }
    }
    precise float s = reduce16(x) * pc.scale;
    return s;
}

void main() {
    uint h = gl_WorkGroupID.x;
    uint t = gl_WorkGroupID.y;
    uint tid = gl_LocalInvocationID.x;
    uint hd = pc.head_dim;
    uint kvh = h / (pc.n_heads / pc.n_kv_heads);
    uint len = U32s(pc.positions).v[t] + 1;
    U32s seqs = U32s(pc.seq_of_token);
    uint seq = seqs.v[t];
    uint table_offset = U32s(pc.table_offsets).v[t];
    U32s tables = U32s(pc.tables);
    // A sequence with several tokens in this step is prefilling: ggml sums it as a matrix.
    uint tokens_of_seq = 0;
    for (uint u = 0; u < pc.n_tokens; u++) {
        tokens_of_seq += seqs.v[u] == seq ? 1 : 0;
    }
    bool prefill = tokens_of_seq > 1;
    for (uint d = tid; d < hd; d += WG) {
        qs[d] = f16_rne(F32s(pc.q).v[t * pc.q_stride + h * hd + d]);
    }
    barrier();
    F32s sc = F32s(pc.scratch + uint64_t((t * pc.n_heads + h) * pc.scratch_stride) * 4);
    uint n_chunks = (len + 15) / 16;
    uint64_t base = pc.scratch + uint64_t((t * pc.n_heads + h) * pc.scratch_stride) * 4;
    F32s chunk_sums = F32s(base + uint64_t(pc.chunk_offset) * 4);
    F32s value_rows = F32s(base + uint64_t(pc.rows_offset) * 4);
    // Position j's accumulator row: j % rows.
    uint rows = prefill ? 16 : 64;
    if (pc.phase == 1) {
        // Rows 8g .. 8g + 7, each a chain over its positions in order; invocation d owns
        // dimension d. Eight chains at once, four positions of each loaded ahead.
        uint g = gl_WorkGroupID.z;
        if (tid >= hd || 8 * g >= rows) {
            return;
        }
        F16s vc = F16s(pc.v_cache);
        float acc[8];
        [[unroll]] for (uint k = 0; k < 8; k++) {
            acc[k] = 0.0;
        }
        for (uint j0 = 8 * g; j0 < len; j0 += 4 * rows) {
            float w[4][8];
            float v[4][8];
            [[unroll]] for (uint c = 0; c < 4; c++) {
                [[unroll]] for (uint k = 0; k < 8; k++) {
                    uint j = j0 + c * rows + k;
                    bool in_row = j < len;
                    w[c][k] = in_row ? sc.v[j] : 0.0;
                    uint cell = in_row ? kv_cell(tables, table_offset, j, pc.block_size) : 0;
                    v[c][k] = in_row ? float(vc.v[cell * pc.row_stride + kvh * hd + tid]) : 0.0;
                }
            }
            [[unroll]] for (uint c = 0; c < 4; c++) {
                [[unroll]] for (uint k = 0; k < 8; k++) {
                    if (j0 + c * rows + k < len) {
                        // f16 times f16 is exact in f32: fused or not alike.
                        precise float a = w[c][k] * v[c][k] + acc[k];
                        acc[k] = a;
                    }
                }
            }
        }
        [[unroll]] for (uint k = 0; k < 8; k++) {
            value_rows.v[(8 * g + k) * hd + tid] = acc[k];
        }
        return;
    }
    if (pc.phase == 2) {
        if (tid < hd) {
            float x[16];
            [[unroll]] for (uint l = 0; l < 16; l++) {
                x[l] = prefill ? value_rows.v[l * hd + tid]
                               : (value_rows.v[l * hd + tid] + value_rows.v[(32 + l) * hd + tid]) + (value_rows.v[(16 + l) * hd + tid] + value_rows.v[(48 + l) * hd + tid]);
            }
            F32s(pc.out_).v[t * pc.out_stride + h * hd + tid] = reduce16(x);
        }
        return;
    }
    if (pc.phase == 3) {
        uint j = gl_WorkGroupID.z * WG + tid;
        if (j < len) {
            sc.v[j] = score_of(j, tables, table_offset, kvh, hd, prefill);
        }
        return;
    }

    // The scores' maximum (phase 3 wrote them).
    float mx = -1.0 / 0.0;
    for (uint j = tid; j < len; j += WG) {
        mx = max(mx, sc.v[j]);
    }
    red[tid] = mx;
    barrier();
    float m = -1.0 / 0.0;
    for (uint i = 0; i < WG; i++) {
        m = max(m, red[i]);
    }
    // Exponentials, each written by the invocation that wrote its score.
    for (uint j = tid; j < len; j += WG) {
        sc.v[j] = ggml_expf(sc.v[j] - m);
    }
    memoryBarrierBuffer();
    barrier();
    for (uint c = tid; c < n_chunks; c += WG) {
        float e[16];
        [[unroll]] for (uint l = 0; l < 16; l++) {
            e[l] = 16 * c + l < len ? sc.v[16 * c + l] : 0.0;
        }
        chunk_sums.v[c] = reduce16(e);
    }
    memoryBarrierBuffer();
    barrier();
    if (tid == 0) {
        // As the CPU: the chunk sums added in f64 in order, 1 / sum in f64, rounded to f32.
        double sum = 0.0lf;
        for (uint c = 0; c < n_chunks; c++) {
            sum += double(chunk_sums.v[c]);
        }
        inv_sum = float(1.0lf / sum);
    }
    barrier();
    // The weights, rounded to f16 as the CPU rounds them before they meet the f16 cache.
    float inv = inv_sum;
    for (uint j = tid; j < len; j += WG) {
        precise float p = sc.v[j] * inv;
        sc.v[j] = f16_rne(p);
    }
}
