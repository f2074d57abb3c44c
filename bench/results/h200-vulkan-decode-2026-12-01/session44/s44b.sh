# Session 44, call 1 (as cut to the device time left): the attention split kernels recorded
# right after QKV with no barrier (STRATA_VULKAN_TAGGED_ATTENTION=1) against the default (HEAD's
# form), 7B Q4_K and Q4_1 at context 512 in two interleaved rounds, Q4_K at 8192 (the
# long-context kernel's tagged build); the greedy tokens of both; then the whole table
# (bench/h200_vulkan.sh: KL and top-1 against the CPU, prefill 2048, decode at 512 and 8192,
# batches of 8 and 32) for Q4_K and Q4_1 with the default; the registers of the new builds.
# Carry [".gl", ".carryt"].
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session44/s44b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
# The driver's register counts of the tagged QKV and split builds against the plain ones
# (.carryt/spv: the build's SPIR-V and the shader_stats example), while the models are made.
( chmod +x .carryt/spv/shader_stats; STRATA_VULKAN_PROFILE=1 .carryt/spv/shader_stats 0 .carryt/spv/*.spv 2>&1 | sed 's/^\.carryt\/spv\///' | cut -c1-200 > $OUT/registers.txt ) &
synth qwen2.5-7b Q4_K Q4_1
wait
cat $OUT/registers.txt
echo "models ready, $(left) s left"
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
bench() {
  local ty=$1 v=$2 d=${3:-512}
  echo "$ty $v @$d: $(env $v $bin bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d $d -r ${REPS:-2} 2>&1 | grep -E 'bandwidth \(|tg128|rror' | short)" | tee -a $OUT/decode.txt
}
for round in 1 2; do
  for ty in Q4_K Q4_1; do
    for v in X=1 STRATA_VULKAN_TAGGED_ATTENTION=1; do
      [ "$(left)" -lt 60 ] && { echo "out of time before $ty $v"; break 3; }
      bench $ty $v
    done
  done
done
for v in X=1 STRATA_VULKAN_TAGGED_ATTENTION=1; do
  [ "$(left)" -lt 40 ] && break
  echo "tokens $v: $(env $v STRATA_DEVICES__DECODE=vulkan:0 $bin generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
for v in X=1 STRATA_VULKAN_TAGGED_ATTENTION=1; do
  [ "$(left)" -lt 60 ] && break
  REPS=1 bench Q4_K $v 8192
done
for ty in Q4_K Q4_1; do
  [ "$(left)" -lt 120 ] && { echo "out of time before the table of $ty"; break; }
  MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 5 )) bash bench/h200_vulkan.sh $bin $OUT $ty 2>&1 | grep -E 'KL|top-1|bandwidth|^\| ' | tail -20
done
echo "left: $(left) s"
