# Sourced by session 42's call scripts (from the repository root): session 41's prologue (the
# device's loader and driver; .carryt/'s default and timeline builds as $bin and $tl; the GPU's
# name in $OUT/gpu.txt; the 7B Q4_K and Q4_1 models, `m TYPE`; `left`), then `bench BIN TYPE
# VARIANT`: one 7B decode bench at context 512 with the variant's knobs set (commas between them).
source bench/results/h200-vulkan-decode-2026-12-01/session41/common.sh
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
bench() {
  local b=$1 ty=$2 v=$3
  echo "$ty $v: $(env ${v//,/ } $b bench -m $(m $ty) --device vulkan:0 -p 64 -n 128 -d 512 -r ${REPS:-2} 2>&1 | grep -E 'bandwidth \(|tg128|rror' | short)"
}
