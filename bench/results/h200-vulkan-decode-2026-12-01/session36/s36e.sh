#!/usr/bin/env bash
# Session 36, call 5: where a 7B Q4_1 step's time goes on the H100 (to set beside session 35's
# H200 profile): STRATA_VULKAN_PROFILE=steps (GPU time a step, no pipelining) and =1 (per op).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
mkdir -p .carry && gunzip -c .carryz/strata-rt.gz > .carry/strata-rt && chmod +x .carry/strata-rt
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
source bench/h200_common.sh "$PWD/.carry/strata-rt" "$OUT" Q4_1
STRATA_VULKAN_PROFILE=steps "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -vE "^pipeline " > "$OUT/steps-Q4_1.txt"
STRATA_VULKAN_PROFILE=1 "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -vE "^pipeline " > "$OUT/profile-Q4_1.txt"
grep -E "us per step|host:" "$OUT/steps-Q4_1.txt"
grep -A16 "one-token steps" "$OUT/profile-Q4_1.txt" | head -18
