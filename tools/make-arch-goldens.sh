#!/usr/bin/env bash
# Makes the goldens of the tiny architecture models: tools/make-arch-models.py writes the files,
# llama.cpp (../shared/tools/build-llama-cpp.sh, its tools/src/llama-golden) runs them, and
# tests/fixtures/archs/ gets the files' SHA256SUMS and golden/NAME.logits.{json,bin}: for two
# sequences (24 ids drawn from the file's name, and one id), llama.cpp's logits at every position
# (one llama_decode of the whole sequence) and 32 greedy tokens with their logits (one token per
# llama_decode), f32 KV cache, flash attention off, 2 threads. The test suite
# (tests/tests/golden/archs.rs) compares the engine with these. Run it after adding a row to
# make-arch-models.py; the files themselves stay out of git (tools/make-fixtures.sh makes them).
#
#   tools/make-arch-goldens.sh [ARCH...]      (default: every architecture of make-arch-models.py)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FIX=$ROOT/tests/fixtures/archs
BIN=$(bash "$ROOT/../shared/tools/build-llama-cpp.sh")
PYDIR=$(bash "$ROOT/tools/make-fixtures.sh" --pydeps)
made=$(mktemp -d)
trap 'rm -rf "$made"' EXIT
PYTHONPATH=$PYDIR python3 "$ROOT/tools/make-arch-models.py" "$made" "$@" >&2
mkdir -p "$FIX/golden"
touch "$FIX/SHA256SUMS"
for file in "$made"/*.gguf; do
  name=$(basename "$file" .gguf)
  ids=$(python3 -c 'import random, sys
r = random.Random(sys.argv[1])
print(",".join(str(r.randrange(128)) for _ in range(24)))' "$name")
  "$BIN/llama-golden" -m "$file" -t 2 -c 256 --fa off --kv f32 --seq "$ids" --seq 7 --gen 32 \
    -o "$FIX/golden/$name.logits" >&2
  # the file's checksum line replaces an older one
  grep -v " $name.gguf\$" "$FIX/SHA256SUMS" >"$made/sums" || true
  (cd "$made" && sha256sum "$name.gguf") >>"$made/sums"
  sort -k2 "$made/sums" >"$FIX/SHA256SUMS"
  cp "$file" "$FIX/$name.gguf"
  echo "made $FIX/golden/$name.logits.{json,bin}" >&2
done
