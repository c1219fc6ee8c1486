#!/usr/bin/env bash
# Tokenizer speed side by side: llama.cpp b11434's llama_tokenize (tools/src/tokenize-bench.cpp,
# built against tools/build-llama-cpp.sh's tree) and ours (criterion, benches/benches/tokenize.rs),
# both encoding benches/data/english-1mib.txt whole with the llama-bpe, refact and llama-spm
# vocabularies, add_special and parse_special off.
#
#   tools/bench-tokenizer.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SHARED_TOOLS=${SHARED_TOOLS:-$ROOT/../shared/tools}
BIN=$("$SHARED_TOOLS/build-llama-cpp.sh")
LLAMA=$(cd "$BIN/.." && pwd)
EXE=$LLAMA/bin/tokenize-bench
if [ ! -x "$EXE" ] || [ "$HERE/src/tokenize-bench.cpp" -nt "$EXE" ]; then
  g++ -O2 -std=c++17 "$HERE/src/tokenize-bench.cpp" -I"$LLAMA/src/include" -I"$LLAMA/src/ggml/include" \
    -Wl,--start-group "$LLAMA"/build/src/libllama.a "$LLAMA"/build/ggml/src/libggml*.a -Wl,--end-group \
    -fopenmp -lpthread -ldl -o "$EXE"
fi
echo "== llama.cpp"
for v in llama-bpe refact llama-spm; do
  "$EXE" "$ROOT/tests/fixtures/tokenizer/ggml-vocab-$v.gguf" "$ROOT/benches/data/english-1mib.txt" 10
done
echo "== engine"
cd "$ROOT" && cargo bench -p benches --bench tokenize 2>/dev/null | grep -E '^encode|time:|thrpt:'
