// The merge of attention's per-split partial results (attention.comp and attention_decode.comp
// write them: per split [max, sum, hd weighted values]): dimensions d0 .. d0 + 7 of the head whose
// records start at `base`, the splits summed in order. attention_combine.comp and quantize_act.comp
// (COMBINE) both merge through it, so the two paths give the same values bit for bit.
#ifndef MERGE_BUF
#define MERGE_BUF F32s
#endif
// Dimensions d0 .. d0 + 7 (those below hd) into o, the splits' maxima and sums read once for the
// eight.
void merge_splits8(MERGE_BUF part, uint base, uint n_splits, uint hd, uint d0, out float o[8]) {
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
    [[unroll]] for (uint k = 0; k < 8; k++) {
        o[k] = 0.0;
    }
    // Four splits' loads in flight at a time.
    for (uint s0 = 0; s0 < n_splits; s0 += 4) {
        float ms[4];
        float ls[4];
        float vs[4][8];
        [[unroll]] for (uint u = 0; u < 4; u++) {
            bool in_range = s0 + u < n_splits;
            uint rec = base + (s0 + u) * (hd + 2);
            ms[u] = in_range ? part.v[rec] : -1.0 / 0.0;
            ls[u] = in_range ? part.v[rec + 1] : 0.0;
            [[unroll]] for (uint k = 0; k < 8; k++) {
                vs[u][k] = in_range && d0 + k < hd ? part.v[rec + 2 + d0 + k] : 0.0;
            }
        }
        [[unroll]] for (uint u = 0; u < 4; u++) {
            if (s0 + u < n_splits && ms[u] != -1.0 / 0.0) {
                float f = exp(ms[u] - mx);
                l += f * ls[u];
                [[unroll]] for (uint k = 0; k < 8; k++) {
                    o[k] += f * vs[u][k];
                }
            }
        }
    }
    [[unroll]] for (uint k = 0; k < 8; k++) {
        o[k] = o[k] / l;
    }
}
