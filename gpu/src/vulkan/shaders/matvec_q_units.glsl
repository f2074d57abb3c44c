// The body of matvec_q.comp: one workgroup's (or virtual workgroup's) units of a product, with the
// epilogue of its build. matvec_q.comp includes it once; ffn_persistent.comp twice, for two
// products of different layouts in one shader. The includer defines the layout (WG, TPR, GROUPS,
// ROWS, NT, PAIRS, the variant), W_OF / AUX_OF, PC(name) (the argument of that name: a push
// constant, or anything else), UNITS_FN (the function's name) and UNITS_PARTIALS (its shared
// sums' name).
shared float UNITS_PARTIALS[WG][ROWS * NT];

#if defined(QKV_ROPE)
// Which projection of the layer's QKV this dispatch computes: 0 Q, 1 K, 2 V (the mode word's low
// byte; TAGGED_OUT builds keep the tag salt above it).
#define QKV_PROJECTION (PC(mode) & 0xffu)
// The rotation pair of workgroup `pair` (the first half_dims pairs of a head rotate; NeoX pairs
// dimension i with i + half_dims, the original style 2i with 2i + 1; V pairs are never rotated).
uvec2 pair_rows(uint pair, out bool rotated, out uint angle) {
    uint per_head = PC(head_dim) / 2;
    uint h = pair / per_head;
    uint p = pair % per_head;
    uint mode = QKV_PROJECTION;
    rotated = mode != 2 && p < PC(half_dims);
    angle = p;
    uint base = h * PC(head_dim);
    if (mode != 2 && PC(neox) != 0) {
        return p < PC(half_dims) ? uvec2(base + p, base + p + PC(half_dims)) : uvec2(base + 2 * p, base + 2 * p + 1);
    }
    return uvec2(base + 2 * p, base + 2 * p + 1);
}
#endif

