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

# The 1 MiB benchmark text: token count and sha256 of llama-tokenize's id list per vocabulary.
TEXT=$ROOT/benches/data/english-1mib.txt
{
  printf '{\n "text": "benches/data/english-1mib.txt",\n'
  printf ' "made_by": "llama-tokenize -m VOCAB -f TEXT --ids --no-bos --no-escape --no-parse-special (llama.cpp b11434); sha256 of its output line without the newline"'
  for v in llama-bpe refact llama-spm; do
    line=$("$BIN/llama-tokenize" -m "$DIR/ggml-vocab-$v.gguf" -f "$TEXT" --ids --log-disable --no-bos --no-escape --no-parse-special 2>/dev/null | tr -d '\n')
    n=$(python3 -c 'import sys,ast; print(len(ast.literal_eval(sys.stdin.read())))' <<<"$line")
    sha=$(printf '%s' "$line" | sha256sum | cut -d' ' -f1)
    printf ',\n "%s": {\n  "n_tokens": %s,\n  "sha256_ids": "%s"\n }' "$v" "$n" "$sha"
  done
  printf '\n}\n'
} > "$OUT/english-1mib.json"
echo english-1mib
