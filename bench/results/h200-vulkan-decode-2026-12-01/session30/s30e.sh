#!/usr/bin/env bash
# Session 30, call 6: the host's share of a decoded token (what taking the host out of the loop
# could gain): tg128 at context 512 with STRATA_VULKAN_PROFILE=steps (the GPU's time a step from
# its first and last timestamps only) against the wall time, 7B Q4_1 and Q4_K, and SmolLM2 Q4_1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
bin=$PWD/.carry/strata-rt
for spec in "qwen2.5-7b Q4_1" "qwen2.5-7b Q4_K" "smollm2-135m Q4_1"; do
  set -- $spec
  SHAPE=$1 source bench/h200_common.sh "$bin" "$OUT/host" "$2"
  for r in 1 2; do
    echo "== $1 $2 round $r" >> "$OUT/host/steps.txt"
    STRATA_VULKAN_PROFILE=steps "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E "tg128|one-token steps|host:|engine, greedy" >> "$OUT/host/steps.txt"
  done
done
cat "$OUT/host/steps.txt"