// The workgroup's share of the product: `wg`'s units (a dispatch's workgroup, or in PERSISTENT
// builds each of the units' workgroups a resident workgroup takes in turn).
void UNITS_FN(uint wg) {
    uint tid = gl_LocalInvocationID.x;
    uint group = tid / TPR;
    uint lane = tid % TPR;
    uint unit = wg * GROUPS + group;
#if defined(QKV_ROPE)
    bool rotated;
    uint angle;
    bool unit_valid = unit < PC(units);
    uvec2 pair = pair_rows(min(unit, PC(units) - 1), rotated, angle);
    uint t0 = 0;
    uint n_tokens = 1;
    uint x_stride = 0;
#elif defined(SWIGLU_PAIR)
    bool unit_valid = unit * PAIRS < PC(rows);
    uint out_row = min(unit * PAIRS, PC(rows) - 1);
    uint t0 = 0;
    uint n_tokens = 1;
    uint x_stride = 0;
#else
    uint row0 = unit * ROWS;
    uint t0 = gl_WorkGroupID.y * NT;
    uint n_tokens = PC(n_tokens);
    uint x_stride = PC(x_stride);
#endif
    uint n_items = PC(cols) / 32;
#if defined(NORM_SCALE)
    // (Tokens past the step's read the last one's sums and write nothing.)
    vec2 norm_sums[NT];
    [[unroll]] for (uint t = 0; t < NT; t++) {
        norm_sums[t] = norm_sums_load(min(t0 + t, n_tokens - 1));
    }
#endif
    float acc[ROWS][NT];
    [[unroll]] for (uint r = 0; r < ROWS; r++) {
        [[unroll]] for (uint t = 0; t < NT; t++) {
            acc[r][t] = 0.0;
        }
    }
#if NT > 1
#if defined(QKV_ROPE) || defined(SWIGLU_PAIR)
#error "the fused epilogues are built for one token"
#endif
    // Batched: the item's weights of every row first, then the tokens one at a time, each
    // token's activations live only for its products (holding all NT tokens' activations, as
    // the one-token form below does, cost 7B Q4_K batch-8 decode ~10% on the H200; the
    // one-token form is ~4% faster there than this). Same order of additions per (row, token).
    for (uint item = lane; item < n_items; item += TPR) {
        uint wq[ROWS][8];
        vec2 ws[ROWS];
        ivec4 wsc[ROWS];
        [[unroll]] for (uint r = 0; r < ROWS; r++) {
            load_w(W_OF(r), AUX_OF(r), PC(cols), min(row0 + r, PC(rows) - 1), item, wq[r], ws[r], wsc[r]);
        }
        [[unroll]] for (uint t = 0; t < NT; t++) {
            uint xq[8];
            uvec2 meta;
            uint64_t rec = PC(x) + uint64_t(min(t0 + t, n_tokens - 1)) * x_stride;
            load_x(rec, PC(meta_offset), item, xq, meta);
            [[unroll]] for (uint r = 0; r < ROWS; r++) {
                acc[r][t] += item_dot(wq[r], ws[r], wsc[r], xq, meta);
            }
        }
    }
#else
    uint item = lane;
    // The weight row of the unit's row r.
#if defined(QKV_ROPE)
#define UNIT_ROW(r) pair[r]
#elif defined(SWIGLU_PAIR)
#define UNIT_ROW(r) min(out_row + (r) / 2, PC(rows) - 1)
#else
#define UNIT_ROW(r) min(row0 + (r), PC(rows) - 1)
#endif
#if defined(UNROLL2)
#if NT != 1 || defined(QKV_ROPE) || defined(SWIGLU_PAIR)
#error "UNROLL2 builds are the plain one-token kernel"
#endif
    // Two of the lane's items loaded at once (twice the bytes in flight for the rows' few
    // workgroups of a long-row product), added in the same order as the loop below, which
    // takes the last item if their count is odd: the same bits.
    uint64_t rec = PC(x) + uint64_t(min(t0, n_tokens - 1)) * x_stride;
    for (; item + TPR < n_items; item += 2 * TPR) {
        uint xa[8];
        uint xb[8];
        uvec2 ma;
        uvec2 mb;
        load_x(rec, PC(meta_offset), item, xa, ma);
        load_x(rec, PC(meta_offset), item + TPR, xb, mb);
        [[unroll]] for (uint r = 0; r < ROWS; r++) {
            uint row = UNIT_ROW(r);
            uint wa[8];
            uint wb[8];
            vec2 sa;
            vec2 sb;
            ivec4 ca;
            ivec4 cb;
            load_w(W_OF(r), AUX_OF(r), PC(cols), row, item, wa, sa, ca);
            load_w(W_OF(r), AUX_OF(r), PC(cols), row, item + TPR, wb, sb, cb);
            acc[r][0] += item_dot(wa, sa, ca, xa, ma);
            acc[r][0] += item_dot(wb, sb, cb, xb, mb);
        }
    }
#endif
    for (; item < n_items; item += TPR) {
        uint xq[NT][8];
        uvec2 meta[NT];
        [[unroll]] for (uint t = 0; t < NT; t++) {
            uint64_t rec = PC(x) + uint64_t(min(t0 + t, n_tokens - 1)) * x_stride;
            load_x(rec, PC(meta_offset), item, xq[t], meta[t]);
        }
        [[unroll]] for (uint r = 0; r < ROWS; r++) {
            uint row = UNIT_ROW(r);
            uint wq[8];
            vec2 ws;
            ivec4 wsc;
            load_w(W_OF(r), AUX_OF(r), PC(cols), row, item, wq, ws, wsc);
            [[unroll]] for (uint t = 0; t < NT; t++) {
                acc[r][t] += item_dot(wq, ws, wsc, xq[t], meta[t]);
            }
        }
    }
#undef UNIT_ROW
#endif
#if defined(NORM_SCALE)
    float norm_scale[NT];
    [[unroll]] for (uint t = 0; t < NT; t++) {
        norm_scale[t] = norm_scale_of(norm_sums[t]);
    }
#endif
    [[unroll]] for (uint r = 0; r < ROWS; r++) {
        [[unroll]] for (uint t = 0; t < NT; t++) {
            float s = subgroupAdd(acc[r][t]);
            if (subgroupElect()) {
                UNITS_PARTIALS[gl_SubgroupID][r * NT + t] = s;
            }
        }
    }
    barrier();
    // The group's subgroups (the host builds GROUPS > 1 only where a subgroup fits in a group).
    uint sg_first = group * (TPR / gl_SubgroupSize);
    uint sg_end = sg_first + TPR / gl_SubgroupSize;
#if defined(QKV_ROPE)
    if (lane == 0 && unit_valid) {
        float v[2];
        [[unroll]] for (uint r = 0; r < 2; r++) {
            float s = 0.0;
            for (uint sg = sg_first; sg < sg_end; sg++) {
                s += UNITS_PARTIALS[sg][r];
            }
            float b = PC(bias) != 0 ? F32s(PC(bias)).v[pair[r]] : 0.0;
#if defined(NORM_SCALE)
            s = norm_scaled(s, norm_scale[0]);
#endif
            v[r] = s + b;
        }
        uint pos = U32s(PC(positions)).v[0];
        if (rotated) {
            F32s tab = F32s(PC(table));
            float c = tab.v[pos * 2 * PC(half_dims) + angle];
            float sn = tab.v[pos * 2 * PC(half_dims) + PC(half_dims) + angle];
            // The CPU device's (and ggml's x86) fusing of the rotation, as rope_store.comp.
            // (fma_once pins its own rounding; a `precise` here would propagate back through v
            // to the product loop and forbid contracting its multiply-adds, which the batched
            // product, followed by rope_store.comp, may contract: other bits in a batch.)
            float ra = fma_once(v[0], c, -(v[1] * sn));
            float rb = fma_once(v[0], sn, v[1] * c);
            v[0] = ra;
            v[1] = rb;
        }
        if (QKV_PROJECTION == 0) {
            F32s(PC(out_)).v[pair.x] = v[0];
            F32s(PC(out_)).v[pair.y] = v[1];
#if defined(TAGGED_OUT)
            // One 8-byte store a value: the value and the proof that it is this layer's.
            uint tag = STEP_TAG;
            U32x2s(PC(tagged)).v[pair.x] = uvec2(floatBitsToUint(v[0]), tag);
            U32x2s(PC(tagged)).v[pair.y] = uvec2(floatBitsToUint(v[1]), tag);
#endif
        } else {
            uint at = kv_cell(U32s(PC(tables)), U32s(PC(table_offsets)).v[0], pos, PC(block_size)) * PC(row_stride);
            F16s(PC(out_)).v[at + pair.x] = float16_t(f16_rne(v[0]));
            F16s(PC(out_)).v[at + pair.y] = float16_t(f16_rne(v[1]));
#if defined(TAGGED_OUT)
            // The new cell's row as the cache holds it (f16 bits), read by the split kernels
            // in place of the cell (which they may reach before this store).
            uint tag = STEP_TAG;
            U32x2s(PC(tagged)).v[pair.x] = uvec2(packHalf2x16(vec2(f16_rne(v[0]), 0.0)), tag);
            U32x2s(PC(tagged)).v[pair.y] = uvec2(packHalf2x16(vec2(f16_rne(v[1]), 0.0)), tag);
#endif
        }
    }
#elif defined(SWIGLU_PAIR)
    if (lane == 0) {
        [[unroll]] for (uint p = 0; p < PAIRS; p++) {
            float gu[2];
            [[unroll]] for (uint r = 0; r < 2; r++) {
                float s = 0.0;
                for (uint sg = sg_first; sg < sg_end; sg++) {
                    s += UNITS_PARTIALS[sg][2 * p + r];
                }
#if defined(NORM_SCALE)
                s = norm_scaled(s, norm_scale[0]);
#endif
                gu[r] = s;
            }
            if (unit_valid && out_row + p < PC(rows)) {
                float y = ggml_silu(gu[0]) * gu[1];
                F32sC(PC(act)).v[out_row + p] = y;
#if defined(TAGGED_OUT)
                U32x2s(PC(tagged)).v[out_row + p] = uvec2(floatBitsToUint(y), STEP_TAG);
#endif
            }
        }
#if !defined(NO_TICKET)
        memoryBarrierBuffer();
#endif
    }
#if !defined(NO_TICKET)
    // (NO_TICKET builds, the default, stop at the f32 output; the quantization then runs as a
    // dispatch of its own: the fence and ticket per workgroup cost more than that dispatch.)
    // A workgroup's units lie in one chunk (GROUPS divides 256); it counts the valid ones.
    uint first = wg * GROUPS;
    uint chunk = first / 256;
    if (!completes_chunk(chunk, min(first + GROUPS, PC(rows)) - first, PC(rows), PC(counters))) {
        return;
    }
    // The chunk's 256 outputs are the first 32 slots' (the others hold zeros and write nothing).
    uint slot = ql_slot();
    uint e0 = slot < 32 ? chunk * 256 + 8 * slot : PC(rows);
    float vs[8];
    [[unroll]] for (uint k = 0; k < 8; k++) {
        vs[k] = e0 + k < PC(rows) ? F32sC(PC(act)).v[e0 + k] : 0.0;
    }
    ql_quantize(vs, slot, e0, PC(rows), PC(records), PC(out_meta_offset));
    if (tid == 0) {
        U32sC(PC(counters)).v[chunk] = 0;
    }
#endif
#else
    if (lane < ROWS * NT) {
        uint row = row0 + lane / NT;
        uint token = t0 + lane % NT;
        float s = 0.0;
        for (uint sg = sg_first; sg < sg_end; sg++) {
            s += UNITS_PARTIALS[sg][lane];
        }
        if (row < PC(rows) && token < PC(n_tokens)) {
            float b = PC(bias) != 0 ? F32s(PC(bias)).v[row] : 0.0;
            uint at = token * PC(out_stride) + row;
#if defined(NORM_SCALE)
            // The RMSNorm's scale before the bias, as the fused one-token products apply it.
            s = norm_scaled(s, norm_scale[lane % NT]);
#endif
            // As the CPU: the projection (with its bias), then the residual add.
            float r = s + b;
#if defined(NORM_EPILOGUE)
            F32sC(PC(out_)).v[at] = PC(accumulate) != 0 ? IN_F32S(PC(out_)).v[at] + r : r;
            memoryBarrierBuffer();
#else
            float sum = PC(accumulate) != 0 ? IN_F32S(PC(out_)).v[at] + r : r;
            F32s(PC(out_)).v[at] = sum;
#if defined(TAGGED_OUT)
            // One 8-byte store: the value and the proof that it is this step's arrive together.
            U32x2s(PC(tagged)).v[at] = uvec2(floatBitsToUint(sum), STEP_TAG);
#endif
#endif
        }
    }
#if defined(NORM_EPILOGUE)
    // The RMSNorm of the row this product completes, without a stage of its own: the last
    // workgroup to finish a chunk of 256 rows (its ticket) quantizes the chunk's x * weight for
    // the next product (quantize_lanes.glsl; the norm's scale, which the quantization does not
    // change but for rounding, multiplies that product's outputs: its NORM_SCALE build) and
    // leaves the chunk's sum of squares. A workgroup's rows lie in one chunk (GROUPS * ROWS
    // divides 256).
    uint first = wg * GROUPS * ROWS;
    uint chunk = first / 256;
    if (!completes_chunk(chunk, min(first + GROUPS * ROWS, PC(rows)) - first, PC(rows), PC(counters))) {
        return;
    }
    // The chunk's 256 rows are the first 32 slots' (the others hold zeros and write nothing).
    uint slot = ql_slot();
    uint e0 = slot < 32 ? chunk * 256 + 8 * slot : PC(rows);
    float vs[8];
    float g[8];
    [[unroll]] for (uint k = 0; k < 8; k++) {
        vs[k] = e0 + k < PC(rows) ? F32sC(PC(out_)).v[e0 + k] : 0.0;
        g[k] = e0 + k < PC(rows) ? F32s(PC(norm_w)).v[e0 + k] : 0.0;
    }
    float squares = ql_norm_run(vs, g);
    ql_quantize(vs, slot, e0, PC(rows), PC(records), PC(records_meta_offset));
    if (slot < 32) {
        ne_squares[slot] = squares;
    }
    barrier();
    if (tid == 0) {
        float total = 0.0;
        for (uint k = 0; k < 32; k++) {
            total += ne_squares[k];
        }
        F32s p = F32s(PC(norm_partials));
        p.v[1 + chunk] = total;
        if (chunk == 0) {
            p.v[0] = PC(eps);
        }
        U32sC(PC(counters)).v[chunk] = 0;
    }
#endif
#endif
}
