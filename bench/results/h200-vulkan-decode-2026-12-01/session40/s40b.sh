#!/usr/bin/env bash
# Session 40, call 2: the down projection reading tagged records without a pipeline barrier after
# the SwiGLU row's quantization (STRATA_VULKAN_TAGGED_DOWN=1), 7B Q4_1 and Q4_K at context 512,
# interleaved with the default; then its logits against the CPU's and the default's (the same
# arithmetic: the KL must be the default's to the last digit).
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session38/common.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
T=STRATA_VULKAN_TAGGED_DOWN=1
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //'; }
synth Q4_1 >/dev/null
ab Q4_1 512 X=1 $T X=1 $T 2>&1 | short | tee $OUT/tagged-Q4_1.txt
for v in X=1 $T; do
  echo "$v: $(env $v $bin compare-devices -m $(model_of Q4_1) --device vulkan:0 --ubatch 1 --positions 32 --prompt-tokens 64 2>&1 | tail -1)"
done | tee $OUT/compare-Q4_1.txt
[ "$(left)" -gt 150 ] && synth Q4_K >/dev/null && ab Q4_K 512 X=1 $T X=1 $T 2>&1 | short | tee $OUT/tagged-Q4_K.txt
