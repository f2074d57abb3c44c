#version 450
// The feed-forward half of a decoding layer for one token in one dispatch: RMSNorm with the
// quantization of its row, gate and up with SwiGLU, the quantization of that row, and the down
// projection added into the residual stream. Four stages that otherwise take four dispatches and
// four pipeline barriers run here in a few resident workgroups that meet at grid barriers
// between stages (an atomic counter polled through volatile loads: ~3 us on the H200 against
// ~5.6 us for a dispatch boundary, gpu/examples/stage_chain.rs). Each stage is cut into the
// staged kernels' own workgroups ("virtual workgroups"), which the resident ones take in turn,
// so this computes the staged kernels' bits whatever the number of workgroups:
// - the norm as rms_norm_q.comp's 512 invocations (each invocation here holds four of their
//   slots in turn, a subgroup the same 32 slots as theirs), quantized by quantize_lanes.glsl;
// - gate/up and down as matvec_q_units.glsl in the layouts the host picks for the staged
//   kernels (GU_GROUPS / GU_PAIRS, DOWN_GROUPS / DOWN_ROWS / DOWN_UNROLL2);
// - the SwiGLU row quantized as quantize_act.comp's INT_OUT build does.
// Between arriving at a grid barrier and waiting there, each workgroup loads its first weight
// items of the next stage (weights do not depend on the stage before).
//
// Every workgroup must be resident at once (the host dispatches few enough; a device that does
// not keep them so makes a wait give up after `spin_limit` polls, counted for the host, which
// then reports an error instead of hanging). Data one stage writes and the next reads is written
// and read within this dispatch only: no workgroup reads those addresses before they are written,
// so no stale cache line can be hit (the SwiGLU records go to their own buffer, not the norm's,
// which every workgroup has read).
#include "common.glsl"
#extension GL_EXT_spirv_intrinsics : require

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int dot4_i8(uint a, uint b, spirv_literal int packed_vector_format);
#define DOT4(a, b) dot4_i8((a), (b), 0)

#define WG 128
#define NT 1
layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    // The residual row (f32): the norm's input, the down projection's output (added into).
    uint64_t h;
    uint64_t norm_w;
    // The norm's 8-bit record (gate/up's input).
    uint64_t x_records;
    uint64_t w_gate;
    uint64_t aux_gate;
    uint64_t w_up;
    uint64_t aux_up;
    // The f32 SwiGLU row and its 8-bit record (down's input).
    uint64_t act;
    uint64_t act_records;
    uint64_t w_down;
    uint64_t aux_down;
    // Down's bias, or 0.
    uint64_t down_bias;
    // Words: arrivals at grid barriers, departures, give-ups (zero between dispatches but the
    // give-ups, which the host reads), a sink for the prefetches.
    uint64_t sync;
    uint cols;
    uint ff;
    uint x_meta_offset;
    uint act_meta_offset;
    uint spin_limit;
    float eps;
} ffn;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) volatile coherent buffer U32sV { uint v[]; };

#if defined(ACT_Q8_K)
#define SEG 256
#else
#define SEG 32
#endif
#define QL_BLOCKS (WG * 8 / 32)
#include "quantize_lanes.glsl"
#include "matvec_q_items.glsl"

// Gate and up: matvec_swiglu_<type>_f32[_p2] in its layout.
#define GROUPS GU_GROUPS
#define PAIRS GU_PAIRS
#define ROWS (2 * GU_PAIRS)
#define TPR (WG / GROUPS)
#define SWIGLU_PAIR
#define NO_TICKET
#define W_OF(r) ((r) % 2 == 0 ? PC(w) : PC(w2))
#define AUX_OF(r) ((r) % 2 == 0 ? PC(aux) : PC(aux2))
// Its arguments, by the names matvec_q_units.glsl reads (straight from the push constants).
#define PC(name) GATE_UP_##name
#define GATE_UP_w ffn.w_gate
#define GATE_UP_aux ffn.aux_gate
#define GATE_UP_w2 ffn.w_up
#define GATE_UP_aux2 ffn.aux_up
#define GATE_UP_x ffn.x_records
#define GATE_UP_act ffn.act
#define GATE_UP_rows ffn.ff
#define GATE_UP_cols ffn.cols
#define GATE_UP_meta_offset ffn.x_meta_offset
#define UNITS_FN gate_up_units
#define UNITS_PARTIALS gate_up_partials
#include "matvec_q_units.glsl"
#undef GROUPS
#undef PAIRS
#undef ROWS
#undef TPR
#undef SWIGLU_PAIR
#undef NO_TICKET
#undef W_OF
#undef AUX_OF
#undef PC
#undef UNITS_FN
#undef UNITS_PARTIALS

