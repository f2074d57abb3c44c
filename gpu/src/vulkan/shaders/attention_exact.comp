#version 450
// Attention of one query (token t, head h) per workgroup in the CPU device's arithmetic bit for
// bit (strata-quant's ggml_float, which is ggml's x86 attention): the query rounded to f16; the
// scores in the order of the sequence's step (ggml_vec_dot_f16's four 16-lane accumulators over
// chunks of 64 when the step holds one token of the sequence, tinyBLAS's one 16-lane
// accumulator over chunks of 16 when it holds several); ggml's softmax (its expf, the
// exponentials' 16-wide chunk sums added in f64 in order, the weights rounded to f16); the
// values summed into 64 (or 16) accumulator rows, position j into row j % rows, reduced as the
// CPU does. Scores and exponentials go through a scratch area of the context's length per
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
    // Floats of scratch per (token, head).
    uint scratch_stride;
} pc;

shared float qs[MAX_HD];
shared float red[WG];
shared float w_tile[64];
shared uint cell_tile[64];
shared float inv_sum;

// GCC's _mm512_reduce_add_ps: halves, quarters, then pairs.
float reduce16(float x[16]) {
    float h[8];
    [[unroll]] for (uint i = 0; i < 8; i++) {
        h[i] = x[i] + x[i + 8];
    }
    return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
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
    uint table_offset = U32s(pc.table_offsets).v[seq];
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
    F32s chunk_sums = F32s(pc.scratch + (uint64_t((t * pc.n_heads + h) * pc.scratch_stride) + pc.scratch_stride - n_chunks) * 4);
    U32x4s kc = U32x4s(pc.k_cache);

    // Scores.
    float mx = -1.0 / 0.0;
    for (uint j = tid; j < len; j += WG) {
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
        sc.v[j] = s;
        mx = max(mx, s);
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
    float inv = inv_sum;
    // Values: invocation d owns dimension d's accumulator rows.
    float acc[64];
    [[unroll]] for (uint r = 0; r < 64; r++) {
        acc[r] = 0.0;
    }
    F16s vc = F16s(pc.v_cache);
    for (uint j0 = 0; j0 < len; j0 += 64) {
        if (tid < 64) {
            uint j = j0 + tid;
            float w = 0.0;
            uint cell = 0;
            if (j < len) {
                precise float p = sc.v[j] * inv;
                w = f16_rne(p);
                cell = kv_cell(tables, table_offset, j, pc.block_size);
            }
            w_tile[tid] = w;
            cell_tile[tid] = cell;
        }
        barrier();
        if (tid < hd) {
            uint n = min(64, len - j0);
            float v[64];
            [[unroll]] for (uint r = 0; r < 64; r++) {
                v[r] = r < n ? float(vc.v[cell_tile[r] * pc.row_stride + kvh * hd + tid]) : 0.0;
            }
            // Position j0 + r goes into row (j0 + r) % rows (j0 is a multiple of 64); products
            // of two f16 values are exact in f32, so fused or not alike.
            if (prefill) {
                [[unroll]] for (uint r = 0; r < 64; r++) {
                    if (r < n) {
                        precise float a = w_tile[r] * v[r] + acc[r % 16];
                        acc[r % 16] = a;
                    }
                }
            } else {
                [[unroll]] for (uint r = 0; r < 64; r++) {
                    if (r < n) {
                        precise float a = w_tile[r] * v[r] + acc[r];
                        acc[r] = a;
                    }
                }
            }
        }
        barrier();
    }
    if (tid < hd) {
        float x[16];
        [[unroll]] for (uint l = 0; l < 16; l++) {
            x[l] = prefill ? acc[l] : (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
        }
        F32s(pc.out_).v[t * pc.out_stride + h * hd + tid] = reduce16(x);
    }
}
