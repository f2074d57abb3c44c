# Session 49, call 4: the chunked norm's scale computed before the product's loop (the build with
# STRATA_SHADER_DEFINES=NORM_SCALE_EARLY, .carryt/strata-rt-early.gz) against after it
# (.carryt/strata-rt.gz), and workgroup timelines of the default and the chunked norm
# (.carryt/strata-rt-tl.gz: this session's code built with STRATA_SHADER_TIMELINE=1), on either card.
# 7B at context 512 (`bench -p 64 -n 128 -d 512 -r 2`), two interleaved rounds.
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session49/s49d.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
early=$PWD/.carry/strata-rt-early
tl=$PWD/.carry/strata-rt-tl
STRATA_VULKAN_PROFILE=1 .carry/shader_stats 0 .carryt/spv49/early_*.spv 2>&1 | sed "s/ Local Memory Size=[0-9]*//" | tee $OUT/registers.txt
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for round in 1 2; do
  for ty in Q4_K Q4_1; do
    for cfg in "default $bin NONE=1" "chunked-norm $bin STRATA_VULKAN_TAGGED_NORM_SCALE=1" "chunked-norm-early $early STRATA_VULKAN_TAGGED_NORM_SCALE=1" "chunked-ffn-early $early STRATA_VULKAN_TAGGED_NORM_SCALE=ffn" "chunked-norm-early+small-first $early STRATA_VULKAN_TAGGED_NORM_SCALE=1 STRATA_SWIGLU_SMALL_FIRST=1320"; do
      set -- $cfg
      [ "$ty" = Q4_1 ] && [ "$1" = chunked-norm-early+small-first ] && continue
      [ "$(left)" -lt 120 ] && break 3
      echo "$ty $1: $(env $3 ${4:-} $2 bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
    done
  done
done
for cfg in "default NONE=1" "chunked STRATA_VULKAN_TAGGED_NORM_SCALE=1"; do
  set -- $cfg
  [ "$(left)" -lt 40 ] && { echo "out of time before the timeline of $1"; break; }
  echo "timeline $1, submission 30: $(env $2 STRATA_VULKAN_TIMELINE=$OUT/tl-$1.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'tg128|timeline|rror' | tr '\n' ' ')"
  python3 bench/timeline_report.py $OUT/tl-$1.bin --csv $OUT/tl-$1-stages.csv > $OUT/tl-$1.md 2>&1
  rm -f $OUT/tl-$1.bin
done
echo "left: $(left) s"
