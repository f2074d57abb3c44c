#!/usr/bin/env bash
# Session 40, call 2: the down projection reading tagged records without a pipeline barrier after
# the SwiGLU row's quantization (STRATA_VULKAN_TAGGED_DOWN=1), 7B Q4_1 and Q4_K at context 512,
# interleaved with the default; then its logits against the CPU's and the default's (the same
# arithmetic: the KL must be the default's to the last digit).
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session40/common.sh
T=STRATA_VULKAN_TAGGED_DOWN=1
synth Q4_1 >/dev/null
ab Q4_1 512 X=1 $T X=1 $T 2>&1 | short | tee $OUT/tagged-Q4_1.txt
compare Q4_1 X=1 $T | tee $OUT/compare-Q4_1.txt
[ "$(left)" -gt 150 ] && synth Q4_K >/dev/null && ab Q4_K 512 X=1 $T X=1 $T 2>&1 | short | tee $OUT/tagged-Q4_K.txt
