# Session 44, call 1: the whole table with HEAD's default (the tagged small stages on, greedy runs
# pipelined): `bench/h200_vulkan.sh` for the three 7B types and SmolLM2's shape (KL and top-1
# against the CPU; prefill 2048; decode at 512 and 8192; batches of 8 and 32). Carry
# [".gl", ".carryt"]. Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session44/s44a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
synth qwen2.5-7b Q4_K Q4_1 Q4_0
synth smollm2-135m Q4_1
echo "models ready, $(left) s left"
for ty in Q4_K Q4_1 Q4_0 smollm2-Q4_1; do
  [ "$(left)" -lt 110 ] && { echo "out of time before $ty"; break; }
  MODELS_DIR=$PWD/target/m REPS=2 bash bench/h200_vulkan.sh $bin $OUT $ty 2>&1 | grep -vE '^\s*$' | tail -40
done
echo "left: $(left) s"
