# Session 46, call 1: on an H200, the default's whole table (bench/h200_vulkan.sh: KL and top-1
# against the CPU, prefill 2048, decode at 512 and 8192, batches of 8 and 32), Q4_K and Q4_1
# first, then Q4_0 and SmolLM2's shape as time allows. On an H100 it stops at once: H100
# figures do not settle issue 5, and each second of the call is device time.
# Carry [".gl", ".carryt"] (.carryt/strata-rt.gz: the default build of HEAD).
# Run: BUDGET_S=420 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session46/s46a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
grep -q H200 $OUT/gpu.txt || { echo "not an H200: stopping"; exit 0; }
table() {
  for ty in "$@"; do
    [ "$(left)" -lt 50 ] && { echo "out of time before the table of $ty"; break; }
    MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 5 )) bash bench/h200_vulkan.sh $bin $OUT $ty 2>&1 | grep -E 'KL|bandwidth|^\| ' | tail -20
  done
}
synth qwen2.5-7b Q4_K Q4_1 Q4_0
synth smollm2-135m Q4_1
echo "models ready, $(left) s left"
table Q4_K Q4_1 Q4_0 smollm2-Q4_1
echo "left: $(left) s"
