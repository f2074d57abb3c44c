# Session 48, call 3: the tuning knobs again on the H200 under the tagged default (7B Q4_K decode at
# context 512, `bench -p 64 -n 128 -d 512 -r 2`), two interleaved rounds, Q4_1 for the two
# best (STRATA_SWIGLU_SMALL_FIRST: this session's second build of strata-rt-tail), Q4_0's default once; then the workgroup timelines of Q4_1's default and of Q4_K with 128 lanes a row everywhere. The build of s48a.sh.
# Carry [".gl", ".carryt"]. Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session48/s48b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/memory read bandwidth (vulkan:0): //; s/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
b=$PWD/.carry/strata-rt-tail
bin=$b  # (synth uses it)
synth qwen2.5-7b Q4_K Q4_1 Q4_0
echo "models ready, $(left) s left"
knobs="NONE=1 STRATA_SWIGLU_SMALL_FIRST=1320 STRATA_SWIGLU_SMALL_FIRST=640 STRATA_SWIGLU_SMALL_FIRST=2640 STRATA_MATVEC_LANES=128 STRATA_SWIGLU_PAIRS=1 STRATA_MATVEC_LANES=32 STRATA_ATTENTION_SPLIT=128"
for round in 1 2; do
  for k in $knobs; do
    [ "$(left)" -lt 60 ] && break 2
    echo "Q4_K $k: $(env $k $b bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/knobs.txt
  done
done
for k in NONE=1 STRATA_SWIGLU_SMALL_FIRST=1320; do
  echo "tokens $k: $(env $k STRATA_DEVICES__DECODE=vulkan:0 $b generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
echo "Q4_0 default, -r 3: $($b bench -m $(m Q4_0) --device vulkan:0 -p 64 -n 128 -d 512 -r 3 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/knobs.txt
for k in NONE=1 STRATA_MATVEC_LANES=128 STRATA_MATVEC_LONE_128=1; do
  [ "$(left)" -lt 40 ] && break
  echo "Q4_1 $k: $(env $k $b bench -m $(m Q4_1) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/knobs.txt
done
tl=$PWD/.carry/strata-rt-tl
if [ "$(left)" -gt 30 ]; then
  echo "Q4_1 timeline: $(STRATA_VULKAN_TIMELINE=$OUT/tl-q4_1.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m Q4_1) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'tg128|timeline|rror' | tr '\n' ' ')"
  python3 bench/timeline_report.py $OUT/tl-q4_1.bin --csv $OUT/tl-q4_1-stages.csv > $OUT/tl-q4_1.md 2>&1
  head -3 $OUT/tl-q4_1.md; gzip $OUT/tl-q4_1.bin
fi
if [ "$(left)" -gt 30 ]; then
  echo "Q4_K timeline, 128 lanes: $(STRATA_MATVEC_LANES=128 STRATA_VULKAN_TIMELINE=$OUT/tl-lanes128.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'tg128|timeline|rror' | tr '\n' ' ')"
  python3 bench/timeline_report.py $OUT/tl-lanes128.bin --csv $OUT/tl-lanes128-stages.csv > $OUT/tl-lanes128.md 2>&1
  head -3 $OUT/tl-lanes128.md; gzip $OUT/tl-lanes128.bin
fi
echo "left: $(left) s"
