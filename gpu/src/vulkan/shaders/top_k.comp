#version 450
// The K_MAX largest values of each row of x (rows of `width` f32) with their positions, largest
// first, of equal values the smaller position first, NaNs never taken (strata_model::sampling::
// top_k): a sampling step's candidates without reading its logits back. One workgroup per row;
// out row i holds K_MAX (position, value bits) pairs, position 0xFFFFFFFF past the row's values.
// Values are compared by order-preserving keys (-0 below +0, as f32::total_cmp).
//
// Each invocation's largest key first, then each subgroup's r-th largest of those (r = K_MAX /
// subgroups): the smallest of them is a floor under the row's K_MAX-th largest value (every
// subgroup holds r values at least that large). The keys at or above the floor (for logits,
// typically not many more than K_MAX) are gathered in shared memory and ranked there. Should
// more than CAP pass the floor, a radix select (four passes of 8 bits over the keys at or above
// the floor, each a histogram of the next byte among the keys sharing the bytes fixed so far;
// slow where many keys share a byte, hence not first) fixes the K_MAX-th largest key exactly and
// gathers the keys above it and, of the keys equal to it, the first ones by position.
#include "common.glsl"

#define WG 1024
#define K_MAX 64
#define CAP 2048
#define IN_FLIGHT 8
layout(local_size_x = WG) in;

