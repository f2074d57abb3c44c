#!/usr/bin/env bash
# Session 36, call 2: backend_ops whole, alone (in call 1 it ran beside two synth-model runs of
# 16 threads each and finished no test in 200 s; alone it takes ~8 s).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
mkdir -p .carry && gunzip -c .carryz/backend_ops.gz > .carry/backend_ops && chmod +x .carry/backend_ops
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
REQUIRE_VULKAN_DEVICE=1 timeout 150 .carry/backend_ops --test-threads 4 2>&1 | tee "$OUT/backend_ops.txt" | grep -E "^test |test result|panicked|FAILED"
