#!/usr/bin/env bash
# Session 39, call 4 (the same H200): knobs beside STRATA_MATVEC_LONE_128=1 on 7B Q4_1 at
# context 512, looking for the ~5% that 50% of the roofline needs.
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session39/common.sh >/dev/null 2>&1
synth Q4_1 >/dev/null
L=STRATA_MATVEC_LONE_128=1
ab Q4_1 512 X=1 $L $L,STRATA_ATTENTION_SPLIT=32 $L,STRATA_ATTENTION_SPLIT=128 $L,STRATA_VULKAN_GREEDY_STEPS=8 $L,STRATA_SWIGLU_PAIRS=2 \
  $L,STRATA_VULKAN_FUSE_SWIGLU_PRODUCT=1 $L,STRATA_VULKAN_PERSISTENT_FFN=1 X=1 $L 2>&1 | sed 's/weight bytes read per decode step: [0-9.]* MB, plus 57.3 KB of KV per cell of context //' | tee $OUT/knobs-h200.txt
