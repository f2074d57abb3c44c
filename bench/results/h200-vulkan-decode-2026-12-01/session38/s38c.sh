#!/usr/bin/env bash
# Session 38, call 3: whether STRATA_MATVEC_LONE_128=1 should be the default: 7B tg128 at
# context 512 with one sequence and with batches of 8, default against it, interleaved.
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
for ty in Q4_1 Q4_K; do
  synth $ty; m=$(model_of $ty)
  for v in X=1 STRATA_MATVEC_LONE_128=1 X=1 STRATA_MATVEC_LONE_128=1; do
    [ "$(left)" -lt 25 ] && break
    echo "$ty $v: $(env $v $bin bench -m $m --device vulkan:0 -p 64 -n 128 -d 512 --batch 8 -r 2 2>&1 | grep -E 'tg128|x8|batch' | tr '\n' ' ')"
  done
done | tee $OUT/lone128.txt
