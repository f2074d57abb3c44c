#!/usr/bin/env bash
# Session 30, call 1: decode attention of short contexts in one dispatch
# (STRATA_ATTENTION_WHOLE_UNTIL) against the split path, 7B shape, TYPE ($1), tg128 at context
# 512 interleaved 3 times; with the lone-128 output projection too; a profile of each; the decode
# kernels' agreement with the CPU (ubatch 1) with the new kernel.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
ty=${1:-Q4_1}
bin=$PWD/.carry/strata-rt
W=STRATA_ATTENTION_WHOLE_UNTIL=4096
L=STRATA_MATVEC_LONE_128=1
source bench/h200_common.sh "$bin" "$OUT/$ty" "$ty"
for r in 1 2 3; do
  line="round $r:"
  for v in default "$W" "$L" "$W,$L"; do
    line="$line | $v $(run "$v" -p 64 -n 128 -d 512 -r 1 | awk -F'|' '/tg128/ {gsub(/ /,"",$3); printf "%s", $3}')"
  done
  echo "$line"
done 2>&1 | tee "$OUT/$ty/table.txt"
for v in default "$W"; do
  echo "== profile $v" >> "$OUT/$ty/profile.txt"
  STRATA_VULKAN_PROFILE=1 env $(settings "$v") "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -E "pipeline Attention|one-token steps" -A18 >> "$OUT/$ty/profile.txt"
done
for v in "$W"; do
  echo "== compare ubatch 1 $v" >> "$OUT/$ty/compare.txt"
  env $(settings "$v") timeout 200 "$bin" compare-devices -m "$m" --device vulkan:0 --ubatch 1 --prompt-tokens 128 --positions 64 2>&1 | tail -2 >> "$OUT/$ty/compare.txt"
done
cat "$OUT/$ty/compare.txt"
