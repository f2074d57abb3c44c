# Session 49, call 3: where the chunked norm (STRATA_VULKAN_TAGGED_NORM_SCALE) gains and loses, on
# either card. The driver's register counts (shader_stats) of the QKV and gate/up products plain
# and scaled (.carryt/spv49/); 7B at context 512, two interleaved rounds of the default, the
# chunked norm before both products (=1), before QKV only (=qkv), before gate/up only (=ffn), and
# (Q4_K) =1 with STRATA_SWIGLU_SMALL_FIRST=1320; KL against the CPU one token a step (--ubatch 1).
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session49/s49c.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
STRATA_VULKAN_PROFILE=1 .carry/shader_stats 0 .carryt/spv49/*.spv 2>&1 | sed 's/ Local Memory Size=[0-9]*//' | tee $OUT/registers.txt
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for round in 1 2; do
  for ty in Q4_K Q4_1; do
    for cfg in "default NONE=1" "chunked-norm STRATA_VULKAN_TAGGED_NORM_SCALE=1" "chunked-qkv STRATA_VULKAN_TAGGED_NORM_SCALE=qkv" "chunked-ffn STRATA_VULKAN_TAGGED_NORM_SCALE=ffn" "chunked-norm+small-first STRATA_VULKAN_TAGGED_NORM_SCALE=1 STRATA_SWIGLU_SMALL_FIRST=1320"; do
      set -- $cfg
      [ "$ty" = Q4_1 ] && [ "$1" = chunked-norm+small-first ] && continue
      [ "$(left)" -lt 150 ] && break 3
      echo "$ty $1: $(env $2 ${3:-} $bin bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
    done
  done
done
for x in "chunked-norm STRATA_VULKAN_TAGGED_NORM_SCALE=1" "default NONE=1"; do
  set -- $x
  [ "$(left)" -lt 60 ] && break
  echo "KL $1: $(env $2 timeout $(( $(left) - 8 )) $bin compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --prompt-tokens 128 --positions 64 2>&1 | tail -2 | tr '\n' ' ')" | tee -a $OUT/kl.txt
done
echo "left: $(left) s"
