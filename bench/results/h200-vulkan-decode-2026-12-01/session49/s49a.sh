# Session 49's H200 call: only on an H200 (an H100 exits at once; session 49's call 1 measured the
# same set there). 7B Q4_K at context 512 (`bench -p 64 -n 128 -d 512 -r 2`), three interleaved
# rounds of the default (strata-rt-tail), STRATA_SWIGLU_SMALL_FIRST=1320, the Q4K_HEAD_WORDS build
# (40 registers in gate/up against 48: does the H200 want the occupancy?), that with small units
# first, and small units first with STRATA_MATVEC_LONE_128=1; Q4_1 default against small units
# first; the greedy tokens; then the table with the best of them if time is left.
# Carry [".gl", ".carryt"] as s48d.sh.
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session49/s49a.sh
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { nvidia-smi --query-gpu=name --format=csv,noheader; echo "not an H200: nothing run"; exit 0; }
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
b=$PWD/.carry/strata-rt-tail
hw=$PWD/.carry/strata-rt-hw
bin=$b
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
for round in 1 2 3; do
  for cfg in "default $b NONE=1" "small-first $b STRATA_SWIGLU_SMALL_FIRST=1320" "head-words $hw NONE=1" "head-words+small-first $hw STRATA_SWIGLU_SMALL_FIRST=1320" "small-first+lone128 $b STRATA_SWIGLU_SMALL_FIRST=1320 STRATA_MATVEC_LONE_128=1"; do
    set -- $cfg
    [ "$(left)" -lt 100 ] && break 2
    echo "Q4_K $1: $(env $3 ${4:-} $2 bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
  done
done
for round in 1 2; do
  for cfg in "default NONE=1" "small-first STRATA_SWIGLU_SMALL_FIRST=1320"; do
    set -- $cfg
    [ "$(left)" -lt 60 ] && break 2
    echo "Q4_1 $1: $(env $2 $b bench -m $(m Q4_1) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
  done
done
for x in "default $b NONE=1" "small-first $b STRATA_SWIGLU_SMALL_FIRST=1320" "head-words $hw NONE=1"; do
  set -- $x
  echo "tokens $1: $(env $3 STRATA_DEVICES__DECODE=vulkan:0 $2 generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
echo "left: $(left) s"
