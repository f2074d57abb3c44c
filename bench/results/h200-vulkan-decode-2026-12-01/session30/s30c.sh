#!/usr/bin/env bash
# Session 30, call 4: gate/up workgroups that quantize their own blocks of 32 outputs
# (STRATA_VULKAN_SWIGLU_LOCAL_QUANT=1: no quantization stage before down) against the default,
# with the lone-128 output projection too; 7B Q4_1 and Q4_0, tg128 at 512 three times, profiles,
# the decode kernels' agreement with the CPU.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
bin=$PWD/.carry/strata-rt
Q=STRATA_VULKAN_SWIGLU_LOCAL_QUANT=1
L=STRATA_MATVEC_LONE_128=1
for ty in "$@"; do
  source bench/h200_common.sh "$bin" "$OUT/$ty" "$ty"
  vs=(default "$Q" "$L" "$Q,$L")
  for r in 1 2 3; do
    line="round $r:"
    for v in "${vs[@]}"; do
      line="$line | $v $(run "$v" -p 64 -n 128 -d 512 -r 1 | awk -F'|' '/tg128/ {gsub(/ /,"",$3); printf "%s", $3}')"
    done
    echo "$line"
  done 2>&1 | tee "$OUT/$ty/table.txt"
  for v in default "$Q"; do
    echo "== profile $v" >> "$OUT/$ty/profile.txt"
    STRATA_VULKAN_PROFILE=1 env $(settings "$v") "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -E "pipeline MatVecIntSwiGlu|one-token steps" -A6 >> "$OUT/$ty/profile.txt"
  done
  echo "batch 8: default $(run default -p 64 -n 128 -d 512 --batch 8 -r 1 | grep x8 | awk -F'|' '{gsub(/ /,"",$3); printf "%s", $3}') local $(run "$Q" -p 64 -n 128 -d 512 --batch 8 -r 1 | grep x8 | awk -F'|' '{gsub(/ /,"",$3); printf "%s", $3}')" | tee -a "$OUT/$ty/table.txt"
done
ty=$1; source bench/h200_common.sh "$bin" "$OUT/$ty" "$ty"
env $Q timeout 200 "$bin" compare-devices -m "$m" --device vulkan:0 --ubatch 1 --prompt-tokens 128 --positions 64 2>&1 | tail -1 | tee "$OUT/$ty/compare.txt"
