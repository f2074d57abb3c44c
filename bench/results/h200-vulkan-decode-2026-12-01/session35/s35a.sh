#!/usr/bin/env bash
# Session 35, call 1 (builds nothing; .carryz holds gzipped strata-rt (this session's build),
# strata-rt-old (53a6e17, session 34's) and backend_ops, stripped):
#  1. backend_ops: the flush-aware rounding test (never run on the H200) and the embedding test
#     (embed.comp now spreads a row over several workgroups);
#  2. decode t/s at context 512 (tg128) of the 7B Q4_1 and Q4_K shapes, old build against new
#     (argmax with 16-byte loads, no SelectRows stage in one-token steps, the embedding spread),
#     interleaved, and the new one with STRATA_MATVEC_LONE_128=1;
#  3. the new build's GPU time per step (STRATA_VULKAN_PROFILE=steps: no pipelining, first and
#     last timestamps only) and its per-op profile, for the host's share and the small stages;
#  4. the server's greedy runs (batching.greedy_run_tokens 32 against 0), Q4_1, Vulkan prefill
#     and decode, one rep each (bench/server_sampling.py).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
# The binaries come gzipped (.carryz/: the tree and three binaries exceed the carry limit).
mkdir -p .carry && for z in .carryz/*.gz; do b=.carry/$(basename "$z" .gz); gunzip -c "$z" > "$b" && chmod +x "$b"; done
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json MODELS_DIR=/tmp/m
mkdir -p "$OUT"
REQUIRE_VULKAN_DEVICE=1 timeout 120 .carry/backend_ops vulkan_exact_rounding_helpers_are_ieee embedding_rows_every_type --nocapture > "$OUT/backend_ops.txt" 2>&1
grep -E "^test |test result" "$OUT/backend_ops.txt"
bin=$PWD/.carry/strata-rt
old=$PWD/.carry/strata-rt-old
tg() { awk -F'|' '/tg[0-9]/ {gsub(/ /,"",$3); printf "%s ", $3}'; }
for ty in Q4_1 Q4_K; do
  source bench/h200_common.sh "$bin" "$OUT" "$ty"
  vs=("@$old" default STRATA_MATVEC_LONE_128=1)
  {
    echo "== $shape $ty: tg128 at context 512 (old = 53a6e17)"
    for i in 1 2 3; do
      line="rep $i:"
      for v in "${vs[@]}"; do line="$line | ${v/@$old/old} $(run "$v" -p 64 -n 128 -d 512 -r 1 | tg)"; done
      echo "$line"
    done
  } 2>&1 | tee -a "$OUT/ab.txt"
  run default -p 64 -n 128 -d 512 -r 1 > "$OUT/bench-$ty.txt"
  if [ "$ty" = Q4_1 ]; then
    for v in "@$old" default; do
      echo "== $ty ${v/@$old/old}: STRATA_VULKAN_PROFILE=steps" >> "$OUT/steps.txt"
      env STRATA_VULKAN_PROFILE=steps "$(binary "$v")" bench -m "$m" --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -vE "^pipeline " >> "$OUT/steps.txt"
    done
    STRATA_VULKAN_PROFILE=1 "$bin" bench -m "$m" --device vulkan:0 -p 64 -n 32 -d 512 -r 1 2>&1 | grep -vE "^pipeline " > "$OUT/profile-$ty.txt"
    export STRATA_DEVICES__PREFILL=vulkan:0 STRATA_DEVICES__DECODE=vulkan:0
    for runs in 32 0; do
      echo "== greedy_run_tokens $runs" >> "$OUT/server.txt"
      STRATA_BATCHING__GREEDY_RUN_TOKENS=$runs timeout 150 python3 bench/server_sampling.py --strata "$bin" --model "$m" \
        --prompt-tokens 512 --gen 128 --streams 8 -r 1 --out "$OUT/server.txt" > "$OUT/server-$runs.log" 2>&1
    done
    unset STRATA_DEVICES__PREFILL STRATA_DEVICES__DECODE
    cat "$OUT/server.txt"
  fi
done
grep -E "us per step|host:" "$OUT/steps.txt"