// Down: matvec_q1_r<rows>_<type>[_g2 | _u2] in its layout, adding into the residual.
#define GROUPS DOWN_GROUPS
#define ROWS DOWN_ROWS
#define TPR (WG / GROUPS)
#if DOWN_UNROLL2
#define UNROLL2
#endif
#define W_OF(r) PC(w)
#define AUX_OF(r) PC(aux)
#define PC(name) DOWN_##name
#define DOWN_w ffn.w_down
#define DOWN_aux ffn.aux_down
#define DOWN_x ffn.act_records
#define DOWN_out_ ffn.h
#define DOWN_bias ffn.down_bias
#define DOWN_rows ffn.cols
#define DOWN_cols ffn.ff
#define DOWN_n_tokens 1u
#define DOWN_x_stride 0u
#define DOWN_out_stride 0u
#define DOWN_meta_offset ffn.act_meta_offset
#define DOWN_accumulate 1u
#define UNITS_FN down_units
#define UNITS_PARTIALS down_partials
#include "matvec_q_units.glsl"
#undef PC

// rms_norm_q.comp's layout: 512 slots of two eight-element runs (slot s holds elements 8s.. and
// 8 (s + 512)..), its subgroups' sums added in order.
#define NORM_SLOTS 512
#define NORM_PARTS (NORM_SLOTS / WG)
shared float norm_red[NORM_SLOTS];
shared uint gave_up;

// rms_norm_q.comp's scale for the row: each invocation's slot sums exactly as there.
float norm_scale() {
    uint n_words = ffn.cols / 4;
    Vec4s x = Vec4s(ffn.h);
    uint sg_per_part = WG / gl_SubgroupSize;
    // One part's loads at a time: unrolled, all sixteen would be in registers at once, and the
    // whole kernel takes its widest stage's register count (fewer workgroups resident).
    [[dont_unroll]] for (uint part = 0; part < NORM_PARTS; part++) {
        uint slot = part * WG + ql_slot();
        float s = 0.0;
        [[unroll]] for (uint k = 0; k < 2; k++) {
            [[unroll]] for (uint h = 0; h < 2; h++) {
                uint word = 2 * (slot + k * NORM_SLOTS) + h;
                vec4 xv = word < n_words ? x.v[word] : vec4(0.0);
                s += xv.x * xv.x + xv.y * xv.y + xv.z * xv.z + xv.w * xv.w;
            }
        }
        s = subgroupAdd(s);
        if (subgroupElect()) {
            norm_red[part * sg_per_part + gl_SubgroupID] = s;
        }
    }
    barrier();
    float total = 0.0;
    for (uint k = 0; k < NORM_SLOTS / gl_SubgroupSize; k++) {
        total += norm_red[k];
    }
    float mean = total / float(ffn.cols);
    precise float m_eps = mean + ffn.eps;
    return div_rn(1.0, sqrt_rn(m_eps));
}

// Elements 1024 p .. 1024 p + 1023 of the normalized row, quantized into the record.
void norm_pass(uint p, float scale) {
    uint n_words = ffn.cols / 4;
    Vec4s x = Vec4s(ffn.h);
    Vec4s w = Vec4s(ffn.norm_w);
    uint slot = ql_slot();
    uint e0 = p * WG * 8 + 8 * slot;
    float v[QL_E];
    [[unroll]] for (uint h = 0; h < 2; h++) {
        uint word = e0 / 4 + h;
        vec4 xv = word < n_words ? x.v[word] : vec4(0.0);
        vec4 wv = word < n_words ? w.v[word] : vec4(0.0);
        precise vec4 scaled = xv * scale;
        precise vec4 weighted = scaled * wv;
        [[unroll]] for (uint e = 0; e < 4; e++) {
            v[4 * h + e] = weighted[e];
        }
    }
    ql_quantize(v, slot, e0, ffn.cols, ffn.x_records, ffn.x_meta_offset);
}

// Elements 1024 p .. of the SwiGLU row (written by other workgroups: coherent loads),
// quantized into down's record.
void act_pass(uint p) {
    uint slot = ql_slot();
    uint e0 = p * WG * 8 + 8 * slot;
    float v[QL_E];
    [[unroll]] for (uint k = 0; k < QL_E; k++) {
        v[k] = e0 + k < ffn.ff ? F32sC(ffn.act).v[e0 + k] : 0.0;
    }
    ql_quantize(v, slot, e0, ffn.ff, ffn.act_records, ffn.act_meta_offset);
}

// A grid barrier in two halves, so that a workgroup can issue loads between them: arrive (its
// stage is done), then wait until every workgroup has arrived at stage `stage` (1, 2, ...). A
// wait that gives up lifts every later one of this dispatch (the results are void anyway).
void grid_arrive() {
    barrier();
    if (gl_LocalInvocationID.x == 0) {
        memoryBarrierBuffer();
        atomicAdd(U32sC(ffn.sync).v[0], 1u);
    }
}

// Bit 31 of `spin_limit` (for tests, plan.rs GRID_FAULT): the first barrier waits for one
// workgroup more than the dispatch has, and gives up.
#define GRID_FAULT 0x80000000u

