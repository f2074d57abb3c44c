#!/usr/bin/env bash
# Session 38, call 2: the SwiGLU row's quantization and down in one dispatch with a grid barrier
# between them (STRATA_VULKAN_QUANT_DOWN=1), 7B tg128 at context 512. Grid-barrier forms run
# greedy steps one at a time, so the A/B is with STRATA_VULKAN_GREEDY_PIPELINE=off on both sides
# (P=off below), the pipelined default beside them; then per-op profiles with the registers.
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session38/common.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
P=STRATA_VULKAN_GREEDY_PIPELINE=off
qd=STRATA_VULKAN_QUANT_DOWN=1
synth Q4_K
run Q4_K $P $P,$qd $P $P,$qd X=1 $P,$qd,STRATA_VULKAN_QUANT_DOWN_GROUPS=1320 $P,$qd,STRATA_VULKAN_QUANT_DOWN_GROUPS=528 | tee $OUT/q4_k.txt
m=$(model_of Q4_K)
for v in X=1 $qd; do
  [ "$(left)" -lt 40 ] && break
  env ${v//,/ } STRATA_VULKAN_PROFILE=1 $bin bench -m $m --device vulkan:0 -p 64 -n 32 -d 512 -r 1 > $OUT/profile-Q4_K-${v%%=*}.txt 2>&1
done
[ "$(left)" -gt 150 ] && { synth Q4_1; run Q4_1 $P $P,$qd $P $P,$qd | tee $OUT/q4_1.txt; }
m=$(model_of Q4_1)
[ "$(left)" -gt 40 ] && STRATA_VULKAN_QUANT_DOWN=1 STRATA_VULKAN_PROFILE=1 $bin bench -m $m --device vulkan:0 -p 64 -n 32 -d 512 -r 1 > $OUT/profile-Q4_1-qd.txt 2>&1
grep -h "FfnQuantDown\|MatVecInt1Unrolled\|MatVecInt1(" $OUT/profile-*.txt | sort -u | tee $OUT/registers.txt
