#!/usr/bin/env bash
# Regenerates tests/fixtures/tokenizer/golden/: llama.cpp's ids (add_special x parse_special),
# pieces and detokenization for every vocab-only GGUF in tests/fixtures/tokenizer/, over the
# vocab's own test texts (NAME.json) and over golden/special.inp (NAME.special.json), which puts
# the chat and control tokens of all 13 vocabularies (and near misses) in text.
#
#   tools/make-tokenizer-goldens.sh     (builds llama.cpp b11434 first if needed: about 8 min)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SHARED_TOOLS=${SHARED_TOOLS:-$ROOT/../shared/tools}
BIN=$("$SHARED_TOOLS/build-llama-cpp.sh")
DIR=$ROOT/tests/fixtures/tokenizer
OUT=$DIR/golden
for gguf in "$DIR"/ggml-vocab-*.gguf; do
  name=$(basename "$gguf" .gguf); name=${name#ggml-vocab-}
  "$BIN/llama-golden" -m "$gguf" --texts "$gguf.inp" -o "$OUT/$name" >/dev/null
  "$BIN/llama-golden" -m "$gguf" --texts "$OUT/special.inp" -o "$OUT/$name.special" >/dev/null
  echo "$name"
done
