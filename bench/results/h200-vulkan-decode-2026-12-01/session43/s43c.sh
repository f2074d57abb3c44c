# Session 43, call 3 (cut to the device time left): the tagged small stages as the default, with
# greedy runs pipelined again (before, a plan with tagged stages ran greedy steps one at a
# time). The default against the three turned off (the old default) and against a build whose
# tagged products read the step's tag where they store (TAG_AT_STORE, $late: no register holds
# it through the product); 7B Q4_K and Q4_1 at context 512, Q4_K at 8192; the greedy tokens (a
# pipelined run); the driver's register counts of the tagged products against the plain ones
# (.carryt/spv, glslc's builds of matvec_q.comp). `round with-pipeline-off` adds the tagged
# forms with pipelined greedy runs off. Carry [".gl", ".carryt"].
# Run: BUDGET_S=250 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session43/s43c.sh
source bench/results/h200-vulkan-decode-2026-12-01/session43/common.sh
gunzip -c .carryt/strata-rt-late.gz > .carry/strata-rt-late; chmod +x .carry/strata-rt-late .carryt/spv/shader_stats
late=$PWD/.carry/strata-rt-late
STRATA_VULKAN_PROFILE=1 .carryt/spv/shader_stats 0 .carryt/spv/*.spv 2>&1 | sed 's/^\.carryt\/spv\///' > $OUT/registers.txt
cut -c1-180 $OUT/registers.txt
off=STRATA_VULKAN_TAGGED_NORM=0,STRATA_VULKAN_TAGGED_QUANT=0,STRATA_VULKAN_TAGGED_MERGE=0
round() {
  for ty in Q4_K Q4_1; do
    for bv in "$bin $off" "$bin X=1" "$late X=1" ${1:+"$bin STRATA_VULKAN_GREEDY_PIPELINE=off"}; do
      [ "$(left)" -lt 40 ] && { echo "out of time before $ty $bv"; return; }
      set -- $bv
      echo "$( [ "$1" = "$late" ] && echo late || echo default-build ) $(bench $1 $ty $2)" | tee -a $OUT/decode.txt
    done
  done
}
long_rep() {
  for bv in "$bin $off" "$bin X=1" "$late X=1"; do
    [ "$(left)" -lt 60 ] && { echo "out of time before 8192 $bv"; return; }
    set -- $bv
    echo "$( [ "$1" = "$late" ] && echo late || echo default-build ) Q4_K $2: $(env ${2//,/ } $1 bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 8192 -r 1 2>&1 | grep -E 'tg128|rror' | short)" | tee -a $OUT/decode-8192.txt
  done
}
round
for v in $off X=1; do
  [ "$(left)" -lt 30 ] && { echo "out of time before the tokens of $v"; break; }
  echo "tokens $v: $(env ${v//,/ } STRATA_DEVICES__DECODE=vulkan:0 $bin generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
[ "$(left)" -ge 30 ] && echo "tokens late X=1: $(STRATA_DEVICES__DECODE=vulkan:0 $late generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
long_rep
round
echo "left: $(left) s"
