#version 450
// A decode step's memory pattern without its arithmetic: a list of stages, each streaming a range
// of device memory (a product's weights) or, in one workgroup, a few kilobytes with two
// workgroup reductions (an RMSNorm). It answers one question: what does a stage boundary cost?
// Mode 0 runs one stage per dispatch (the host records a pipeline barrier between them, as a
// decode step does); mode 1 runs every stage in one dispatch of a few resident workgroups that
// wait for each other between stages (a grid barrier: an atomic counter, polled with atomic adds
// of zero, bounded so that a device that does not keep every workgroup resident ends the run
// instead of hanging; the sink's word 0 then counts the give-ups, and a give-up lifts every
// later wait). Mode 2 is mode 1 without the waits: the streaming alone. Mode 3 is mode 1 with
// each workgroup's first loads of the next stage issued before it waits. Modes 4 and 5 are mode 0
// without the pipeline barriers: a dispatch a stage, each of its workgroups waiting (bounded, as
// above) until every workgroup of the stage before has counted itself done in that stage's word
// of the counter array; mode 5 issues its first loads before waiting. They ask whether a
// dispatch's launch and ramp can overlap the previous dispatch's tail while each stage keeps its
// own kernel (and register count).
// (gpu/examples/stage_chain.rs drives it.)
#include "common.glsl"

#define WG 256
#define UNROLL 8

layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    // Four ranges of up to 1 GiB that the stages read.
    uint64_t src[4];
    // One word per invocation (the loads' results feed it); word 0 also counts give-ups.
    uint64_t sink;
    // The grid barrier's counter (zero before a mode 1 dispatch).
    uint64_t counter;
    // One uvec4 per stage: (range, first 16-byte vector, vectors, kind: 0 stream, 1 single).
    uint64_t stages;
    uint n_stages;
    uint mode;
    // Mode 0: the stage this dispatch runs.
    uint stage;
    uint spin_limit;
    // Modes 1 and 3: how the grid barrier polls its counter (0: atomic adds of zero, 1: volatile
    // coherent loads).
    uint poll;
    // Modes 4 and 5: the workgroups of the stage before (each counts itself in word stage - 1).
    uint prev_groups;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Stages { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) volatile coherent buffer U32sV { uint v[]; };
// BIG_SHARED builds (stage_chain_big_shared) take 16 KiB more shared memory, COPY builds
// (stage_chain_copy) nothing more: alternating dispatches between builds asks whether a
// pipeline switch, or one that changes the shared-memory carve-out, stops the driver from
// overlapping dispatches that no barrier separates.
#if defined(BIG_SHARED)
shared float red[WG / 4 + 4096];
#else
shared float red[WG / 4];
#endif
shared uint gave_up;

// The first UNROLL loads of this invocation's share of stage s (issued ahead of a barrier in
// mode 3: weights do not depend on the stage before).
void stream_first(uvec4 s, uint groups, uint group, out uvec4 v[UNROLL]) {
    U32x4s src = U32x4s(pc.src[s.x]);
    uint stride = groups * WG;
    uint i0 = group * WG + gl_LocalInvocationID.x;
    [[unroll]] for (uint u = 0; u < UNROLL; u++) {
        v[u] = i0 < s.z ? src.v[s.y + min(i0 + u * stride, s.z - 1)] : uvec4(0);
    }
}

// Stage s from the given first loads on.
uvec4 stream_rest(uvec4 s, uint groups, uint group, uvec4 first[UNROLL]) {
    U32x4s src = U32x4s(pc.src[s.x]);
    uint stride = groups * WG;
    uvec4 acc = uvec4(0);
    [[unroll]] for (uint u = 0; u < UNROLL; u++) {
        acc ^= first[u];
    }
    for (uint i0 = group * WG + gl_LocalInvocationID.x + stride * UNROLL; i0 < s.z; i0 += stride * UNROLL) {
        uvec4 v[UNROLL];
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            v[u] = src.v[s.y + min(i0 + u * stride, s.z - 1)];
        }
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            acc ^= v[u];
        }
    }
    return acc;
}

uvec4 stream(uvec4 s, uint groups, uint group) {
    U32x4s src = U32x4s(pc.src[s.x]);
    uint stride = groups * WG;
    uvec4 acc = uvec4(0);
    for (uint i0 = group * WG + gl_LocalInvocationID.x; i0 < s.z; i0 += stride * UNROLL) {
        uvec4 v[UNROLL];
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            v[u] = src.v[s.y + min(i0 + u * stride, s.z - 1)];
        }
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            acc ^= v[u];
        }
    }
    return acc;
}