// The loop ends on its condition: Mesa 22.3's lavapipe lost a flag set just before a `break`
// out of a polling loop (attention_merge.glsl's settle16 did).
void grid_wait(uint stage) {
    if (gl_LocalInvocationID.x == 0) {
        bool fault = stage == 1u && (ffn.spin_limit & GRID_FAULT) != 0u;
        uint target = stage * gl_NumWorkGroups.x + (fault ? 1u : 0u);
        uint limit = ffn.spin_limit & ~GRID_FAULT;
        uint spins = 0;
        bool arrived = false;
        while (!arrived && spins < limit) {
            arrived = U32sV(ffn.sync).v[0] >= target;
            spins++;
        }
        if (!arrived) {
            gave_up++;
            atomicAdd(U32sC(ffn.sync).v[0], 1u << 30);
        }
        memoryBarrierBuffer();
    }
    barrier();
}

// Loads this invocation's first weight item of `rows` consecutive rows from `row0` (clamped to
// the matrix's `n_rows`) while the workgroup waits at a grid barrier: weights do not depend on
// the stage before, and the next stage's first loads then find them in the caches. Returns a
// word the caller folds in after the wait (so the loads stay, and nothing waits for them early).
uint prefetch_items(uint64_t w, uint64_t aux, uint cols, uint row0, uint rows, uint n_rows, uint item) {
    uint acc = 0;
    if (item < cols / 32) {
        for (uint r = 0; r < rows; r++) {
            uint wq[8];
            vec2 ws;
            ivec4 wsc;
            load_w(w, aux, cols, min(row0 + r, n_rows - 1), item, wq, ws, wsc);
            acc ^= wq[0] ^ wq[7] ^ floatBitsToUint(ws.x) ^ uint(wsc.x);
        }
    }
    return acc;
}

// The first gate/up and down items of this workgroup's first units in those stages.
uint prefetch_gate_up(uint me) {
    uint tid = gl_LocalInvocationID.x;
    uint unit = me * GU_GROUPS + tid / (WG / GU_GROUPS);
    uint lane = tid % (WG / GU_GROUPS);
    return prefetch_items(ffn.w_gate, ffn.aux_gate, ffn.cols, unit * GU_PAIRS, GU_PAIRS, ffn.ff, lane)
        ^ prefetch_items(ffn.w_up, ffn.aux_up, ffn.cols, unit * GU_PAIRS, GU_PAIRS, ffn.ff, lane);
}

uint prefetch_down(uint me, uint item_offset) {
    uint tid = gl_LocalInvocationID.x;
    uint unit = me * DOWN_GROUPS + tid / (WG / DOWN_GROUPS);
    uint lane = tid % (WG / DOWN_GROUPS);
    return prefetch_items(ffn.w_down, ffn.aux_down, ffn.ff, unit * DOWN_ROWS, DOWN_ROWS, ffn.cols, lane + item_offset);
}

// Folds a prefetch's word in: never true in practice, but the loads must stay.
void keep(uint acc) {
    if (acc == 0x9E3779B9u) {
        U32sC(ffn.sync).v[3] = acc;
    }
}

void main() {
    uint me = gl_WorkGroupID.x;
    uint n = gl_NumWorkGroups.x;
    if (gl_LocalInvocationID.x == 0) {
        gave_up = 0;
    }
    uint norm_passes = (ffn.cols + WG * 8 - 1) / (WG * 8);
    for (uint p = me; p < norm_passes; p += n) {
        norm_pass(p, norm_scale());
        // norm_red and ql_block are the next pass's.
        barrier();
    }
    grid_arrive();
    uint early = prefetch_gate_up(me);
    grid_wait(1);
    keep(early);
    uint gate_up_groups = (ffn.ff + GU_GROUPS * GU_PAIRS - 1) / (GU_GROUPS * GU_PAIRS);
    for (uint g = me; g < gate_up_groups; g += n) {
        gate_up_units(g);
        // The next units' sums go where this one's were read.
        barrier();
    }
    grid_arrive();
    early = prefetch_down(me, 0);
    grid_wait(2);
    keep(early);
    uint act_passes = (ffn.ff + WG * 8 - 1) / (WG * 8);
    for (uint p = me; p < act_passes; p += n) {
        act_pass(p);
        barrier();
    }
    grid_arrive();
    early = prefetch_down(me, WG / DOWN_GROUPS);
    grid_wait(3);
    keep(early);
    uint down_groups = (ffn.cols + DOWN_GROUPS * DOWN_ROWS - 1) / (DOWN_GROUPS * DOWN_ROWS);
    for (uint g = me; g < down_groups; g += n) {
        down_units(g);
        barrier();
    }
    // The last workgroup out zeroes the counters for the next dispatch: every other one has
    // passed its last wait.
    if (gl_LocalInvocationID.x == 0) {
        if (gave_up > 0) {
            atomicAdd(U32sC(ffn.sync).v[2], gave_up);
        }
        memoryBarrierBuffer();
        if (atomicAdd(U32sC(ffn.sync).v[1], 1u) == n - 1) {
            U32sC(ffn.sync).v[0] = 0;
            U32sC(ffn.sync).v[1] = 0;
        }
    }
}
