#version 450
// Attention for decode-sized steps over long contexts: one workgroup per (KV head, split of the
// context, token) serving every query head of the KV head's group at once (GQA), so each K/V row
// is read once per group, where attention_decode.comp (a workgroup per query head) reads it once
// per query head. A token's context is cut into about header word 2 splits of whole tiles by its
// own length, so the merge stays short (at 8192 positions the per-head kernel's 64-position
// splits made a 128-way merge).
//
// Tokens shorter than `gqa_from` positions are left to attention_decode.comp (which returns for
// the others): a token's result depends on its own length only, not on its decode batch.
//
// Per tile of 64 positions: four invocations per position each take a quarter of the K row
// (16-byte vectors c, c + 4, ...: neighbouring invocations read neighbouring vectors) for every
// head of the group, their sums added by two quad swaps; each subgroup then runs the online
// softmax of one head; invocations owning two dimensions and a slice of the tile sum the weighted
// V rows for every head. The V loads are issued before the softmax, the next tile's K loads
// during it. The partial result per (token, query head, split) has attention_decode.comp's
// layout; attention_combine.comp merges the splits.
#include "common.glsl"
#extension GL_KHR_shader_subgroup_quad : require

#define WG 256
#define TILE 64
#define MAX_GROUP 8
#define MAX_HD 256
// V rows of an invocation's slice loaded ahead (before the softmax), at most.
#define PRE 16

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
    // Tokens of at least this many positions are this kernel's.
    uint gqa_from;
#ifdef TAGGED_OUT
    // The partial records written as (bits, tag) pairs instead, as attention_decode.comp's
    // TAGGED_OUT build writes them (the merge after both waits on the tags): the step's tag
    // (header word 3) times 256 plus this, the layer's salt.
    uint tag_salt;
#endif
#ifdef TAGGED_IN
    // This layer's q and the new cell's K and V as the QKV products wrote them, recorded right
    // before this dispatch without a pipeline barrier (attention_decode.comp's TAGGED_IN
    // layout), and the word that counts waits that gave up.
    uint64_t tagged_qkv;
    uint64_t give_ups;
#endif
} pc;
#ifdef TAGGED_OUT
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };
#endif
#if defined(TAGGED_IN) && !defined(TAGGED_OUT)
#error "the tagged inputs' build tags its records too (the merge after it waits on them)"
#endif
shared float qs[MAX_GROUP * MAX_HD];
#ifdef TAGGED_IN
#include "attention_tagged_qkv.glsl"
#endif
// Scores of the tile per head, then (in place) their softmax weights.
shared float sp[MAX_GROUP][TILE];
shared uint cells[TILE];
shared float m_run[MAX_GROUP];
shared float l_run[MAX_GROUP];
shared float factor[MAX_GROUP];
// Each V slice's sums per (head, dimension): (WG / (hd / 2)) slices x MAX_GROUP x hd.
shared float v_sums[2 * WG * MAX_GROUP];

// The first four 16-byte vectors of this invocation's quarter of K row j (zeros past the split)
// and its cell.
void load_k(U32x4s kc, U32s tables, uint table_offset, uint j, uint j_end, uint kvh, uint hd, uint c, out uint cell, out uvec4 raw[4]) {
    cell = 0;
    [[unroll]] for (uint u = 0; u < 4; u++) {
        raw[u] = uvec4(0);
    }
    if (j < j_end) {
        cell = kv_cell(tables, table_offset, j, pc.block_size);
        uint kb = (cell * pc.row_stride + kvh * hd) / 8;
        [[unroll]] for (uint u = 0; u < 4; u++) {
            if (u < hd / 32) {
                raw[u] = kc.v[kb + c + 4 * u];
            }
        }
    }
}

