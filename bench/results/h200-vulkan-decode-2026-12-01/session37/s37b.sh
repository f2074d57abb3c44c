#!/usr/bin/env bash
# Session 37, call 2 (the same warm machine: models and llama-bench kept under target/): strata-rt's
# whole table (prefill 2048, decode at 512 and 8192, batches of 8 and 32; read bandwidth measured
# in each run) for the 7B types and SmolLM2's shape, and whatever llama-bench call 1 left.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/devices.txt"
for ty in ${TYPES:-Q4_1 Q4_K Q4_0 smollm2-Q4_1}; do
  synth "$ty"
  [ "$(left)" -gt 60 ] || { echo "skipped $ty (time)"; continue; }
  echo "== $ty" >> "$OUT/bench.txt"
  timeout $(( $(left) - 5 )) "$bin" bench -m "$(model_of $ty)" --device vulkan:0 -p 2048 -n 128 -d 512,8192 --batch 8,32 -r 2 --json "$OUT/bench-$ty.json" >> "$OUT/bench.txt" 2>&1
  echo "bench $ty done at $(( $(date +%s) - t0 )) s"
done
grep -E "^==|bandwidth|^\| (pp|tg)" "$OUT/bench.txt"
for ty in ${LLAMA_TYPES:-}; do
  build_llama 16
  [ "$(left)" -gt 70 ] || { echo "skipped llama-bench $ty (time)"; continue; }
  echo "== qwen2.5-7b $ty" >> "$OUT/llama-cpp.txt"
  timeout $(( $(left) - 10 )) "$lcp" -m "$(model_of $ty)" -ngl 99 -fa 1 -p 2048 -n 128 -d 512,8192 -r 2 2>&1 | grep -E "^\|" >> "$OUT/llama-cpp.txt"
done
cat "$OUT/llama-cpp.txt" 2>/dev/null
