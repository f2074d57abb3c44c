# Session 49's H200 call (an H100 exits at once): the chunked norm (.carryt/strata-rt-nsl.gz with
# STRATA_VULKAN_TAGGED_NORM_SCALE=1) and small units first against the default (.carryt/strata-rt.gz,
# whose default path is session 48's), 7B at context 512 (`bench -p 64 -n 128 -d 512 -r 2`), three
# interleaved rounds of Q4_K, two of Q4_1; then bench/h200_vulkan.sh's table for Q4_K of the nsl
# build's default path (built from the session's last commit: the chunked norm opt-in) if time
# is left.
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session49/s49f.sh
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { nvidia-smi --query-gpu=name --format=csv,noheader; echo "not an H200: nothing run"; exit 0; }
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
nsl=$PWD/.carry/strata-rt-nsl
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for round in 1 2 3; do
  for ty in Q4_K Q4_1; do
    [ "$ty" = Q4_1 ] && [ $round = 3 ] && continue
    for cfg in "default $bin NONE=1" "chunked-norm $nsl STRATA_VULKAN_TAGGED_NORM_SCALE=1" "chunked-norm+small-first $nsl STRATA_VULKAN_TAGGED_NORM_SCALE=1 STRATA_SWIGLU_SMALL_FIRST=1320" "small-first $bin STRATA_SWIGLU_SMALL_FIRST=1320"; do
      set -- $cfg
      [ "$(left)" -lt 30 ] && break 3
      echo "$ty $1: $(env $3 ${4:-} $2 bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
    done
  done
done
# The whole table of the default path.
if [ "$(left)" -gt 150 ]; then
  MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 5 )) bash bench/h200_vulkan.sh $nsl $OUT/table Q4_K 2>&1 | grep -E 'KL|bandwidth|^\| ' | tail -12
fi
echo "left: $(left) s"
