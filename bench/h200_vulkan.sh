#!/usr/bin/env bash
# The Vulkan device on a GPU machine (run there by the device tool; see BENCHMARKS.md): synthetic
# models of Qwen2.5-7B's shape (Q4_K, Q4_0, Q4_1) and of the default model, each checked against
# the CPU device (KL, top-1) and timed (prefill 2048; decode at context 512 and 8192; batched
# decode of 8 and 32 sequences), with the device's read bandwidth measured in the same run.
# Usage: bench/h200_vulkan.sh BINARY OUTDIR [TYPES...]   (default types: Q4_K Q4_0 Q4_1)
# Environment: REPS (default 3); NOISE=1 adds the CPU's AVX2-vs-AVX-512 noise floor; PROFILE=1 adds
# a decode run with per-op GPU times; VARIANTS="A=1 B=2" adds one decode run (ctx 512) per
# environment setting, e.g. STRATA_MATVEC_ROWS=4 or STRATA_VULKAN_INT_DOT=0.
set -uo pipefail
bin=${1:?binary}; out=${2:?output folder}; shift 2
types=("$@"); [ ${#types[@]} -gt 0 ] || types=(Q4_K Q4_0 Q4_1)
models=${MODELS_DIR:-/tmp/strata-models}
mkdir -p "$models" "$out"
reps=${REPS:-3}
{
  echo "== $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  "$bin" devices
} 2>&1 | tee "$out/devices.txt"
for ty in "${types[@]}"; do
  case $ty in
    smollm2-*) shape=smollm2-135m; qt=${ty#smollm2-} ;;
    *) shape=qwen2.5-7b; qt=$ty ;;
  esac
  m="$models/$shape-$qt.gguf"
  [ -f "$m" ] || /usr/bin/time -f "synth %e s" "$bin" synth-model --shape "$shape" --type "$qt" --out "$m" 2>&1 | tail -2
  echo "== $shape $qt"
  "$bin" compare-devices -m "$m" --device vulkan:0 --prompt-tokens 128 --positions 64 2>&1 | tee -a "$out/compare.txt"
  # The noise floor of those bars: the CPU's AVX2 kernels against its AVX-512 ones.
  [ "${NOISE:-0}" = 1 ] && "$bin" compare-devices -m "$m" --device cpu --device-simd avx2 --prompt-tokens 128 --positions 64 2>&1 | tee -a "$out/compare.txt"
  "$bin" bench -m "$m" --device vulkan:0 -p 2048 -n 128 -d 512,8192 --batch 8,32 -r "$reps" --json "$out/bench-$shape-$qt.json" 2>&1 | tee -a "$out/bench.txt"
  for v in ${VARIANTS:-}; do
    echo "== $shape $qt with $v" | tee -a "$out/variants.txt"
    env "$v" "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E "tg128|pp64" | tee -a "$out/variants.txt"
  done
  if [ "${PROFILE:-0}" = 1 ]; then
    echo "== $shape $qt" >> "$out/profile.txt"
    STRATA_VULKAN_PROFILE=1 "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 >> "$out/profile.txt" 2>&1
  fi
done
