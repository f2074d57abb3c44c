#!/usr/bin/env bash
# Decode speed of environment variants of one build on a GPU machine (run there by the device
# tool; see BENCHMARKS.md): a synthetic 7B shape, every variant's decode t/s at context 512
# interleaved REPS times (GPU clocks drift by a few percent between runs), once each at context
# 8192 and batched (8 sequences), then a per-op GPU profile of each and the first variant's
# agreement with the CPU device.
# Usage: bench/h200_variants.sh BINARY OUTDIR TYPE VARIANT...
#   VARIANT: "default" (no setting) or settings joined by commas, e.g.
#   STRATA_MATVEC_LAYOUT=g1u1 or STRATA_MATVEC_LAYOUT=g2u2,STRATA_ATTENTION_SPLIT=32
# Environment: REPS (default 3), SHAPE (qwen2.5-7b), MODELS_DIR.
source "$(dirname "$0")/h200_common.sh" "$@"
tg() { awk -F'|' '/tg[0-9]/ {gsub(/ /,"",$3); printf "%s ", $3}'; }
{
  echo "== $shape $ty: decode t/s at context 512 (tg128), variants interleaved"
  for i in $(seq "${REPS:-3}"); do
    line="rep $i:"
    for v in "${variants[@]}"; do line="$line $v $(run "$v" -p 64 -n 128 -d 512 -r 1 | tg)"; done
    echo "$line"
  done
  echo "== context 8192 (tg128), then 8 sequences at context 512 (tg128 x8)"
  for v in "${variants[@]}"; do
    echo "$v: ctx 8192 $(run "$v" -p 64 -n 128 -d 8192 -r 1 | tg) batch 8 $(run "$v" -p 64 -n 128 -d 512 --batch 8 -r 1 | grep x8 | tg)"
  done
} 2>&1 | tee -a "$out/variants-$ty.txt"
for v in "${variants[@]}"; do
  echo "== $shape $ty $v" >> "$out/profile-$ty.txt"
  STRATA_VULKAN_PROFILE=1 run "$v" -p 64 -n 32 -d 512 -r 1 >> "$out/profile-$ty.txt"
done
env $(settings "${variants[0]}") "$bin" compare-devices -m "$m" --device vulkan:0 --prompt-tokens 128 --positions 64 2>&1 | tee -a "$out/compare-$ty.txt" | tail -3
