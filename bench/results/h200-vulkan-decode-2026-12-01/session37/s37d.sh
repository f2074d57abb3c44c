#!/usr/bin/env bash
# Session 37, call 4: the long-context attention kernel with the split's block-table words in
# shared memory and each tile's V loads issued before its scores (new) against HEAD (base),
# 7B Q4_1 and Q4_K at context 8192 (and 4096, where the kernel starts), interleaved; split
# counts of the new kernel (SPLIT_VARIANTS, default 16 and 64); its register count and per-op
# profile. Call 5 (s37e.sh) ran it again with another build.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh
base=$PWD/.carry/strata-rt-base
nvidia-smi --query-gpu=name --format=csv,noheader
for ty in Q4_1 Q4_K; do synth $ty; done
for r in 1 2; do
  for ty in Q4_1 Q4_K; do
    for b in base new; do
      exe=$bin; [ $b = base ] && exe=$base
      echo "== round $r $ty $b: $("$exe" bench -m "$(model_of $ty)" --device vulkan:0 -p 64 -n 128 -d 4096,8192 -r 1 2>&1 | grep -E 'tg128' | tr '\n' ' ')"
    done
  done
done | tee "$OUT/ab.txt"
for v in ${SPLIT_VARIANTS-STRATA_ATTENTION_GQA_SPLITS=16 STRATA_ATTENTION_GQA_SPLITS=64}; do
  echo "== new $v: $(env $v "$bin" bench -m "$(model_of Q4_1)" --device vulkan:0 -p 64 -n 128 -d 8192 -r 1 2>&1 | grep -E 'tg128')"
done | tee "$OUT/splits.txt"
for b in base new; do
  exe=$bin; [ $b = base ] && exe=$base
  echo "== $b" >> "$OUT/profile.txt"
  STRATA_VULKAN_PROFILE=1 "$exe" bench -m "$(model_of Q4_1)" --device vulkan:0 -p 64 -n 32 -d 8192 -r 1 >> "$OUT/profile.txt" 2>&1
done
grep -E "^==|AttentionDecodeGqa|one-token|attention" "$OUT/profile.txt" | grep -v "8-token" | head -30
