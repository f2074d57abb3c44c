# Sourced by session 40's call scripts (from the repository root): session 38's prologue and
# `ab`; the GPU's name into $OUT/gpu.txt; `short` (a bench line without the bytes-a-step
# clause); `compare TYPE VARIANT...`, each variant's KL and top-1 against the CPU on the 7B of
# TYPE (32 positions after 64 tokens, one token a step).
source bench/results/h200-vulkan-decode-2026-12-01/session38/common.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //'; }
compare() {
  local m; m=$(model_of "$1"); shift
  for v in "$@"; do
    echo "$v: $(env ${v//,/ } $bin compare-devices -m $m --device vulkan:0 --ubatch 1 --positions 32 --prompt-tokens 64 2>&1 | tail -1)"
  done
}
