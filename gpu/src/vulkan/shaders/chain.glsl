// Chained dispatches (CHAINED builds; plan.rs records them for one-token steps with
// `STRATA_VULKAN_CHAIN=1`): consecutive stages of a decode step recorded without a pipeline
// barrier between them, so the driver may launch a stage's workgroups while the stage before
// is still finishing (its tail). Each workgroup orders itself instead: it waits until every
// workgroup of the stage before has counted itself done in that stage's word, and when done it
// counts itself in its own stage's words (the host zeroes them at the start of each step).
// In gpu/examples/stage_chain.rs's probe on the H200 a boundary so ordered cost 3.9-4.6 us over
// its bytes' time (3.4 with each stage in one wave), against 5.9-6.7 for a pipeline barrier,
// with the next loads issued before the wait.
//
// Waits are bounded: a device that did not launch a dispatch's workgroups before the next
// dispatch's (which could then fill the GPU with waiters) makes a wait give up after
// CHAIN_SPIN_LIMIT polls; the workgroup then runs anyway and sets CHAIN_GAVE_UP in its stage's
// word, which lifts every later wait and which the host reads back to fail the step with an
// error, never a hang.
//
// The includer declares `chain_expect` (workgroups of the stage before; 0: no wait, a pipeline
// barrier ordered it) and `chain` (the address of the stage before's word; this stage's is the
// next) at the end of its push constants, and defines CHAIN_PC(name).
layout(buffer_reference, std430, buffer_reference_align = 4) volatile coherent buffer ChainWordsV { uint v[]; };
#define CHAIN_GAVE_UP 0x80000000u
#define CHAIN_SPIN_LIMIT (1u << 18)
// A stage counts its workgroups in CHAIN_LINES words, CHAIN_LINE_WORDS words apart (a workgroup
// in word gl_WorkGroupID.x % CHAIN_LINES): atomic adds to one address are served one at a time
// (~3.7 ns each on the H200, so one word cost a 4,736-workgroup product ~17 us), spread over
// separate cache lines they are not. Stage s's line l is word l * CHAIN_LINE_WORDS + s.
#define CHAIN_LINES 16u
#define CHAIN_LINE_WORDS 1024u
shared uint chain_flag;

// A bit of `chain_expect` above the count: CHAIN_NO_COUNT, this stage does not count its
// workgroups (a pipeline barrier orders what follows it); a wait that gave up is still marked.
#define CHAIN_NO_COUNT 0x80000000u
#define CHAIN_COUNT_MASK 0x7FFFFFFFu

// Every invocation of the workgroup returns once the stage before is done (or a wait gave up).
// The first subgroup polls the stage's lines and adds them up.
void chain_wait() {
    if (gl_SubgroupID == 0u) {
        uint flag = 0u;
        uint expect = CHAIN_PC(chain_expect) & CHAIN_COUNT_MASK;
        if (expect > 0u) {
            // The loop ends on its condition: Mesa 22.3's lavapipe lost a flag set just before
            // a `break` out of a polling loop (attention_merge.glsl's settle16 did).
            uint spins = 0u;
            bool done = false;
            while (!done && spins < CHAIN_SPIN_LIMIT) {
                uint total = 0u;
                uint gave_up = 0u;
                for (uint l = gl_SubgroupInvocationID; l < CHAIN_LINES; l += gl_SubgroupSize) {
                    uint w = ChainWordsV(CHAIN_PC(chain) + uint64_t(4u * CHAIN_LINE_WORDS * l)).v[0];
                    total += w & ~CHAIN_GAVE_UP;
                    gave_up |= w & CHAIN_GAVE_UP;
                }
                total = subgroupAdd(total);
                gave_up = subgroupOr(gave_up);
                done = total >= expect || gave_up != 0u;
                flag = gave_up;
                spins++;
            }
            if (!done) {
                flag = CHAIN_GAVE_UP;
            }
        }
        if (subgroupElect()) {
            chain_flag = flag;
        }
        memoryBarrierBuffer();
    }
    barrier();
}

// Counts this workgroup done, after every invocation's writes (unless the stage does not
// count: then only a wait that gave up is marked).
void chain_signal() {
    bool count = (CHAIN_PC(chain_expect) & CHAIN_NO_COUNT) == 0u;
    if (count) {
        memoryBarrierBuffer();
        barrier();
    }
    if (gl_LocalInvocationIndex == 0u) {
        U32sC own = U32sC(CHAIN_PC(chain) + uint64_t(4u + 4u * CHAIN_LINE_WORDS * (gl_WorkGroupID.x % CHAIN_LINES)));
        if (chain_flag != 0u) {
            atomicOr(own.v[0], CHAIN_GAVE_UP);
        }
        if (count) {
            atomicAdd(own.v[0], 1u);
        }
    }
}
