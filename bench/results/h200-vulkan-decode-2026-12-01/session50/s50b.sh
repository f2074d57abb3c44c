# Session 50, on the machine s50a.sh left warm (its models under target/m): why the new default
# (.carryt/strata-rt-new.gz) timed below the old build's opt-in form. Two interleaved rounds of
# the old build (default, STRATA_VULKAN_TAGGED_NORM_SCALE=1) and the new (default, =0), Q4_K 7B at
# context 512; then the old default's KL against the CPU on s50a.sh's comparison.
# Run: BUDGET_S=200 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session50/s50b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
new=$PWD/.carry/strata-rt-new
synth qwen2.5-7b Q4_K
for round in 1 2; do
  for cfg in "old-default $bin NONE=1" "old-chunked $bin STRATA_VULKAN_TAGGED_NORM_SCALE=1" "new-default $new NONE=1" "new-staged $new STRATA_VULKAN_TAGGED_NORM_SCALE=0"; do
    set -- $cfg
    echo "Q4_K $1: $(env $3 $2 bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
  done
done
timeout $(( $(left) - 5 )) $bin compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --prompt-tokens 128 --positions 64 2>&1 | tail -2 | tee $OUT/compare-old-q4_k.txt
echo "left: $(left) s"
