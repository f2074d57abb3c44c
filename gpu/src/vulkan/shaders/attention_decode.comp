#version 450
// Attention for decode-sized steps (a few tokens, one query each): one workgroup per (query head,
// split of the context, token), so a single decoded token spreads over n_heads * n_splits
// workgroups instead of attention.comp's n_kv_heads * n_splits (the GPU sat mostly idle: 32
// workgroups per layer for a 7B shape at context 512, each walking seven heads in turn). The
// query heads of a KV head read the same K/V rows; the second and later reads hit the cache.
//
// Per tile of 64 positions: two invocations per position take one half of the K row each (eight
// 16-byte loads in flight), the scores go through an online softmax, and the weighted V rows are
// summed by invocations that own two dimensions and a slice of the tile (the slice's first rows
// loaded before the softmax, whose latency then hides theirs). The partial result
// (max, sum, weighted values) has attention.comp's layout; attention_combine.comp merges splits.
// Nothing depends on the step's other tokens: a token's result is the same in any decode batch.
#include "common.glsl"

#define WG 128
#define TILE 64
#define MAX_HD 256
#define MAX_SUBGROUPS 128
// V rows of an invocation's slice loaded before the tile's softmax.
#ifndef PRE
#define PRE 32
#endif

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
#ifdef FUSED_COMBINE
    // The merged row's 8-bit records (one per token, record_bytes apart) and one counter per
    // (token, chunk of 256 outputs), zero between uses.
    uint64_t records;
    uint64_t counters;
#endif
    uint n_heads;
    uint n_kv_heads;
    uint head_dim;
    uint q_stride;
    uint row_stride;
    uint block_size;
    float scale;
#ifdef FUSED_COMBINE
    uint meta_offset;
    uint record_bytes;
#endif
    // Tokens of at least this many positions are attention_decode_gqa.comp's: none here.
    uint gqa_from;
#ifdef TAGGED_OUT
    // The partial records written as (bits, tag) pairs instead (twice the words, in `partial`),
    // for the merge recorded right after this dispatch without a pipeline barrier
    // (quantize_act.comp COMBINE + TAGGED_IN). The tag is the step's (header word 3) times 256
    // plus this, the layer's salt: the records are rewritten by every layer of a step.
    uint tag_salt;
#endif
#ifdef TAGGED_IN
    // This layer's q and the new cell's K and V as the QKV products wrote them (matvec_q.comp
    // QKV_ROPE + TAGGED_OUT), recorded right before this dispatch without a pipeline barrier:
    // (bits, tag) per element, q (f32) of every query head, then K and V (f16 bits) of every
    // KV head, tagged as the split records are. And the word that counts waits that gave up.
    uint64_t tagged_qkv;
    uint64_t give_ups;
#endif
} pc;
#if defined(TAGGED_OUT) && defined(FUSED_COMBINE)
#error "the tagged records are the split kernel's, merged by a dispatch of its own"
#endif
#if defined(TAGGED_IN) && !defined(TAGGED_OUT)
#error "the tagged inputs' build tags its records too (the merge after it waits on them)"
#endif

#ifdef FUSED_COMBINE
// The merge of the splits and the quantization for the output projection, by the last
// workgroup to finish a chunk of 256 outputs (heads of a width dividing 256): one dispatch
// instead of attention, barrier, combine. quantize_act.comp (COMBINE) computes the same bits.
#define MERGE_BUF F32sC
#include "attention_merge.glsl"
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };
#if defined(ACT_Q8_K)
#define SEG 256
#else
#define SEG 32
#endif
#define QL_BLOCKS (WG * 8 / 32)
#include "quantize_lanes.glsl"
shared uint ticket;
shared float merged[256];
#define PARTIAL_BUF F32sC
#else
#define PARTIAL_BUF F32s
#endif
#ifdef TAGGED_OUT
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };
#endif
shared float qs[MAX_HD];
#ifdef TAGGED_IN
#include "attention_tagged_qkv.glsl"
#endif
shared float half_dot[WG];
shared float p[TILE];
shared uint cells[TILE];
shared float red[MAX_SUBGROUPS];
shared float v_sums[2 * WG];

