# Session 53's second call: the build-time experiments on the H200 (issue 5 names it; on an H100
# the header builds were slower, session 49). Carry [".gl", ".carryt"] with .carryt holding
# strata-rt.gz (HEAD's default), strata-rt-{hw,hs,ve}.gz (built with STRATA_SHADER_DEFINES=
# Q4K_HEAD_WORDS / Q4K_HEAD_SHUFFLE / ATTN_V_EARLY, CARGO_TARGET_DIR of their own),
# shader_stats.gz and spv/{default,hw,hs,ve}/ (those builds' SPIR-V of the products and the
# split attention kernel).
# 1. The driver's register and shared-memory counts of those kernels in each build.
# 2. 7B Q4_K at context 512, interleaved rounds: default, small units first (=1320), head words,
#    head shuffle, V loads beside K, and V-early with small units first; Q4_1 default and V-early.
# 3. The greedy tokens of each build (the same bits expected of ve; hw and hs other roundings).
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session53/s53b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
b=$PWD/.carry/strata-rt
hw=$PWD/.carry/strata-rt-hw
hs=$PWD/.carry/strata-rt-hs
ve=$PWD/.carry/strata-rt-ve
STRATA_VULKAN_PROFILE=1 .carry/shader_stats 0 .carryt/spv/*/*.spv 2>&1 | tee $OUT/registers.txt
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for round in 1 2 3; do
  for cfg in "default $b NONE=1" "small-first $b STRATA_SWIGLU_SMALL_FIRST=1320" "head-words $hw NONE=1" "head-shuffle $hs NONE=1" "v-early $ve NONE=1" "v-early+small-first $ve STRATA_SWIGLU_SMALL_FIRST=1320"; do
    set -- $cfg
    [ "$(left)" -lt 100 ] && break 2
    echo "Q4_K $1: $(tg512 $2 Q4_K $3)" | tee -a $OUT/decode.txt
  done
  [ "$(left)" -lt 100 ] && break
  echo "Q4_1 default: $(tg512 $b Q4_1)" | tee -a $OUT/decode.txt
  echo "Q4_1 v-early: $(tg512 $ve Q4_1)" | tee -a $OUT/decode.txt
done
for x in "default $b" "head-words $hw" "head-shuffle $hs" "v-early $ve"; do
  set -- $x
  [ "$(left)" -lt 20 ] && break
  echo "tokens $1: $(STRATA_DEVICES__DECODE=vulkan:0 $2 generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
echo "left: $(left) s"
