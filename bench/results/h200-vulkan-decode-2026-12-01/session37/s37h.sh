#!/usr/bin/env bash
# Session 37, call 8 (the H200 of call 7, still warm): 7B Q4_1 tg128 at context 512, default
# against the opt-in forms STRATA_MATVEC_LONE_128=1 and that plus STRATA_VULKAN_NORM_EPILOGUE=1
# (X=1 is no setting), the default again last.
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
synth Q4_1; m=$(model_of Q4_1)
for v in X=1 STRATA_MATVEC_LONE_128=1 STRATA_MATVEC_LONE_128=1,STRATA_VULKAN_NORM_EPILOGUE=1 X=1; do
  echo "$v: $(env ${v//,/ } $bin bench -m $m --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'bandwidth \(|tg128' | tr '\n' ' ')"
done | tee $OUT/knobs.txt
