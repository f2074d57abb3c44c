# Session 41, call 1: workgroup timelines of one-token steps of the 7B shape (Q4_K, Q4_1) at
# context 512. Carry [".gl", ".carryt"]: .carryt/strata-rt.gz (the default build) and
# strata-rt-tl.gz (the same code, shaders built with STRATA_SHADER_TIMELINE=1).
# SKIP_BASE=1 skips the unrecorded runs.
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session41/s41a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session41/common.sh
bench() { "$@" -p 64 -n 128 -d 512 2>&1 | grep -E 'bandwidth \(|tg128|timeline|rror' | sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; echo; }
for ty in Q4_K Q4_1; do
  [ "$(left)" -lt 60 ] && { echo "out of time before $ty"; break; }
  if [ "${SKIP_BASE:-0}" != 1 ]; then
  echo "$ty default: $(bench $bin bench -m $(m $ty) --device vulkan:0 -r 2)"
  # (The buffer and clock enabled, every workgroup taking a slot number, none storing a record:
  # the recording's own cost.)
  echo "$ty timeline build, slots taken, no submission recorded: $(STRATA_VULKAN_TIMELINE=/tmp/none.bin STRATA_VULKAN_TIMELINE_AT=1000000 bench $tl bench -m $(m $ty) --device vulkan:0 -r 2)"
  fi
  for at in 20 30; do
    echo "$ty timeline build, recording submission $at: $(STRATA_VULKAN_TIMELINE=$OUT/tl-$ty-$at.bin STRATA_VULKAN_TIMELINE_AT=$at bench $tl bench -m $(m $ty) --device vulkan:0 -r 1)"
    python3 bench/timeline_report.py $OUT/tl-$ty-$at.bin --csv $OUT/tl-$ty-$at-stages.csv > $OUT/tl-$ty-$at.md 2>&1
    head -3 $OUT/tl-$ty-$at.md
    gzip $OUT/tl-$ty-$at.bin
  done
done
echo "left: $(left) s"
