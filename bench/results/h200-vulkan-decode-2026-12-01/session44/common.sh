# Sourced by session 44's call scripts (from the repository root): the device's loader and driver,
# .carryt/strata-rt.gz (the default build of HEAD) as $bin, the GPU's name into $OUT/gpu.txt, the
# synthetic models under target/m (kept on a warm machine; `m TYPE` is the 7B one), `left`:
# the seconds left of BUDGET_S, and (since session 51) `tg512 BIN TYPE [VAR=VALUE...]`: one
# line of the 7B model's decode at context 512 and the bandwidth it was measured against.
set -u
t0=$(date +%s)
# At most 8 files come back from $OUT (the device README): past that, at the script's exit, the
# folders under $OUT go into all.tgz (the whole of $OUT), and if top-level files alone are still
# too many, only the archive stays.
pack_out() {
  [ "$(find "$OUT" -type f | wc -l)" -le 8 ] && return
  tar czf /tmp/strata-out.tgz -C "$OUT" . || return
  find "$OUT" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
  mv /tmp/strata-out.tgz "$OUT/all.tgz"
  [ "$(find "$OUT" -type f | wc -l)" -le 8 ] || find "$OUT" -type f ! -name all.tgz -delete
}
trap pack_out EXIT
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
# The bench lines a session table keeps: bandwidth and tg128 (or the error), on one line.
short() { sed 's/weight bytes read per decode step: [0-9.]* MB, plus [0-9.]* KB of KV per cell of context //' | tr '\n' ' '; }
tg512() { local b=$1 ty=$2; shift 2; env NONE=1 "$@" "$b" bench -m "$(m "$ty")" --device vulkan:0 -p 64 -n 128 -d 512 -r 2 2>&1 | grep -E 'bandwidth|tg128|rror' | short; }
