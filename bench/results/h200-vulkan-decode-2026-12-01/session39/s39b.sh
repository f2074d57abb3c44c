#!/usr/bin/env bash
# Session 39, call 3 (the H200, warm after call 2's models): the one-stage decode attention
# against the split kernels, 7B Q4_1 and Q4_K (Q8_K records: the ticket form, and two heads a
# workgroup) at context 512. Needs one-stage-attention.diff applied to the binary's build.
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session39/common.sh >/dev/null 2>&1
synth Q4_1 >/dev/null; synth Q4_K >/dev/null
W=STRATA_ATTENTION_WHOLE_MAX=4096
(ab Q4_1 512 X=1 $W; ab Q4_K 512 X=1 $W $W,STRATA_ATTENTION_WHOLE_PAIRS=1) 2>&1 | sed 's/weight bytes read per decode step: [0-9.]* MB, plus 57.3 KB of KV per cell of context //' | tee $OUT/ab512-h200.txt
