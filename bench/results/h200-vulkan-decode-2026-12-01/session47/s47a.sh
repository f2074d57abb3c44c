# Session 47: issue 5's figure (7B Q4_K and Q4_1 decode at context 512 with the bandwidth
# measured in the same run, `-r 3`) of the build with the one-wait merge
# (.carryt/strata-rt-merge1.gz, built from 293995a); workgroup timelines of the default's one-token
# steps (.carryt/strata-rt-tl.gz: d40b045 with STRATA_SHADER_TIMELINE=1; bench/timeline_report.py);
# then, on an H200 only, the whole table (bench/h200_vulkan.sh, with a decode with
# STRATA_MATVEC_LONE_128=1 and a per-op profile) as time allows. Carry [".gl", ".carryt"].
# Run: BUDGET_S=480 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session47/s47a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
tl=$PWD/.carry/strata-rt-tl
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
# (On an H100 session 47's call 1 measured this build already.)
grep -q H200 $OUT/gpu.txt && for ty in Q4_K Q4_1; do
  echo "== $ty" >> $OUT/decode.txt
  .carry/strata-rt-merge1 bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 3 2>&1 | grep -E 'bandwidth|tg128|rror' | tee -a $OUT/decode.txt
done
for ty in Q4_K Q4_1; do
  [ "$(left)" -lt 40 ] && { echo "out of time before the timeline of $ty"; break; }
  echo "$ty timeline build, recording submission 30: $(STRATA_VULKAN_TIMELINE=$OUT/tl-$ty-30.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'tg128|timeline|rror' | tr '\n' ' ')"
  python3 bench/timeline_report.py $OUT/tl-$ty-30.bin --csv $OUT/tl-$ty-30-stages.csv > $OUT/tl-$ty-30.md 2>&1
  head -3 $OUT/tl-$ty-30.md
  gzip $OUT/tl-$ty-30.bin
done
if grep -q H200 $OUT/gpu.txt; then
  for ty in Q4_K Q4_1; do
    [ "$(left)" -lt 90 ] && { echo "out of time before the table of $ty"; break; }
    MODELS_DIR=$PWD/target/m REPS=2 PROFILE=1 VARIANTS="STRATA_MATVEC_LONE_128=1" timeout $(( $(left) - 5 )) bash bench/h200_vulkan.sh $PWD/.carry/strata-rt-merge1 $OUT/table $ty 2>&1 | grep -E 'KL|bandwidth|^\| ' | tail -20
  done
fi
echo "left: $(left) s"
