# Session 42, call 1: small stages recorded right after the stage before them with no pipeline
# barrier, each value that stage writes tagged with the step and the small stage waiting for
# this step's tags itself: STRATA_VULKAN_TAGGED_NORM=1 (each RMSNorm after a residual add),
# STRATA_VULKAN_TAGGED_QUANT=1 (the SwiGLU row's quantization after gate/up),
# STRATA_VULKAN_TAGGED_MERGE=1 (the attention merge after the splits; the long-context kernel off
# for it, so its baseline is that too), against the default; 7B Q4_K and Q4_1 at context 512,
# interleaved; workgroup timelines (Q4_K); the KL against the CPU (the bits must be the
# default's). Carry [".gl", ".carryt"].
# Run: BUDGET_S=420 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session42/s42a.sh
source bench/results/h200-vulkan-decode-2026-12-01/session42/common.sh
all=STRATA_VULKAN_TAGGED_NORM=1,STRATA_VULKAN_TAGGED_QUANT=1,STRATA_VULKAN_TAGGED_MERGE=1,STRATA_ATTENTION_GQA_FROM=off
variants="X=1 STRATA_ATTENTION_GQA_FROM=off STRATA_VULKAN_TAGGED_NORM=1,STRATA_VULKAN_TAGGED_QUANT=1 $all"
decode_rep() {
  for ty in Q4_K Q4_1; do
    for v in $variants; do
      [ "$(left)" -lt 60 ] && { echo "out of time before $ty $v"; return; }
      bench $bin $ty $v | tee -a $OUT/decode.txt
    done
  done
}
decode_rep
# The greedy tokens of both must be the same (the same bits, unless a wait read a stale value).
for v in X=1 $all; do
  [ "$(left)" -lt 60 ] && { echo "out of time before the tokens of $v"; break; }
  echo "tokens $v: $(env ${v//,/ } STRATA_DEVICES__DECODE=vulkan:0 $bin generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
for v in X=1 $all; do
  [ "$(left)" -lt 60 ] && { echo "out of time before the timeline of $v"; break; }
  name=Q4_K-$(echo "$v" | sed 's/STRATA_VULKAN_//g; s/STRATA_ATTENTION_//g; s/=1//g; s/=off//g; s/,/+/g')
  env ${v//,/ } STRATA_VULKAN_TIMELINE=/tmp/tl-$name.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'timeline|rror'
  python3 bench/timeline_report.py /tmp/tl-$name.bin > $OUT/tl-$name.md 2>&1
  head -3 $OUT/tl-$name.md
done
decode_rep
for v in X=1 $all; do
  [ "$(left)" -lt 50 ] && { echo "out of time before the KL of $v"; break; }
  echo "KL Q4_K $v: $(env ${v//,/ } $bin compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --positions 32 --prompt-tokens 64 2>&1 | tail -1)" | tee -a $OUT/kl.txt
done
echo "left: $(left) s"
