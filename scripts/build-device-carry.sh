#!/usr/bin/env bash
# Builds what a device call carries (see /work/.library/device/README.md): the release binary of
# HEAD, stripped and gzipped into .carryt/strata-rt.gz, and the Vulkan loader's Debian packages
# into .gl/ (the GPU machine has the NVIDIA driver but no loader). Both folders are ignored through
# .git/info/exclude. Optional: TIMELINE=1 also builds .carryt/strata-rt-tl.gz with
# STRATA_SHADER_TIMELINE=1 (workgroup timelines; its own target folder, ~6 minutes more).
# Usage: bash scripts/build-device-carry.sh, then carry [".gl", ".carryt"].
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .git/info .carryt
for d in /.gl/ /.carryt/ /.carry/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
if ! ls .gl/*.deb >/dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update -qq
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
cargo build --release -p strata-rt
strip -o .carryt/strata-rt target/release/strata-rt
gzip -f .carryt/strata-rt
if [ "${TIMELINE:-0}" = 1 ]; then
  STRATA_SHADER_TIMELINE=1 CARGO_TARGET_DIR="$root/target-tl" cargo build --release -p strata-rt
  strip -o .carryt/strata-rt-tl target-tl/release/strata-rt
  gzip -f .carryt/strata-rt-tl
fi
echo "built at $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with uncommitted changes)'):"
ls -l .carryt .gl
