# Session 43, call 1: session 42's tagged forms on whichever card comes (the H200 is the one
# issue 5 names): 7B Q4_K and Q4_1 at context 512, the default, tagged norms + quantization, and
# all three (with the short-context attention only), two interleaved rounds; the greedy tokens
# and the KL against the CPU of the default and of all three forms. Carry [".gl", ".carryt"].
# Run: BUDGET_S=300 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session43/s43a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session43/common.sh
nq=STRATA_VULKAN_TAGGED_NORM=1,STRATA_VULKAN_TAGGED_QUANT=1
all=$nq,STRATA_VULKAN_TAGGED_MERGE=1,STRATA_ATTENTION_GQA_FROM=off
variants="X=1 $nq $all"
decode_rep
for v in $variants; do
  [ "$(left)" -lt 40 ] && { echo "out of time before the tokens of $v"; break; }
  echo "tokens $v: $(env ${v//,/ } STRATA_DEVICES__DECODE=vulkan:0 $bin generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
for v in X=1 $all; do
  [ "$(left)" -lt 40 ] && { echo "out of time before the KL of $v"; break; }
  echo "KL Q4_K $v: $(env ${v//,/ } $bin compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --positions 32 --prompt-tokens 64 2>&1 | tail -1)" | tee -a $OUT/kl.txt
done
decode_rep
echo "left: $(left) s"
