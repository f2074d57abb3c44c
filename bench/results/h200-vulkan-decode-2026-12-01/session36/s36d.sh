#!/usr/bin/env bash
# Session 36, call 4 (`37f4531`: K adapts to the step time unless set): 7B Q4_1 and SmolLM2's
# shape, tg128 at context 512, the default (adaptive) against K = 1 and K = 4 fixed, interleaved;
# the server's greedy runs with the default.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
mkdir -p .carry && gunzip -c .carryz/strata-rt.gz > .carry/strata-rt && chmod +x .carry/strata-rt
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
bin=$PWD/.carry/strata-rt
tg() { awk -F'|' '/tg[0-9]/ {gsub(/ /,"",$3); printf "%s ", $3}'; }
for spec in qwen2.5-7b:Q4_1 smollm2-135m:Q4_1; do
  SHAPE=${spec%%:*} source bench/h200_common.sh "$bin" "$OUT" "${spec##*:}"
  {
    echo "== $shape $ty: tg128 at context 512"
    for i in 1 2; do
      echo "rep $i: | default $(run default -p 64 -n 128 -d 512 -r 1 | tg) | K=1 $(run STRATA_VULKAN_GREEDY_STEPS=1 -p 64 -n 128 -d 512 -r 1 | tg) | K=4 $(run STRATA_VULKAN_GREEDY_STEPS=4 -p 64 -n 128 -d 512 -r 1 | tg)"
    done
  } 2>&1 | tee -a "$OUT/ab.txt"
done
export STRATA_DEVICES__PREFILL=vulkan:0 STRATA_DEVICES__DECODE=vulkan:0 STRATA_BATCHING__GREEDY_RUN_TOKENS=32
timeout 100 python3 bench/server_sampling.py --strata "$bin" --model /tmp/m/qwen2.5-7b-Q4_1.gguf \
  --prompt-tokens 512 --gen 128 --streams 2 -r 1 --out "$OUT/server.txt" > "$OUT/server.log" 2>&1
cat "$OUT/server.txt"
