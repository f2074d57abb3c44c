# Session 43, call 2: the tagged forms with the long-context attention kernel's records tagged
# too (so the tagged merge runs with the default STRATA_ATTENTION_GQA_FROM). 7B Q4_K and Q4_1 at
# context 512: the default, tagged norms + quantization, all three; Q4_K at 8192: the default
# and all three; the greedy tokens and the KL against the CPU of the default and of all three
# with the long-context kernel taking tokens from 32 (tokens) or 48 (KL) positions; then, if
# time is left, workgroup timelines of a Q4_K step (session 42's timeline build, merge with
# the short-context kernel only). Carry [".gl", ".carryt"].
# Run: BUDGET_S=420 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session43/s43b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session43/common.sh
nq=STRATA_VULKAN_TAGGED_NORM=1,STRATA_VULKAN_TAGGED_QUANT=1
all=$nq,STRATA_VULKAN_TAGGED_MERGE=1
variants="X=1 $nq $all"
long_rep() {
  for v in X=1 $all; do
    [ "$(left)" -lt 60 ] && { echo "out of time before 8192 $v"; return; }
    echo "Q4_K $v: $(env ${v//,/ } $bin bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 8192 -r 1 2>&1 | grep -E 'tg128|rror' | short)" | tee -a $OUT/decode-8192.txt
  done
}
decode_rep
long_rep
for v in X=1 $all; do
  [ "$(left)" -lt 40 ] && { echo "out of time before the tokens of $v"; break; }
  echo "tokens $v (long-context kernel from 32): $(env ${v//,/ } STRATA_ATTENTION_GQA_FROM=32 STRATA_DEVICES__DECODE=vulkan:0 $bin generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
for v in X=1 $all; do
  [ "$(left)" -lt 40 ] && { echo "out of time before the KL of $v"; break; }
  echo "KL Q4_K $v (long-context kernel from 48): $(env ${v//,/ } STRATA_ATTENTION_GQA_FROM=48 $bin compare-devices -m $(m Q4_K) --device vulkan:0 --ubatch 1 --positions 32 --prompt-tokens 64 2>&1 | tail -1)" | tee -a $OUT/kl.txt
done
decode_rep
for v in X=1 $all,STRATA_ATTENTION_GQA_FROM=off; do
  [ "$(left)" -lt 60 ] && { echo "out of time before the timeline of $v"; break; }
  name=$( [ "$v" = X=1 ] && echo default || echo tagged-all )
  env ${v//,/ } STRATA_VULKAN_TIMELINE=/tmp/tl.bin STRATA_VULKAN_TIMELINE_AT=30 $tl bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 1 2>&1 | grep -E 'timeline|rror'
  python3 bench/timeline_report.py /tmp/tl.bin > $OUT/tl-Q4_K-$name.md 2>&1
  head -3 $OUT/tl-Q4_K-$name.md
done
echo "left: $(left) s"
