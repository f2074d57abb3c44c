#version 450
// Causal attention over the KV arena, read in place through each sequence's block table.
// One workgroup per (KV head, split of the context, token): it serves every query head of its
// KV head's group (GQA: each K/V row is read once for the group), walks its split's positions in
// tiles of 128 with an online softmax, and writes a partial result (max, sum, weighted values)
// that attention_combine.comp merges across splits (flash-decoding). The number of splits and
// their length vary per step: they come from the step header, and the dispatch is indirect.
#include "common.glsl"

#define WG 128
#define MAX_GROUP 8
#define MAX_Q 1024
#define MAX_HEAD_DIM 256

layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t q;
    uint64_t partial;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t positions;
    uint64_t seq_of_token;
    uint64_t table_offsets;
    uint64_t tables;
    uint64_t header;
    uint n_heads;
    uint n_kv_heads;
    uint head_dim;
    uint q_stride;
    uint row_stride;
    uint block_size;
    float scale;
} pc;

shared float qs[MAX_Q];
shared float p[MAX_GROUP][WG];
shared uint cells[WG];

void main() {
    uint kvh = gl_WorkGroupID.x;
    uint split = gl_WorkGroupID.y;
    uint t = gl_WorkGroupID.z;
    uint tid = gl_LocalInvocationID.x;
    U32s header = U32s(pc.header);
    uint n_splits = header.v[0];
    uint split_len = header.v[1];
    uint group = pc.n_heads / pc.n_kv_heads;
    uint hd = pc.head_dim;
    uint len = U32s(pc.positions).v[t] + 1;
    uint j_begin = split * split_len;
    uint j_end = min(len, j_begin + split_len);
    uint table_offset = U32s(pc.table_offsets).v[U32s(pc.seq_of_token).v[t]];
    U32s tables = U32s(pc.tables);
    F16s kc = F16s(pc.k_cache);
    F16s vc = F16s(pc.v_cache);

    for (uint i = tid; i < group * hd; i += WG) {
        // Rounded to f16 as the CPU device (and ggml) does before meeting the f16 cache.
        qs[i] = float(float16_t(F32s(pc.q).v[t * pc.q_stride + kvh * group * hd + i]));
    }
    float m[MAX_GROUP];
    float l[MAX_GROUP];
    float acc[MAX_GROUP][2];
    for (uint g = 0; g < MAX_GROUP; g++) {
        m[g] = -1.0 / 0.0;
        l[g] = 0.0;
        acc[g][0] = 0.0;
        acc[g][1] = 0.0;
    }
    barrier();
    for (uint j0 = j_begin; j0 < j_end; j0 += WG) {
        uint j = j0 + tid;
        uint n_tile = min(WG, j_end - j0);
        if (j < j_end) {
            uint cell = kv_cell(tables, table_offset, j, pc.block_size);
            cells[tid] = cell;
            uint kb = cell * pc.row_stride + kvh * hd;
            float s[MAX_GROUP];
            for (uint g = 0; g < group; g++) {
                s[g] = 0.0;
            }
            for (uint d = 0; d < hd; d++) {
                float kv = float(kc.v[kb + d]);
                for (uint g = 0; g < group; g++) {
                    s[g] += qs[g * hd + d] * kv;
                }
            }
            for (uint g = 0; g < group; g++) {
                p[g][tid] = s[g] * pc.scale;
            }
        }
        barrier();
        float factor[MAX_GROUP];
        for (uint g = 0; g < group; g++) {
            float mx = m[g];
            for (uint i = 0; i < n_tile; i++) {
                mx = max(mx, p[g][i]);
            }
            factor[g] = exp(m[g] - mx);
            m[g] = mx;
        }
        barrier();
        if (j < j_end) {
            for (uint g = 0; g < group; g++) {
                p[g][tid] = exp(p[g][tid] - m[g]);
            }
        }
        barrier();
        for (uint g = 0; g < group; g++) {
            float sum = 0.0;
            for (uint i = 0; i < n_tile; i++) {
                sum += p[g][i];
            }
            l[g] = l[g] * factor[g] + sum;
        }
        for (uint slot = 0; slot < 2; slot++) {
            uint d = tid + slot * WG;
            if (d >= hd) {
                break;
            }
            for (uint g = 0; g < group; g++) {
                acc[g][slot] *= factor[g];
            }
            for (uint i = 0; i < n_tile; i++) {
                float vv = float(vc.v[cells[i] * pc.row_stride + kvh * hd + d]);
                for (uint g = 0; g < group; g++) {
                    acc[g][slot] += p[g][i] * vv;
                }
            }
        }
        barrier();
    }
    // Partial record of (token, head, split): [max, sum, hd weighted values].
    F32s out_ = F32s(pc.partial);
    for (uint g = 0; g < group; g++) {
        uint h = kvh * group + g;
        uint base = ((t * pc.n_heads + h) * n_splits + split) * (hd + 2);
        if (tid == 0) {
            out_.v[base] = m[g];
            out_.v[base + 1] = l[g];
        }
        for (uint slot = 0; slot < 2; slot++) {
            uint d = tid + slot * WG;
            if (d < hd) {
                out_.v[base + 2 + d] = acc[g][slot];
            }
        }
    }
}
