# Session 46, call 2: the tagged attention merge loading each split's max, sum and value at once
# (one wait where three ran in turn; up to 16 splits in one pass) against HEAD before it:
# .carryt/strata-rt-merge1.gz against .carryt/strata-rt.gz. 7B Q4_K and Q4_1 decode at context
# 512 (`bench -p 64 -n 128 -d 512 -r 2`), two interleaved rounds; Q4_K at 8192 (32 splits: the
# two-pass form) once each; the greedy tokens of both. On an H200 then the whole table of the
# new build (bench/h200_vulkan.sh) for Q4_K and Q4_1 as time allows. Carry [".gl", ".carryt"].
# Run: BUDGET_S=420 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session46/s46b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for round in 1 2; do
  for ty in Q4_K Q4_1; do
    for b in strata-rt strata-rt-merge1; do
      [ "$(left)" -lt 20 ] && break 3
      echo "$ty $b: $(.carry/$b bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
    done
  done
done
for b in strata-rt strata-rt-merge1; do
  [ "$(left)" -lt 30 ] && break
  echo "Q4_K 8192 $b: $(.carry/$b bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 8192 -r 1 2>&1 | grep -E 'tg128|rror' | short)" | tee -a $OUT/decode-8192.txt
done
for b in strata-rt strata-rt-merge1; do
  [ "$(left)" -lt 20 ] && break
  echo "tokens $b: $(STRATA_DEVICES__DECODE=vulkan:0 .carry/$b generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
if grep -q H200 $OUT/gpu.txt; then
  for ty in Q4_K Q4_1; do
    [ "$(left)" -lt 60 ] && { echo "out of time before the table of $ty"; break; }
    MODELS_DIR=$PWD/target/m REPS=2 timeout $(( $(left) - 5 )) bash bench/h200_vulkan.sh $PWD/.carry/strata-rt-merge1 $OUT $ty 2>&1 | grep -E 'KL|bandwidth|^\| ' | tail -20
  done
fi
echo "left: $(left) s"
