#!/usr/bin/env bash
# Session 40, call 3: the tagged down projection with a pause between polls, against itself with
# the pipeline barrier kept (STRATA_VULKAN_TAGGED_DOWN=barrier: the tagged kernels' own cost) and
# the default, 7B Q4_1 at context 512; the driver's register counts of the kernels (shader_stats,
# SPIR-V from the build in .carryz/spv.tgz).
cd "$(dirname "$0")/../../../.."
source bench/results/h200-vulkan-decode-2026-12-01/session40/common.sh
tar xzf .carryz/spv.tgz -C target/
(cd target/spv && STRATA_VULKAN_PROFILE=1 ./shader_stats 0 *.spv) 2>&1 | tee $OUT/registers.txt
synth Q4_1 >/dev/null
ab Q4_1 512 X=1 STRATA_VULKAN_TAGGED_DOWN=1 STRATA_VULKAN_TAGGED_DOWN=barrier X=1 STRATA_VULKAN_TAGGED_DOWN=1 STRATA_VULKAN_TAGGED_DOWN=barrier 2>&1 | short | tee $OUT/tagged-Q4_1.txt
