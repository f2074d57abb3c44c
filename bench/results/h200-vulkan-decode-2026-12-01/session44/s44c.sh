# Session 44, the H200 call (should one come; call 1 got an H100): the whole table with HEAD's
# default (bench/h200_vulkan.sh: KL and top-1 against the CPU, prefill 2048, decode at 512 and
# 8192, batches of 8 and 32) for the three 7B types and SmolLM2's shape, then the opt-in tagged
# attention (STRATA_VULKAN_TAGGED_ATTENTION=1) against the default, 7B Q4_K and Q4_1 at context
# 512, two interleaved rounds. On an H100 only the table's types call 1 did not run (Q4_0 and
# SmolLM2's shape). Carry [".gl", ".carryt"].
# Run: BUDGET_S=400 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session44/s44c.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
types="Q4_K Q4_1 Q4_0 smollm2-Q4_1"; ab=1
grep -q H100 $OUT/gpu.txt && { types="Q4_0 smollm2-Q4_1"; ab=0; }
synth qwen2.5-7b $(for t in $types; do case $t in smollm2-*) ;; *) echo $t ;; esac; done)
synth smollm2-135m Q4_1
echo "models ready, $(left) s left"
for ty in $types; do
  [ "$(left)" -lt 60 ] && { echo "out of time before the table of $ty"; break; }
  MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 5 )) bash bench/h200_vulkan.sh $bin $OUT $ty 2>&1 | grep -E 'KL|bandwidth|^\| ' | tail -20
done
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
for round in $( [ $ab = 1 ] && echo 1 2 ); do
  for ty in Q4_K Q4_1; do
    for v in X=1 STRATA_VULKAN_TAGGED_ATTENTION=1; do
      [ "$(left)" -lt 25 ] && { echo "out of time before $ty $v"; break 3; }
      echo "$ty $v: $(env $v $bin bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'tg128|rror' | short)" | tee -a $OUT/decode.txt
    done
  done
done
echo "left: $(left) s"
