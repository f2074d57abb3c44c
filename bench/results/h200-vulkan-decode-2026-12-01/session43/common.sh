# Sourced by session 43's call scripts (from the repository root): session 42's prologue and
# `bench`, then `decode_rep`: one 7B bench at context 512 per type (Q4_K, Q4_1) and variant of
# $variants (spaces between variants, commas between a variant's knobs), into $OUT/decode.txt.
source bench/results/h200-vulkan-decode-2026-12-01/session42/common.sh
decode_rep() {
  for ty in Q4_K Q4_1; do
    for v in $variants; do
      [ "$(left)" -lt 40 ] && { echo "out of time before $ty $v"; return; }
      bench $bin $ty $v | tee -a $OUT/decode.txt
    done
  done
}
