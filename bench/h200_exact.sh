#!/usr/bin/env bash
# The Vulkan device's exact mode (STRATA_VULKAN_EXACT=1) on a GPU machine (run there by the device
# tool; see BENCHMARKS.md): for each synthetic 7B model, agreement with the CPU device through
# the decode kernels (one token per step) in the fast and the exact mode, and the exact mode's
# decode speed for each depth of its products' load ring (STRATA_MATVEC_UNROLL).
# Usage: bench/h200_exact.sh BINARY OUTDIR [TYPES...]   (default types: Q4_K Q4_0)
set -uo pipefail
bin=${1:?binary}; out=${2:?output folder}; shift 2
types=("$@"); [ ${#types[@]} -gt 0 ] || types=(Q4_K Q4_0)
models=${MODELS_DIR:-/tmp/strata-models}
mkdir -p "$models" "$out"
for ty in "${types[@]}"; do
  m="$models/qwen2.5-7b-$ty.gguf"
  [ -f "$m" ] || "$bin" synth-model --shape qwen2.5-7b --type "$ty" --out "$m" >/dev/null 2>&1
  for exact in 0 1; do
    echo "== qwen2.5-7b $ty, STRATA_VULKAN_EXACT=$exact, one token per step"
    STRATA_VULKAN_EXACT=$exact "$bin" compare-devices -m "$m" --device vulkan:0 --prompt-tokens 128 --positions 64 --ubatch 1 2>&1 | tail -1
  done
  for unroll in ${UNROLLS:-2 4 8}; do
    echo "== qwen2.5-7b $ty, exact mode, STRATA_MATVEC_UNROLL=$unroll"
    STRATA_VULKAN_EXACT=1 STRATA_MATVEC_UNROLL=$unroll "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E "tg128"
  done
  echo "== qwen2.5-7b $ty, exact mode, default load ring"
  STRATA_VULKAN_EXACT=1 "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 128 -d 512,8192 -r 1 2>&1 | grep -E "tg128"
done 2>&1 | tee -a "$out/exact.txt"
if [ "${PROFILE:-0}" = 1 ]; then
  STRATA_VULKAN_EXACT=1 STRATA_VULKAN_PROFILE=1 "$bin" bench -m "$models/qwen2.5-7b-${types[0]}.gguf" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -v "^pipeline" > "$out/profile-exact.txt"
fi
