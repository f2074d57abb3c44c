#!/usr/bin/env bash
# Session 30, call 5: the local-quantization gate/up in workgroups of 1,024 / 512 / 256 (32 / 16
# / 8 lane groups: 2 / 4 / 8 passes a block of 32 outputs) against the default, 7B Q4_1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
bin=$PWD/.carry/strata-rt
ty=${1:-Q4_1}
source bench/h200_common.sh "$bin" "$OUT/$ty" "$ty"
vs=(default STRATA_VULKAN_SWIGLU_LOCAL_QUANT=1 STRATA_VULKAN_SWIGLU_LOCAL_QUANT=512 STRATA_VULKAN_SWIGLU_LOCAL_QUANT=256)
for r in 1 2; do
  line="round $r:"
  for v in "${vs[@]}"; do
    line="$line | $v $(run "$v" -p 64 -n 128 -d 512 -r 1 | awk -F'|' '/tg128/ {gsub(/ /,"",$3); printf "%s", $3}')"
  done
  echo "$line"
done 2>&1 | tee "$OUT/$ty/table.txt"
for v in "${vs[@]}"; do
  echo "== profile $v" >> "$OUT/$ty/profile.txt"
  STRATA_VULKAN_PROFILE=1 env $(settings "$v") "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -E "one-token steps" -A3 >> "$OUT/$ty/profile.txt"
done
cat "$OUT/$ty/profile.txt"
