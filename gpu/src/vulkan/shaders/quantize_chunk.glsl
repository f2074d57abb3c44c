// The CPU device's activation quantizer (ggml's x86 Q8_0/Q8_1 and Q8_K) over one 256-element
// chunk of a row, written as the integer kernels' 8-bit record: the quants at byte e of the row's
// record, and per block of 32 at `meta_offset` the (scale as f32 bits, sum of the quants) pair
// (for Q8_K the super-block's scale repeated in each of its eight blocks). Block maxima are a tree
// reduction that keeps the first element on ties, as the CPU's scan does.
//
// QC_WG invocations share a chunk, each holding 256 / QC_WG of its elements (element
// tid + QC_WG * k). Every workgroup invocation must call it (it synchronizes with barrier()).
// quantize_act.comp runs it with 256 invocations, the fused epilogues of other kernels with
// 128: the arithmetic per element and the reduction trees are the same, so are the bits.
// Needs SEG (32 or 256: ACT_Q8_0 or ACT_Q8_K) and U32x2s.

#define QC_PER (256 / QC_WG)

shared float qc_abs[256];
shared float qc_val[256];
shared int qc_sum[256];

// v[k]: element chunk_first + tid + QC_WG * k of the row (0.0 past `cols`).
void quantize_chunk(uint tid, uint chunk_first, float v[QC_PER], uint cols, uint64_t rec, uint meta_offset) {
    [[unroll]] for (uint k = 0; k < QC_PER; k++) {
        qc_abs[tid + QC_WG * k] = abs(v[k]);
        qc_val[tid + QC_WG * k] = v[k];
    }
    for (uint s = SEG / 2; s > 0; s >>= 1) {
        barrier();
        [[unroll]] for (uint k = 0; k < QC_PER; k++) {
            uint i = tid + QC_WG * k;
            if (i % SEG < s && qc_abs[i + s] > qc_abs[i]) {
                qc_abs[i] = qc_abs[i + s];
                qc_val[i] = qc_val[i + s];
            }
        }
    }
    barrier();
    float d[QC_PER];
    [[unroll]] for (uint k = 0; k < QC_PER; k++) {
        uint i = tid + QC_WG * k;
        uint e = chunk_first + i;
        uint first = i - i % SEG;
        float amax = qc_abs[first];
        // The quant and the scale its block stores.
        int q;
#if defined(ACT_Q8_K)
        if (amax == 0.0) {
            q = 0;
            d[k] = 0.0;
        } else {
            float iscale = div_rn(-127.0, qc_val[first]);
            q = int(min(roundEven(iscale * v[k]), 127.0));
            d[k] = div_rn(1.0, iscale);
        }
#else
        d[k] = div_rn(amax, 127.0);
        float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
        q = int(roundEven(v[k] * id));
#endif
        if (e < cols) {
            U8s(rec).v[e] = uint8_t(uint(q) & 0xFFu);
        }
        qc_sum[i] = e < cols ? q : 0;
    }
    for (uint s = 16; s > 0; s >>= 1) {
        barrier();
        [[unroll]] for (uint k = 0; k < QC_PER; k++) {
            uint i = tid + QC_WG * k;
            if (i % 32 < s) {
                qc_sum[i] += qc_sum[i + s];
            }
        }
    }
    barrier();
    [[unroll]] for (uint k = 0; k < QC_PER; k++) {
        uint i = tid + QC_WG * k;
        uint e = chunk_first + i;
        if (e < cols && i % 32 == 0) {
            U32x2s(rec + meta_offset).v[e / 32] = uvec2(floatBitsToUint(d[k]), uint(qc_sum[i]));
        }
    }
}
