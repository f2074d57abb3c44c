#!/usr/bin/env bash
# llama.cpp's CUDA llama-bench beside strata-rt's Vulkan bench, same machine, same synthetic models
# (run on the GPU machine by the device tool; see BENCHMARKS.md). The llama.cpp source is the one
# `llama-cpp-python` 0.3.36 vendors, carried as a tarball of its build inputs:
#   tar czf .lcp/llama.cpp.tgz -C <sdist>/vendor llama.cpp/{ggml,src,include,common,tools,vendor,cmake,CMakeLists.txt,licenses,LICENSE}
# Usage: bench/h200_llama_cpp.sh LLAMA_TGZ STRATA_BINARY OUTDIR [TYPES...]   (default: Q4_0 Q4_K)
set -uo pipefail
tgz=${1:?llama.cpp tarball}; bin=${2:?strata-rt binary}; out=${3:?output folder}; shift 3
types=("$@"); [ ${#types[@]} -gt 0 ] || types=(Q4_0 Q4_K)
models=${MODELS_DIR:-/tmp/strata-models}
mkdir -p "$models" "$out" /tmp/lcpb
tar xzf "$tgz" -C /tmp/lcpb
cd /tmp/lcpb/llama.cpp || exit 1
cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF > "$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; exit 1; }
start=$(date +%s)
cmake --build build -t llama-bench -j"$(nproc)" > "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
echo "llama-bench (CUDA) built in $(( $(date +%s) - start )) s" | tee -a "$out/llama-cpp.txt"
cd - > /dev/null || exit 1
for ty in "${types[@]}"; do
  m="$models/qwen2.5-7b-$ty.gguf"
  [ -f "$m" ] || "$bin" synth-model --shape qwen2.5-7b --type "$ty" --out "$m" > /dev/null 2>&1
  echo "== qwen2.5-7b $ty" | tee -a "$out/llama-cpp.txt"
  /tmp/lcpb/llama.cpp/build/bin/llama-bench -m "$m" -ngl 99 -fa 1 -p 2048 -n 128 -d 0,512,8192 -r 2 2>&1 | grep -E "^\|" | tee -a "$out/llama-cpp.txt"
  "$bin" bench -m "$m" --device vulkan:0 -p 2048 -n 128 -d 512,8192 -r 2 2>&1 | grep -E "^\||bandwidth" | tee -a "$out/llama-cpp.txt"
done
