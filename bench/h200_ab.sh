#!/usr/bin/env bash
# A/B of two strata-rt builds on a GPU machine (run there by the device tool; see BENCHMARKS.md):
# decode t/s at context 512 of a synthetic 7B shape, the two builds interleaved REPS times (GPU
# clocks drift between runs by a few percent), then one run per environment variant of build B,
# a per-op GPU profile of each build, and build B's agreement with the CPU device through the
# decode kernels.
# Usage: bench/h200_ab.sh BIN_A BIN_B OUTDIR [TYPE]   (TYPE: Q4_0 by default; Q4_K, Q4_1, ...)
# Environment: REPS (default 3), VARIANTS="A=1 B=2" (each run with build B), SHAPE (qwen2.5-7b).
set -uo pipefail
a=${1:?build A}; b=${2:?build B}; out=${3:?output folder}; ty=${4:-Q4_0}
shape=${SHAPE:-qwen2.5-7b}
models=${MODELS_DIR:-/tmp/strata-models}
mkdir -p "$models" "$out"
m="$models/$shape-$ty.gguf"
[ -f "$m" ] || /usr/bin/time -f "synth %e s" "$b" synth-model --shape "$shape" --type "$ty" --out "$m" 2>&1 | tail -1
decode() { "$@" bench -m "$m" --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E "tg128" | awk -F'|' '{gsub(/ /,"",$3); print $3}'; }
{
  echo "== $shape $ty: decode t/s at context 512 (tg128), A=$a B=$b"
  for i in $(seq "${REPS:-3}"); do
    echo "rep $i: A $(decode "$a") B $(decode "$b")"
  done
  for v in ${VARIANTS:-}; do
    echo "B with $v: $(decode env "$v" "$b")"
  done
} 2>&1 | tee -a "$out/ab.txt"
for which in A B; do
  bin=$a; [ $which = B ] && bin=$b
  echo "== $shape $ty build $which" >> "$out/profile-$ty.txt"
  STRATA_VULKAN_PROFILE=1 "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -vE "^pipeline " >> "$out/profile-$ty.txt"
done
"$b" compare-devices -m "$m" --device vulkan:0 --prompt-tokens 128 --positions 64 --ubatch 1 2>&1 | tee -a "$out/compare-$ty.txt" | tail -3
