// The merge of attention's per-split partial results (attention.comp and attention_decode.comp
// write them: per split [max, sum, hd weighted values]): dimension d of the head whose records
// start at `base`, the splits summed in order. attention_combine.comp and quantize_act.comp
// (COMBINE) both merge through it, so the two paths give the same values bit for bit.
#ifndef MERGE_BUF
#define MERGE_BUF F32s
#endif
// Splits s0.. s0 + 15 (those below n_splits) added into the sums, in order: both merges' arithmetic.
void merge_batch(float ms[16], float ls[16], float vs[16], uint s0, uint n_splits, float mx, inout float l, inout float o) {
    [[unroll]] for (uint u = 0; u < 16; u++) {
        if (s0 + u < n_splits && ms[u] != -1.0 / 0.0) {
            float f = exp(ms[u] - mx);
            l += f * ls[u];
            o += f * vs[u];
        }
    }
}
float merge_splits(MERGE_BUF part, uint base, uint n_splits, uint hd, uint d) {
    // Sixteen splits' loads in flight at a time (memory latency). Up to 16 splits take one
    // pass (the max over the loaded maxima, then the sums), more a pass for the maxima first.
    float mx = -1.0 / 0.0;
    if (n_splits > 16u) {
        for (uint s0 = 0; s0 < n_splits; s0 += 16) {
            float ms[16];
            [[unroll]] for (uint u = 0; u < 16; u++) {
                ms[u] = s0 + u < n_splits ? part.v[base + (s0 + u) * (hd + 2)] : -1.0 / 0.0;
            }
            [[unroll]] for (uint u = 0; u < 16; u++) {
                mx = max(mx, ms[u]);
            }
        }
    }
    float l = 0.0;
    float o = 0.0;
    for (uint s0 = 0; s0 < n_splits; s0 += 16) {
        float ms[16];
        float ls[16];
        float vs[16];
        [[unroll]] for (uint u = 0; u < 16; u++) {
            bool in_range = s0 + u < n_splits;
            uint rec = base + (s0 + u) * (hd + 2);
            ms[u] = in_range ? part.v[rec] : -1.0 / 0.0;
            ls[u] = in_range ? part.v[rec + 1] : 0.0;
            vs[u] = in_range ? part.v[rec + 2 + d] : 0.0;
        }
        if (n_splits <= 16u) {
            [[unroll]] for (uint u = 0; u < 16; u++) {
                mx = max(mx, ms[u]);
            }
        }
        merge_batch(ms, ls, vs, s0, n_splits, mx, l, o);
    }
    return o / l;
}

#ifdef MERGE_TAGGED
// merge_splits over records written as (bits, tag) pairs (attention_decode.comp TAGGED_OUT) by
// a dispatch recorded right before this one with no pipeline barrier: each batch of loads is
// read again past the caches until every value carries `tag` (tagged.glsl's TAG_SPIN_LIMIT
// polls at most; `gave_up` is then set). The same arithmetic as merge_splits.
layout(buffer_reference, std430, buffer_reference_align = 8) volatile coherent buffer U32x2sV { uvec2 v[]; };

bool runs_fresh16(uvec2 raw[16], uint tag) {
    bool fresh = true;
    [[unroll]] for (uint u = 0; u < 16; u++) {
        fresh = fresh && raw[u].y == tag;
    }
    return fresh;
}

// Reads again, past the caches, each of the first n of raw that does not carry `tag`.
void refresh16(uint64_t part, uint idx[16], uint n, uint tag, inout uvec2 raw[16]) {
    [[unroll]] for (uint u = 0; u < 16; u++) {
        if (u < n && raw[u].y != tag) {
            raw[u] = U32x2sV(part).v[idx[u]];
        }
    }
}

void load16(uint64_t part, uint idx[16], uint n, uint tag, out uvec2 raw[16]) {
    [[unroll]] for (uint u = 0; u < 16; u++) {
        raw[u] = u < n ? U32x2sV(part).v[idx[u]] : uvec2(0u, tag);
    }
}

void values16(uvec2 raw[16], out float vals[16]) {
    [[unroll]] for (uint u = 0; u < 16; u++) {
        vals[u] = uintBitsToFloat(raw[u].x);
    }
}

