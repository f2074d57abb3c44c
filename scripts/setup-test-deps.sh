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
# Mesa 25 from bookworm-backports: its lavapipe runs the Vulkan tests two to three times as fast as
# bookworm's Mesa 22 (buffer-device-address loads, which every kernel uses, are slow in 22's
# llvmpipe). Added from the mirror bookworm already uses; without it, Mesa 22 still passes.
if grep -q '^VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
  if ! apt-cache policy 2>/dev/null | grep -q 'bookworm-backports/main'; then
    mirror=$(python3 scripts/debian-mirror.py bookworm 2>/dev/null || true)
    if [ -n "$mirror" ]; then
      printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$mirror" \
        | $sudo tee /etc/apt/sources.list.d/strata-rt-bookworm-backports.sources >/dev/null
      $sudo apt-get update -qq || true
    fi
  fi
  $sudo apt-get install -y -qq --no-install-recommends -t bookworm-backports mesa-vulkan-drivers >/dev/null \
    || echo "setup-test-deps: Mesa from bookworm-backports is not available here; the tests run on bookworm's (slower)" >&2
fi
# The Debian package starts a Prometheus service on :9090; the tests start their own.
($sudo systemctl stop prometheus 2>/dev/null || $sudo service prometheus stop 2>/dev/null || $sudo pkill -x prometheus) >/dev/null 2>&1 || true
bash scripts/fetch-model.sh
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q openai==2.8.1
echo "test dependencies ready"
