#!/usr/bin/env bash
# The fused decode stages on a GPU machine (run there by the device tool; see BENCHMARKS.md):
# decode t/s of a synthetic 7B shape with every fused epilogue on (FUSED, default: the QKV one
# and the two opt-in ones) and with all of them off, interleaved REPS times at context 512 (GPU clocks drift by a few percent between runs),
# once each at context 8192, a per-op GPU profile of each, and whether the two compute the same
# logits (compare-devices through the decode kernels, per position, both against the CPU).
# Usage: bench/h200_fusions.sh BINARY OUTDIR [TYPES...]   (default: Q4_K)
# Environment: REPS (default 3), SHAPE (qwen2.5-7b).
set -uo pipefail
bin=${1:?binary}; out=${2:?output folder}; shift 2
types=("$@"); [ ${#types[@]} -gt 0 ] || types=(Q4_K)
shape=${SHAPE:-qwen2.5-7b}
models=${MODELS_DIR:-/tmp/strata-models}
mkdir -p "$models" "$out"
on=${FUSED:-STRATA_VULKAN_FUSE_QKV=1 STRATA_VULKAN_FUSE_SWIGLU_PRODUCT=1 STRATA_VULKAN_FUSE_ATTENTION=1}
off="STRATA_VULKAN_FUSE_QKV=0 STRATA_VULKAN_FUSE_SWIGLU_PRODUCT=0 STRATA_VULKAN_FUSE_ATTENTION=0"
decode() { env "$@" bench -m "$m" --device vulkan:0 -p 64 -n 128 -d "$depth" -r 1 2>&1 | grep -E "tg128" | awk -F'|' '{gsub(/ /,"",$3); print $3}'; }
for ty in "${types[@]}"; do
  m="$models/$shape-$ty.gguf"
  [ -f "$m" ] || /usr/bin/time -f "synth %e s" "$bin" synth-model --shape "$shape" --type "$ty" --out "$m" 2>&1 | tail -1
  {
    echo "== $shape $ty: decode t/s, fused ($on) vs separate stages ($off)"
    depth=512
    for i in $(seq "${REPS:-3}"); do
      echo "ctx 512 rep $i: fused $(decode $on "$bin") separate $(decode $off "$bin")"
    done
    depth=8192
    echo "ctx 8192: fused $(decode $on "$bin") separate $(decode $off "$bin")"
  } 2>&1 | tee -a "$out/fusions.txt"
  for which in fused separate; do
    vars=$on; [ $which = separate ] && vars=$off
    echo "== $shape $ty $which" >> "$out/profile-$ty.txt"
    env $vars STRATA_VULKAN_PROFILE=1 "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -vE "^pipeline " >> "$out/profile-$ty.txt"
    env $vars "$bin" compare-devices -m "$m" --device vulkan:0 --prompt-tokens 128 --positions 64 --ubatch 1 --per-position > "$out/compare-$ty-$which.txt" 2>&1
    tail -1 "$out/compare-$ty-$which.txt"
  done
  if cmp -s <(grep -v "^==" "$out/compare-$ty-fused.txt") <(grep -v "^==" "$out/compare-$ty-separate.txt"); then
    echo "$ty: fused and separate stages print the same per-position comparison" | tee -a "$out/fusions.txt"
  else
    echo "$ty: fused and separate stages DIFFER" | tee -a "$out/fusions.txt"
  fi
done
