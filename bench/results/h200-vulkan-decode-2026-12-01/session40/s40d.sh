#!/usr/bin/env bash
# Session 40, call 5: session 21's stage-boundary probe with a new mode, stages ordered by
# events (set after each dispatch, waited before the next) instead of pipeline barriers, beside
# the barriers and the barrier-free modes, on a 7B Q4_K token's memory pattern.
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session40/common.sh
.carry/stage_chain 0 7b 396 2>&1 | tee $OUT/probe.txt
