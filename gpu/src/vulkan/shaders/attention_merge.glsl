// The merge of attention's per-split partial results (attention.comp and attention_decode.comp
// write them: per split [max, sum, hd weighted values]): dimension d of the head whose records
// start at `base`, the splits summed in order. attention_combine.comp and quantize_act.comp
// (COMBINE) both merge through it, so the two paths give the same values bit for bit.
#ifndef MERGE_BUF
#define MERGE_BUF F32s
#endif
float merge_splits(MERGE_BUF part, uint base, uint n_splits, uint hd, uint d) {
    // Sixteen splits' loads in flight at a time (memory latency).
    float mx = -1.0 / 0.0;
    for (uint s0 = 0; s0 < n_splits; s0 += 16) {
        float ms[16];
        [[unroll]] for (uint u = 0; u < 16; u++) {
            ms[u] = s0 + u < n_splits ? part.v[base + (s0 + u) * (hd + 2)] : -1.0 / 0.0;
        }
        [[unroll]] for (uint u = 0; u < 16; u++) {
            mx = max(mx, ms[u]);
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
        [[unroll]] for (uint u = 0; u < 16; u++) {
            if (s0 + u < n_splits && ms[u] != -1.0 / 0.0) {
                float f = exp(ms[u] - mx);
                l += f * ls[u];
                o += f * vs[u];
            }
        }
    }
    return o / l;
}
