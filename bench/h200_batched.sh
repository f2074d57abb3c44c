#!/usr/bin/env bash
# Batched decode of environment variants of one build on a GPU machine (run there by the device
# tool; see BENCHMARKS.md): a synthetic 7B shape, each variant's single-sequence decode at context
# 512 and 8 and 32 sequences decoding together (each after a 128-token prompt), the variants
# interleaved REPS times, then a per-op GPU profile of each variant's batched steps.
# Usage: bench/h200_batched.sh BINARY OUTDIR TYPE VARIANT...
#   VARIANT: as bench/h200_common.sh describes ("default", A=1,B=2, "@/tmp/old,A=1").
# Environment: REPS (default 2), SHAPE (qwen2.5-7b), MODELS_DIR.
source "$(dirname "$0")/h200_common.sh" "$@"
tg() { awk -F'|' '/tg[0-9]/ {gsub(/ /,"",$2); gsub(/ /,"",$3); printf "%s %s  ", $2, $3}'; }
{
  echo "== $shape $ty: decode t/s (one sequence at context 512; 8 and 32 sequences), variants interleaved"
  for i in $(seq "${REPS:-2}"); do
    for v in "${variants[@]}"; do echo "rep $i $v: $(run "$v" -p 16 -n 64 -d 512 --batch 8,32 -r 1 | tg)"; done
  done
} 2>&1 | tee -a "$out/batched-$ty.txt"
for v in "${variants[@]}"; do
  echo "== $shape $ty $v" >> "$out/profile-batched-$ty.txt"
  STRATA_VULKAN_PROFILE=1 run "$v" -p 16 -n 16 --batch 8,32 -r 1 | grep -vE "^pipeline " >> "$out/profile-batched-$ty.txt"
done