// A norm's shape: one workgroup loads a few kilobytes, reduces them (a subgroup sum, then the
// subgroups' sums through shared memory), and uses the total in a second pass.
uvec4 single(uvec4 s) {
    U32x4s src = U32x4s(pc.src[s.x]);
    float sum = 0.0;
    uvec4 acc = uvec4(0);
    for (uint i = gl_LocalInvocationID.x; i < s.z; i += WG) {
        uvec4 v = src.v[s.y + i];
        acc ^= v;
        sum += float(v.x & 0xFFu);
    }
    sum = subgroupAdd(sum);
    if (subgroupElect()) {
        red[gl_SubgroupID] = sum;
    }
    barrier();
    float total = 0.0;
    for (uint k = 0; k < gl_NumSubgroups; k++) {
        total += red[k];
    }
    barrier();
    return acc ^ uvec4(floatBitsToUint(total));
}

void main() {
    Stages stages = Stages(pc.stages);
    uvec4 acc = uvec4(0);
    if (pc.mode == 0) {
        uvec4 s = stages.v[pc.stage];
        acc = s.w == 0 ? stream(s, gl_NumWorkGroups.x, gl_WorkGroupID.x) : single(s);
    } else if (pc.mode >= 4) {
        uvec4 s = stages.v[pc.stage];
        uvec4 pre[UNROLL];
        bool preloaded = pc.mode == 5 && s.w == 0;
        if (preloaded) {
            stream_first(s, gl_NumWorkGroups.x, gl_WorkGroupID.x, pre);
        }
        if (gl_LocalInvocationID.x == 0) {
            gave_up = 0;
            if (pc.stage > 0) {
                // Polling loops here end on their condition: Mesa 22.3's lavapipe lost a flag
                // set just before a `break` out of one (attention_merge.glsl's settle16 did).
                uint spins = 0;
                bool done = false;
                while (!done && spins < pc.spin_limit) {
                    done = U32sV(pc.counter).v[pc.stage - 1] >= pc.prev_groups;
                    spins++;
                }
                gave_up = done ? 0u : 1u;
                memoryBarrierBuffer();
            }
        }
        barrier();
        if (s.w == 0) {
            acc = preloaded ? stream_rest(s, gl_NumWorkGroups.x, gl_WorkGroupID.x, pre) : stream(s, gl_NumWorkGroups.x, gl_WorkGroupID.x);
        } else {
            acc = single(s);
        }
        barrier();
        if (gl_LocalInvocationID.x == 0) {
            memoryBarrierBuffer();
            atomicAdd(U32sC(pc.counter).v[pc.stage], 1u);
        }
    } else {
        if (gl_LocalInvocationID.x == 0) {
            gave_up = 0;
        }
        uvec4 pre[UNROLL];
        bool preloaded = false;
        for (uint k = 0; k < pc.n_stages; k++) {
            uvec4 s = stages.v[k];
            if (s.w == 0) {
                acc ^= preloaded ? stream_rest(s, gl_NumWorkGroups.x, gl_WorkGroupID.x, pre) : stream(s, gl_NumWorkGroups.x, gl_WorkGroupID.x);
            } else if (gl_WorkGroupID.x == 0) {
                acc ^= single(s);
            }
            preloaded = false;
            if (pc.mode == 2) {
                continue;
            }
            if (pc.mode == 3 && k + 1 < pc.n_stages && stages.v[k + 1].w == 0) {
                stream_first(stages.v[k + 1], gl_NumWorkGroups.x, gl_WorkGroupID.x, pre);
                preloaded = true;
            }
            // Every workgroup done with stage k before any starts stage k + 1.
            barrier();
            if (gl_LocalInvocationID.x == 0) {
                memoryBarrierBuffer();
                uint target = (k + 1) * gl_NumWorkGroups.x;
                atomicAdd(U32sC(pc.counter).v[0], 1u);
                uint spins = 0;
                bool done = false;
                while (!done && spins < pc.spin_limit) {
                    done = (pc.poll == 0 ? atomicAdd(U32sC(pc.counter).v[0], 0u) : U32sV(pc.counter).v[0]) >= target;
                    spins++;
                }
                if (!done) {
                    // Lift every later wait of this dispatch too: one give-up is enough to void
                    // the run, and a device that cannot keep the workgroups resident would
                    // otherwise spin through every barrier.
                    gave_up++;
                    atomicAdd(U32sC(pc.counter).v[0], 1u << 30);
                }
                memoryBarrierBuffer();
            }
            barrier();
        }
    }
    U32s sink = U32s(pc.sink);
    uint word = acc.x ^ acc.y ^ acc.z ^ acc.w;
    // Never equal in practice: the loads stay live without a store per invocation.
    if (word == 0x9E3779B9u) {
        sink.v[1 + gl_GlobalInvocationID.x] = word;
    }
    if (pc.mode != 0 && pc.mode != 2 && gl_LocalInvocationID.x == 0 && gave_up > 0) {
        atomicAdd(U32sC(pc.sink).v[0], gave_up);
    }
}
