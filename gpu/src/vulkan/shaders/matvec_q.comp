#version 450
// out[t][row] = dot(W[row], x[t]) (+ bias[row]) for up to NT tokens, with the activations as 8-bit
// quants (quantize_act.comp, INT_OUT) and the weights' integer quants multiplied by integer dot
// products (four 8-bit products and their sum in one instruction), as the CPU device does: each
// 32-element block's integer sum is exact, then scaled in f32.
//
// A workgroup of 128 invocations holds GROUPS groups of TPR = 128 / GROUPS lanes; each group owns
// ROWS rows (a "unit"), and lane i takes items (32-element blocks) i, i + TPR, ... of them: a row
// is read by many lanes at once; one-token builds load an item's activations once for all the
// unit's rows, batched builds (NT > 1) each row's weights once for all the tokens. The partial sums are added within each subgroup and then across the group's subgroups
// in a fixed order. The arithmetic of a (row, token) depends on TPR only, not on NT or ROWS: a
// token's result is the same whatever else is in its decode batch, and every variant below
// (plain, QKV_ROPE, SWIGLU_PAIR) computes the same bits for a row as long as all are built with
// the same GROUPS (the host builds them alike). (Two items' loads in flight per lane were
// slower on the H200: 45 -> 71 registers, 7B Q4_K decode 356 -> 329 t/s.)
#include "common.glsl"
#extension GL_EXT_spirv_intrinsics : require

// OpSDotKHR with the 4x8-bit packed format: the sum of the four signed 8-bit products.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int dot4_i8(uint a, uint b, spirv_literal int packed_vector_format);
#define DOT4(a, b) dot4_i8((a), (b), 0)

#ifndef NT
#define NT 1
#endif
#ifndef ROWS
#define ROWS 2
#endif
#ifndef GROUPS
#define GROUPS 1
#endif
#define WG 128
#define TPR (WG / GROUPS)

layout(local_size_x = WG) in;

