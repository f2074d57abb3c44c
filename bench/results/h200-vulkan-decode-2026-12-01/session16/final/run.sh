#!/usr/bin/env bash
# Session 16, call B: the final defaults against c5ea318, agreement, and a full Q4_K run.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
B=$PWD/.carry/strata-rt; OLD=$PWD/.carry/strata-rt-old; O=$OUT
M=/tmp/strata-models/qwen2.5-7b-Q4_K.gguf; mkdir -p /tmp/strata-models
/usr/bin/time -f "synth %e s" $B synth-model --shape qwen2.5-7b --type Q4_K --out $M 2>&1 | tail -1 | tee $O/log.txt
for e in 0 1; do
  STRATA_VULKAN_EXACT=$e timeout 120 $B compare-devices -m $M --device vulkan:0 --prompt-tokens 128 --positions 64 --ubatch 1 > $O/cmp-exact$e.txt 2>&1; tail -1 $O/cmp-exact$e.txt | tee -a $O/log.txt
done
REPS=3 timeout 300 bash bench/h200_batched.sh $B $O Q4_K @$OLD default 2>&1 | tail -8
timeout 200 $B bench -m $M --device vulkan:0 -p 2048 -n 128 -d 512,8192 --batch 8,32 -r 2 --json $O/bench-Q4_K.json > $O/bench-Q4_K.txt 2>&1; tail -12 $O/bench-Q4_K.txt
