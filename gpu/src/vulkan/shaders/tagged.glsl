// Tagged rows (plan.rs, STRATA_VULKAN_TAGGED_NORM / STRATA_VULKAN_TAGGED_QUANT): a product writes
// each output again as (its bits, the step's tag) in one 8-byte store (matvec_q.comp TAGGED_OUT),
// and the small stage after it is recorded with no pipeline barrier between them. The driver may
// then start the small stage's workgroups while the product still runs, so each element says by
// itself whether it is this step's: one load brings the value and its proof, and the reads go
// past the caches (a coherent view) until every element carries the step's tag.
//
// Element e of a row is uvec2 e: a uvec4 holds elements e, e + 1 (e even) as (x, y), (z, w).
layout(buffer_reference, std430, buffer_reference_align = 16) volatile coherent buffer U32x4sV { uvec4 v[]; };
// Polls of a run before a lane gives up (a device that did not run the product's workgroups
// beside this one): the includer counts it, the host then fails the step; never a hang.
#define TAG_SPIN_LIMIT (1u << 20)

// Issues the loads of the run of eight elements at e0 (even) of the tagged row at `row`; past
// `width`, zeros that pass for this step's.
void tagged_issue(uint64_t row, uint e0, uint width, uint tag, out uvec4 raw[4]) {
    [[unroll]] for (uint q = 0; q < 4; q++) {
        uint e = e0 + 2 * q;
        raw[q] = e < width ? U32x4sV(row).v[e / 2] : uvec4(0u, tag, 0u, tag);
    }
}

bool tagged_fresh(uvec4 raw[4], uint e0, uint width, uint tag) {
    bool fresh = true;
    [[unroll]] for (uint q = 0; q < 4; q++) {
        uint e = e0 + 2 * q;
        fresh = fresh && (e >= width || raw[q].y == tag) && (e + 1 >= width || raw[q].w == tag);
    }
    return fresh;
}

// Reads the run again until all of it is this step's; returns whether it gave up. (No return
// from inside the loop: lavapipe (Mesa 22.3) then never reported a give-up.)
bool tagged_settle(uint64_t row, uint e0, uint width, uint tag, inout uvec4 raw[4]) {
    uint spins = 0u;
    bool fresh = tagged_fresh(raw, e0, width, tag);
    while (!fresh && spins < TAG_SPIN_LIMIT) {
        spins++;
        tagged_issue(row, e0, width, tag, raw);
        fresh = tagged_fresh(raw, e0, width, tag);
    }
    return !fresh;
}

// The run's eight values (zeros past the row).
void tagged_values(uvec4 raw[4], out float v[8]) {
    [[unroll]] for (uint q = 0; q < 4; q++) {
        v[2 * q] = uintBitsToFloat(raw[q].x);
        v[2 * q + 1] = uintBitsToFloat(raw[q].z);
    }
}

// Invocations of a workgroup that poll a row (a subgroup on NVIDIA) where a whole workgroup
// waits: the others wait at its barrier and issue no loads. A stage of hundreds of polling
// workgroups otherwise sends a stream of coherent reads to the few L2 lines it polls while the
// stage before still runs.
#define TAG_POLL_LANES 32u

// Elements 2p and 2p + 1 of the tagged row at `row` (16-byte aligned), read until both carry
// `tag`; returns whether it gave up.
bool tagged_pair_settle(uint64_t row, uint p, uint tag, out uvec4 raw) {
    raw = U32x4sV(row).v[p];
    uint spins = 0u;
    while ((raw.y != tag || raw.w != tag) && spins < TAG_SPIN_LIMIT) {
        spins++;
        raw = U32x4sV(row).v[p];
    }
    return raw.y != tag || raw.w != tag;
}
