#!/usr/bin/env bash
# Long-context decode on a GPU machine (run there by the device tool; see BENCHMARKS.md): a
# synthetic 7B shape, every variant's decode t/s at context DEPTHS (default 8192 and 512),
# interleaved REPS times, then a per-op GPU profile of each variant at the first depth.
# Usage: bench/h200_long_context.sh BINARY OUTDIR TYPE VARIANT...
#   VARIANT: as bench/h200_variants.sh ("default" or settings joined by commas).
# Environment: REPS (default 2), DEPTHS (default "8192 512"), SHAPE, MODELS_DIR.
source "$(dirname "$0")/h200_common.sh" "$@"
tg() { awk -F'|' '/tg[0-9]/ {gsub(/ /,"",$3); printf "%s ", $3}'; }
depths=(${DEPTHS:-8192 512})
{
  echo "== $shape $ty: decode t/s (tg128) at depths ${depths[*]}, variants interleaved"
  for i in $(seq "${REPS:-2}"); do
    for d in "${depths[@]}"; do
      line="rep $i ctx $d:"
      for v in "${variants[@]}"; do line="$line $v $(run "$v" -p 64 -n 128 -d "$d" -r 1 | tg)"; done
      echo "$line"
    done
  done
} 2>&1 | tee -a "$out/long-context-$ty.txt"
for v in "${variants[@]}"; do
  echo "== $shape $ty $v ctx ${depths[0]}" >> "$out/profile-$ty.txt"
  STRATA_VULKAN_PROFILE=1 run "$v" -p 64 -n 32 -d "${depths[0]}" -r 1 | grep -v "^pipeline" >> "$out/profile-$ty.txt"
done