void main() {
    uint h = gl_WorkGroupID.x;
    uint split = gl_WorkGroupID.y;
    uint t = gl_WorkGroupID.z;
    uint tid = gl_LocalInvocationID.x;
    U32s header = U32s(pc.header);
    uint n_splits = header.v[0];
    uint split_len = header.v[1];
    uint hd = pc.head_dim;
    uint kvh = h / (pc.n_heads / pc.n_kv_heads);
    uint len = U32s(pc.positions).v[t] + 1;
#ifndef FUSED_COMBINE
    // (The fused build's tickets count every workgroup: the host passes no such tokens to it.)
    if (len >= pc.gqa_from) {
        return;
    }
#endif
    uint j_begin = split * split_len;
    uint j_end = min(len, j_begin + split_len);
    uint table_offset = U32s(pc.table_offsets).v[t];
    U32s tables = U32s(pc.tables);

    // K: invocation tid takes position tid % TILE of the tile and half tid / TILE of its row
    // (row vectors of 8 halves: the first ceil(n/2) vectors, or the rest).
    uint jj = tid % TILE;
    uint k_half = tid / TILE;
    uint n_vec = hd / 8;
    uint vec_begin = k_half == 0 ? 0 : (n_vec + 1) / 2;
    uint vec_end = k_half == 0 ? (n_vec + 1) / 2 : n_vec;
    // V: invocation tid owns dimensions 2 * dp, 2 * dp + 1 for slice vg of the tile.
    uint dim_pairs = hd / 2;
    uint v_groups = WG / dim_pairs;
    uint dp = tid % dim_pairs;
    uint vg = tid / dim_pairs;
    uint slice = (TILE + v_groups - 1) / v_groups;
    U32s vc = U32s(pc.v_cache);
    U32x4s kc = U32x4s(pc.k_cache);
#ifdef TAGGED_IN
    // While QKV may still run: the first tile's past K and V rows (this invocation's position
    // and half row, a word a 32-byte sector) brought towards the caches, then the query and
    // (in the split holding it) the newest cell polled from the tagged row. The touched words
    // are kept by a store that never happens.
    uint touched = 0u;
    {
        uint j = j_begin + jj;
        if (j + 1 < len && j < j_end) {
            uint cell = kv_cell(tables, table_offset, j, pc.block_size);
            uint kw = (cell * pc.row_stride + kvh * hd) / 2;
            for (uint v = vec_begin; v < vec_end; v += 2) {
                touched ^= U32s(pc.k_cache).v[kw + 4 * v] ^ vc.v[kw + 4 * v];
            }
        }
    }
    uint pairs = hd / 2;
    poll_tagged_qkv(tid, split_records_tag(header.v[3], pc.tag_salt), h * pairs, pairs, kvh, pairs, j_end == len);
    if (touched == 0x9E3779B9u && hd == 0u) {
        qs[0] = uintBitsToFloat(touched);
    }
#else
    // The query, rounded to f16 as the CPU device (and ggml) does before meeting the f16 cache.
    for (uint d = tid; d < hd; d += WG) {
        qs[d] = f16_rne(F32s(pc.q).v[t * pc.q_stride + h * hd + d]);
    }
#endif

    // Vector v of position j's K row and the pair of dimensions of position j's V row this
    // invocation sums: the newest position's from the tagged row in TAGGED_IN builds.
#ifdef TAGGED_IN
#define K_VEC(j, kb, vec) ((j) + 1 == len ? uvec4(k_new[4 * (vec)], k_new[4 * (vec) + 1], k_new[4 * (vec) + 2], k_new[4 * (vec) + 3]) : kc.v[(kb) + (vec)])
#define V_PAIR(j, cell) ((j) + 1 == len ? v_new[dp] : vc.v[(cell) * (pc.row_stride / 2) + vbase])
#else
#define K_VEC(j, kb, vec) kc.v[(kb) + (vec)]
#define V_PAIR(j, cell) vc.v[(cell) * (pc.row_stride / 2) + vbase]
#endif
    float m = -1.0 / 0.0;
    float l = 0.0;
    vec2 acc = vec2(0.0);
    barrier();
    for (uint j0 = j_begin; j0 < j_end; j0 += TILE) {
        uint j = j0 + jj;
        bool valid = j < j_end;
        uint n_tile = min(TILE, j_end - j0);
        uint i_begin = vg * slice;
        uint i_end = min(n_tile, i_begin + slice);
        uint vbase = kvh * hd / 2 + dp;
#if PRE > 0 && defined(ATTN_V_EARLY)
        // (An experiment, STRATA_SHADER_DEFINES=ATTN_V_EARLY at build time: the slice's V rows
        // loaded beside the K rows, each lane looking its cells up itself, so that the V loads
        // are not one more dependent memory trip after the scores' barrier. Same arithmetic.
        // With blocks of 16 cells or more a slice of PRE <= 32 positions spans at most three
        // blocks: their table entries are read at once and each cell picked by two compares
        // (a division by the block size per position cost the H100 3.6% a token, session 53).)
        uint vpre[PRE];
        uint bs = pc.block_size;
        if (bs >= 16u && PRE <= 32 && i_end > i_begin) {
            uint jv = j0 + i_begin;
            uint blk0 = jv / bs;
            uint r0 = jv % bs;
            uint last = (j0 + i_end - 1u) / bs;
            uint e0 = tables.v[table_offset + blk0] * bs;
            uint e1 = last >= blk0 + 1u ? tables.v[table_offset + blk0 + 1u] * bs : 0u;
            uint e2 = last >= blk0 + 2u ? tables.v[table_offset + blk0 + 2u] * bs : 0u;
            [[unroll]] for (uint u = 0; u < PRE; u++) {
                uint i = i_begin + u;
                uint r = r0 + u;
                uint cell = r < bs ? e0 + r : (r < 2u * bs ? e1 + (r - bs) : e2 + (r - 2u * bs));
                vpre[u] = vg < v_groups && i < i_end ? V_PAIR(j0 + i, cell) : 0u;
            }
        } else {
            [[unroll]] for (uint u = 0; u < PRE; u++) {
                uint i = i_begin + u;
                vpre[u] = vg < v_groups && i < i_end ? V_PAIR(j0 + i, kv_cell(tables, table_offset, j0 + i, pc.block_size)) : 0u;
            }
        }
#endif
        float dot = 0.0;
        if (valid) {
            uint cell = kv_cell(tables, table_offset, j, pc.block_size);
            if (k_half == 0) {
                cells[jj] = cell;
            }
            uint kb = (cell * pc.row_stride + kvh * hd) / 8;
            for (uint v0 = vec_begin; v0 < vec_end; v0 += 8) {
                uvec4 raw[8];
                [[unroll]] for (uint u = 0; u < 8; u++) {
                    raw[u] = v0 + u < vec_end ? K_VEC(j, kb, v0 + u) : uvec4(0);
                }
                [[unroll]] for (uint u = 0; u < 8; u++) {
                    if (v0 + u < vec_end) {
                        uint qi = 8 * (v0 + u);
                        vec2 k01 = unpackHalf2x16(raw[u].x);
                        vec2 k23 = unpackHalf2x16(raw[u].y);
                        vec2 k45 = unpackHalf2x16(raw[u].z);
                        vec2 k67 = unpackHalf2x16(raw[u].w);
                        dot += qs[qi] * k01.x + qs[qi + 1] * k01.y + qs[qi + 2] * k23.x + qs[qi + 3] * k23.y;
                        dot += qs[qi + 4] * k45.x + qs[qi + 5] * k45.y + qs[qi + 6] * k67.x + qs[qi + 7] * k67.y;
                    }
                }
            }
        }
        half_dot[tid] = dot;
        barrier();
        // The first PRE rows of this invocation's V slice, loaded now (the tile's cells are
        // known) so that they arrive while the softmax runs instead of after it.
#if PRE > 0 && !defined(ATTN_V_EARLY)
        uint vpre[PRE];
        [[unroll]] for (uint u = 0; u < PRE; u++) {
            vpre[u] = vg < v_groups && i_begin + u < i_end ? V_PAIR(j0 + i_begin + u, cells[i_begin + u]) : 0u;
        }
#endif
        float s = (tid < TILE && valid) ? (half_dot[tid] + half_dot[tid + TILE]) * pc.scale : -1.0 / 0.0;
        // The tile's maximum: subgroup maxima, then across subgroups.
        float sm = subgroupMax(s);
        if (subgroupElect()) {
            red[gl_SubgroupID] = sm;
        }
        barrier();
        float mx = m;
        for (uint k = 0; k < gl_NumSubgroups; k++) {
            mx = max(mx, red[k]);
        }
        float factor = exp(m - mx);
        m = mx;
        float pj = (tid < TILE && valid) ? ggml_expf(s - mx) : 0.0;
        barrier();
        float ps = subgroupAdd(pj);
        if (subgroupElect()) {
            red[gl_SubgroupID] = ps;
        }
        if (tid < TILE) {
            p[tid] = pj;
        }
        barrier();
        float sum = 0.0;
        for (uint k = 0; k < gl_NumSubgroups; k++) {
            sum += red[k];
        }
        l = l * factor + sum;
        acc *= factor;
        if (vg < v_groups) {
#if PRE > 0
            [[unroll]] for (uint u = 0; u < PRE; u++) {
                if (i_begin + u < i_end) {
                    acc += p[i_begin + u] * unpackHalf2x16(vpre[u]);
                }
            }
#endif
            // The rest: sixteen V loads in flight, then the sums in position order.
            for (uint i0 = i_begin + PRE; i0 < i_end; i0 += 16) {
                uint raw[16];
                [[unroll]] for (uint u = 0; u < 16; u++) {
                    raw[u] = i0 + u < i_end ? V_PAIR(j0 + i0 + u, cells[i0 + u]) : 0u;
                }
                [[unroll]] for (uint u = 0; u < 16; u++) {
                    if (i0 + u < i_end) {
                        acc += p[i0 + u] * unpackHalf2x16(raw[u]);
                    }
                }
            }
        }
        barrier();
    }
    if (vg < v_groups) {
        v_sums[vg * hd + 2 * dp] = acc.x;
        v_sums[vg * hd + 2 * dp + 1] = acc.y;
    }
    barrier();
    // Partial record of (token, head, split): [max, sum, hd weighted values], the slices summed
    // in order.
    PARTIAL_BUF out_ = PARTIAL_BUF(pc.partial);
    uint base = ((t * pc.n_heads + h) * n_splits + split) * (hd + 2);
#ifdef TAGGED_OUT
    // One 8-byte store a value: the value and the proof that it is this layer's arrive together.
    uint out_tag = split_records_tag(header.v[3], pc.tag_salt);
    U32x2s tout = U32x2s(pc.partial);
    if (tid == 0) {
        tout.v[base] = uvec2(floatBitsToUint(m), out_tag);
        tout.v[base + 1] = uvec2(floatBitsToUint(l), out_tag);
    }
#else
    if (tid == 0) {
        out_.v[base] = m;
        out_.v[base + 1] = l;
    }
#endif
    for (uint d = tid; d < hd; d += WG) {
        float o = 0.0;
        for (uint g = 0; g < v_groups; g++) {
            o += v_sums[g * hd + d];
        }
#ifdef TAGGED_OUT
        tout.v[base + 2 + d] = uvec2(floatBitsToUint(o), out_tag);
#else
        out_.v[base + 2 + d] = o;
#endif
    }
#ifdef FUSED_COMBINE
    memoryBarrierBuffer();
    barrier();
    uint cols = pc.n_heads * hd;
    uint heads_per_chunk = 256 / hd;
    uint chunk = h / heads_per_chunk;
    uint chunks = (cols + 255) / 256;
    uint counter = t * chunks + chunk;
    if (tid == 0) {
        ticket = atomicAdd(U32sC(pc.counters).v[counter], 1u);
    }
    barrier();
    if (ticket + 1 != min(heads_per_chunk, pc.n_heads - chunk * heads_per_chunk) * n_splits) {
        return;
    }
    // The chunk's last workgroup: every split of its heads is written.
    memoryBarrierBuffer();
    // Each invocation merges two of the chunk's 256 outputs (a merge walks every split), then
    // the first 32 slots take eight each (the others hold zeros and write nothing).
    [[unroll]] for (uint k = 0; k < 2; k++) {
        uint e = chunk * 256 + tid + WG * k;
        float m = 0.0;
        if (e < cols) {
            uint rec = (t * pc.n_heads + e / hd) * n_splits * (hd + 2);
            m = merge_splits(F32sC(pc.partial), rec, n_splits, hd, e % hd);
        }
        merged[tid + WG * k] = m;
    }
    barrier();
    uint slot = ql_slot();
    uint e0 = slot < 32 ? chunk * 256 + 8 * slot : cols;
    float vs[8];
    [[unroll]] for (uint k = 0; k < 8; k++) {
        vs[k] = slot < 32 ? merged[8 * slot + k] : 0.0;
    }
    ql_quantize(vs, slot, e0, cols, pc.records + uint64_t(t) * pc.record_bytes, pc.meta_offset);
    if (tid == 0) {
        U32sC(pc.counters).v[counter] = 0;
    }
#endif
}
