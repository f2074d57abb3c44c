#!/usr/bin/env bash
# Session 29: the full table (bench/h200_vulkan.sh) for the given types.
set -uo pipefail
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
REPS=2 bash bench/h200_vulkan.sh "$PWD/.carry/strata-rt" "$OUT/table" "$@" > "$OUT/table-run.log" 2>&1
grep -E "==|tg128|pp2048|KL|GB/s" "$OUT/table-run.log" | head -60