#if defined(QKV_ROPE)
// One of a layer's Q, K and V projections for one decoding token, with RoPE and the K/V store in
// its epilogue (rope_store.comp's arithmetic): a workgroup owns the two rows a rotation pairs, so
// the projection, the rotation and the store take one dispatch and no barrier between them.
layout(push_constant) uniform Push {
    uint64_t w;
    uint64_t aux;
    uint64_t x;
    // Q: the f32 query rows; K and V: the layer's cache.
    uint64_t out_;
    uint64_t bias;
    uint64_t table;
    uint64_t positions;
    // The step header (TAGGED_OUT builds read the step's tag, word 3, from it).
    uint64_t header;
    // Per token: where its sequence's block table starts in `tables` (resolved by the host, so
    // a cell is two dependent reads away, not three).
    uint64_t table_offsets;
    uint64_t tables;
#if defined(NORM_PROLOGUE)
    uint64_t norm_w;
#endif
#if defined(NORM_SCALE)
    uint64_t norm_partials;
#endif
    uint cols;
    uint meta_offset;
    // Bits 0-7: 0 Q, 1 K, 2 V (stored, not rotated). TAGGED_OUT builds: bits 8 and up hold the
    // layer's tag salt (QKV_TAG_SALT).
    uint mode;
    uint head_dim;
    uint half_dims;
    uint neox;
    uint row_stride;
    uint block_size;
    // Rotation pairs (rows / 2) in all.
    uint units;
#if defined(NORM_PROLOGUE)
    float eps;
#endif
#if defined(CHAINED)
    uint chain_expect;
    uint64_t chain;
#endif
#if defined(TAGGED_OUT)
    // This projection's outputs again as (bits, tag) pairs (q as f32, K and V as f16 bits), for
    // the attention split kernels recorded right after QKV without a pipeline barrier
    // (attention_decode.comp TAGGED_IN): where this projection's part of the layer's tagged
    // row starts. The tag is the split records' (common.glsl split_records_tag): every layer
    // rewrites the row.
    uint64_t tagged;
#endif
} pc;
#define QKV_TAG_SALT (pc.mode >> 8)
#elif defined(SWIGLU_PAIR)
// The gate and up projections of one decoding token with SwiGLU and the quantization for the
// down projection in the epilogue: a workgroup owns row i of gate and row i of up and writes
// silu(gate_i) * up_i; the last workgroup to finish a chunk of 256 outputs (its ticket from an
// atomic counter) quantizes the chunk (quantize_lanes.glsl, as quantize_act.comp SWIGLU does).
layout(push_constant) uniform Push {
    uint64_t w;
    uint64_t aux;
    uint64_t w2;
    uint64_t aux2;
    uint64_t x;
    // The f32 SwiGLU row, its 8-bit record, and one counter per chunk of 256 outputs (zero
    // between uses: the last workgroup resets its chunk's).
    uint64_t act;
    uint64_t records;
    uint64_t counters;
#if defined(NORM_PROLOGUE)
    uint64_t norm_w;
#endif
#if defined(NORM_SCALE)
    uint64_t norm_partials;
#endif
    uint cols;
    uint meta_offset;
    uint rows;
    uint out_meta_offset;
#if defined(NORM_PROLOGUE)
    float eps;
#endif
#if defined(CHAINED)
    uint chain_expect;
    uint64_t chain;
#endif
#if defined(TAGGED_OUT)
    // The SwiGLU row again as (bits, the step's tag) per output, for the quantization recorded
    // right after this product without a pipeline barrier (quantize_act.comp TAGGED_IN), and
    // the step header whose word 3 holds the tag.
    uint64_t tagged;
    uint64_t tag_header;
#endif
} pc;
#else
layout(push_constant) uniform Push {
    uint64_t w;
    uint64_t aux;
    uint64_t x;
    uint64_t out_;
    uint64_t bias;
#if defined(NORM_SCALE)
    // The partials of the RMSNorm before (NORM_SCALE below), each token's row of them.
    uint64_t norm_partials;
#endif
#if defined(NORM_EPILOGUE)
    // The RMSNorm after the residual add (NORM_EPILOGUE below): its weight, where its 8-bit
    // records go, one ticket counter per chunk of 256 rows (zero between uses), and the norm's
    // partials: (eps, then each chunk's sum of squares).
    uint64_t norm_w;
    uint64_t records;
    uint64_t counters;
    uint64_t norm_partials;
#endif
    uint rows;
    uint cols;
    uint n_tokens;
    // Bytes between two tokens' activation records, and where a record's block metadata starts.
    uint x_stride;
    uint out_stride;
    uint meta_offset;
    // Nonzero: add the product into `out_` (the residual stream) instead of writing it.
    uint accumulate;
#if defined(NORM_EPILOGUE)
    uint records_meta_offset;
    float eps;
#endif
#if defined(CHAINED)
    uint chain_expect;
    uint64_t chain;
#endif
#if defined(TAGGED_OUT)
    // Each output again as (its bits, the step's tag), for the RMSNorm recorded right after
    // this product without a pipeline barrier (rms_norm_q.comp TAGGED_IN), and the step header
    // whose word 3 holds the tag.
    uint64_t tagged;
    uint64_t tag_header;
#endif
} pc;
#endif
#if defined(TAGGED_OUT) && (defined(NORM_EPILOGUE) || defined(NORM_PROLOGUE) || (defined(NORM_SCALE) && !defined(SWIGLU_PAIR)) || defined(CHAINED) || defined(PERSISTENT) || (defined(SWIGLU_PAIR) && !defined(NO_TICKET)) || NT != 1)
#error "tagged outputs are built for the plain one-token products, QKV and the f32 SwiGLU pair (scaled or not)"
#endif

layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };

#if defined(NORM_PROLOGUE)
// The RMSNorm before the product in the product's own workgroups: each one normalizes the
// residual row (`x` in the push constants) and quantizes it into shared memory as the record
// rms_norm_q.comp would write (the same quantizer; the sum of squares in another order), then
// takes units in turn (a few resident workgroups walk all of them: PERSISTENT), so the norm costs
// each workgroup one read of the row instead of a stage of its own. One decoding token.
#if !defined(QKV_ROPE) && !defined(SWIGLU_PAIR)
#error "the norm prologue is built for the fused QKV and gate/up products"
#endif
#define PERSISTENT
#define NP_MAX_COLS 8192
// Word k (quants 4k..4k+3) of item i at np_words[k * NP_ITEMS + i]: a lane reads its item's
// words while its neighbours read theirs from the next banks (the record's own layout, an item's
// 32 bytes together, put eight lanes on one bank).
#define NP_ITEMS (NP_MAX_COLS / 32)
shared uint np_words[8 * NP_ITEMS];
shared uvec2 np_meta[NP_ITEMS];
shared float np_red[WG];
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };
#endif

