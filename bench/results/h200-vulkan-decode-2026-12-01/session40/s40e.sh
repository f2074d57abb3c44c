#!/usr/bin/env bash
# Session 40, call 6: the attention merge in the output projection's workgroups
# (STRATA_VULKAN_O_MERGE=1: matvec_o_merge.comp, partial rows a column group of 256 summed into
# the residual by the RMSNorm after it), 7B Q4_1 and Q4_K at context 512, interleaved with the
# default; its logits against the CPU's; one profiled run of each (per-op us a token).
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session40/common.sh
O=STRATA_VULKAN_O_MERGE=1
synth Q4_1 >/dev/null
ab Q4_1 512 X=1 $O X=1 $O 2>&1 | short | tee $OUT/o-merge-Q4_1.txt
compare Q4_1 X=1 $O | tee $OUT/compare-Q4_1.txt
for v in X=1 $O; do
  echo "== $v"; env $v STRATA_VULKAN_PROFILE=1 $bin bench -m $(model_of Q4_1) --device vulkan:0 -p 64 -n 64 -d 512 -r 1 2>&1 | grep -A16 "one-token steps" | head -17
done | tee $OUT/profile-Q4_1.txt
[ "$(left)" -gt 150 ] && synth Q4_K >/dev/null && ab Q4_K 512 X=1 $O X=1 $O 2>&1 | short | tee $OUT/o-merge-Q4_K.txt
