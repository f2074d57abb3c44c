#!/usr/bin/env bash
# Everything the test suite needs besides Rust, on Debian 12 (run as root, or with sudo for apt):
# Debian packages (Prometheus for the dashboard checks; glslc for the Vulkan shaders; Mesa's lavapipe
# and the Vulkan loader for the Vulkan device's tests), the default model (from PyPI), and the
# official openai Python client in .venv (for tests/http_openai_client.rs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends \
  build-essential pkg-config ca-certificates python3 python3-pip python3-venv prometheus \
  glslc libvulkan1 mesa-vulkan-drivers vulkan-tools >/dev/null
# The Debian package starts a Prometheus service on :9090; the tests start their own.
($sudo systemctl stop prometheus 2>/dev/null || $sudo service prometheus stop 2>/dev/null || $sudo pkill -x prometheus) >/dev/null 2>&1 || true
bash scripts/fetch-model.sh
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q openai==2.8.1
echo "test dependencies ready"