layout(push_constant) uniform Push {
    uint64_t x;
    uint64_t out_;
    uint width;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2s { uvec2 v[]; };

shared uint cand_key[CAP];
shared uint cand_pos[CAP];
shared uint n_cand;
shared uint s_floor;
shared uint s_valid;
// The radix select's state.
shared uint hist[256];
shared uint s_prefix;
shared uint s_mask;
shared uint s_need;
shared uint s_done;
shared uint s_taken;
// A count per subgroup (subgroups of at least 4 invocations).
shared uint sub_counts[WG / 4];

// The order-preserving key of v; 0 for NaN (below every value: -inf's key is 0x007FFFFF).
uint key_of(float v) {
    uint b = floatBitsToUint(v);
    if (isnan(v)) {
        return 0u;
    }
    return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}

float value_of(uint key) {
    return uintBitsToFloat((key & 0x80000000u) != 0u ? key & 0x7FFFFFFFu : ~key);
}

// Adds key (at position i) to the candidates when it passes the floor.
void gather(uint key, uint i, uint key_floor) {
    if (key != 0u && key >= key_floor) {
        uint slot = atomicAdd(n_cand, 1u);
        if (slot < CAP) {
            cand_key[slot] = key;
            cand_pos[slot] = i;
        }
    }
}

// The radix select over keys at or above `key_floor`: leaves cand_key / cand_pos[0, want) holding
// exactly the `want` largest (unordered).
void radix_select(F32s x, uint key_floor, uint want) {
    uint tid = gl_LocalInvocationID.x;
    if (tid == 0) {
        s_prefix = 0u;
        s_mask = 0u;
        s_need = want;
        s_done = 0u;
        s_taken = 0u;
        n_cand = 0u;
    }
    for (uint pass = 0; pass < 4; pass++) {
        uint shift = 24u - 8u * pass;
        if (tid < 256) {
            hist[tid] = 0u;
        }
        barrier();
        if (s_done != 0u) {
            break;
        }
        uint prefix = s_prefix;
        uint mask = s_mask;
        for (uint i = tid; i < pc.width; i += WG) {
            uint key = key_of(x.v[i]);
            if (key != 0u && key >= key_floor && (key & mask) == prefix) {
                atomicAdd(hist[(key >> shift) & 255u], 1u);
            }
        }
        barrier();
        // The bin holding the want-th largest (`need` still wanted among the keys with this
        // prefix), scanned from the top by one invocation.
        if (tid == 0) {
            uint need = s_need;
            uint cum = 0u;
            uint bin = 0u;
            for (int b = 255; b >= 0; b--) {
                uint h = hist[b];
                if (cum + h >= need) {
                    bin = uint(b);
                    break;
                }
                cum += h;
            }
            s_prefix = prefix | (bin << shift);
            s_mask = mask | (255u << shift);
            s_need = need - cum;
            // The bin holds exactly the keys still wanted: take it whole.
            s_done = hist[bin] == need - cum ? 1u : 0u;
        }
        barrier();
    }
    uint prefix = s_prefix;
    uint mask = s_mask;
    uint need = s_need;
    // Keys above the prefix (want - need of them) are all taken; keys equal to it (as masked),
    // `need` of them: all when exactly that many (s_done), else the first by position.
    for (uint i = tid; i < pc.width; i += WG) {
        uint key = key_of(x.v[i]);
        uint m = key & mask;
        if (key == 0u || key < key_floor) {
            continue;
        }
        if (m > prefix || (m == prefix && s_done != 0u)) {
            uint slot = atomicAdd(n_cand, 1u);
            cand_key[slot] = key;
            cand_pos[slot] = i;
        }
    }
    barrier();
    if (s_done == 0u) {
        // More keys equal the want-th largest than are still wanted (equal values): the first
        // `need` of them by position, a workgroup-wide ordered compaction.
        uint first = want - need;
        for (uint base = 0; base < pc.width; base += WG) {
            uint i = base + tid;
            uint eq = i < pc.width && key_of(x.v[i]) == prefix ? 1u : 0u;
            uint rank = subgroupExclusiveAdd(eq);
            uint total = subgroupAdd(eq);
            if (subgroupElect()) {
                sub_counts[gl_SubgroupID] = total;
            }
            barrier();
            uint slot = s_taken + rank;
            for (uint s = 0; s < gl_SubgroupID; s++) {
                slot += sub_counts[s];
            }
            if (eq != 0u && slot < need) {
                cand_key[first + slot] = prefix;
                cand_pos[first + slot] = i;
            }
            barrier();
            if (tid == 0) {
                for (uint s = 0; s < gl_NumSubgroups; s++) {
                    s_taken += sub_counts[s];
                }
            }
            barrier();
            if (s_taken >= need) {
                break;
            }
        }
    }
    if (tid == 0) {
        n_cand = want;
    }
    barrier();
}

void main() {
    uint row = gl_WorkGroupID.x;
    uint tid = gl_LocalInvocationID.x;
    F32s x = F32s(pc.x + uint64_t(row) * pc.width * 4);
    if (tid == 0) {
        n_cand = 0u;
        s_valid = 0u;
        s_floor = 0xFFFFFFFFu;
    }
    // This invocation's largest key and its count of values, IN_FLIGHT loads in flight a pass
    // (one a pass, a dependent L2 round trip each, made the 152k row's pass ~40 us on the H200).
    uint best = 0u;
    uint valid = 0u;
    uint c = tid;
    for (; c + (IN_FLIGHT - 1) * WG < pc.width; c += IN_FLIGHT * WG) {
        uint k[IN_FLIGHT];
        [[unroll]] for (uint u = 0; u < IN_FLIGHT; u++) {
            k[u] = key_of(x.v[c + u * WG]);
        }
        [[unroll]] for (uint u = 0; u < IN_FLIGHT; u++) {
            best = max(best, k[u]);
            valid += k[u] != 0u ? 1u : 0u;
        }
    }
    for (; c < pc.width; c += WG) {
        uint k = key_of(x.v[c]);
        best = max(best, k);
        valid += k != 0u ? 1u : 0u;
    }
    valid = subgroupAdd(valid);
    if (subgroupElect()) {
        atomicAdd(s_valid, valid);
    }
    // The floor: each subgroup's r-th largest maximum (r = K_MAX / subgroups, rounded up), the
    // smallest of those; then every subgroup holds r values at least that large, K_MAX or more
    // in all. (0, every value passing, where a subgroup holds fewer than r values.)
    uint r = (uint(K_MAX) + gl_NumSubgroups - 1) / gl_NumSubgroups;
    uint cur = best;
    uint rth = 0u;
    for (uint k = 0; k < r; k++) {
        rth = subgroupMax(cur);
        uint holder = subgroupMin(cur == rth ? gl_SubgroupInvocationID : 0xFFFFFFFFu);
        if (gl_SubgroupInvocationID == holder) {
            cur = 0u;
        }
    }
    if (subgroupElect()) {
        atomicMin(s_floor, rth);
    }
    barrier();
    uint key_floor = s_floor;
    uint want = min(uint(K_MAX), s_valid);
    c = tid;
    for (; c + (IN_FLIGHT - 1) * WG < pc.width; c += IN_FLIGHT * WG) {
        uint k[IN_FLIGHT];
        [[unroll]] for (uint u = 0; u < IN_FLIGHT; u++) {
            k[u] = key_of(x.v[c + u * WG]);
        }
        [[unroll]] for (uint u = 0; u < IN_FLIGHT; u++) {
            gather(k[u], c + u * WG, key_floor);
        }
    }
    for (; c < pc.width; c += WG) {
        gather(key_of(x.v[c]), c, key_floor);
    }
    barrier();
    if (n_cand > CAP) {
        barrier();
        radix_select(x, key_floor, want);
    }
    uint n = n_cand;
    // Each candidate's rank: larger key first, of equal keys the smaller position.
    U32x2s out_ = U32x2s(pc.out_ + uint64_t(row) * K_MAX * 8);
    for (uint ci = tid; ci < n; ci += WG) {
        uint k = cand_key[ci];
        uint p = cand_pos[ci];
        uint rank = 0u;
        for (uint j = 0; j < n && rank < want; j++) {
            uint kj = cand_key[j];
            rank += kj > k || (kj == k && cand_pos[j] < p) ? 1u : 0u;
        }
        if (rank < want) {
            out_.v[rank] = uvec2(p, floatBitsToUint(value_of(k)));
        }
    }
    if (tid >= want && tid < K_MAX) {
        out_.v[tid] = uvec2(0xFFFFFFFFu, 0u);
    }
}
