#!/usr/bin/env bash
# Session 16, call E: the final build (37f4f0e) against c5ea318, 7B Q4_0 and Q4_K, contexts 512 / 8192.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
C=$PWD/.carry; M=/tmp/strata-models; mkdir -p $M
for t in Q4_0 Q4_K; do
  /usr/bin/time -f "synth $t %e s" $C/strata-rt synth-model --shape qwen2.5-7b --type $t --out $M/qwen2.5-7b-$t.gguf 2>&1 | tail -1
  for b in strata-rt-old strata-rt strata-rt-old strata-rt; do
    echo "$b $t: $($C/$b bench -m $M/qwen2.5-7b-$t.gguf --device vulkan:0 -p 64 -n 128 -d 512,8192 --batch 8 -r 1 2>&1 | grep -E '^\| tg' | awk -F'|' '{printf "%s %s ", $2, $3}')"
  done
done 2>&1 | tee $OUT/ab.txt
