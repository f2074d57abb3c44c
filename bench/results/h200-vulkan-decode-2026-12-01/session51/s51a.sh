# Session 51's call, for the next session with device time (none was left to this one: 223 s).
# Build first, here: `bash scripts/build-device-carry.sh` (HEAD's binary into .carryt/strata-rt.gz).
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session51/s51a.sh
# carry [".gl", ".carryt"], on either card (the H200 is the one issue 5 names).
# 1. Decode's batch invariance on NVIDIA, never checked (its compiler fuses multiply-adds,
#    lavapipe's does not): `compare-devices --reference-ubatch 4`, one token a step against four,
#    bit for bit, on a synthetic Qwen2.5-0.5B in Q4_K (Q8_K records, the chunked norm) and Q4_1
#    (Q8_0-style records). ~60 s.
# 2. HEAD's default (the chunked norm for the K-quants, b69a59c and the QKV contraction fix,
#    3e5de3a, never timed on an H200) on 7B Q4_K and Q4_1 at context 512, with small units first
#    (STRATA_SWIGLU_SMALL_FIRST=1320) beside it, two interleaved rounds.
# 3. The KL against the CPU one token a step on 7B Q4_K, then, as far as the budget goes, the
#    whole table of issue 5 (bench/h200_vulkan.sh: pp2048, context 512 and 8192, batches 8 and 32).
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
synth qwen2.5-0.5b Q4_K Q4_1 &
synth qwen2.5-7b Q4_K Q4_1 &
wait
echo "models ready, $(left) s left"
for ty in Q4_K Q4_1; do
  timeout 120 $bin compare-devices -m $PWD/target/m/qwen2.5-0.5b-$ty.gguf --device vulkan:0 --reference-ubatch 4 --prompt-tokens 32 --positions 64 2>&1 | tail -1 | tee -a $OUT/invariance.txt
done
for round in 1 2; do
  for ty in Q4_K Q4_1; do
    [ "$(left)" -lt 120 ] && break 2
    echo "$ty default: $(tg512 $bin $ty)" | tee -a $OUT/decode.txt
    echo "$ty small-first: $(tg512 $bin $ty STRATA_SWIGLU_SMALL_FIRST=1320)" | tee -a $OUT/decode.txt
  done
done
[ "$(left)" -gt 100 ] && timeout $(( $(left) - 60 )) $bin compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --prompt-tokens 128 --positions 64 2>&1 | tail -1 | tee $OUT/compare-q4_k.txt
[ "$(left)" -gt 120 ] && MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 10 )) bash bench/h200_vulkan.sh $bin $OUT/table Q4_K
echo "left: $(left) s"
