# Session 53's call: session 51's checks (s51a.sh) and the build-time experiments in one,
# most valuable first, for the one machine a session may get. Carry [".gl", ".carryt"] with .carryt
# holding strata-rt.gz (HEAD's default, scripts/build-device-carry.sh), strata-rt-{hw,hs,ve}.gz
# (STRATA_SHADER_DEFINES=Q4K_HEAD_WORDS / Q4K_HEAD_SHUFFLE / ATTN_V_EARLY, each with a
# CARGO_TARGET_DIR of its own), shader_stats.gz and spv/{default,hw,hs,ve}/.
# 1. The driver's register and shared-memory counts of those builds' products and split attention.
# 2. Decode's batch invariance on NVIDIA (one token a step against four, bit for bit; 0.5B Q4_K, Q4_1).
# 3. 7B Q4_K at context 512, two interleaved rounds: default, small units first (=1320), head words,
#    head shuffle, V loads beside K, V-early with small units first; Q4_1 default and V-early.
# 4. The greedy tokens of each build; the KL against the CPU (7B Q4_K, one token a step); then the
#    table of issue 5 (bench/h200_vulkan.sh) as far as the budget goes.
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session53/s53a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
b=$PWD/.carry/strata-rt
hw=$PWD/.carry/strata-rt-hw
hs=$PWD/.carry/strata-rt-hs
ve=$PWD/.carry/strata-rt-ve
STRATA_VULKAN_PROFILE=1 .carry/shader_stats 0 .carryt/spv/*/*.spv 2>&1 | tee $OUT/registers.txt
synth qwen2.5-0.5b Q4_K Q4_1 &
synth qwen2.5-7b Q4_K Q4_1 &
wait
echo "models ready, $(left) s left"
for ty in Q4_K Q4_1; do
  timeout 90 $b compare-devices -m $PWD/target/m/qwen2.5-0.5b-$ty.gguf --device vulkan:0 --reference-ubatch 4 --prompt-tokens 32 --positions 64 2>&1 | tail -1 | tee -a $OUT/invariance.txt
done
for round in 1 2; do
  for cfg in "default $b NONE=1" "small-first $b STRATA_SWIGLU_SMALL_FIRST=1320" "head-words $hw NONE=1" "head-shuffle $hs NONE=1" "v-early $ve NONE=1" "v-early+small-first $ve STRATA_SWIGLU_SMALL_FIRST=1320"; do
    set -- $cfg
    [ "$(left)" -lt 150 ] && break 2
    echo "Q4_K $1: $(tg512 $2 Q4_K $3)" | tee -a $OUT/decode.txt
  done
  [ "$(left)" -lt 150 ] && break
  echo "Q4_1 default: $(tg512 $b Q4_1)" | tee -a $OUT/decode.txt
  echo "Q4_1 v-early: $(tg512 $ve Q4_1)" | tee -a $OUT/decode.txt
done
for x in "default $b" "head-words $hw" "head-shuffle $hs" "v-early $ve"; do
  set -- $x
  [ "$(left)" -lt 120 ] && break
  echo "tokens $1: $(STRATA_DEVICES__DECODE=vulkan:0 timeout 60 $2 generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
[ "$(left)" -gt 100 ] && timeout $(( $(left) - 60 )) $b compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --prompt-tokens 128 --positions 64 2>&1 | tail -1 | tee $OUT/compare-q4_k.txt
[ "$(left)" -gt 120 ] && MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 10 )) bash bench/h200_vulkan.sh $b $OUT/table Q4_K
echo "left: $(left) s"
