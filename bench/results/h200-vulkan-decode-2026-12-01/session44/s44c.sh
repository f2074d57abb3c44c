# Session 44, call 2: the tagged attention with one subgroup polling a split workgroup (the rest
# wait at its barrier; call 1 had every invocation poll) against the default, 7B Q4_K and Q4_1
# at context 512, two interleaved rounds, and the greedy tokens of both. On an H200 the whole
# table with the default first (bench/h200_vulkan.sh: KL and top-1 against the CPU, prefill
# 2048, decode at 512 and 8192, batches of 8 and 32; the three 7B types and SmolLM2's shape); on
# an H100 the table's types call 1 did not run (Q4_0, SmolLM2's shape) after the A/B, as time
# allows. Carry [".gl", ".carryt"].
# Run: BUDGET_S=300 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session44/s44c.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
table() {
  for ty in "$@"; do
    [ "$(left)" -lt 50 ] && { echo "out of time before the table of $ty"; break; }
    MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 5 )) bash bench/h200_vulkan.sh $bin $OUT $ty 2>&1 | grep -E 'KL|bandwidth|^\| ' | tail -20
  done
}
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
ab() {
  for round in 1 2; do
    for ty in Q4_K Q4_1; do
      for v in X=1 STRATA_VULKAN_TAGGED_ATTENTION=1; do
        [ "$(left)" -lt 25 ] && { echo "out of time before $ty $v"; return; }
        echo "$ty $v: $(env $v $bin bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'tg128|rror' | short)" | tee -a $OUT/decode.txt
      done
    done
  done
  for v in X=1 STRATA_VULKAN_TAGGED_ATTENTION=1; do
    [ "$(left)" -lt 20 ] && return
    echo "tokens $v: $(env $v STRATA_DEVICES__DECODE=vulkan:0 $bin generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
  done
}
if grep -q H200 $OUT/gpu.txt; then
  synth qwen2.5-7b Q4_K Q4_1 Q4_0
  synth smollm2-135m Q4_1
  echo "models ready, $(left) s left"
  table Q4_K Q4_1 Q4_0 smollm2-Q4_1
  ab
else
  synth qwen2.5-7b Q4_K Q4_1 Q4_0
  echo "models ready, $(left) s left"
  ab
  synth smollm2-135m Q4_1
  table Q4_0 smollm2-Q4_1
fi
echo "left: $(left) s"
