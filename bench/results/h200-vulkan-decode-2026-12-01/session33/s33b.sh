#!/usr/bin/env bash
# Session 33, call 2: the exact mode's new integer division (F64 builds) on the H200.
#  1. gpu/tests/backend_ops.rs whole, from a carried test binary (.carry/backend_ops), with
#     REQUIRE_VULKAN_DEVICE=1: every op against the CPU, the rounding helpers against IEEE, the
#     exact products against the CPU's bits;
#  2. bench/h200_exact.sh on the 7B Q4_K shape: compare-devices fast and exact (one token a step;
#     the exact mode must give KL 0 and 64 of 64), and the exact mode's decode speed.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
mkdir -p "$OUT"
# The op tests read their model-free inputs only; the carried binary runs from the tree's root.
REQUIRE_VULKAN_DEVICE=1 timeout 240 .carry/backend_ops --test-threads 4 > "$OUT/backend_ops.txt" 2>&1
grep -E "^test |test result" "$OUT/backend_ops.txt" | tail -30
UNROLLS=2 timeout 300 bash bench/h200_exact.sh "$PWD/.carry/strata-rt" "$OUT" ${TYPES:-Q4_K}
