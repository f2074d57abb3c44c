# Session 42, call 2: call 1's forms again after the fix of what it found (the tagged norm and
# quantization wrote their 8-bit records into the buffer the product beside them was still
# reading: now the other records buffer). 7B Q4_K and Q4_1 at context 512, interleaved; the
# greedy tokens and the KL against the CPU of the default and of all three forms (the bits must
# be the default's); workgroup timelines (Q4_K). Carry [".gl", ".carryt"].
# Run: BUDGET_S=330 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session42/s42b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session42/common.sh
all=STRATA_VULKAN_TAGGED_NORM=1,STRATA_VULKAN_TAGGED_QUANT=1,STRATA_VULKAN_TAGGED_MERGE=1,STRATA_ATTENTION_GQA_FROM=off
variants="X=1 STRATA_VULKAN_TAGGED_NORM=1 STRATA_VULKAN_TAGGED_NORM=1,STRATA_VULKAN_TAGGED_QUANT=1 $all"
decode_rep() {
  for ty in Q4_K Q4_1; do
    for v in $variants; do
      [ "$(left)" -lt 40 ] && { echo "out of time before $ty $v"; return; }
      bench $bin $ty $v | tee -a $OUT/decode.txt
    done
  done
}
decode_rep
# The greedy tokens and the KL must be the default's (the same bits, unless a wait read a stale
# value or a stage overwrote what another still read).
for v in X=1 STRATA_VULKAN_TAGGED_NORM=1 STRATA_VULKAN_TAGGED_NORM=1,STRATA_VULKAN_TAGGED_QUANT=1 $all; do
  [ "$(left)" -lt 40 ] && { echo "out of time before the tokens of $v"; break; }
  echo "tokens $v: $(env ${v//,/ } STRATA_DEVICES__DECODE=vulkan:0 $bin generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
for v in X=1 $all; do
  [ "$(left)" -lt 40 ] && { echo "out of time before the KL of $v"; break; }
  echo "KL Q4_K $v: $(env ${v//,/ } $bin compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --positions 32 --prompt-tokens 64 2>&1 | tail -1)" | tee -a $OUT/kl.txt
done
v=$all
if [ "$(left)" -ge 40 ]; then
  env ${v//,/ } STRATA_VULKAN_TIMELINE=/tmp/tl-all.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'timeline|rror'
  python3 bench/timeline_report.py /tmp/tl-all.bin > $OUT/tl-Q4_K-tagged-all.md 2>&1
  head -3 $OUT/tl-Q4_K-tagged-all.md
fi
decode_rep
echo "left: $(left) s"
