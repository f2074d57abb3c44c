# Sourced with the script's arguments (BINARY OUTDIR TYPE VARIANT...) by bench/h200_variants.sh,
# h200_batched.sh, h200_prefill.sh and h200_long_context.sh: sets bin, out (created), ty and
# variants (default: "default"); the synthetic model of SHAPE (default qwen2.5-7b) and type $ty in
# MODELS_DIR (written once by $bin), and how a variant runs.
#   VARIANT: "default" (no setting) or settings joined by commas (A=1,B=2); a first element
#   "@PATH" runs the binary at PATH instead of $bin (e.g. "@/tmp/old" or "@/tmp/old,A=1").
# Sets shape and m; defines settings VARIANT, binary VARIANT and run VARIANT ARGS... (`bench` of
# the model on vulkan:0 with the variant's settings and binary).
set -uo pipefail
bin=${1:?binary}; out=${2:?output folder}; ty=${3:?type}; shift 3
variants=("$@"); [ ${#variants[@]} -gt 0 ] || variants=(default)
mkdir -p "$out"
shape=${SHAPE:-qwen2.5-7b}
models=${MODELS_DIR:-/tmp/strata-models}
mkdir -p "$models"
m="$models/$shape-$ty.gguf"
[ -f "$m" ] || /usr/bin/time -f "synth %e s" "$bin" synth-model --shape "$shape" --type "$ty" --out "$m" 2>&1 | tail -1
settings() { [ "$1" = default ] || { local s="${1//,/ }"; echo "${s#@* }" | grep -v '^@'; }; }
binary() { case "$1" in @*) local b="${1#@}"; echo "${b%%,*}";; *) echo "$bin";; esac; }
run() { local v=$1; shift; env $(settings "$v") "$(binary "$v")" bench -m "$m" --device vulkan:0 "$@" 2>&1; }
