#version 450
// Decode attention over a short context in one stage: one workgroup per (chunk of heads, token)
// walks the whole context, and quantizes the heads' merged outputs for the output projection.
// attention_decode.comp cuts a context into splits of 64 positions, one workgroup each, and a
// second dispatch (quantize_act.comp COMBINE) merges them: at a 7B's context of 512 that second
// stage, with the pipeline barrier before it, was ~5 of the attention's ~14 us a layer on the
// H200. Here the splits are the workgroup's own subgroups: each walks its own chunks of
// gl_SubgroupSize positions with its own online softmax and no barrier, and the subgroups' results
// meet once in shared memory.
//
// In a subgroup a chunk's positions are one a lane for K (each lane the whole dot product of its
// position's key with the query) and the head's dimensions DL a lane for V (each lane DL
// consecutive dimensions of every row of the chunk: the chunk's rows are read whole, a row per
// load across the subgroup). The V loads are issued before the chunk's softmax, whose reductions
// then run while they are in flight.
//
// Chunks of heads: `heads_per_wg` heads, whose outputs make whole blocks of the record's rounding
// (one head for Q8_0's blocks of 32; 256 / head_dim heads for Q8_K's 256), or (TICKET, Q8_K) one
// head a workgroup, the last of a block's heads to finish quantizing the block: a 7B's pairs of
// query heads are not always of one KV head, and a workgroup of two heads walks twice the rows.
// Tokens past `max_len` positions return at once (another kernel recorded beside this one takes
// them).
// DL (head_dim / subgroup size) is the build's; the host checks it.
#include "common.glsl"
#extension GL_KHR_shader_subgroup_quad : require

#define WG 512
#define MAX_HD 256
#define MAX_SUBGROUPS (WG / 4)
// Floats of the subgroups' weighted value sums (the host keeps subgroups * head_dim within it).
#define ACC_FLOATS 4096
#ifndef DL
#define DL 4
#endif
// Positions whose V words are in flight at once.
#define PU 32

layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t q;
    // The merged rows as f32 (`out_stride` floats a token) and as 8-bit records (`record_bytes`
    // a token, block metadata at `meta_offset`).
    uint64_t out_;
    uint64_t k_cache;
    uint64_t v_cache;
    uint64_t positions;
    uint64_t table_offsets;
    uint64_t tables;
    uint64_t records;
#ifdef TICKET
    // One counter per (token, block of 256 outputs), zero between uses.
    uint64_t counters;
#endif
    uint n_heads;
    uint n_kv_heads;
    uint head_dim;
    uint q_stride;
    uint row_stride;
    uint block_size;
    float scale;
    uint heads_per_wg;
    // Tokens attending over more positions than this are another kernel's.
    uint max_len;
    uint out_stride;
    uint meta_offset;
    uint record_bytes;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };
#if defined(ACT_Q8_K)
#define SEG 256
#else
#define SEG 32
#endif
#define QL_BLOCKS (WG * 8 / 32)
#include "quantize_lanes.glsl"

shared float qs[MAX_HD];
// Each subgroup's chunk: its positions' cells and softmax weights (lane i's at base + i).
shared uint wcell[WG];
shared float wp[WG];
// Each subgroup's running maximum and sum, and its weighted value sums.
shared float sm[MAX_SUBGROUPS];
shared float sl[MAX_SUBGROUPS];
shared float wacc[ACC_FLOATS];
shared float merged[256];
#ifdef TICKET
#if SEG != 256
#error "the ticket build is Q8_K's"
#endif
shared uint ticket;
#define OUT_F32S F32sC
#else
#define OUT_F32S F32s
#endif

