# Session 49, the RMSNorm after each residual add in the row's chunks (STRATA_VULKAN_TAGGED_NORM_SCALE=1:
# quantize_act.comp NORM_W, the products after it NORM_SCALE) against the single-workgroup tagged
# norm, on either card. .carryt/strata-rt.gz is this session's build (the knob off is the default
# path). 7B at context 512 (`bench -p 64 -n 128 -d 512 -r 2`): Q4_K three interleaved rounds of
# default, the chunked norm, and it with STRATA_SWIGLU_SMALL_FIRST=1320; Q4_1 two rounds of default
# and the chunked norm; the greedy tokens; on an H200 also the Q4K_HEAD_WORDS build
# (.carryt/strata-rt-hw.gz); KL against the CPU of both paths if time is left.
# Run: BUDGET_S=560 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session49/s49b.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
hw=$PWD/.carry/strata-rt-hw
synth qwen2.5-7b Q4_K Q4_1
echo "models ready, $(left) s left"
cfgs=("default $bin NONE=1" "chunked-norm $bin STRATA_VULKAN_TAGGED_NORM_SCALE=1" "chunked-norm+small-first $bin STRATA_VULKAN_TAGGED_NORM_SCALE=1 STRATA_SWIGLU_SMALL_FIRST=1320")
grep -q H200 $OUT/gpu.txt && cfgs+=("head-words $hw NONE=1" "small-first $bin STRATA_SWIGLU_SMALL_FIRST=1320")
for round in 1 2 3; do
  for cfg in "${cfgs[@]}"; do
    set -- $cfg
    [ "$(left)" -lt 150 ] && break 2
    echo "Q4_K $1: $(env $3 ${4:-} $2 bench -m $(m Q4_K) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
  done
done
for round in 1 2; do
  for cfg in "default NONE=1" "chunked-norm STRATA_VULKAN_TAGGED_NORM_SCALE=1"; do
    set -- $cfg
    [ "$(left)" -lt 110 ] && break 2
    echo "Q4_1 $1: $(env $2 $bin bench -m $(m Q4_1) --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short)" | tee -a $OUT/decode.txt
  done
done
for x in "default NONE=1" "chunked-norm STRATA_VULKAN_TAGGED_NORM_SCALE=1"; do
  set -- $x
  echo "tokens $1: $(env $2 STRATA_DEVICES__DECODE=vulkan:0 $bin generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
for x in "chunked-norm STRATA_VULKAN_TAGGED_NORM_SCALE=1" "default NONE=1"; do
  set -- $x
  [ "$(left)" -lt 70 ] && break
  echo "KL $1: $(env $2 timeout $(( $(left) - 10 )) $bin compare-devices -m $(m Q4_K) --device vulkan:0 --prompt-tokens 128 --positions 64 2>&1 | tail -3 | tr '\n' ' ')" | tee -a $OUT/kl.txt
done
echo "left: $(left) s"
