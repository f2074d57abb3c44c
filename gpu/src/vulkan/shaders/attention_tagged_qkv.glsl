// The split kernels' TAGGED_IN inputs (attention_decode.comp, attention_decode_gqa.comp): the
// queries and the newest cell's K and V, polled from the row the QKV products tag (matvec_q.comp
// QKV_ROPE + TAGGED_OUT), recorded right before the split kernel without a pipeline barrier. The
// row holds (bits, tag) per element: q (f32) of every query head, then K and V (f16 bits) of
// every KV head. Included after the includer's `qs`; the push constants name `tagged_qkv`,
// `give_ups`, `n_heads` and `n_kv_heads`.
#include "tagged.glsl"
// The newest cell's K and V rows of this KV head (f16 pairs), from the tagged row: the cache's
// copy may not be written yet when this workgroup reaches it.
shared uint k_new[MAX_HD / 2];
shared uint v_new[MAX_HD / 2];

// Polls `q_pairs` f16 pairs of queries from pair `q_first` of the row into `qs` (rounded to f16
// as the CPU device, and ggml, round the query before it meets the f16 cache) and, where
// `with_newest`, KV head `kvh`'s new K and V rows into `k_new` and `v_new`; a wait that gives up
// is counted in `give_ups`. Only TAG_POLL_LANES invocations poll; the caller's barrier follows.
void poll_tagged_qkv(uint tid, uint tag, uint q_first, uint q_pairs, uint kvh, uint pairs, bool with_newest) {
    uint k_at = pc.n_heads * pairs + kvh * pairs;
    uint v_at = k_at + pc.n_kv_heads * pairs;
    uint count = q_pairs + (with_newest ? 2 * pairs : 0);
    bool gave_up = false;
    for (uint i = tid; tid < TAG_POLL_LANES && i < count; i += TAG_POLL_LANES) {
        bool is_q = i < q_pairs;
        bool is_k = !is_q && i < q_pairs + pairs;
        uint p = is_q ? i : is_k ? i - q_pairs : i - q_pairs - pairs;
        uint at = is_q ? q_first + p : is_k ? k_at + p : v_at + p;
        uvec4 raw;
        gave_up = tagged_pair_settle(pc.tagged_qkv, at, tag, raw) || gave_up;
        if (is_q) {
            qs[2 * p] = f16_rne(uintBitsToFloat(raw.x));
            qs[2 * p + 1] = f16_rne(uintBitsToFloat(raw.z));
        } else if (is_k) {
            k_new[p] = (raw.x & 0xffffu) | (raw.z << 16);
        } else {
            v_new[p] = (raw.x & 0xffffu) | (raw.z << 16);
        }
    }
    if (gave_up) {
        atomicAdd(U32s(pc.give_ups).v[0], 1u);
    }
}
