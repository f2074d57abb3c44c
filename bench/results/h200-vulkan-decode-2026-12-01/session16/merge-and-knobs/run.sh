#!/usr/bin/env bash
# Session 16, call D: attention's merge back to one element an invocation (long contexts), the V
# preload on/off, and the new product defaults per type, against c5ea318; contexts 512 and 8192.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
C=$PWD/.carry; M=/tmp/strata-models; mkdir -p $M
for t in Q4_0 Q4_K; do [ -f $M/qwen2.5-7b-$t.gguf ] || $C/strata-rt synth-model --shape qwen2.5-7b --type $t --out $M/qwen2.5-7b-$t.gguf > /dev/null 2>&1; done
[ -f $M/smollm2-135m-Q4_1.gguf ] || $C/strata-rt synth-model --shape smollm2-135m --type Q4_1 --out $M/smollm2-135m-Q4_1.gguf > /dev/null 2>&1
run() { local name=$1 b=$2 m=$3; shift 3; echo "$name $m: $(env "$@" $C/$b bench -m $M/$m.gguf --device vulkan:0 -p 64 -n 128 -d 512,8192 -r 1 2>&1 | grep -E '^\| tg' | awk -F'|' '{printf "%s %s ", $2, $3}')"; }
for i in 1 2; do
  for m in qwen2.5-7b-Q4_0 smollm2-135m-Q4_1 qwen2.5-7b-Q4_K; do
    run old strata-rt-old $m X=1
    run new strata-rt $m X=1
    run nopre strata-rt-nopre $m X=1
    [ $m = qwen2.5-7b-Q4_0 ] && run new-rows2 strata-rt $m STRATA_MATVEC_ROWS=2
    [ $m = qwen2.5-7b-Q4_0 ] && run new-pairs1 strata-rt $m STRATA_SWIGLU_PAIRS=1
  done
done 2>&1 | tee $OUT/ab.txt
for b in strata-rt-old strata-rt; do echo "== $b Q4_0 ctx 8192" >> $OUT/profile.txt; STRATA_VULKAN_PROFILE=1 $C/$b bench -m $M/qwen2.5-7b-Q4_0.gguf --device vulkan:0 -p 64 -n 32 -d 8192 -r 1 2>&1 | grep -A14 "one-token steps" >> $OUT/profile.txt; done
