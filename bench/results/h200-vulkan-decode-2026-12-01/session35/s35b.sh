#!/usr/bin/env bash
# Session 35, call 2 (builds nothing; .carryz as in s35a.sh, backend_ops rebuilt with the exact
# division's special cases spelled out):
#  1. backend_ops whole on the H200 (every op against the CPU, the rounding helpers against IEEE);
#  2. the 7B Q4_0 and the SmolLM2 shapes, session 34's build against this one, tg128 at context
#     512, interleaved twice.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
mkdir -p .carry && for z in .carryz/*.gz; do b=.carry/$(basename "$z" .gz); gunzip -c "$z" > "$b" && chmod +x "$b"; done
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
mkdir -p "$OUT"
REQUIRE_VULKAN_DEVICE=1 timeout 240 .carry/backend_ops --test-threads 4 > "$OUT/backend_ops.txt" 2>&1
grep -E "^test |test result" "$OUT/backend_ops.txt" | tail -30
bin=$PWD/.carry/strata-rt
old=$PWD/.carry/strata-rt-old
tg() { awk -F'|' '/tg[0-9]/ {gsub(/ /,"",$3); printf "%s ", $3}'; }
for spec in qwen2.5-7b:Q4_0 smollm2-135m:Q4_1; do
  SHAPE=${spec%%:*} source bench/h200_common.sh "$bin" "$OUT" "${spec##*:}"
  {
    echo "== $shape $ty: tg128 at context 512 (old = 53a6e17)"
    for i in 1 2; do
      echo "rep $i: | old $(run "@$old" -p 64 -n 128 -d 512 -r 1 | tg) | new $(run default -p 64 -n 128 -d 512 -r 1 | tg)"
    done
  } 2>&1 | tee -a "$OUT/ab.txt"
  run default -p 64 -n 128 -d 512 -r 1 > "$OUT/bench-$shape-$ty.txt"
done
