#!/usr/bin/env bash
# Session 29: llama.cpp's CUDA llama-bench beside strata-rt's Vulkan bench (bench/h200_llama_cpp.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
bash bench/h200_llama_cpp.sh "$PWD/.carry/llama.cpp.tgz" "$PWD/.carry/strata-rt" "$OUT/lcp" "$@"
