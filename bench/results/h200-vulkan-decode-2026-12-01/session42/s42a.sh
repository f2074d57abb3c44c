# Session 42, call 1: RMSNorms recorded right after the residual-adding product before them with
# no pipeline barrier (STRATA_VULKAN_TAGGED_NORM=1: the product writes its row tagged with the
# step, the norm's one workgroup waits for the tags itself), against the default; 7B Q4_K and
# Q4_1 at context 512, interleaved; the KL against the CPU of both (the bits must be the same);
# a workgroup timeline of each. Carry [".gl", ".carryt"].
# Run: BUDGET_S=540 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session42/s42a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session42/common.sh
for rep in 1 2; do
  for ty in Q4_K Q4_1; do
    for v in X=1 STRATA_VULKAN_TAGGED_NORM=1; do
      [ "$(left)" -lt 150 ] && { echo "out of time before $ty $v"; break 3; }
      bench $bin $ty $v | tee -a $OUT/decode.txt
    done
  done
done
for v in X=1 STRATA_VULKAN_TAGGED_NORM=1; do
  [ "$(left)" -lt 100 ] && { echo "out of time before the timeline of $v"; break; }
  name=Q4_K-${v%%=*}
  env $v STRATA_VULKAN_TIMELINE=/tmp/tl-$name.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'timeline|rror'
  python3 bench/timeline_report.py /tmp/tl-$name.bin > $OUT/tl-$name.md 2>&1
  head -3 $OUT/tl-$name.md
done
for v in X=1 STRATA_VULKAN_TAGGED_NORM=1; do
  [ "$(left)" -lt 40 ] && { echo "out of time before the KL of $v"; break; }
  echo "KL Q4_K $v: $(env $v $bin compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --positions 32 --prompt-tokens 64 2>&1 | tail -1)" | tee -a $OUT/kl.txt
done
echo "left: $(left) s"
