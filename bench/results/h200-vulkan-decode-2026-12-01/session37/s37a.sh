#!/usr/bin/env bash
# Session 37, call 1: models, correctness against the CPU device, backend_ops, then llama.cpp's
# CUDA llama-bench on the same card (built here, in the background while the models are made).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; "$bin" devices; } > "$OUT/devices.txt" 2>&1
head -1 "$OUT/devices.txt"
build_llama 12 > "$OUT/llama-build-summary.txt" 2>&1 &
builder=$!
for ty in Q4_1 Q4_K Q4_0 smollm2-Q4_1; do synth "$ty"; done
echo "models at $(( $(date +%s) - t0 )) s"
for ty in Q4_1 Q4_K Q4_0 smollm2-Q4_1; do
  echo "== $ty" >> "$OUT/compare.txt"
  timeout 150 "$bin" compare-devices -m "$(model_of $ty)" --device vulkan:0 --prompt-tokens 128 --positions 64 >> "$OUT/compare.txt" 2>&1
  echo "== $ty exact mode" >> "$OUT/compare.txt"
  STRATA_VULKAN_EXACT=1 timeout 150 "$bin" compare-devices -m "$(model_of $ty)" --device vulkan:0 --prompt-tokens 128 --positions 64 >> "$OUT/compare.txt" 2>&1
  echo "compare $ty done at $(( $(date +%s) - t0 )) s: $(grep -iE 'mean KL|top-1' "$OUT/compare.txt" | tail -2 | tr '\n' ' ')"
done
wait $builder; cat "$OUT/llama-build-summary.txt"
REQUIRE_VULKAN_DEVICE=1 timeout 60 .carry/backend_ops --test-threads 4 > "$OUT/backend_ops.txt" 2>&1
grep -E "test result" "$OUT/backend_ops.txt"
for ty in Q4_1 Q4_K Q4_0; do
  [ "$(left)" -gt 70 ] || { echo "skipped llama-bench $ty (time)"; continue; }
  echo "== qwen2.5-7b $ty" >> "$OUT/llama-cpp.txt"
  timeout $(( $(left) - 10 )) "$lcp" -m "$(model_of $ty)" -ngl 99 -fa 1 -p 2048 -n 128 -d 512,8192 -r 2 2>&1 | grep -E "^\|" >> "$OUT/llama-cpp.txt"
  echo "llama-bench $ty done at $(( $(date +%s) - t0 )) s"
done
cat "$OUT/llama-cpp.txt" 2>/dev/null
