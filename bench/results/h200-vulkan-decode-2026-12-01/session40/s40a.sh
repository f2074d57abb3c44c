#!/usr/bin/env bash
# Session 40, call 1: what a token pays outside the kernels' own work on the H200, 7B Q4_1 and
# Q4_K at context 512: the empty long-context attention dispatch (STRATA_ATTENTION_GQA_FROM=off
# drops it), the indirect attention dispatch (STRATA_VULKAN_ATTENTION_DIRECT=S: a direct one of
# S splits a head), and binding each dispatch's pipeline and push constants before its barrier.
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session40/common.sh
synth Q4_1 >/dev/null
G=STRATA_ATTENTION_GQA_FROM=off
D=STRATA_VULKAN_ATTENTION_DIRECT=12
B=STRATA_VULKAN_BIND_BEFORE_BARRIER=1
ab Q4_1 512 X=1 $G $G,$D $B $G,$D,$B X=1 $G,$D,$B $G,STRATA_VULKAN_ATTENTION_DIRECT=16 2>&1 | short | tee $OUT/overheads-Q4_1.txt
[ "$(left)" -gt 200 ] && synth Q4_K >/dev/null && ab Q4_K 512 X=1 $G,$D,$B X=1 $G,$D,$B 2>&1 | short | tee $OUT/overheads-Q4_K.txt
