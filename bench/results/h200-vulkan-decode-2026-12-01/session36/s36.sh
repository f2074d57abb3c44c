#!/usr/bin/env bash
# Session 36, one call (builds nothing; .carryz holds gzipped strata-rt and backend_ops of this
# session's build, stripped):
#  1. backend_ops whole on the H200 (every op against the CPU; the exact division's special cases
#     spelled out since session 35's call, where the rounding test failed 13 of 403,385);
#  2. greedy steps a command buffer (STRATA_VULKAN_GREEDY_STEPS 1 = session 35's two single
#     steps in flight, 2, 4, 8), 7B Q4_1 and Q4_K, tg128 at context 512, interleaved;
#     and K = 4 with STRATA_MATVEC_LONE_128=1;
#  3. the server's greedy runs (batching.greedy_run_tokens 32), Q4_1, K = 1 against 4.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
mkdir -p .carry && for z in .carryz/*.gz; do b=.carry/$(basename "$z" .gz); gunzip -c "$z" > "$b" && chmod +x "$b"; done
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
mkdir -p "$OUT"
bin=$PWD/.carry/strata-rt
# The models are written while backend_ops runs.
( "$bin" synth-model --shape qwen2.5-7b --type Q4_1 --out /tmp/m/qwen2.5-7b-Q4_1.gguf > "$OUT/synth.txt" 2>&1
  "$bin" synth-model --shape qwen2.5-7b --type Q4_K --out /tmp/m/qwen2.5-7b-Q4_K.gguf >> "$OUT/synth.txt" 2>&1 ) &
synth=$!
mkdir -p /tmp/m
REQUIRE_VULKAN_DEVICE=1 timeout 200 .carry/backend_ops --test-threads 4 > "$OUT/backend_ops.txt" 2>&1
echo "backend_ops exit $?"
grep -E "test result|FAILED|panicked" "$OUT/backend_ops.txt" | head -20
wait $synth
tg() { awk -F'|' '/tg[0-9]/ {gsub(/ /,"",$3); printf "%s ", $3}'; }
for ty in Q4_1 Q4_K; do
  source bench/h200_common.sh "$bin" "$OUT" "$ty"
  if [ "$ty" = Q4_1 ]; then ks="1 2 4 8"; else ks="1 4 8"; fi
  {
    echo "== $shape $ty: tg128 at context 512, STRATA_VULKAN_GREEDY_STEPS = K (L: with STRATA_MATVEC_LONE_128=1)"
    for i in 1 2; do
      line="rep $i:"
      for k in $ks; do line="$line | K=$k $(run STRATA_VULKAN_GREEDY_STEPS=$k -p 64 -n 128 -d 512 -r 1 | tg)"; done
      line="$line | K=4,L $(run STRATA_VULKAN_GREEDY_STEPS=4,STRATA_MATVEC_LONE_128=1 -p 64 -n 128 -d 512 -r 1 | tg)"
      echo "$line"
    done
  } 2>&1 | tee -a "$OUT/ab.txt"
  run STRATA_VULKAN_GREEDY_STEPS=4 -p 64 -n 128 -d 512 -r 1 > "$OUT/bench-$ty.txt"
done
m=/tmp/m/qwen2.5-7b-Q4_1.gguf
export STRATA_DEVICES__PREFILL=vulkan:0 STRATA_DEVICES__DECODE=vulkan:0 STRATA_BATCHING__GREEDY_RUN_TOKENS=32
for k in 1 4; do
  echo "== STRATA_VULKAN_GREEDY_STEPS=$k" >> "$OUT/server.txt"
  STRATA_VULKAN_GREEDY_STEPS=$k timeout 120 python3 bench/server_sampling.py --strata "$bin" --model "$m" \
    --prompt-tokens 512 --gen 128 --streams 2 -r 1 --out "$OUT/server.txt" > "$OUT/server-$k.log" 2>&1
done
cat "$OUT/server.txt"
