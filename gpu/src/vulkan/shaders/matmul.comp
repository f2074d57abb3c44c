#version 450
// out[t][row] = dot(W[row], x[t]) (+ bias[row]) for many tokens (prefill): 64 rows x 64 tokens per
// workgroup, 32 columns (one unit) at a time through shared memory; each invocation computes a 4x4
// patch of the output.
#include "common.glsl"
#include "dequant.glsl"

#define BM 64
#define BN 64

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint64_t w;
    uint64_t aux;
    uint64_t x;
    uint64_t out_;
    uint64_t bias;
    uint rows;
    uint cols;
    uint n_tokens;
    uint x_stride;
    uint out_stride;
} pc;

shared float ws[32][BM + 1];
shared float xs[32][BN + 1];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint row0 = gl_WorkGroupID.x * BM;
    uint tok0 = gl_WorkGroupID.y * BN;
    uint tr = (tid % 16) * 4;
    uint tt = (tid / 16) * 4;
    uint n_units = (pc.cols + 31) / 32;
    F32s x = F32s(pc.x);
    float acc[4][4];
    [[unroll]] for (uint i = 0; i < 4; i++) {
        [[unroll]] for (uint j = 0; j < 4; j++) {
            acc[i][j] = 0.0;
        }
    }
    for (uint u = 0; u < n_units; u++) {
        if (tid < BM) {
            uint row = row0 + tid;
            float wv[32];
            if (row < pc.rows) {
                dequant_unit(pc.w, pc.aux, pc.cols, row, u, wv);
            } else {
                [[unroll]] for (uint i = 0; i < 32; i++) {
                    wv[i] = 0.0;
                }
            }
            [[unroll]] for (uint i = 0; i < 32; i++) {
                ws[i][tid] = wv[i];
            }
        }
        for (uint e = tid; e < 32 * BN; e += 256) {
            uint k = e % 32;
            uint t = e / 32;
            uint c = u * 32 + k;
            xs[k][t] = (tok0 + t < pc.n_tokens && c < pc.cols) ? x.v[(tok0 + t) * pc.x_stride + c] : 0.0;
        }
        barrier();
        [[unroll]] for (uint k = 0; k < 32; k++) {
            vec4 a = vec4(ws[k][tr], ws[k][tr + 1], ws[k][tr + 2], ws[k][tr + 3]);
            vec4 b = vec4(xs[k][tt], xs[k][tt + 1], xs[k][tt + 2], xs[k][tt + 3]);
            [[unroll]] for (uint i = 0; i < 4; i++) {
                acc[i][0] += a[i] * b.x;
                acc[i][1] += a[i] * b.y;
                acc[i][2] += a[i] * b.z;
                acc[i][3] += a[i] * b.w;
            }
        }
        barrier();
    }
    F32s o = F32s(pc.out_);
    [[unroll]] for (uint i = 0; i < 4; i++) {
        uint row = row0 + tr + i;
        if (row >= pc.rows) {
            continue;
        }
        float b = pc.bias != 0 ? F32s(pc.bias).v[row] : 0.0;
        [[unroll]] for (uint j = 0; j < 4; j++) {
            uint t = tok0 + tt + j;
            if (t < pc.n_tokens) {
                o.v[t * pc.out_stride + row] = acc[i][j] + b;
            }
        }
    }
}
