// The CPU device's activation quantizer (ggml's x86 Q8_0/Q8_1 and Q8_K) written as the integer
// kernels' 8-bit record, with each invocation holding eight consecutive elements: a block of 32 is
// one quad of invocations, so its largest magnitude and its quant sum are two quad swaps each,
// with no barrier; a Q8_K super-block (eight quads) takes one trip through shared memory. (The
// tree reduction over shared memory this replaces took ~15 barriers a chunk.) The quants land at
// byte e of the record, and per block of 32 at `meta_offset` the (scale as f32 bits, sum of the
// quants) pair (for Q8_K the super-block's scale repeated in each of its eight blocks).
//
// Callers: every invocation of the workgroup calls ql_quantize, or, to quantize several runs
// around one barrier, ql_block_max for each, then (Q8_K) barrier(), then ql_write for each, with
// its slot: ql_slot() (plus a multiple of 32 for each further run of a workgroup
// holding several), whose invocation holds elements 8 * slot .. 8 * slot + 7 of the workgroup's
// span, which starts at a multiple of 256 elements; elements past the row are 0.0 (and not
// written). Block maxima keep the first element of the largest magnitude, as the CPU's scan does.
// Needs SEG (32 or 256: ACT_Q8_0 or ACT_Q8_K), QL_BLOCKS (blocks of 32 a workgroup holds) and
// U32x2s.
#extension GL_KHR_shader_subgroup_quad : require

#define QL_E 8

#if SEG == 256
// Each block's (largest magnitude, its signed value), for the super-block's scale.
shared vec2 ql_block[QL_BLOCKS];
#endif

// The invocation's place: consecutive within a subgroup, so a quad is four consecutive slots.
uint ql_slot() {
    return gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
}

// The block's largest magnitude (x) in every invocation of the quad, and (y) the signed value
// of its first element of that magnitude in the quad's first invocation (strict comparisons
// there keep the earlier invocation's on ties; the others may hold the other sign). Q8_K builds
// also leave the first invocation's in shared memory for ql_write (a barrier must come between).
vec2 ql_block_max(float v[QL_E], uint slot) {
    float a = 0.0;
    float s = 0.0;
    [[unroll]] for (uint e = 0; e < QL_E; e++) {
        if (abs(v[e]) > a) {
            a = abs(v[e]);
            s = v[e];
        }
    }
    float oa = subgroupQuadSwapHorizontal(a);
    float os = subgroupQuadSwapHorizontal(s);
    if (oa > a) {
        a = oa;
        s = os;
    }
    oa = subgroupQuadSwapVertical(a);
    os = subgroupQuadSwapVertical(s);
    if (oa > a) {
        a = oa;
        s = os;
    }
#if SEG == 256
    if ((gl_SubgroupInvocationID & 3u) == 0u) {
        ql_block[slot / 4] = vec2(a, s);
    }
#endif
    return vec2(a, s);
}

// The invocation's eight quants packed in two words and its block's (scale bits, quant sum),
// given its block's ql_block_max: what ql_write stores. Every invocation of a quad must call it
// (the sum takes two quad swaps).
void ql_encode(float v[QL_E], vec2 block, uint slot, out uvec2 packed, out uvec2 meta) {
    int q[QL_E];
#if SEG == 256
    // The super-block's first largest magnitude, over its eight blocks in order.
    uint first = (slot / 32) * 8;
    vec2 m = ql_block[first];
    [[unroll]] for (uint j = 1; j < 8; j++) {
        vec2 b = ql_block[first + j];
        if (b.x > m.x) {
            m = b;
        }
    }
    float d = 0.0;
    if (m.x == 0.0) {
        [[unroll]] for (uint e = 0; e < QL_E; e++) {
            q[e] = 0;
        }
    } else {
        float iscale = div_rn(-127.0, m.y);
        [[unroll]] for (uint e = 0; e < QL_E; e++) {
            q[e] = int(min(roundEven(iscale * v[e]), 127.0));
        }
        d = div_rn(1.0, iscale);
    }
#else
    float amax = block.x;
    float d = div_rn(amax, 127.0);
    float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    [[unroll]] for (uint e = 0; e < QL_E; e++) {
        q[e] = int(roundEven(v[e] * id));
    }
#endif
    int sum = 0;
    packed = uvec2(0);
    [[unroll]] for (uint e = 0; e < QL_E; e++) {
        sum += q[e];
        packed[e / 4] |= (uint(q[e]) & 0xFFu) << (8 * (e % 4));
    }
    sum += subgroupQuadSwapHorizontal(sum);
    sum += subgroupQuadSwapVertical(sum);
    meta = uvec2(floatBitsToUint(d), uint(sum));
}

// Quantizes the invocation's elements (`e0`: the row index of v[0]; `cols`: the row's length)
// into the record at `rec`, given its block's ql_block_max.
void ql_write(float v[QL_E], vec2 block, uint slot, uint e0, uint cols, uint64_t rec, uint meta_offset) {
    uvec2 packed;
    uvec2 meta;
    ql_encode(v, block, slot, packed, meta);
    if (e0 < cols) {
        U32x2s(rec).v[e0 / 8] = packed;
        if ((gl_SubgroupInvocationID & 3u) == 0u) {
            U32x2s(rec + meta_offset).v[e0 / 32] = meta;
        }
    }
}

// ql_block_max, the barrier a Q8_K super-block needs, and ql_write: one run an invocation.
void ql_quantize(float v[QL_E], uint slot, uint e0, uint cols, uint64_t rec, uint meta_offset) {
    vec2 block = ql_block_max(v, slot);
#if SEG == 256
    barrier();
#endif
    ql_write(v, block, slot, e0, cols, rec, meta_offset);
}

// The chunked RMSNorm's share of a run (quantize_act.comp NORM_W, matvec_q_units.glsl
// NORM_EPILOGUE; one function so that both compute the same bits): `v` holds the run's x and
// becomes x * weight for ql_quantize (8-bit quantization is scale-invariant but for rounding:
// the products after it multiply by the norm's scale); returns the run's sum of squares, which
// the caller adds to its chunk's over the 32 slots in order.
float ql_norm_run(inout float v[QL_E], float weight[QL_E]) {
    float squares = 0.0;
    [[unroll]] for (uint k = 0; k < QL_E; k++) {
        float x = v[k];
        squares += x * x;
        v[k] = x * weight[k];
    }
    return squares;
}
