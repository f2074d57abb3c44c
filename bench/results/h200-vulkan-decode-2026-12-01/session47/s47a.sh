# Session 47, H200 only: issue 5's figure first (7B Q4_K and Q4_1 decode at context 512 with the
# bandwidth measured in the same run, `-r 3`), then the whole table (bench/h200_vulkan.sh) of the
# build with the one-wait merge (.carryt/strata-rt-merge1.gz, built from 293995a) as time allows.
# On any other card it stops at once. Carry [".gl", ".carryt"].
# Run: BUDGET_S=480 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session47/s47a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
grep -q H200 $OUT/gpu.txt || { echo "not an H200: stopping"; exit 0; }
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for ty in Q4_K Q4_1; do
  echo "== $ty" >> $OUT/decode.txt
  .carry/strata-rt-merge1 bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 3 2>&1 | grep -E 'bandwidth|tg128|rror' | tee -a $OUT/decode.txt
done
for ty in Q4_K Q4_1; do
  [ "$(left)" -lt 90 ] && { echo "out of time before the table of $ty"; break; }
  MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 5 )) bash bench/h200_vulkan.sh $PWD/.carry/strata-rt-merge1 $OUT/table $ty 2>&1 | grep -E 'KL|bandwidth|^\| ' | tail -20
done
echo "left: $(left) s"
