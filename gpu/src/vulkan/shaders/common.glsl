// Shared by every strata-rt compute shader: buffers are reached through device addresses passed in
// push constants (VK_KHR_buffer_device_address), so no shader binds a descriptor set.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference2 : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer F16s { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32s { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U32x4s { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer U8s { uint8_t v[]; };
// Views whose loads and stores reach other workgroups of the same dispatch (with
// memoryBarrierBuffer()): the fused epilogues, where the last workgroup to finish a chunk of
// outputs reads what the others wrote (its ticket from an atomic counter).
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer F32sC { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer U32sC { uint v[]; };

#if defined(CHAINED)
// Chained builds (chain.glsl) run beside the dispatch before them, without a pipeline barrier
// and so without its cache invalidation: f32 rows that another dispatch of the same step wrote
// (the residual stream, the SwiGLU row) are read through coherent views, which no stale line of
// an earlier read in this SM can serve. The 8-bit records are not (read by every workgroup of a
// product, they need the L1: through coherent views the 7B's decode fell from 410 to 282 t/s on
// the H200); a chained step writes each to a slot of its own instead. Weights, which no step
// writes, keep the cached views.
layout(buffer_reference, std430, buffer_reference_align = 16) coherent buffer Vec4sC { vec4 v[]; };
#define IN_F32S F32sC
#define IN_VEC4S Vec4sC
#else
#define IN_F32S F32s
#define IN_VEC4S Vec4s
#endif

// a / b and sqrt(a) rounded once, as the CPU computes them: Vulkan lets a division or square root
// be off by a few ulps (llvmpipe's division is), which moves an 8-bit activation a whole step
// now and then. F64 builds compute the square root in f64 (correctly rounded there, and the
// rounding to f32 then exact) and the division in integers: `float(double(a) / double(b))` is
// what they did before, until Mesa 25's llvmpipe skipped the rounding to f32 between two of
// them (the quantizer's 1 / (-127 / max) came out one ulp off in about a third of its scales):
// a compiler may rewrite f64 arithmetic that is not `precise`. Integers leave nothing to rewrite.
#if defined(F64) || defined(FMA_F64)
// The significand of a finite nonzero f32 in [2^23, 2^24) (x) and its biased exponent, subnormals
// shifted up (y: 1 - the shift).
ivec2 significand_exponent(uint bits) {
    uint e = (bits >> 23) & 0xFFu;
    uint m = bits & 0x7FFFFFu;
    if (e == 0u) {
        int s = 23 - findMSB(m);
        return ivec2(int(m << uint(s)), 1 - s);
    }
    return ivec2(int(m | 0x800000u), int(e));
}

// The f32 nearest (ties to even) to the exact value q / 2^shift * 2^(e - 127 - 23), where
// q >> shift has 24 significant bits, 1 <= shift < 64, and `rest` says whether anything nonzero
// lies below q's last bit: subnormals and overflow to infinity included.
float round_to_f32(uint sign, uint64_t q, int e, uint shift, bool rest) {
    if (e < 1) {
        // A subnormal result: fewer significant bits; from 64 on, none (q < 2^63 rounds to 0).
        uint total = shift + uint(min(1 - e, 100));
        if (total >= 64u) {
            return uintBitsToFloat(sign);
        }
        shift = total;
        e = 0;
    }
    uint mant = uint(q >> shift);
    uint64_t dropped = q & ((1ul << shift) - 1ul);
    uint64_t half_ulp = 1ul << (shift - 1u);
    if (dropped > half_ulp || (dropped == half_ulp && (rest || (mant & 1u) != 0u))) {
        mant += 1u;
    }
    // Normal: the exponent field plus the significand with its hidden bit (a carry out of the
    // significand steps the exponent, and past the largest finite value reaches infinity).
    uint bits = e >= 1 ? (uint(e - 1) << 23) + mant : mant;
    bits = e >= 255 ? 0x7F800000u : min(bits, 0x7F800000u);
    return uintBitsToFloat(sign | bits);
}

bool is_inf_or_nan(uint bits) {
    return (bits & 0x7F800000u) == 0x7F800000u;
}

bool is_zero(uint bits) {
    return (bits & 0x7FFFFFFFu) == 0u;
}

// a / b correctly rounded, by a long division of the significands in 64-bit integers.
float div_rn_integer(float a, float b) {
    uint ua = floatBitsToUint(a);
    uint ub = floatBitsToUint(b);
    if (is_inf_or_nan(ua) || is_inf_or_nan(ub) || is_zero(ua) || is_zero(ub)) {
        // NaN, infinity or zero on either side, spelled out: a driver's `a / b` may be
        // a * (1 / b), and NVIDIA's flushes 1 / b to zero for b above 2^126 (inf / 3.4e38 came
        // out NaN on the H200).
        uint sign = (ua ^ ub) & 0x80000000u;
        bool nan = (ua & 0x7FFFFFFFu) > 0x7F800000u || (ub & 0x7FFFFFFFu) > 0x7F800000u;
        bool a_inf = is_inf_or_nan(ua);
        bool b_inf = is_inf_or_nan(ub);
        if (nan || (a_inf && b_inf) || (is_zero(ua) && is_zero(ub))) {
            return uintBitsToFloat(0x7FC00000u);
        }
        // inf / finite and finite / 0: infinity; 0 / nonzero and finite / inf: zero.
        return uintBitsToFloat(sign | (a_inf || is_zero(ub) ? 0x7F800000u : 0u));
    }
    ivec2 x = significand_exponent(ua);
    ivec2 y = significand_exponent(ub);
    // q in (2^25, 2^27): 24 significant bits, a round bit and one more below it or two.
    uint64_t num = uint64_t(x.x) << 26;
    uint64_t q = num / uint64_t(y.x);
    bool rest = num - q * uint64_t(y.x) != 0ul;
    bool wide = q >= (1ul << 26);
    return round_to_f32((ua ^ ub) & 0x80000000u, q, x.y - y.y + (wide ? 127 : 126), wide ? 3u : 2u, rest);
}

// a * b correctly rounded, in integers (fma_rn_integer's product when c is zero).
float mul_rn_integer(float a, float b) {
    uint ua = floatBitsToUint(a);
    uint ub = floatBitsToUint(b);
    if (is_inf_or_nan(ua) || is_inf_or_nan(ub) || is_zero(ua) || is_zero(ub)) {
        return a * b;
    }
    ivec2 x = significand_exponent(ua);
    ivec2 y = significand_exponent(ub);
    // p in [2^46, 2^48): exact.
    uint64_t p = uint64_t(x.x) * uint64_t(y.x);
    bool wide = p >= (1ul << 47);
    return round_to_f32((ua ^ ub) & 0x80000000u, p, x.y + y.y + (wide ? -126 : -127), wide ? 24u : 23u, false);
}

// v >> n with the bits shifted out ORed into the last bit (a "sticky" bit): enough for rounding
// a sum whose result has its rounding place at least two bits above bit 0.
uint64_t shift_right_sticky(uint64_t v, int n) {
    if (n >= 64) {
        return v != 0ul ? 1ul : 0ul;
    }
    uint64_t kept = v >> uint(n);
    return kept | ((v & ((1ul << uint(n)) - 1ul)) != 0ul ? 1ul : 0ul);
}

int msb64(uint64_t v) {
    uint hi = uint(v >> 32);
    return hi != 0u ? 32 + findMSB(hi) : findMSB(uint(v));
}

// fma(a, b, c) rounded once, in integers. `float(double(a) * double(b) + double(c))` did this
// before, until Mesa 25's llvmpipe gave other bits for chains of them (a lane's sum over a row's
// blocks), as for the division above. The product (48 bits) and c are aligned with the larger
// one's top bit at bit 61, the smaller shifted onto that scale (right with a sticky bit, then at
// most bit 0 is inexact, far below where the sum rounds), added or subtracted, and rounded.
float fma_rn_integer(float a, float b, float c) {
    uint ua = floatBitsToUint(a);
    uint ub = floatBitsToUint(b);
    uint uc = floatBitsToUint(c);
    if (is_inf_or_nan(ua) || is_inf_or_nan(ub) || is_zero(ua) || is_zero(ub)) {
        // The product is zero, infinite or NaN: exact in any arithmetic.
        return a * b + c;
    }
    if (is_inf_or_nan(uc)) {
        return c;
    }
    if (is_zero(uc)) {
        return mul_rn_integer(a, b);
    }
    ivec2 x = significand_exponent(ua);
    ivec2 y = significand_exponent(ub);
    ivec2 z = significand_exponent(uc);
    uint sign_p = (ua ^ ub) & 0x80000000u;
    uint sign_c = uc & 0x80000000u;
    // Values: p * 2^lsb_p and cm * 2^lsb_c.
    uint64_t p = uint64_t(x.x) * uint64_t(y.x);
    int lsb_p = x.y + y.y - 300;
    uint64_t cm = uint64_t(z.x);
    int lsb_c = z.y - 150;
    int top_p = lsb_p + msb64(p);
    int top_c = lsb_c + 23;
    uint64_t big;
    uint64_t small;
    uint sign_big;
    uint sign_small;
    int lsb;
    int k;
    if (top_p >= top_c) {
        int up = 61 - msb64(p);
        big = p << uint(up);
        lsb = lsb_p - up;
        k = lsb_c - lsb;
        small = k >= 0 ? cm << uint(k) : shift_right_sticky(cm, -k);
        sign_big = sign_p;
        sign_small = sign_c;
    } else {
        big = cm << 38u;
        lsb = lsb_c - 38;
        k = lsb_p - lsb;
        small = k >= 0 ? p << uint(k) : shift_right_sticky(p, -k);
        sign_big = sign_c;
        sign_small = sign_p;
    }
    uint64_t r;
    uint sign = sign_big;
    if (sign_big == sign_small) {
        r = big + small;
    } else if (big >= small) {
        r = big - small;
    } else {
        r = small - big;
        sign = sign_small;
    }
    if (r == 0ul) {
        // An exact cancellation: +0 when rounding to nearest.
        return 0.0;
    }
    int m = msb64(r);
    if (m < 24) {
        // Exact (nothing was shifted out): move the top bit up to where rounding needs it.
        r <<= uint(24 - m);
        lsb -= 24 - m;
        m = 24;
    }
    return round_to_f32(sign, r, lsb + m + 127, uint(m - 23), false);
}
#endif

float div_rn(float a, float b) {
#if defined(F64)
    return div_rn_integer(a, b);
#else
    return a / b;
#endif
}

float sqrt_rn(float a) {
#if defined(F64)
    return float(sqrt(double(a)));
#else
    return sqrt(a);
#endif
}

// x rounded to the nearest f16 value, ties to even, as the CPU converts (Vulkan leaves the
// rounding of a conversion to f16 to the implementation). In integers: a floating-point trick
// such as (|x| + 2^(e+13)) - 2^(e+13) was folded away by a driver's vectorizer even when
// `precise`. Significand bits below f16's last place are rounded off in the f32 bit pattern
// (13 of them from 2^-14 up, one more per binade below: f16's subnormals); a carry moves the
// exponent as it should.
float f16_rne(float x) {
    uint b = floatBitsToUint(x);
    uint sign = b & 0x80000000u;
    uint a = b & 0x7FFFFFFFu;
    if (a >= 0x477FF000u) {
        // From 65520 up (and infinity) to infinity; NaN stays NaN.
        return a > 0x7F800000u ? x : uintBitsToFloat(sign | 0x7F800000u);
    }
    uint e = a >> 23;
    if (e <= 102u) {
        // Below 2^-24, f16's smallest step: above half of it rounds up to it, the rest to zero.
        return uintBitsToFloat(sign | (a > 0x33000000u ? 0x33800000u : 0u));
    }
    uint drop = 13u + uint(max(113 - int(e), 0));
    uint r = a + (1u << (drop - 1u)) - 1u + ((a >> drop) & 1u);
    return uintBitsToFloat(sign | (r & ~((1u << drop) - 1u)));
}

// a * b + c rounded once, as the CPU's FMA. Vulkan lets `fma` round twice (its precision is that
// of a multiply and an add), and llvmpipe's does; FMA_F64 builds compute it in f64, where every
// product of two f32 values is exact, so only the sum rounds (to f64, then to f32: a double
// rounding that differs from one rounding once in ~2^29 sums).
float fma_once(float a, float b, float c) {
#if defined(FMA_F64)
    return fma_rn_integer(a, b, c);
#else
    precise float r = fma(a, b, c);
    return r;
#endif
}

// ggml's vectorized expf (AVX-512 build), which the CPU device computes bit for bit
// (strata-quant's ggml_float::v_expf): range reduction by ln 2, a degree-5 polynomial, 2^n.
// The rounding to an integer, z = x / ln 2 + 1.5 * 2^23 rounded once, gives n = z - 1.5 * 2^23;
// n is read from z's significand (z's exponent is 2^23's for |n| < 2^22) because compilers fold
// the float subtraction `(x*c + shift) - shift` into `x*c` even when `precise` (Mesa's vectorizer
// did, for all but the first of eight unrolled calls), which drops that rounding. Beyond |x| =
// 10^6 (where ggml's n overflows its range check) the result is ggml's: 0 or infinity.
float ggml_expf(float x) {
    if (abs(x) > 1.0e6) {
        return x < 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
    }
    const float shift = 12582912.0;
    precise float z = fma_once(x, uintBitsToFloat(0x3fb8aa3bu), shift);
    float n = float(int(floatBitsToUint(z) & 0x7FFFFFu) - 0x400000);
    precise float b = fma_once(-n, uintBitsToFloat(0x35bfbe8eu), fma_once(-n, uintBitsToFloat(0x3f317200u), x));
    if (abs(n) > 192.0) {
        return n <= 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
    }
    precise float u = b * b;
    precise float j = fma_once(fma_once(fma_once(uintBitsToFloat(0x3c072010u), b, uintBitsToFloat(0x3d2b9f17u)), u,
                               fma_once(uintBitsToFloat(0x3e2aaf33u), b, uintBitsToFloat(0x3efffedbu))),
                      u, fma_once(uintBitsToFloat(0x3f7ffff6u), b, 1.0));
    return ldexp(j, int(n));
}

// ggml's SiLU, x / (1 + expf(-x)), as the CPU device computes it.
float ggml_silu(float x) {
    return div_rn(x, 1.0 + ggml_expf(0.0 - x));
}

// The tag of the attention split records of one layer of a step (attention_decode.comp and
// attention_decode_gqa.comp TAGGED_OUT, quantize_act.comp COMBINE + TAGGED_IN): every layer
// rewrites them, so the tag is the step's (header word 3) times 256 plus the layer's salt
// (plan.rs: layer + 1, for fewer than 256 layers).
uint split_records_tag(uint step_tag, uint layer_salt) {
    return step_tag * 256u + layer_salt;
}

// The KV cell of position `pos` of the sequence whose block table starts at `table_offset`.
uint kv_cell(U32s tables, uint table_offset, uint pos, uint block_size) {
    return tables.v[table_offset + pos / block_size] * block_size + pos % block_size;
}

// The 6-bit scale (x) and min (y) of sub-block j of a Q4_K super-block whose 12 scale bytes
// conv.rs repacked (held here in three words): byte j (j < 8) is the scale with the min's two low
// bits above it, nibble j of the third word the min's four high bits. GGUF's packing (ggml's
// get_scale_min_k4) takes a branch on j < 4, which lanes of one subgroup take both ways.
uvec2 q4k_scale_min(uint w0, uint w1, uint w2, uint j) {
    uint b = ((j < 4u ? w0 : w1) >> (8u * (j % 4u))) & 0xFFu;
    return uvec2(b & 63u, (b >> 6) | (((w2 >> (4u * j)) & 15u) << 2));
}

#if defined(TIMELINE)
// Workgroup timeline builds (build.rs with STRATA_SHADER_TIMELINE=1 or sm; a developer's tool, never
// the default): every workgroup records its kernel, its index, and the device clock (ns) when
// it started and when its last invocation finished, into the buffer at the address the host
// gives as specialization constants (0: record nothing). The slot comes from an atomic taken at
// the start, so its latency hides behind the work and only a store is added at the end. The
// kernel's own `main` becomes `strata_main`, called from the recording one.
#extension GL_EXT_shader_realtime_clock : require
#if defined(TIMELINE_SM)
// (STRATA_SHADER_TIMELINE=sm: NVIDIA's SM index too, VK_NV_shader_sm_builtins.)
#extension GL_NV_shader_sm_builtins : require
#define TIMELINE_SM_ID gl_SMIDNV
#else
#define TIMELINE_SM_ID 0u
#endif
layout(constant_id = 240) const uint TIMELINE_ADDRESS_LO = 0;
layout(constant_id = 241) const uint TIMELINE_ADDRESS_HI = 0;
layout(constant_id = 242) const uint TIMELINE_KERNEL = 0;
layout(constant_id = 243) const uint TIMELINE_CAPACITY = 0;
// Word 0 counts the workgroups that took a slot; records (two uvec4 each) start at byte 16.
layout(buffer_reference, std430, buffer_reference_align = 16) buffer TimelineRecords { uint taken; uint pad0; uint pad1; uint pad2; uvec4 records[]; };
void strata_main();
void main() {
    bool recording = (TIMELINE_ADDRESS_LO | TIMELINE_ADDRESS_HI) != 0u && gl_LocalInvocationIndex == 0u;
    TimelineRecords timeline = TimelineRecords(packUint2x32(uvec2(TIMELINE_ADDRESS_LO, TIMELINE_ADDRESS_HI)));
    uint slot = 0xFFFFFFFFu;
    uvec2 started = uvec2(0);
    if (recording) {
        started = clockRealtime2x32EXT();
        slot = atomicAdd(timeline.taken, 1u);
    }
    strata_main();
    barrier();
    if (recording && slot < TIMELINE_CAPACITY) {
        uvec2 ended = clockRealtime2x32EXT();
        uint group = gl_WorkGroupID.x + gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
        timeline.records[2u * slot] = uvec4(TIMELINE_KERNEL, group, started.x, started.y);
        timeline.records[2u * slot + 1u] = uvec4(ended.x, ended.y, TIMELINE_SM_ID, 0u);
    }
}
#define main strata_main
#endif
