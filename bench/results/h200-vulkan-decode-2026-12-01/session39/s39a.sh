#!/usr/bin/env bash
# Session 39, call 1: decode attention in one stage (STRATA_ATTENTION_WHOLE_MAX) against the
# split kernels and their merge, 7B Q4_1: tg128 at context 512 interleaved, at 2048 (where the
# threshold's default should end), with STRATA_MATVEC_LONE_128=1, a per-op profile, and the
# issue's correctness bars (64 positions one token a step after a prompt of 128).
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session39/common.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
synth Q4_1 | tee $OUT/synth.txt
W=STRATA_ATTENTION_WHOLE_MAX=4096
ab Q4_1 512 X=1 $W X=1 $W STRATA_MATVEC_LONE_128=1 $W,STRATA_MATVEC_LONE_128=1 | tee $OUT/ab512.txt
ab Q4_1 2048 X=1 $W | tee $OUT/ab2048.txt
ab Q4_1 1024 X=1 $W | tee $OUT/ab1024.txt
[ "$(left)" -gt 60 ] && for v in X=1 $W; do echo "== $v"; env $v STRATA_VULKAN_PROFILE=1 $bin bench -m $(model_of Q4_1) --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -A18 "one-token steps" | head -19; done > $OUT/profile.txt 2>&1
[ "$(left)" -gt 70 ] && env $W timeout $(( $(left) - 5 )) $bin compare-devices -m $(model_of Q4_1) --device vulkan:0 --prompt-tokens 128 --positions 64 --ubatch 1 > $OUT/compare.txt 2>&1
tail -5 $OUT/compare.txt
echo "left $(left) s"
