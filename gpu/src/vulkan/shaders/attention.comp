#version 450
// Causal attention over the KV arena, read in place through each sequence's block table.
// One workgroup per (KV head, split of the context, token): it serves every query head of its
// KV head's group (GQA: each K/V row is read once for the group), walks its split's positions in
// tiles of 128 with an online softmax, and writes a partial result (max, sum, weighted values)
// that attention_combine.comp merges across splits (flash-decoding). The number of splits and
// their length vary per step: they come from the step header, and the dispatch is indirect.
// Loops over the per-head register arrays run to MAX_GROUP with uniform conditions, so the
// arrays stay in registers.
#include "common.glsl"

#define WG 128
#define MAX_GROUP 8
#define MAX_Q 1024
#define MAX_SUBGROUPS 32

layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t q;
    uint64_t partial;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t positions;
    uint64_t seq_of_token;
    // Per token: where its sequence's block table starts in `tables` (resolved by the host, so
    // a cell is two dependent reads away, not three).
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

layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };

shared float qs[MAX_Q];
shared float p[MAX_GROUP][WG];
shared float red[MAX_SUBGROUPS][MAX_GROUP];
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
    uint table_offset = U32s(pc.table_offsets).v[t];
    U32s tables = U32s(pc.tables);
    F16s vc = F16s(pc.v_cache);

    // The group's queries, rounded to f16 as the CPU device (and ggml) does before meeting the
    // f16 cache; up to eight loads in flight per invocation.
    for (uint i0 = tid; i0 < group * hd; i0 += WG * 8) {
        float qv[8];
        [[unroll]] for (uint u = 0; u < 8; u++) {
            uint i = i0 + u * WG;
            qv[u] = i < group * hd ? F32s(pc.q).v[t * pc.q_stride + kvh * group * hd + i] : 0.0;
        }
        [[unroll]] for (uint u = 0; u < 8; u++) {
            uint i = i0 + u * WG;
            if (i < group * hd) {
                qs[i] = f16_rne(qv[u]);
            }
        }
    }
    float m[MAX_GROUP];
    float l[MAX_GROUP];
    float acc[MAX_GROUP][2];
    [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
        m[g] = -1.0 / 0.0;
        l[g] = 0.0;
        acc[g][0] = 0.0;
        acc[g][1] = 0.0;
    }
    barrier();
    for (uint j0 = j_begin; j0 < j_end; j0 += WG) {
        uint j = j0 + tid;
        uint n_tile = min(WG, j_end - j0);
        float s[MAX_GROUP];
        [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
            s[g] = -1.0 / 0.0;
        }
        if (j < j_end) {
            uint cell = kv_cell(tables, table_offset, j, pc.block_size);
            cells[tid] = cell;
            // The K row of this position, 4 halves per load.
            uint kb = (cell * pc.row_stride + kvh * hd) / 4;
            float dot[MAX_GROUP];
            [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
                dot[g] = 0.0;
            }
            // Eight 16-byte loads of the row in flight before their products (a loop of one
            // load and its math waits out the memory latency at every step); the sums keep
            // their order.
            U32x4s kc4 = U32x4s(pc.k_cache);
            for (uint u0 = 0; u0 < hd / 8; u0 += 8) {
                uvec4 raw[8];
                [[unroll]] for (uint u = 0; u < 8; u++) {
                    raw[u] = u0 + u < hd / 8 ? kc4.v[kb / 2 + u0 + u] : uvec4(0);
                }
                [[unroll]] for (uint u = 0; u < 8; u++) {
                    if (u0 + u < hd / 8) {
                        [[unroll]] for (uint half_ = 0; half_ < 2; half_++) {
                            vec2 k01 = unpackHalf2x16(half_ == 0 ? raw[u].x : raw[u].z);
                            vec2 k23 = unpackHalf2x16(half_ == 0 ? raw[u].y : raw[u].w);
                            uint d4 = 2 * (u0 + u) + half_;
                            [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
                                if (g < group) {
                                    uint qi = g * hd + 4 * d4;
                                    dot[g] += qs[qi] * k01.x + qs[qi + 1] * k01.y + qs[qi + 2] * k23.x + qs[qi + 3] * k23.y;
                                }
                            }
                        }
                    }
                }
            }
            [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
                s[g] = dot[g] * pc.scale;
            }
        }
        // The tile's maximum per head: subgroup maxima, then across subgroups.
        [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
            float sm = subgroupMax(s[g]);
            if (gl_SubgroupInvocationID == 0 && g < group) {
                red[gl_SubgroupID][g] = sm;
            }
        }
        barrier();
        float factor[MAX_GROUP];
        [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
            float mx = m[g];
            if (g < group) {
                for (uint k = 0; k < gl_NumSubgroups; k++) {
                    mx = max(mx, red[k][g]);
                }
            }
            factor[g] = g < group ? exp(m[g] - mx) : 0.0;
            m[g] = mx;
            // Weights of this invocation's position (zero past the split's end).
            s[g] = (j < j_end && g < group) ? ggml_expf(s[g] - mx) : 0.0;
        }
        barrier();
        [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
            float ss = subgroupAdd(s[g]);
            if (g < group) {
                p[g][tid] = s[g];
                if (gl_SubgroupInvocationID == 0) {
                    red[gl_SubgroupID][g] = ss;
                }
            }
        }
        barrier();
        [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
            if (g < group) {
                float sum = 0.0;
                for (uint k = 0; k < gl_NumSubgroups; k++) {
                    sum += red[k][g];
                }
                l[g] = l[g] * factor[g] + sum;
            }
        }
        [[unroll]] for (uint slot = 0; slot < 2; slot++) {
            uint d = tid + slot * WG;
            if (d < hd) {
                [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
                    acc[g][slot] *= factor[g];
                }
                // As for K: sixteen V loads in flight, then the sums in position order.
                for (uint i0 = 0; i0 < n_tile; i0 += 16) {
                    float vv[16];
                    [[unroll]] for (uint u = 0; u < 16; u++) {
                        vv[u] = i0 + u < n_tile ? float(vc.v[cells[i0 + u] * pc.row_stride + kvh * hd + d]) : 0.0;
                    }
                    [[unroll]] for (uint u = 0; u < 16; u++) {
                        if (i0 + u < n_tile) {
                            [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
                                if (g < group) {
                                    acc[g][slot] += p[g][i0 + u] * vv[u];
                                }
                            }
                        }
                    }
                }
            }
        }
        barrier();
    }
    // Partial record of (token, head, split): [max, sum, hd weighted values].
    F32s out_ = F32s(pc.partial);
    [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
        if (g < group) {
            uint h = kvh * group + g;
            uint base = ((t * pc.n_heads + h) * n_splits + split) * (hd + 2);
            if (tid == 0) {
                out_.v[base] = m[g];
                out_.v[base + 1] = l[g];
            }
            [[unroll]] for (uint slot = 0; slot < 2; slot++) {
                uint d = tid + slot * WG;
                if (d < hd) {
                    out_.v[base + 2 + d] = acc[g][slot];
                }
            }
        }
    }
}
