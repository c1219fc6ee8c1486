#!/usr/bin/env bash
# Goldens of the BPE pre-tokenizers no vocabulary of tests/fixtures/tokenizer/ names (gpt-oss's,
# Mistral 3's, GLM-4's, OLMo's and OLMo 2's, DeepSeek-V3's, SmolLM's, ...): llama.cpp's llama-bpe test vocabulary with its `tokenizer.ggml.pre` replaced, run by
# llama-golden over tests/fixtures/tokenizer/pretokenizers.inp (targeted texts: case runs,
# contractions, digits, marks, scripts without case; then llama-bpe's own test texts). Writes
# tests/fixtures/tokenizer/golden/llama-bpe-as-PRE.json, which
# tests/tests/golden/tokenizer_golden.rs reads with the same vocabulary relabelled in memory.
#
#   tools/make-pretokenizer-goldens.sh [PRE...]
#       (default: gpt-4o tekken glm4 chatglm-bpe dbrx olmo deepseek-v3 smollm smaug-bpe)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$ROOT/tests/fixtures/tokenizer
BIN=$(bash "$ROOT/../shared/tools/build-llama-cpp.sh")
PYDIR=$(bash "$ROOT/tools/make-fixtures.sh" --pydeps)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ $# -gt 0 ] || set -- gpt-4o tekken glm4 chatglm-bpe dbrx olmo deepseek-v3 smollm smaug-bpe
for pre in "$@"; do
  PYTHONPATH=$PYDIR python3 - "$DIR/ggml-vocab-llama-bpe.gguf" "$work/vocab.gguf" "$pre" <<'EOF'
import sys
from gguf import GGUFReader, GGUFValueType, GGUFWriter
src, dst, pre = sys.argv[1:]
reader = GGUFReader(src)
writer = GGUFWriter(dst, reader.fields["general.architecture"].contents())
for name, field in reader.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    value = pre if name == "tokenizer.ggml.pre" else field.contents()
    kind = field.types[0]
    writer.add_key_value(name, value, kind, sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
EOF
  "$BIN/llama-golden" -m "$work/vocab.gguf" --texts "$DIR/pretokenizers.inp" -o "$DIR/golden/llama-bpe-as-$pre" >/dev/null
  echo "$DIR/golden/llama-bpe-as-$pre.json"
done
