#!/usr/bin/env bash
# Session 30, call 3: the one-dispatch attention's builds (why it is slow): eight units of 128
# (64 registers at most), the same with fewer loads in flight (`lean`), four units (`u4`, 128
# registers at most, two tiles a unit at context 512). Q4_1 7B, tg128 at 512 twice, profiles.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
ty=${1:-Q4_1}
bin=$PWD/.carry/strata-rt
W=STRATA_ATTENTION_WHOLE_UNTIL=4096
source bench/h200_common.sh "$bin" "$OUT/$ty" "$ty"
vs=(default "$W" "$W,STRATA_ATTENTION_WHOLE_BUILD=lean" "$W,STRATA_ATTENTION_WHOLE_BUILD=u4")
for r in 1 2; do
  line="round $r:"
  for v in "${vs[@]}"; do
    line="$line | $v $(run "$v" -p 64 -n 128 -d 512 -r 1 | awk -F'|' '/tg128/ {gsub(/ /,"",$3); printf "%s", $3}')"
  done
  echo "$line"
done 2>&1 | tee "$OUT/$ty/table.txt"
for v in "${vs[@]}"; do
  echo "== profile $v" >> "$OUT/$ty/profile.txt"
  STRATA_VULKAN_PROFILE=1 env $(settings "$v") "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -E "pipeline AttentionDecodeWhole|one-token steps|  attention" >> "$OUT/$ty/profile.txt"
done
cat "$OUT/$ty/profile.txt"
