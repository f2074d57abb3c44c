#!/usr/bin/env bash
# Session 36, call 3 (the same warm machine as calls 1-2, models of call 1 in /tmp/m): K = 1
# against K = 4 for Q4_0, Q4_1 and Q4_K at contexts 512 and 8192, one rep each.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
mkdir -p .carry && gunzip -c .carryz/strata-rt.gz > .carry/strata-rt && chmod +x .carry/strata-rt
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
tg() { awk -F'|' '/tg[0-9]/ {gsub(/ /,"",$2); gsub(/ /,"",$3); printf "%s %s; ", $2, $3}'; }
for ty in Q4_0 Q4_1 Q4_K; do
  source bench/h200_common.sh "$PWD/.carry/strata-rt" "$OUT" "$ty"
  for k in 1 4; do echo "$ty K=$k: $(run STRATA_VULKAN_GREEDY_STEPS=$k -p 64 -n 128 -d 512,8192 -r 1 | tg)" | tee -a "$OUT/ctx.txt"; done
done
run default -p 64 -n 128 -d 512,8192 -r 1 > "$OUT/bench-Q4_K.txt"
