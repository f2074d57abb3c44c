# Session 50's H200 call: the opt-in forms measured on the H100 in
# sessions 48-49, on the card issue 5 names. 7B at context 512 (`bench -p 64 -n 128 -d 512 -r 2`),
# interleaved rounds: the default, the chunked tagged norm (STRATA_VULKAN_TAGGED_NORM_SCALE=1),
# small units first (STRATA_SWIGLU_SMALL_FIRST=1320), both, both with STRATA_MATVEC_LONE_128=1,
# and the Q4K_HEAD_WORDS build (.carryt/strata-rt-hw.gz: gate/up 40 registers, not 48) alone and
# with both. Then, if the timeline build is there (.carryt/strata-rt-tl.gz), workgroup timelines
# of the default and of both forms, Q4_K.
# Last, the new build (.carryt/strata-rt-new.gz: the chunked norm the K-quants' default, batched
# steps alike) by default and with small units first, and its KL against the CPU one token a step.
# Binaries: .carryt/strata-rt.gz (14d5ec2), strata-rt-hw.gz (14d5ec2 with
# STRATA_SHADER_DEFINES=Q4K_HEAD_WORDS), strata-rt-tl.gz (14d5ec2 with STRATA_SHADER_TIMELINE=1),
# strata-rt-new.gz (the session's change).
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session50/s50a.sh
# On another card (session 49 measured these on an H100), only the new build against the old
# build's default and chunked norm, Q4_K, two rounds, and the new build's KL against the CPU,
# within 300 s.
h200=1
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { h200=0; BUDGET_S=300; }
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
hw=$PWD/.carry/strata-rt-hw
tl=$PWD/.carry/strata-rt-tl
new=$PWD/.carry/strata-rt-new
if [ $h200 = 0 ]; then
  synth qwen2.5-7b Q4_K
  for round in 1 2; do
    for cfg in "default $bin NONE=1" "old-chunked $bin STRATA_VULKAN_TAGGED_NORM_SCALE=1" "new-default $PWD/.carry/strata-rt-new NONE=1" "new+small-first $PWD/.carry/strata-rt-new STRATA_SWIGLU_SMALL_FIRST=1320"; do
      set -- $cfg
      echo "Q4_K $1: $(env $3 $2 bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
    done
  done
  timeout $(( $(left) - 10 )) .carry/strata-rt-new compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --prompt-tokens 128 --positions 64 2>&1 | tail -4 | tee $OUT/compare-new-q4_k.txt
  echo "left: $(left) s"
  exit 0
fi
# (With BUDGET_S under 500: Q4_K only, no LONE_128 or head-words-alone rows, no timelines.)
short_run=0; [ "${BUDGET_S:-400}" -lt 500 ] && short_run=1
if [ $short_run = 1 ]; then synth qwen2.5-7b Q4_K; else synth qwen2.5-7b Q4_K Q4_1; fi
echo "models ready, $(left) s left"
both="STRATA_VULKAN_TAGGED_NORM_SCALE=1 STRATA_SWIGLU_SMALL_FIRST=1320"
for round in 1 2 3; do
  for ty in Q4_K Q4_1; do
    [ "$ty" = Q4_1 ] && { [ $round = 3 ] || [ $short_run = 1 ]; } && continue
    while IFS='|' read -r name b knobs; do
      [ "$ty" = Q4_1 ] && [ "$b" = hw ] && continue
      [ $short_run = 1 ] && case $name in small-first|chunked-norm|chunked+small-first+lone128|head-words) continue ;; esac
      case $b in hw) b=$hw ;; new) b=$new ;; *) b=$bin ;; esac
      [ -x "$b" ] || continue
      [ "$(left)" -lt $(( short_run ? 70 : 100 )) ] && break 3
      echo "$ty $name: $(env NONE=1 $knobs $b bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
    done <<LIST
default|bin|
chunked-norm|bin|STRATA_VULKAN_TAGGED_NORM_SCALE=1
small-first|bin|STRATA_SWIGLU_SMALL_FIRST=1320
chunked+small-first|bin|$both
chunked+small-first+lone128|bin|$both STRATA_MATVEC_LONE_128=1
head-words|hw|
head-words+chunked+small-first|hw|$both
new-default|new|
new+small-first|new|STRATA_SWIGLU_SMALL_FIRST=1320
LIST
  done
done
if [ -x "$tl" ] && [ $short_run = 0 ]; then
  for cfg in "default NONE=1" "chunked+small-first $both"; do
    set -- $cfg
    [ "$(left)" -lt 40 ] && { echo "out of time before the timeline of $1"; break; }
    echo "timeline $1, submission 30: $(env ${@:2} STRATA_VULKAN_TIMELINE=$OUT/tl-$1.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'tg128|timeline|rror' | tr '\n' ' ')"
    python3 bench/timeline_report.py $OUT/tl-$1.bin --csv $OUT/tl-$1-stages.csv > $OUT/tl-$1.md 2>&1
    rm -f $OUT/tl-$1.bin
  done
fi
if [ -x "$new" ] && [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 10 )) $new compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --prompt-tokens 128 --positions 64 2>&1 | tail -4 | tee $OUT/compare-new-q4_k.txt
fi
echo "left: $(left) s"