void main() {
    uint t = gl_WorkGroupID.y;
    uint tid = gl_LocalInvocationID.x;
    uint len = U32s(pc.positions).v[t] + 1;
    if (len > pc.max_len) {
        return;
    }
    uint hd = pc.head_dim;
    uint hpw = pc.heads_per_wg;
    uint first_head = gl_WorkGroupID.x * hpw;
    uint S = gl_SubgroupSize;
    uint lane = gl_SubgroupInvocationID;
    uint sg = gl_SubgroupID;
    // Subgroups a head: as many as divide evenly, within the shared sums.
    uint per_head = min(gl_NumSubgroups / hpw, ACC_FLOATS / (hpw * hd));
    uint hh = sg / per_head;
    uint w = sg % per_head;
    uint h = first_head + hh;
    bool runs = hh < hpw && h < pc.n_heads;
    uint kvh = h / (pc.n_heads / pc.n_kv_heads);

    // The queries, rounded to f16 as the CPU device (and ggml) does before meeting the f16 cache.
    for (uint e = tid; e < hpw * hd; e += WG) {
        uint head = first_head + e / hd;
        qs[e] = head < pc.n_heads ? f16_rne(F32s(pc.q).v[t * pc.q_stride + head * hd + e % hd]) : 0.0;
    }
    barrier();

    uint table_offset = U32s(pc.table_offsets).v[t];
    U32s tables = U32s(pc.tables);
    U32x4s kc = U32x4s(pc.k_cache);
    U32s vc = U32s(pc.v_cache);
    uint n_vec = hd / 8;
    uint q0 = hh * hd;
    uint base = sg * S;
    uint vrow = kvh * hd / 2 + lane * (DL / 2);

    float m = -1.0 / 0.0;
    float l = 0.0;
    float acc[DL];
    [[unroll]] for (uint d = 0; d < DL; d++) {
        acc[d] = 0.0;
    }
    uint n_chunks = (len + S - 1) / S;
    for (uint c = w; runs && c < n_chunks; c += per_head) {
        uint j = c * S + lane;
        bool valid = j < len;
        uint cell = valid ? kv_cell(tables, table_offset, j, pc.block_size) : 0u;
        wcell[base + lane] = cell;
        // K: the lane's position whole, sixteen 16-byte loads in flight.
        float dot = 0.0;
        if (valid) {
            uint kb = (cell * pc.row_stride + kvh * hd) / 8;
            for (uint v0 = 0; v0 < n_vec; v0 += 16) {
                uvec4 raw[16];
                [[unroll]] for (uint u = 0; u < 16; u++) {
                    raw[u] = v0 + u < n_vec ? kc.v[kb + v0 + u] : uvec4(0);
                }
                [[unroll]] for (uint u = 0; u < 16; u++) {
                    if (v0 + u < n_vec) {
                        uint qi = q0 + 8 * (v0 + u);
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
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        uint n_chunk = min(S, len - c * S);
        // V: the first PU rows of the chunk in flight before the softmax.
        uint vraw[PU][DL / 2];
        [[unroll]] for (uint i = 0; i < PU; i++) {
            [[unroll]] for (uint k = 0; k < DL / 2; k++) {
                vraw[i][k] = i < n_chunk ? vc.v[wcell[base + i] * (pc.row_stride / 2) + vrow + k] : 0u;
            }
        }
        float s = valid ? dot * pc.scale : -1.0 / 0.0;
        float mx = max(m, subgroupMax(s));
        float factor = exp(m - mx);
        m = mx;
        float p = valid ? ggml_expf(s - mx) : 0.0;
        l = l * factor + subgroupAdd(p);
        wp[base + lane] = p;
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint d = 0; d < DL; d++) {
            acc[d] *= factor;
        }
        [[unroll]] for (uint i = 0; i < PU; i++) {
            if (i < n_chunk) {
                float pi = wp[base + i];
                [[unroll]] for (uint k = 0; k < DL / 2; k++) {
                    vec2 v = unpackHalf2x16(vraw[i][k]);
                    acc[2 * k] += pi * v.x;
                    acc[2 * k + 1] += pi * v.y;
                }
            }
        }
        // Subgroups wider than PU: the chunk's other rows, PU at a time.
        for (uint i0 = PU; i0 < n_chunk; i0 += PU) {
            [[unroll]] for (uint i = 0; i < PU; i++) {
                [[unroll]] for (uint k = 0; k < DL / 2; k++) {
                    vraw[i][k] = i0 + i < n_chunk ? vc.v[wcell[base + i0 + i] * (pc.row_stride / 2) + vrow + k] : 0u;
                }
            }
            [[unroll]] for (uint i = 0; i < PU; i++) {
                if (i0 + i < n_chunk) {
                    float pi = wp[base + i0 + i];
                    [[unroll]] for (uint k = 0; k < DL / 2; k++) {
                        vec2 v = unpackHalf2x16(vraw[i][k]);
                        acc[2 * k] += pi * v.x;
                        acc[2 * k + 1] += pi * v.y;
                    }
                }
            }
        }
        // (The next chunk rewrites this one's cells and weights.)
        subgroupBarrier();
    }
    if (runs && w * S < len) {
        if (lane == 0) {
            sm[sg] = m;
            sl[sg] = l;
        }
        [[unroll]] for (uint d = 0; d < DL; d++) {
            wacc[sg * hd + lane * DL + d] = acc[d];
        }
    }
    barrier();

    // The merge: output e of the chunk of heads, its head's subgroups summed in order (those
    // that had no position hold nothing and count for nothing).
    uint n_out = hpw * hd;
    if (tid < n_out) {
        uint ho = tid / hd;
        uint d = tid % hd;
        uint head = first_head + ho;
        float o = 0.0;
        if (head < pc.n_heads) {
            uint used = min(per_head, (len + S - 1) / S);
            uint sg0 = ho * per_head;
            float mx = -1.0 / 0.0;
            for (uint k = 0; k < used; k++) {
                mx = max(mx, sm[sg0 + k]);
            }
            float lsum = 0.0;
            for (uint k = 0; k < used; k++) {
                float f = exp(sm[sg0 + k] - mx);
                lsum += f * sl[sg0 + k];
                o += f * wacc[(sg0 + k) * hd + d];
            }
            o = o / lsum;
            OUT_F32S(pc.out_).v[t * pc.out_stride + head * hd + d] = o;
        }
        merged[tid] = o;
    }
    uint cols = pc.n_heads * hd;
    uint chunk_start = first_head * hd;
#ifdef TICKET
    // The block's last head to finish quantizes it, from what every head wrote.
    memoryBarrierBuffer();
    barrier();
    uint heads_per_block = 256 / hd;
    uint block = first_head / heads_per_block;
    uint counter = t * ((cols + 255) / 256) + block;
    if (tid == 0) {
        ticket = atomicAdd(U32sC(pc.counters).v[counter], 1u);
    }
    barrier();
    if (ticket + 1 != min(heads_per_block, pc.n_heads - block * heads_per_block)) {
        return;
    }
    memoryBarrierBuffer();
    chunk_start = block * 256;
    n_out = min(256u, cols - chunk_start);
    if (tid < 256) {
        merged[tid] = tid < n_out ? F32sC(pc.out_).v[t * pc.out_stride + chunk_start + tid] : 0.0;
    }
    if (tid == 0) {
        U32sC(pc.counters).v[counter] = 0;
    }
#endif
    barrier();
    // The quantization: slot k holds outputs 8k..8k+7 of the chunk (slots past it, zeros that
    // write nothing).
    uint slot = ql_slot();
    uint e0 = 8 * slot < n_out ? chunk_start + 8 * slot : cols;
    float vs[8];
    [[unroll]] for (uint k = 0; k < 8; k++) {
        vs[k] = 8 * slot < n_out ? merged[8 * slot + k] : 0.0;
    }
    ql_quantize(vs, slot, e0, cols, pc.records + uint64_t(t) * pc.record_bytes, pc.meta_offset);
}
