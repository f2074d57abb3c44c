#!/usr/bin/env bash
# Session 38, call 1: the L2 prefetches of latency-bound stages' inputs (STRATA_VULKAN_PREFETCH_KV:
# the attention's K/V cells beside the Q/K/V products; STRATA_VULKAN_PREFETCH_NORM: the next
# RMSNorm's weights in the tail of the product before it), 7B tg128 at context 512, interleaved
# with the default (X=1 is no setting), Q4_1 then Q4_K; then per-op profiles of Q4_1.
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session38/common.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv | tee $OUT/gpu.txt
both=STRATA_VULKAN_PREFETCH_KV=2048,STRATA_VULKAN_PREFETCH_NORM=1
synth Q4_1
run Q4_1 X=1 STRATA_VULKAN_PREFETCH_KV=2048 STRATA_VULKAN_PREFETCH_NORM=1 $both X=1 $both STRATA_VULKAN_PREFETCH_MB=8,$both STRATA_MATVEC_LONE_128=1,$both STRATA_MATVEC_LONE_128=1 | tee $OUT/q4_1.txt
m=$(model_of Q4_1)
for v in X=1 $both; do
  [ "$(left)" -lt 40 ] && break
  env ${v//,/ } STRATA_VULKAN_PROFILE=1 $bin bench -m $m --device vulkan:0 -p 64 -n 32 -d 512 -r 1 > $OUT/profile-Q4_1-${v%%=*}.txt 2>&1
done
[ "$(left)" -gt 200 ] && { synth Q4_K; run Q4_K X=1 $both X=1 $both STRATA_MATVEC_LONE_128=1,$both | tee $OUT/q4_k.txt; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv | tee -a $OUT/gpu.txt
