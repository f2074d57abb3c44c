#!/usr/bin/env bash
# Session 37, call 6: the exact mode against the CPU device on the lent card, one token a step
# (the exact mode computes the CPU's bits in decode-sized steps; call 1's compare took 64 a step).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for ty in Q4_1 Q4_0 Q4_K; do
  synth $ty
  [ "$(left)" -gt 40 ] || { echo "skipped $ty (time)"; continue; }
  echo "== $ty exact mode, one token a step" >> "$OUT/compare-exact.txt"
  STRATA_VULKAN_EXACT=1 timeout $(( $(left) - 5 )) "$bin" compare-devices -m "$(model_of $ty)" --device vulkan:0 --prompt-tokens 128 --positions 64 --ubatch 1 >> "$OUT/compare-exact.txt" 2>&1
  echo "$ty done at $(( $(date +%s) - t0 )) s"
done
cat "$OUT/compare-exact.txt"
