# Sourced by session 38's and 39's call scripts (from the repository root): session 37's
# prologue, then `ab TYPE DEPTH VARIANT...`, the 7B model of TYPE's tg128 at context DEPTH (two
# reps) once per variant (comma-separated settings; X=1 is none), while the call's budget lasts,
# and `run TYPE VARIANT...`, the same at context 512.
source bench/results/h200-vulkan-decode-2026-12-01/session37/common.sh
ab() {
  local m; m=$(model_of "$1"); local d=$2; shift 2
  for v in "$@"; do
    [ "$(left)" -lt 25 ] && { echo "out of time before $v"; return; }
    echo "d$d $v: $(env ${v//,/ } $bin bench -m $m --device vulkan:0 -p 64 -n 128 -d $d -r 2 2>&1 | grep -E 'bandwidth \(|tg128|rror' | tr '\n' ' ')"
  done
}
run() {
  local ty=$1; shift
  ab "$ty" 512 "$@"
}