// (Lane i of a unit takes items i, i + TPR, ...: matvec_q_items.glsl's Q4K_HEAD_SHUFFLE relies on it.)
#define ITEM_LANES_ALIGNED
#if defined(Q4K_HEAD_SHUFFLE)
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "matvec_q_items.glsl"

#if defined(SWIGLU_PAIR)
// PAIRS output rows a unit (ROWS = 2 * PAIRS): rows r = 2p, 2p + 1 are gate and up of output row
// unit * PAIRS + p, so the unit's lanes read each activation item once for PAIRS outputs.
#ifndef PAIRS
#define PAIRS 1
#endif
#if ROWS != 2 * PAIRS
#error "a SwiGLU unit holds a gate and an up row per output"
#endif
#if PAIRS > 1 && !defined(NO_TICKET)
#error "the ticket epilogue takes one output a unit"
#endif
#define W_OF(r) ((r) % 2 == 0 ? pc.w : pc.w2)
#define AUX_OF(r) ((r) % 2 == 0 ? pc.aux : pc.aux2)
#if defined(ACT_Q8_K)
#define SEG 256
#else
#define SEG 32
#endif
#define QL_BLOCKS (WG * 8 / 32)
#include "quantize_lanes.glsl"
#else
#define W_OF(r) pc.w
#define AUX_OF(r) pc.aux
#if defined(NORM_PROLOGUE) || defined(NORM_EPILOGUE)
#if defined(ACT_Q8_K)
#define SEG 256
#else
#define SEG 32
#endif
#define QL_BLOCKS (WG * 8 / 32)
#include "quantize_lanes.glsl"
#endif
#if defined(NORM_EPILOGUE)
#if NT != 1 || defined(QKV_ROPE)
#error "the norm epilogue is built for the plain one-token product"
#endif
shared float ne_squares[32];
#endif
#endif

#if (defined(SWIGLU_PAIR) && !defined(NO_TICKET)) || defined(NORM_EPILOGUE)
shared uint chunk_ticket;
// The ticket epilogues' count (every invocation calls it, after its own writes and their
// fence): adds the workgroup's `valid` outputs to its chunk's counter and returns whether they
// completed the chunk of 256 (of fewer at the end of `rows`); the chunk's other outputs are
// then written, and this workgroup is the one to reset the counter.
bool completes_chunk(uint chunk, uint valid, uint rows, uint64_t counters) {
    barrier();
    if (gl_LocalInvocationID.x == 0) {
        chunk_ticket = atomicAdd(U32sC(counters).v[chunk], valid);
    }
    barrier();
    bool last = chunk_ticket + valid == min(256u, rows - chunk * 256);
    if (last) {
        memoryBarrierBuffer();
    }
    return last;
}
#endif

