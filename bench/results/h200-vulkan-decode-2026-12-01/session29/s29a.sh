#!/usr/bin/env bash
# Session 29, call 1: per-token table offsets + V loaded with K (new) against HEAD (base).
set -uo pipefail
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
new=$PWD/.carry/strata-rt; base=$PWD/.carry/strata-rt-base
source bench/h200_common.sh "$new" "$OUT/ab" Q4_K
for r in 1 2 3; do
  for v in "@$base" default; do
    label=base; [ "$v" = default ] && label=new
    echo "== round $r $label"
    run "$v" -p 64 -n 128 -d 512 -r 1 | grep -E "tg128"
  done
done 2>&1 | tee "$OUT/ab/table.txt"
for v in "@$base" default; do
  echo "== profile $v" >> "$OUT/ab/profile.txt"
  STRATA_VULKAN_PROFILE=1 env $(settings "$v") "$(binary "$v")" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -A18 "one-token steps" >> "$OUT/ab/profile.txt"
done
timeout 200 "$new" compare-devices -m "$m" --device vulkan:0 --prompt-tokens 128 --positions 64 > "$OUT/ab/compare.txt" 2>&1
tail -5 "$OUT/ab/compare.txt"
