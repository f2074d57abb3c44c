#!/usr/bin/env bash
# Session 37, call 3: where context 8192's attention goes (7B Q4_1): split counts of the GQA
# kernel, the per-head kernel, and per-op profiles.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
synth Q4_1
m=$(model_of Q4_1)
for v in default STRATA_ATTENTION_GQA_SPLITS=16 STRATA_ATTENTION_GQA_SPLITS=64 STRATA_ATTENTION_GQA_SPLITS=128 STRATA_ATTENTION_GQA_FROM=off; do
  s=; [ $v = default ] || s=$v
  echo "== $v: $(env $s "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 128 -d 8192 -r 1 2>&1 | grep -E 'tg128')"
done | tee "$OUT/splits.txt"
for v in default STRATA_ATTENTION_GQA_SPLITS=64; do
  s=; [ $v = default ] || s=$v
  echo "== $v" >> "$OUT/profile.txt"
  env $s STRATA_VULKAN_PROFILE=1 "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 8192 -r 1 2>&1 | grep -A18 "one-token steps" >> "$OUT/profile.txt"
done
grep -E "==|one-token|attention|gate" "$OUT/profile.txt"