#if defined(NORM_PROLOGUE)
void norm_prologue() {
    uint n_words = pc.cols / 4;
    Vec4s x = Vec4s(pc.x);
    Vec4s w = Vec4s(pc.norm_w);
    float s = 0.0;
    for (uint word = gl_LocalInvocationID.x; word < n_words; word += WG) {
        vec4 v = x.v[word];
        s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    s = subgroupAdd(s);
    if (subgroupElect()) {
        np_red[gl_SubgroupID] = s;
    }
    barrier();
    float total = 0.0;
    for (uint k = 0; k < gl_NumSubgroups; k++) {
        total += np_red[k];
    }
    float mean = total / float(pc.cols);
    precise float m_eps = mean + pc.eps;
    float scale = div_rn(1.0, sqrt_rn(m_eps));
    uint slot = ql_slot();
    // Runs of eight elements an invocation, WG * 8 elements a pass (rows are whole blocks).
    for (uint base = 0; base < pc.cols; base += WG * 8) {
        uint e0 = base + 8 * slot;
        float v[QL_E];
        [[unroll]] for (uint h = 0; h < 2; h++) {
            uint word = e0 / 4 + h;
            vec4 xv = e0 < pc.cols ? x.v[word] : vec4(0.0);
            vec4 wv = e0 < pc.cols ? w.v[word] : vec4(0.0);
            precise vec4 scaled = xv * scale;
            precise vec4 weighted = scaled * wv;
            [[unroll]] for (uint e = 0; e < 4; e++) {
                v[4 * h + e] = weighted[e];
            }
        }
        vec2 block = ql_block_max(v, slot);
#if SEG == 256
        barrier();
#endif
        uvec2 packed;
        uvec2 meta;
        ql_encode(v, block, slot, packed, meta);
        if (e0 < pc.cols) {
            uint k = (e0 % 32) / 4;
            np_words[k * NP_ITEMS + e0 / 32] = packed.x;
            np_words[(k + 1) * NP_ITEMS + e0 / 32] = packed.y;
            if ((gl_SubgroupInvocationID & 3u) == 0u) {
                np_meta[e0 / 32] = meta;
            }
        }
#if SEG == 256
        // ql_block is the next pass's.
        barrier();
#endif
    }
    barrier();
}
#endif

#define PC(name) pc.name

// The step's tag (the step header's word 3), which the tagged outputs carry. TAG_AT_STORE
// builds read it where each output is stored, so that no register holds it through the
// product; the others (build.rs passes TAG_EARLY) read it first, so that its latency hides
// behind the product's. Which is faster depends on the type's registers (build.rs).
#if defined(TAGGED_OUT) && defined(QKV_ROPE)
// (QKV's single lane a unit that stores reads the layer's tag at the store.)
#define STEP_TAG split_records_tag(U32s(pc.header).v[3], QKV_TAG_SALT)
#elif defined(TAGGED_OUT) && defined(TAG_AT_STORE)
#define STEP_TAG (U32s(pc.tag_header).v[3])
#elif defined(TAGGED_OUT)
uint step_tag;
#define STEP_TAG step_tag
#endif

#if defined(NORM_SCALE)
// The RMSNorm scale 1 / sqrt(mean(x^2) + eps) of each token's row that this product's records
// hold: the norm before it (quantize_act.comp NORM_W, or a NORM_EPILOGUE product) quantized
// x * weight, which the scale does not change but for rounding, and left eps and each chunk's
// sum of squares, a row of them a token; the outputs are multiplied by the scale instead. The
// lane's share of the sums is loaded before the product (norm_sums_load) and added after it
// (norm_scale_of), so that the load's latency hides behind the weights'; every subgroup adds
// the chunks in the same order, whatever the build (the fused one-token products and the
// batched plain one give a token the same scale).
#if defined(NORM_EPILOGUE) || (defined(TAGGED_OUT) && !defined(SWIGLU_PAIR)) || defined(CHAINED) || defined(PERSISTENT)
#error "the scaled builds are the fused QKV and gate/up products and the plain batched one"
#endif
// (The lane's share of token `token`'s chunk sums, and eps. The first load is not added inside
// a loop: an add there made every workgroup wait for it before its product's first loads,
// 0.6-0.9 us of a 4-8 us workgroup on an H100; a row of up to 256 elements a lane takes no
// further one.)
vec2 norm_sums_load(uint token) {
    uint n_chunks = (pc.cols + 255) / 256;
    F32s p = F32s(pc.norm_partials + uint64_t(token * (1 + n_chunks)) * 4);
    uint i = gl_SubgroupInvocationID;
    float s = i < n_chunks ? p.v[1 + i] : 0.0;
    for (i += gl_SubgroupSize; i < n_chunks; i += gl_SubgroupSize) {
        s += p.v[1 + i];
    }
    return vec2(s, p.v[0]);
}

// An output times the scale, rounded once and never fused with what follows (the bias), so that
// the fused one-token products and the batched one compute the same bits. (A function: a
// `precise` in the caller would also forbid contraction back through the product's loop, 1.8%
// of 7B Q4_K decode on an H100.)
float norm_scaled(float s, float scale) {
    precise float r = s * scale;
    return r;
}

float norm_scale_of(vec2 lane_sums) {
    float s = subgroupAdd(lane_sums.x);
    float mean = s / float(pc.cols);
    precise float m_eps = mean + lane_sums.y;
    return div_rn(1.0, sqrt_rn(m_eps));
}
#endif

#define UNITS_FN units_of
#define UNITS_PARTIALS partials
#include "matvec_q_units.glsl"

#if defined(CHAINED)
#if defined(NORM_PROLOGUE) || defined(PERSISTENT) || NT != 1
#error "chained builds are the one-token staged kernels"
#endif
#define CHAIN_PC(name) pc.name
#include "chain.glsl"

// Loads this invocation's first weight item of each of its unit's rows (as the loop below will)
// while the workgroup waits for the stage before: weights do not depend on it, and the loop then
// finds them in the caches. Returns a value of them to keep the loads.
uint chain_prefetch(uint wg) {
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % TPR;
    uint unit = wg * GROUPS + tid / TPR;
    if (lane >= pc.cols / 32) {
        return 0u;
    }
#if defined(QKV_ROPE)
    bool rotated;
    uint angle;
    uvec2 pair = pair_rows(min(unit, pc.units - 1), rotated, angle);
#endif
    uint h = 0u;
    [[unroll]] for (uint r = 0; r < ROWS; r++) {
#if defined(QKV_ROPE)
        uint row = pair[r];
#elif defined(SWIGLU_PAIR)
        uint row = min(min(unit * PAIRS, pc.rows - 1) + r / 2, pc.rows - 1);
#else
        uint row = min(unit * ROWS + r, pc.rows - 1);
#endif
        uint wq[8];
        vec2 ws;
        ivec4 wsc;
        load_w(W_OF(r), AUX_OF(r), pc.cols, row, lane, wq, ws, wsc);
        h ^= wq[0] ^ wq[7] ^ floatBitsToUint(ws.x) ^ uint(wsc.x);
    }
    return h;
}
#endif

void main() {
#if defined(PERSISTENT)
#if defined(NORM_PROLOGUE)
    norm_prologue();
#endif
#if defined(QKV_ROPE)
    uint n_groups = (pc.units + GROUPS - 1) / GROUPS;
#else
    uint n_groups = (pc.rows + GROUPS * PAIRS - 1) / (GROUPS * PAIRS);
#endif
    for (uint wg = gl_WorkGroupID.x; wg < n_groups; wg += gl_NumWorkGroups.x) {
        units_of(wg);
        // The next units' sums go where this one's were read.
        barrier();
    }
#elif defined(CHAINED)
    // A few workgroups each take units in turn (the host dispatches at most
    // STRATA_VULKAN_CHAIN_GROUPS): the wait and the count are paid once a workgroup, and a stage
    // in one wave issues all its first loads before waiting (the stage probe: 3.4 against
    // 3.9-4.6 us a boundary).
#if defined(QKV_ROPE)
    uint n_groups = (pc.units + GROUPS - 1) / GROUPS;
#elif defined(SWIGLU_PAIR)
    uint n_groups = (pc.rows + GROUPS * PAIRS - 1) / (GROUPS * PAIRS);
#else
    uint n_groups = (pc.rows + GROUPS * ROWS - 1) / (GROUPS * ROWS);
#endif
    uint pre = chain_prefetch(gl_WorkGroupID.x);
    chain_wait();
    // (Never true: the rows are not empty. It keeps the prefetched loads.)
    if (pre == 0x9E3779B9u && pc.cols == 0u) {
        U32s(pc.chain).v[2] = pre;
    }
    for (uint wg = gl_WorkGroupID.x; wg < n_groups; wg += gl_NumWorkGroups.x) {
        units_of(wg);
        // The next units' sums go where this one's were read.
        barrier();
    }
    chain_signal();
#else
#if defined(TAGGED_OUT) && !defined(TAG_AT_STORE) && !defined(QKV_ROPE)
    // Loaded first: its latency then hides behind the product's.
    step_tag = U32s(pc.tag_header).v[3];
#endif
    units_of(gl_WorkGroupID.x);
#endif
}
