#!/usr/bin/env bash
# Session 16, call C: Q4_0 and Q4_1 on the final build (full bench: agreement, pp2048, ctx 512/8192, batched).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
REPS=2 timeout 560 bash bench/h200_vulkan.sh $PWD/.carry/strata-rt $OUT Q4_0 Q4_1 2>&1 | grep -E "^\| (pp|tg)|synth|mean KL|^== " | tail -30
