# Session 41, call 3: workgroup timelines with each workgroup's SM (shaders built with
# STRATA_SHADER_TIMELINE=sm), 7B Q4_K and Q4_1 at context 512, step submission 30 (4 steps).
# Carry [".gl", ".carryt"]: .carryt/strata-rt-tl.gz is the sm build.
# Run: BUDGET_S=400 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session41/s41b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session41/common.sh
for ty in Q4_K Q4_1; do
  [ "$(left)" -lt 40 ] && { echo "out of time before $ty"; break; }
  STRATA_VULKAN_TIMELINE=/tmp/tl-$ty.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'timeline|tg128|rror'
  python3 bench/timeline_report.py /tmp/tl-$ty.bin --csv /tmp/tl-$ty-stages.csv > /tmp/tl-$ty.md 2>&1
  head -3 /tmp/tl-$ty.md
done
# (At most 8 files of 16 MiB come back: the reports in one archive, each timeline gzipped.)
tar czf $OUT/reports.tgz -C /tmp $(cd /tmp && ls tl-Q4_*.md tl-Q4_*.csv tl-Q4_*.names)
for ty in Q4_K Q4_1; do gzip -c /tmp/tl-$ty.bin > $OUT/tl-$ty.bin.gz; done
ls -la $OUT
echo "left: $(left) s"
