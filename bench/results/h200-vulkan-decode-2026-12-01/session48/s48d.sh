# Session 48's script for the next device call (no machine was left for it): on either card, the
# driver's register counts of the Q4_K and Q4_1 products in the default, Q4K_HEAD_WORDS and Q4K_HEAD_SHUFFLE builds
# (shader_stats), then 7B Q4_K decode at context 512 (`bench -p 64 -n 128 -d 512 -r 2`), three
# interleaved rounds of the default (strata-rt-tail: `da0eef5`), STRATA_SWIGLU_SMALL_FIRST=1320,
# the Q4K_HEAD_WORDS build (strata-rt-hw: `a2176b5` built with
# STRATA_SHADER_DEFINES=Q4K_HEAD_WORDS), the Q4K_HEAD_SHUFFLE build (strata-rt-hs: the commit
# after it, built with STRATA_SHADER_DEFINES=Q4K_HEAD_SHUFFLE) and that with small units first;
# the greedy tokens of the three builds; on an H200
# then Q4_1's default (`-r 3`) and the whole table (bench/h200_vulkan.sh) with small units first.
# Carry [".gl", ".carryt"] with .carryt/{strata-rt-tail,strata-rt-hw,strata-rt-hs,shader_stats}.gz
# and .carryt/spv/{default,hw,hs}/ (those builds' SPIR-V of the products).
# Run: BUDGET_S=400 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session48/s48d.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
b=$PWD/.carry/strata-rt-tail
hw=$PWD/.carry/strata-rt-hw
hs=$PWD/.carry/strata-rt-hs
bin=$b  # (synth uses it)
STRATA_VULKAN_PROFILE=1 .carry/shader_stats 0 .carryt/spv/default/*.spv .carryt/spv/hw/*.spv .carryt/spv/hs/*.spv 2>&1 | tee $OUT/registers.txt
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for round in 1 2 3; do
  for cfg in "default $b NONE=1" "small-first $b STRATA_SWIGLU_SMALL_FIRST=1320" "head-words $hw NONE=1" "head-shuffle $hs NONE=1" "head-shuffle+small-first $hs STRATA_SWIGLU_SMALL_FIRST=1320"; do
    set -- $cfg
    [ "$(left)" -lt 60 ] && break 2
    echo "Q4_K $1: $(env $3 $2 bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
  done
done
for x in "default $b" "head-words $hw" "head-shuffle $hs"; do
  set -- $x
  echo "tokens $1: $(STRATA_DEVICES__DECODE=vulkan:0 $2 generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
if grep -q H200 $OUT/gpu.txt; then
  echo "Q4_1 default: $($b bench -m $(m Q4_1) --device vulkan:0 -p 64 -n 128 -d 512 -r 3 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
  [ "$(left)" -gt 90 ] && STRATA_SWIGLU_SMALL_FIRST=1320 MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 5 )) bash bench/h200_vulkan.sh $b $OUT/table Q4_K 2>&1 | grep -E 'KL|bandwidth|^\| ' | tail -12
fi
echo "left: $(left) s"
