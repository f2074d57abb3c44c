# Sourced by session 37's call scripts (from the repository root): the device's loader and
# driver, the binaries from .carryz/, models and the llama.cpp build kept under target/ (ignored,
# so a warm machine keeps them between calls), and a deadline: `left` prints the seconds that
# remain of the call's budget (BUDGET_S, default 570).
t0=$(date +%s)
left() { echo $(( ${BUDGET_S:-570} - ($(date +%s) - t0) )); }
for f in .gl/*.deb; do dpkg -x "$f" / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p .carry target/m
for f in .carryz/*.gz; do gunzip -c "$f" > ".carry/$(basename "$f" .gz)"; done
chmod +x .carry/* 2>/dev/null
bin=$PWD/.carry/strata-rt
models=$PWD/target/m
export MODELS_DIR=$models
model_of() { case $1 in smollm2-*) echo "$models/smollm2-135m-${1#smollm2-}.gguf";; *) echo "$models/qwen2.5-7b-$1.gguf";; esac; }
synth() {
  local m; m=$(model_of "$1")
  [ -f "$m" ] && return 0
  case $1 in smollm2-*) /usr/bin/time -f "synth $1 %e s" "$bin" synth-model --shape smollm2-135m --type "${1#smollm2-}" --out "$m.tmp" ;;
    *) /usr/bin/time -f "synth $1 %e s" "$bin" synth-model --shape qwen2.5-7b --type "$1" --out "$m.tmp" ;; esac 2>&1 | tail -1
  mv "$m.tmp" "$m"
}
lcp=$PWD/target/lcpb/llama.cpp/build/bin/llama-bench
build_llama() {
  [ -x "$lcp" ] && return 0
  mkdir -p target/lcpb && tar xzf .carryz/llama.cpp.tgz -C target/lcpb
  (cd target/lcpb/llama.cpp && cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF > "$OUT/llama-cmake.log" 2>&1 && \
    /usr/bin/time -f "llama-bench (CUDA) built in %e s" cmake --build build -t llama-bench -j "${1:-16}" > "$OUT/llama-build.log" 2>&1)
  tail -1 "$OUT/llama-build.log"
}
