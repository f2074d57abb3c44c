#!/usr/bin/env bash
# Session 32, call 1: greedy runs with two steps in flight (the host out of the loop) against
# one step at a time (STRATA_VULKAN_GREEDY_PIPELINE=off), with and without the lone projections
# in 128 lanes (STRATA_MATVEC_LONE_128=1): 7B decode t/s at context 512 (tg128), interleaved,
# for Q4_1, Q4_K and Q4_0; then context 8192 once each.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
bin=$PWD/.carry/strata-rt
tg() { awk -F'|' '/tg[0-9]/ {gsub(/ /,"",$3); printf "%s ", $3}'; }
for ty in ${TYPES:-Q4_1 Q4_K Q4_0}; do
  source bench/h200_common.sh "$bin" "$OUT" "$ty"
  vs=(default STRATA_VULKAN_GREEDY_PIPELINE=off STRATA_MATVEC_LONE_128=1)
  {
    echo "== $shape $ty: tg128 at context 512"
    for i in 1 2 3; do
      line="rep $i:"
      for v in "${vs[@]}"; do line="$line | $v $(run "$v" -p 64 -n 128 -d 512 -r 1 | tg)"; done
      echo "$line"
    done
    for v in default STRATA_VULKAN_GREEDY_PIPELINE=off; do echo "ctx 8192 $v $(run "$v" -p 64 -n 128 -d 8192 -r 1 | tg)"; done
  } 2>&1 | tee -a "$OUT/pipeline.txt"
  run default -p 64 -n 128 -d 512 -r 1 > "$OUT/bench-$ty.txt"
done
