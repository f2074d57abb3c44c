# Session 48, call 6: gate/up's first outputs in one-output units on the H200 (STRATA_SWIGLU_SMALL_FIRST,
# +0.5-0.7% on an H100 in calls 4-5), 7B Q4_K decode at context 512, `bench -p 64 -n 128 -d 512
# -r 2`, interleaved rounds. The build of s48b.sh. Carry [".gl", ".carryt"].
# Run: BUDGET_S=200 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session48/s48c.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
b=$PWD/.carry/strata-rt-tail
bin=$b  # (synth uses it)
# (On an H100 it repeats calls 4-5's comparison.)
synth qwen2.5-7b Q4_K
for round in 1 2 3; do
  for k in NONE=1 STRATA_SWIGLU_SMALL_FIRST=1320 "STRATA_SWIGLU_SMALL_FIRST=1320 STRATA_MATVEC_LONE_128=1"; do
    [ "$(left)" -lt 12 ] && break 2
    echo "Q4_K $k: $(env $k $b bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' ')" | tee -a $OUT/small-first.txt
  done
done
echo "left: $(left) s"
