# Sourced by session 44's call scripts (from the repository root): the device's loader and driver,
# .carryt/strata-rt.gz (the default build of HEAD) as $bin, the GPU's name into $OUT/gpu.txt, the
# synthetic models under target/m (kept on a warm machine; `m TYPE` is the 7B one), and `left`:
# the seconds left of BUDGET_S.
set -u
t0=$(date +%s)
left() { echo $(( ${BUDGET_S:-400} - ($(date +%s) - t0) )); }
for f in .gl/*.deb; do dpkg -x "$f" / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p .carry target/m
for f in .carryt/*.gz; do gunzip -c "$f" > ".carry/$(basename "$f" .gz)"; done
chmod +x .carry/*
bin=$PWD/.carry/strata-rt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
m() { echo "$PWD/target/m/qwen2.5-7b-$1.gguf"; }
# synth SHAPE TYPE...: the models not yet there, all at once (16 cores, 128 GiB).
synth() {
  local shape=$1; shift
  for ty in "$@"; do
    local f=$PWD/target/m/$shape-$ty.gguf
    [ -f "$f" ] || ( /usr/bin/time -f "synth $shape $ty %e s" $bin synth-model --shape $shape --type $ty --out "$f.tmp" 2>&1 | tail -1; mv "$f.tmp" "$f" ) &
  done
  wait
}
