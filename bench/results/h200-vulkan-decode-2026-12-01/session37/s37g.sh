#!/usr/bin/env bash
# Session 37, call 7: llama.cpp's Vulkan llama-bench (built on the development machine: Debian
# 12's glslc 2023.2, so no cooperative matrices and no integer dot products, as the issue's peer;
# carried as .carryz/llama-bench-vulkan.gz) beside strata-rt's bench, same card, same models.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh
lv=$PWD/.carry/llama-bench-vulkan
chmod +x "$lv"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/devices.txt"
for ty in Q4_0 Q4_1 Q4_K; do
  synth $ty
  [ "$(left)" -gt 100 ] || { echo "skipped $ty (time)"; continue; }
  echo "== qwen2.5-7b $ty" >> "$OUT/llama-cpp-vulkan.txt"
  timeout $(( $(left) - 40 )) "$lv" -m "$(model_of $ty)" -ngl 99 -fa 1 -p 2048 -n 128 -d 512,8192 -r 2 2>&1 | grep -E "^\||ggml_vulkan: 0" >> "$OUT/llama-cpp-vulkan.txt"
  [ "$(left)" -gt 30 ] && timeout $(( $(left) - 5 )) "$bin" bench -m "$(model_of $ty)" --device vulkan:0 -p 2048 -n 128 -d 512,8192 -r 2 2>&1 | grep -E "^\||bandwidth" >> "$OUT/llama-cpp-vulkan.txt"
  echo "$ty done at $(( $(date +%s) - t0 )) s"
done
cat "$OUT/llama-cpp-vulkan.txt"
