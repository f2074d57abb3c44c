# Session 49, call 5: the scaled products' first partial-sum load left unconsumed through their loop
# (.carryt/strata-rt-nsl.gz, this session's build after that change) against the chunked norm of
# call 2-4 (.carryt/strata-rt.gz) and the default, on either card; registers of the new scaled
# builds. 7B at context 512 (`bench -p 64 -n 128 -d 512 -r 2`), two interleaved rounds.
# Run: BUDGET_S=400 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session49/s49e.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
nsl=$PWD/.carry/strata-rt-nsl
STRATA_VULKAN_PROFILE=1 .carry/shader_stats 0 .carryt/spv49/*.spv 2>&1 | sed "s/ Local Memory Size=[0-9]*//" | tee $OUT/registers.txt
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for round in 1 2; do
  for ty in Q4_K Q4_1; do
    for cfg in "default $bin NONE=1" "chunked-norm $bin STRATA_VULKAN_TAGGED_NORM_SCALE=1" "chunked-norm-nsl $nsl STRATA_VULKAN_TAGGED_NORM_SCALE=1" "chunked-norm-nsl+small-first $nsl STRATA_VULKAN_TAGGED_NORM_SCALE=1 STRATA_SWIGLU_SMALL_FIRST=1320" "small-first $bin STRATA_SWIGLU_SMALL_FIRST=1320"; do
      set -- $cfg
      [ "$(left)" -lt 40 ] && break 3
      echo "$ty $1: $(env $3 ${4:-} $2 bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
    done
  done
done
for x in "chunked $bin" "chunked-nsl $nsl"; do
  set -- $x
  echo "tokens $1: $(STRATA_VULKAN_TAGGED_NORM_SCALE=1 STRATA_DEVICES__DECODE=vulkan:0 $2 generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
echo "left: $(left) s"
