# Session 41, call 5: workgroup timelines of the default and of the opt-in forms that remove stages (7B Q4_K at
# context 512, step submission 30): the norm in the product before it, the attention merge in the
# splits' last workgroups, and the lone 128-lane output projection. Carry [".gl", ".carryt"]
# (strata-rt-tl.gz: the sm build of 63c1de0).
# Run: BUDGET_S=420 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session41/s41c.sh
source bench/results/h200-vulkan-decode-2026-12-01/session41/common.sh
# (First the default of both types, as calls 2-4 on whatever GPU this is.)
for v in Q4_K,X=1 Q4_1,X=1 Q4_K,STRATA_VULKAN_NORM_EPILOGUE=1 Q4_K,STRATA_VULKAN_FUSE_ATTENTION=1 Q4_K,STRATA_MATVEC_LONE_128=1; do
  [ "$(left)" -lt 40 ] && { echo "out of time before $v"; break; }
  ty=${v%%,*}; knob=${v#*,}; name=$ty-${knob#STRATA_}; name=${name%=1}
  env $knob STRATA_VULKAN_TIMELINE=/tmp/tl-$name.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'timeline|rror'
  python3 bench/timeline_report.py /tmp/tl-$name.bin > $OUT/tl-$name.md 2>&1
  head -3 $OUT/tl-$name.md
done
gzip -c /tmp/tl-Q4_K-X.bin > $OUT/tl-Q4_K-X.bin.gz
echo "left: $(left) s"
