#!/usr/bin/env bash
# Prefill speed of the Vulkan product kernels on a GPU machine (run there by the device tool; see
# BENCHMARKS.md): a synthetic 7B shape, pp2048 for each prefill-product variant interleaved REPS
# times, then each variant's agreement with the CPU device through the prefill kernels
# (`compare-devices --ubatch 64`), then the whole benchmark of the first variant.
# Usage: bench/h200_prefill.sh BINARY OUTDIR TYPE VARIANT...
#   VARIANT: as bench/h200_variants.sh ("default", or settings joined by commas such as
#   STRATA_VULKAN_GEMM=off).
# Environment: REPS (default 2), SHAPE (qwen2.5-7b), MODELS_DIR, COMPARE and WHOLE (default 1;
# 0 skips the agreement runs, the whole benchmark). A first untimed run warms the GPU up.
source "$(dirname "$0")/h200_common.sh" "$@"
pp() { awk -F'|' '/pp[0-9]/ {gsub(/ /,"",$3); printf "%s ", $3}'; }
run "${variants[0]}" -p 512 -n 1 -r 1 > /dev/null
{
  echo "== $shape $ty: prompt processing t/s (pp2048), variants interleaved"
  for i in $(seq "${REPS:-2}"); do
    line="rep $i:"
    for v in "${variants[@]}"; do line="$line $v $(run "$v" -p 2048 -n 1 -r 1 | pp)"; done
    echo "$line"
  done
} 2>&1 | tee -a "$out/prefill-$ty.txt"
if [ "${COMPARE:-1}" != 0 ]; then
  for v in "${variants[@]}"; do
    echo "== $v: compare-devices --ubatch 64" >> "$out/compare-$ty.txt"
    env $(settings "$v") "$(binary "$v")" compare-devices -m "$m" --device vulkan:0 --prompt-tokens 128 --positions 64 --ubatch 64 2>&1 | tail -4 >> "$out/compare-$ty.txt"
  done
fi
[ "${WHOLE:-1}" = 0 ] && exit 0
echo "== ${variants[0]}: the whole benchmark" >> "$out/bench-$ty.txt"
run "${variants[0]}" -p 2048 -n 128 -d 512,8192 --batch 8,32 -r 2 >> "$out/bench-$ty.txt"
