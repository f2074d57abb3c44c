# Sourced by session 38's call scripts (from the repository root): session 37's prologue, then
# `run TYPE VARIANT...`, the 7B model of TYPE's tg128 at context 512 (two reps) once per variant
# (comma-separated settings; X=1 is none), while the call's budget lasts.
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh
run() {
  local m; m=$(model_of "$1"); shift
  for v in "$@"; do
    [ "$(left)" -lt 25 ] && { echo "out of time before $v"; return; }
    echo "$v: $(env ${v//,/ } $bin bench -m $m --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth \(|tg128|rror' | tr '\n' ' ')"
  done
}
