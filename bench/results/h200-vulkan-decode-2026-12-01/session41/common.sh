# Sourced by session 41's call scripts (from the repository root): the device's loader and
# driver, the binaries from .carryt/ (strata-rt.gz, the default build, and strata-rt-tl.gz, the
# timeline build) as $bin and $tl, the GPU's name into $OUT/gpu.txt, the 7B models of Q4_K and
# Q4_1 under target/m (kept on a warm machine), and `left`: the seconds left of BUDGET_S.
set -u
t0=$(date +%s)
left() { echo $(( ${BUDGET_S:-400} - ($(date +%s) - t0) )); }
for f in .gl/*.deb; do dpkg -x "$f" / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p .carry target/m
for f in .carryt/*.gz; do gunzip -c "$f" > ".carry/$(basename "$f" .gz)"; done
chmod +x .carry/*
bin=$PWD/.carry/strata-rt
tl=$PWD/.carry/strata-rt-tl
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
m() { echo "$PWD/target/m/qwen2.5-7b-$1.gguf"; }
for ty in Q4_K Q4_1; do
  [ -f "$(m $ty)" ] || ( /usr/bin/time -f "synth $ty %e s" $tl synth-model --shape qwen2.5-7b --type $ty --out "$(m $ty).tmp" 2>&1 | tail -1; mv "$(m $ty).tmp" "$(m $ty)" ) &
done
wait