void main() {
    uint kvh = gl_WorkGroupID.x;
    uint split = gl_WorkGroupID.y;
    uint t = gl_WorkGroupID.z;
    uint tid = gl_LocalInvocationID.x;
    uint len = U32s(pc.positions).v[t] + 1;
    if (len < pc.gqa_from) {
        return;
    }
    // The step's splits per token (the records' stride); this token's own, by its length: about
    // header word 2 of them, of whole tiles (plan.rs's gqa_split_len), few enough that merging
    // them is short, each long enough to stream.
    U32s header = U32s(pc.header);
    uint n_splits = header.v[0];
    uint per_split = header.v[2] * TILE;
    uint split_len = max(1u, (len + per_split - 1) / per_split) * TILE;
    uint hd = pc.head_dim;
    uint group = pc.n_heads / pc.n_kv_heads;
    uint j_begin = split * split_len;
    uint j_end = min(len, j_begin + split_len);
    uint table_offset = U32s(pc.table_offsets).v[t];
    U32s tables = U32s(pc.tables);

#ifndef TAGGED_IN
    // The group's queries, rounded to f16 as the CPU device (and ggml) does before meeting the
    // f16 cache.
    for (uint i = tid; i < group * hd; i += WG) {
        qs[i] = f16_rne(F32s(pc.q).v[t * pc.q_stride + kvh * group * hd + i]);
    }
#endif
    if (tid < MAX_GROUP) {
        m_run[tid] = -1.0 / 0.0;
        l_run[tid] = 0.0;
    }
    // K: position jj of the tile, vectors c, c + 4, ... of its row (hd / 32 of them).
    uint jj = tid / 4;
    uint c = tid % 4;
    uint k_vecs = hd / 32;
    U32x4s kc = U32x4s(pc.k_cache);
    // V: dimensions 2 * dp, 2 * dp + 1 of the positions of slice vg.
    uint dim_pairs = hd / 2;
    uint v_groups = WG / dim_pairs;
    uint dp = tid % dim_pairs;
    uint vg = tid / dim_pairs;
    uint slice = TILE / v_groups;
    uint vbase = kvh * hd / 2 + dp;
    U32s vc = U32s(pc.v_cache);
    // The pair of dimensions of position j's V row this invocation sums: the newest position's
    // from the tagged row in TAGGED_IN builds.
#ifdef TAGGED_IN
#define V_PAIR(j, cell) ((j) + 1 == len ? v_new[dp] : vc.v[(cell) * (pc.row_stride / 2) + vbase])
#else
#define V_PAIR(j, cell) vc.v[(cell) * (pc.row_stride / 2) + vbase]
#endif

    vec2 acc[MAX_GROUP];
    [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
        acc[g] = vec2(0.0);
    }
    // The next tile's K (its first four vectors a quarter: all of a head of up to 128), loaded
    // while the current tile's softmax and V sums run.
    uint next_cell;
    uvec4 next_k[4];
    load_k(kc, tables, table_offset, j_begin + jj, j_end, kvh, hd, c, next_cell, next_k);
#ifdef TAGGED_IN
    // While those loads fly (and QKV may still run): the group's queries and (in the split
    // holding it) the newest cell, polled from the tagged row.
    uint pairs = hd / 2;
    poll_tagged_qkv(tid, split_records_tag(header.v[3], pc.tag_salt), kvh * group * pairs, group * pairs, kvh, pairs, j_end == len);
#endif
    barrier();
    for (uint j0 = j_begin; j0 < j_end; j0 += TILE) {
        uint j = j0 + jj;
        bool valid = j < j_end;
        uint cell = next_cell;
        uvec4 k_first[4] = next_k;
        float dot[MAX_GROUP];
        [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
            dot[g] = 0.0;
        }
        if (valid) {
            if (c == 0) {
                cells[jj] = cell;
            }
            uint kb = (cell * pc.row_stride + kvh * hd) / 8;
            for (uint k0 = 0; k0 < k_vecs; k0 += 4) {
                uvec4 raw[4];
                [[unroll]] for (uint u = 0; u < 4; u++) {
                    raw[u] = k0 == 0 ? k_first[u] : k0 + u < k_vecs ? kc.v[kb + c + 4 * (k0 + u)] : uvec4(0);
#ifdef TAGGED_IN
                    // The newest position's from the tagged row (the cache's may be unwritten).
                    uint vec = c + 4 * (k0 + u);
                    if (j + 1 == len && k0 + u < k_vecs) {
                        raw[u] = uvec4(k_new[4 * vec], k_new[4 * vec + 1], k_new[4 * vec + 2], k_new[4 * vec + 3]);
                    }
#endif
                }
                [[unroll]] for (uint u = 0; u < 4; u++) {
                    if (k0 + u < k_vecs) {
                        uint qi = 8 * (c + 4 * (k0 + u));
                        vec2 k01 = unpackHalf2x16(raw[u].x);
                        vec2 k23 = unpackHalf2x16(raw[u].y);
                        vec2 k45 = unpackHalf2x16(raw[u].z);
                        vec2 k67 = unpackHalf2x16(raw[u].w);
                        [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
                            if (g < group) {
                                uint o = g * hd + qi;
                                dot[g] += qs[o] * k01.x + qs[o + 1] * k01.y + qs[o + 2] * k23.x + qs[o + 3] * k23.y;
                                dot[g] += qs[o + 4] * k45.x + qs[o + 5] * k45.y + qs[o + 6] * k67.x + qs[o + 7] * k67.y;
                            }
                        }
                    }
                }
            }
        }
        // The four quarters of a position are a quad of the subgroup: (c0 + c1) + (c2 + c3),
        // the same sum in all four.
        [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
            dot[g] += subgroupQuadSwapHorizontal(dot[g]);
            dot[g] += subgroupQuadSwapVertical(dot[g]);
        }
        if (c == 0) {
            [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
                if (g < group) {
                    sp[g][jj] = valid ? dot[g] * pc.scale : -1.0 / 0.0;
                }
            }
        }
        barrier();
        // This invocation's first V rows, loaded now (the tile's cells are known) so that they
        // arrive while the softmax runs.
        uint n_tile = min(TILE, j_end - j0);
        uint i_begin = vg * slice;
        uint i_end = min(n_tile, i_begin + slice);
        uint vpre[PRE];
        [[unroll]] for (uint u = 0; u < PRE; u++) {
            vpre[u] = i_begin + u < i_end ? V_PAIR(j0 + i_begin + u, cells[i_begin + u]) : 0u;
        }
        load_k(kc, tables, table_offset, j0 + TILE + jj, j_end, kvh, hd, c, next_cell, next_k);
        // The online softmax, a head per subgroup.
        for (uint g = gl_SubgroupID; g < group; g += gl_NumSubgroups) {
            float tile_max = -1.0 / 0.0;
            for (uint i = gl_SubgroupInvocationID; i < TILE; i += gl_SubgroupSize) {
                tile_max = max(tile_max, sp[g][i]);
            }
            tile_max = subgroupMax(tile_max);
            float m_old = m_run[g];
            float mx = max(m_old, tile_max);
            float sum = 0.0;
            for (uint i = gl_SubgroupInvocationID; i < TILE; i += gl_SubgroupSize) {
                float s = sp[g][i];
                float w = s == -1.0 / 0.0 ? 0.0 : ggml_expf(s - mx);
                sp[g][i] = w;
                sum += w;
            }
            sum = subgroupAdd(sum);
            if (subgroupElect()) {
                float f = exp(m_old - mx);
                factor[g] = f;
                l_run[g] = l_run[g] * f + sum;
                m_run[g] = mx;
            }
        }
        barrier();
        [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
            if (g < group) {
                acc[g] *= factor[g];
            }
        }
        [[unroll]] for (uint u = 0; u < PRE; u++) {
            if (i_begin + u < i_end) {
                vec2 v = unpackHalf2x16(vpre[u]);
                [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
                    if (g < group) {
                        acc[g] += sp[g][i_begin + u] * v;
                    }
                }
            }
        }
        // Slices longer than PRE (head dimensions above 128): the rest, in order.
        for (uint i0 = i_begin + PRE; i0 < i_end; i0 += PRE) {
            uint raw[PRE];
            [[unroll]] for (uint u = 0; u < PRE; u++) {
                raw[u] = i0 + u < i_end ? V_PAIR(j0 + i0 + u, cells[i0 + u]) : 0u;
            }
            [[unroll]] for (uint u = 0; u < PRE; u++) {
                if (i0 + u < i_end) {
                    vec2 v = unpackHalf2x16(raw[u]);
                    [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
                        if (g < group) {
                            acc[g] += sp[g][i0 + u] * v;
                        }
                    }
                }
            }
        }
        barrier();
    }
    [[unroll]] for (uint g = 0; g < MAX_GROUP; g++) {
        if (g < group) {
            v_sums[(vg * MAX_GROUP + g) * hd + 2 * dp] = acc[g].x;
            v_sums[(vg * MAX_GROUP + g) * hd + 2 * dp + 1] = acc[g].y;
        }
    }
    barrier();
    // Partial record of (token, query head, split): [max, sum, hd weighted values], the slices
    // summed in order.
#ifdef TAGGED_OUT
    // One 8-byte store a value: the value and the proof that it is this layer's arrive together.
    uint out_tag = split_records_tag(header.v[3], pc.tag_salt);
    U32x2s tout = U32x2s(pc.partial);
#else
    F32s out_ = F32s(pc.partial);
#endif
    for (uint i = tid; i < group * hd; i += WG) {
        uint g = i / hd;
        uint d = i % hd;
        float o = 0.0;
        for (uint s = 0; s < v_groups; s++) {
            o += v_sums[(s * MAX_GROUP + g) * hd + d];
        }
        uint base = ((t * pc.n_heads + kvh * group + g) * n_splits + split) * (hd + 2);
#ifdef TAGGED_OUT
        tout.v[base + 2 + d] = uvec2(floatBitsToUint(o), out_tag);
        if (d == 0) {
            tout.v[base] = uvec2(floatBitsToUint(m_run[g]), out_tag);
            tout.v[base + 1] = uvec2(floatBitsToUint(l_run[g]), out_tag);
        }
#else
        out_.v[base + 2 + d] = o;
        if (d == 0) {
            out_.v[base] = m_run[g];
            out_.v[base + 1] = l_run[g];
        }
#endif
    }
}