// (The polling loops end on their condition: with a `break` from inside one, lavapipe (Mesa
// 22.3) never reported a give-up, as tagged.glsl's waits with a `return`. A lane that gave up
// once does not spin again: the step has failed, and a merge reads many runs.)
void settle16(uint64_t part, uint idx[16], uint n, uint tag, inout bool gave_up, out float vals[16]) {
    uvec2 raw[16];
    load16(part, idx, n, tag, raw);
    uint spins = 0u;
    bool fresh = runs_fresh16(raw, tag);
    while (!fresh && !gave_up && spins < TAG_SPIN_LIMIT) {
        spins++;
        refresh16(part, idx, n, tag, raw);
        fresh = runs_fresh16(raw, tag);
    }
    gave_up = gave_up || !fresh;
    values16(raw, vals);
}

// Sixteen splits' max, sum and value of dimension d (records at idx), all loads in flight at
// once: one wait for the three where settle16 would take three in turn.
void settle16x3(uint64_t part, uint idx[16], uint n, uint d, uint tag, inout bool gave_up, out float ms[16], out float ls[16], out float vs[16]) {
    uint idx_l[16];
    uint idx_v[16];
    [[unroll]] for (uint u = 0; u < 16; u++) {
        idx_l[u] = idx[u] + 1;
        idx_v[u] = idx[u] + 2 + d;
    }
    uvec2 rm[16];
    uvec2 rl[16];
    uvec2 rv[16];
    load16(part, idx, n, tag, rm);
    load16(part, idx_l, n, tag, rl);
    load16(part, idx_v, n, tag, rv);
    uint spins = 0u;
    bool fresh = runs_fresh16(rm, tag) && runs_fresh16(rl, tag) && runs_fresh16(rv, tag);
    while (!fresh && !gave_up && spins < TAG_SPIN_LIMIT) {
        spins++;
        refresh16(part, idx, n, tag, rm);
        refresh16(part, idx_l, n, tag, rl);
        refresh16(part, idx_v, n, tag, rv);
        fresh = runs_fresh16(rm, tag) && runs_fresh16(rl, tag) && runs_fresh16(rv, tag);
    }
    gave_up = gave_up || !fresh;
    values16(rm, ms);
    values16(rl, ls);
    values16(rv, vs);
}

// merge_splits' arithmetic. Up to 16 splits (decode at short contexts) take one pass: every
// split's three values settled at once, the max over them, then the sums. More take merge_splits'
// two passes (the maxima, then the three values of each sixteen at once).
float merge_splits_tagged(uint64_t part, uint base, uint n_splits, uint hd, uint d, uint tag, inout bool gave_up) {
    float mx = -1.0 / 0.0;
    if (n_splits > 16u) {
        for (uint s0 = 0; s0 < n_splits; s0 += 16) {
            uint idx[16];
            [[unroll]] for (uint u = 0; u < 16; u++) {
                idx[u] = base + (s0 + u) * (hd + 2);
            }
            float ms[16];
            settle16(part, idx, min(16u, n_splits - s0), tag, gave_up, ms);
            [[unroll]] for (uint u = 0; u < 16; u++) {
                mx = max(mx, s0 + u < n_splits ? ms[u] : -1.0 / 0.0);
            }
        }
    }
    float l = 0.0;
    float o = 0.0;
    for (uint s0 = 0; s0 < n_splits; s0 += 16) {
        uint idx[16];
        [[unroll]] for (uint u = 0; u < 16; u++) {
            idx[u] = base + (s0 + u) * (hd + 2);
        }
        float ms[16];
        float ls[16];
        float vs[16];
        settle16x3(part, idx, min(16u, n_splits - s0), d, tag, gave_up, ms, ls, vs);
        if (n_splits <= 16u) {
            [[unroll]] for (uint u = 0; u < 16; u++) {
                mx = max(mx, u < n_splits ? ms[u] : -1.0 / 0.0);
            }
        }
        merge_batch(ms, ls, vs, s0, n_splits, mx, l, o);
    }
    return o / l;
}
#endif
