# Session 48: gate/up's last outputs in one-output units (STRATA_SWIGLU_TAIL, outputs; 0 = off)
# on 7B Q4_K decode at context 512 (`bench -p 64 -n 128 -d 512 -r 2`), two interleaved rounds of
# 0 / 1320 / 2640 / 3960 / 5280, with the greedy tokens of off and 2640; on an H200 then issue 5's
# figures (Q4_K and Q4_1, `-r 3`, bandwidth measured in the same run) of the default, and the
# workgroup timelines of the default (.carryt/strata-rt-tl.gz) as time allows.
# Carry [".gl", ".carryt"] with .carryt/strata-rt-tail.gz (this session's build) and strata-rt-tl.gz.
# Run: BUDGET_S=540 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session48/s48a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
b=$PWD/.carry/strata-rt-tail
bin=$b  # (synth uses it)
h200=0; grep -q H200 $OUT/gpu.txt && h200=1
if [ $h200 = 1 ]; then synth qwen2.5-7b Q4_K Q4_1; else synth qwen2.5-7b Q4_K; fi
echo "models ready, $(left) s left"
for round in 1 2; do
  for tail in 0 1320 2640 3960 5280; do
    [ "$(left)" -lt 25 ] && break 2
    echo "Q4_K tail $tail: $(STRATA_SWIGLU_TAIL=$tail $b bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/tail.txt
  done
done
for tail in 0 2640; do
  [ "$(left)" -lt 20 ] && break
  echo "tokens tail $tail: $(STRATA_SWIGLU_TAIL=$tail STRATA_DEVICES__DECODE=vulkan:0 $b generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
if [ $h200 = 1 ]; then
  for ty in Q4_K Q4_1; do
    [ "$(left)" -lt 40 ] && break
    echo "$ty default: $($b bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 3 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
  done
  tl=$PWD/.carry/strata-rt-tl
  for ty in Q4_K; do
    [ "$(left)" -lt 40 ] && { echo "out of time before the timeline of $ty"; break; }
    echo "$ty timeline build, submission 30: $(STRATA_VULKAN_TIMELINE=$OUT/tl-$ty-30.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'tg128|timeline|rror' | tr '\n' ' ')"
    python3 bench/timeline_report.py $OUT/tl-$ty-30.bin --csv $OUT/tl-$ty-30-stages.csv > $OUT/tl-$ty-30.md 2>&1
    head -3 $OUT/tl-$ty-30.md
    gzip $OUT/tl-$ty-30.bin
  done
fi
echo "left: $(left) s"
