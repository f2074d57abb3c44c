#!/usr/bin/env bash
# Session 34's prepared call (no machine was lent in session 34): everything sessions 33 and 34
# left unmeasured on the H200, in one call that builds nothing.
#  1. gpu/tests/backend_ops.rs's rounding-helper test, whose flush-aware version has not run there;
#  2. the server's greedy runs (batching.greedy_run_tokens, session 34) against one step at a
#     time: bench/server_sampling.py on the 7B Q4_1 shape, Vulkan prefill and decode, alternating;
#  3. session 32's pipelining table for Q4_0 and for the SmolLM2 shape (not re-run since).
# Run from the repository root with the device prefix's .gl/ and .carry/ (strata-rt and
# backend_ops built here and stripped; see session33/README.md); OUT is the call's $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
mkdir -p "$OUT"
REQUIRE_VULKAN_DEVICE=1 timeout 120 .carry/backend_ops --exact vulkan_exact_rounding_helpers_are_ieee --nocapture > "$OUT/rounding.txt" 2>&1
tail -5 "$OUT/rounding.txt"
bin=$PWD/.carry/strata-rt
source bench/h200_common.sh "$bin" "$OUT" Q4_1
export STRATA_DEVICES__PREFILL=vulkan:0 STRATA_DEVICES__DECODE=vulkan:0
for rep in 1 2; do
  for runs in 32 0; do
    echo "== rep $rep, greedy_run_tokens $runs" >> "$OUT/server.txt"
    STRATA_BATCHING__GREEDY_RUN_TOKENS=$runs timeout 200 python3 bench/server_sampling.py --strata "$bin" --model "$m" \
      --prompt-tokens 512 --gen 128 --streams 8 -r 1 --out "$OUT/server.txt" > /dev/null 2>&1
  done
done
unset STRATA_DEVICES__PREFILL STRATA_DEVICES__DECODE
cat "$OUT/server.txt"
OUT=$OUT/q4_0 TYPES=Q4_0 timeout 150 bash bench/results/h200-vulkan-decode-2026-12-01/session32/s32a.sh
OUT=$OUT/smollm2 SHAPE=smollm2-135m TYPES=Q4_1 timeout 100 bash bench/results/h200-vulkan-decode-2026-12-01/session32/s32a.sh
