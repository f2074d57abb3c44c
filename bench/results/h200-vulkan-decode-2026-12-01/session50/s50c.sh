# Session 50, the last of its budget, on either card: b69a59c's default (.carryt/strata-rt-new.gz,
# the chunked norm for Q4_K) against 14d5ec2's default and its opt-in chunked norm
# (.carryt/strata-rt.gz), two interleaved rounds, 7B Q4_K at context 512; its KL against the CPU
# if time is left.
# Run: BUDGET_S=200 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session50/s50c.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
new=$PWD/.carry/strata-rt-new
synth qwen2.5-7b Q4_K
for round in 1 2; do
  for cfg in "old-default $bin NONE=1" "old-chunked $bin STRATA_VULKAN_TAGGED_NORM_SCALE=1" "new-default $new NONE=1"; do
    set -- $cfg
    [ "$(left)" -lt 15 ] && break 2
    echo "Q4_K $1: $(env $3 $2 bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
  done
done
[ "$(left)" -gt 50 ] && timeout $(( $(left) - 5 )) $new compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --prompt-tokens 128 --positions 64 2>&1 | tail -2 | tee $OUT/compare-new-q4_k.txt
echo "left: $(left) s"
