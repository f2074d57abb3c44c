# Session 53's second call (~150 s; the first, s53a.sh, ran on an H100 in 135 s). Carry
# [".gl", ".carryt"] with .carryt holding strata-rt.gz (e16cca8: small units first by default
# from the SM count), strata-rt-ve.gz (the same built with STRATA_SHADER_DEFINES=ATTN_V_EARLY,
# cells by compares), shader_stats.gz and spv/{default,ve}/attention_decode_tagged.spv.
# 1. `devices` (the SM count the default reads) and the two attention builds' registers.
# 2. Batch invariance with the new default (0.5B and 7B Q4_K, one token a step against four).
# 3. 7B at context 512, three interleaved rounds: Q4_K default, STRATA_SWIGLU_SMALL_FIRST=0 (the
#    old default), V-early; Q4_1 default and V-early. The greedy tokens of each.
# 4. On an H200: issue 5's table (bench/h200_vulkan.sh) for Q4_K with the new default.
# Run: BUDGET_S=400 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session53/s53c.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
b=$PWD/.carry/strata-rt
ve=$PWD/.carry/strata-rt-ve
$b devices 2>&1 | tee $OUT/devices.txt
STRATA_VULKAN_PROFILE=1 .carry/shader_stats 0 .carryt/spv/*/*.spv 2>&1 | tee $OUT/registers.txt
synth qwen2.5-0.5b Q4_K &
synth qwen2.5-7b Q4_K Q4_1 &
wait
echo "models ready, $(left) s left"
timeout 60 $b compare-devices -m $PWD/target/m/qwen2.5-0.5b-Q4_K.gguf --device vulkan:0 --reference-ubatch 4 --prompt-tokens 32 --positions 64 2>&1 | tail -1 | tee -a $OUT/invariance.txt
timeout 90 $b compare-devices -m $(m Q4_K) --device vulkan:0 --reference-ubatch 4 --prompt-tokens 32 --positions 32 2>&1 | tail -1 | tee -a $OUT/invariance.txt
for round in 1 2 3; do
  for cfg in "default $b NONE=1" "small-first-off $b STRATA_SWIGLU_SMALL_FIRST=0" "v-early $ve NONE=1"; do
    set -- $cfg
    [ "$(left)" -lt 60 ] && break 2
    echo "Q4_K $1: $(tg512 $2 Q4_K $3)" | tee -a $OUT/decode.txt
  done
  echo "Q4_1 default: $(tg512 $b Q4_1)" | tee -a $OUT/decode.txt
  echo "Q4_1 v-early: $(tg512 $ve Q4_1)" | tee -a $OUT/decode.txt
done
for x in "default $b NONE=1" "small-first-off $b STRATA_SWIGLU_SMALL_FIRST=0" "v-early $ve NONE=1"; do
  set -- $x
  [ "$(left)" -lt 30 ] && break
  echo "tokens $1: $(env $3 STRATA_DEVICES__DECODE=vulkan:0 timeout 60 $2 generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
if grep -q H200 $OUT/gpu.txt && [ "$(left)" -gt 120 ]; then
  MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 10 )) bash bench/h200_vulkan.sh $b $OUT/table Q4_K
fi
echo "left: $(left) s"
