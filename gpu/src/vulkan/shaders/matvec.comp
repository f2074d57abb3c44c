#version 450
// out[t][row] = dot(W[row], x[t]) (+ bias[row]) for a few tokens: the decode-step product, bound by
// the weights' read bandwidth. A workgroup is 4 teams of 32 invocations; a team owns ROWS rows and
// its invocations stride over the rows' 32-element units, so each weight byte is read once and the
// team's x reads hit the cache.
#include "common.glsl"
#include "dequant.glsl"

#define WG 128
#define TPR 32
#define ROWS 2
#define NT 4

layout(local_size_x = WG) in;

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

shared float red[ROWS * NT][WG];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint team = tid / TPR;
    uint lane = tid % TPR;
    uint row0 = (gl_WorkGroupID.x * (WG / TPR) + team) * ROWS;
    uint t0 = gl_WorkGroupID.y * NT;
    uint n_units = (pc.cols + 31) / 32;
    F32s x = F32s(pc.x);

    float acc[ROWS][NT];
    for (uint r = 0; r < ROWS; r++) {
        for (uint t = 0; t < NT; t++) {
            acc[r][t] = 0.0;
        }
    }
    for (uint u = lane; u < n_units; u += TPR) {
        for (uint r = 0; r < ROWS; r++) {
            uint row = row0 + r;
            if (row >= pc.rows) {
                break;
            }
            float wv[32];
            dequant_unit(pc.w, pc.aux, pc.cols, row, u, wv);
            for (uint t = 0; t < NT; t++) {
                if (t0 + t >= pc.n_tokens) {
                    break;
                }
                uint xb = (t0 + t) * pc.x_stride + u * 32;
                float s = 0.0;
#ifdef UNIT_TAIL
                uint lim = min(32u, pc.cols - u * 32);
                for (uint i = 0; i < lim; i++) {
                    s += wv[i] * x.v[xb + i];
                }
#else
                for (uint i = 0; i < 32; i++) {
                    s += wv[i] * x.v[xb + i];
                }
#endif
                acc[r][t] += s;
            }
        }
    }
    for (uint r = 0; r < ROWS; r++) {
        for (uint t = 0; t < NT; t++) {
            red[r * NT + t][tid] = acc[r][t];
        }
    }
    for (uint s = TPR / 2; s > 0; s >>= 1) {
        barrier();
        if (lane < s) {
            for (uint k = 0; k < ROWS * NT; k++) {
                red[k][tid] += red[k][tid + s];
            }
        }
    }
    barrier();
    if (lane == 0) {
        F32s o = F32s(pc.out_);
        for (uint r = 0; r < ROWS; r++) {
            uint row = row0 + r;
            if (row >= pc.rows) {
                break;
            }
            float b = pc.bias != 0 ? F32s(pc.bias).v[row] : 0.0;
            for (uint t = 0; t < NT; t++) {
                if (t0 + t >= pc.n_tokens) {
                    break;
                }
                o.v[(t0 + t) * pc.out_stride + row] = red[r * NT + t][tid] + b;
            }
        }
    }
}
