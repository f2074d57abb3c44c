# Session 45, call 2: the merge's polling loop, old form (a `break` from inside it, `54b1168`,
# .carryt/strata-rt-oldmerge.gz) against the new (the loop ends on its condition, `9fa4363`,
# .carryt/strata-rt.gz): 7B Q4_K and Q4_1 decode at context 512 (`bench -p 64 -n 128 -d 512
# -r 2`, the bandwidth measured in each run), two interleaved rounds. Call 1's H100 gave the new
# form 2-3% less than session 44's H100 gave the old; this tells the code from the card.
# Carry [".gl", ".carryt"].
# Run: BUDGET_S=170 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session45/s45b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for round in 1 2; do
  for ty in Q4_K Q4_1; do
    for b in strata-rt-oldmerge strata-rt; do
      [ "$(left)" -lt 10 ] && break 3
      echo "$ty $b: $(.carry/$b bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' ')" | tee -a $OUT/decode.txt
    done
  done
done
echo "left: $(left) s"
