#!/usr/bin/env bash
# Makes the goldens of the table-level weight types (IQ4_NL, IQ4_XS, MXFP4), which the shared
# fixtures do not cover. llama.cpp (../shared/tools/build-llama-cpp.sh) quantizes the tiny llama
# fixture (tests/fixtures/models/tiny-llama-F32.gguf) with `llama-quantize --pure` into each type,
# and tests/fixtures/quants/ gets, per type (NAME = tiny-llama-TYPE):
#   NAME.tensors.json  the file's SHA-256, and per tensor: its type, the SHA-256 of its blocks as llama-quantize wrote
#                      them, and of its values as ggml dequantizes them (ggml-ref), f32 LE;
#   golden/NAME.logits.{json,bin}
#                      llama-golden with the settings of the shared goldens (2 threads, context
#                      512, f32 KV cache, flash attention off; the fixture's three sequences, 16
#                      greedy tokens), plus `bound`: twice the largest difference llama.cpp itself
#                      shows with one thread, one token at a time and an f16 KV cache (at least
#                      0.01), the tolerance of tests/tests/golden/table_quants.rs.
# The quantized files stay out of git: the test quantizes the F32 fixture itself and checks it
# gets llama-quantize's bytes.
#
# The grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), which the engine
# reads but does not write, are made from an importance matrix (llama-imatrix over README.md,
# built beside the other tools when missing) for two tensors only (blk.0.ffn_down and
# blk.1.attn_q; the rest stays F32), and their blocks are kept: NAME.blocks (the two tensors'
# bytes, in that order) beside NAME.tensors.json (their offsets there); the test puts them
# into the F32 file to rebuild llama-quantize's model.
#
#   tools/make-quant-goldens.sh [TYPE...]      (default: IQ4_NL IQ4_XS MXFP4 and the grid types)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FIX=$ROOT/tests/fixtures/quants
BIN=$(bash "$ROOT/../shared/tools/build-llama-cpp.sh")
PYDIR=$(bash "$ROOT/tools/make-fixtures.sh" --pydeps)
SRC=$ROOT/tests/fixtures/models/tiny-llama-F32.gguf
SEQS=(--seq 1 --seq 1,323,354,417,339,293,441
      --seq 1,189,311,241,195,113,157,14,170,488,443,319,355,236,82,351,47,32,16,65,363,144,509,270,343,427,245,5,509,380,236,168,75,83,195,315,310,370,160,442,75,385,222,403,418,89,103,238,284,402,295,427,410,258,330,264,476,417,238,120,201,364,504,178)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$FIX/golden"
GRID="IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S IQ1_S IQ1_M"
[ $# -gt 0 ] || set -- IQ4_NL IQ4_XS MXFP4 $GRID
imatrix() {
  [ -f "$work/imatrix.gguf" ] && return
  local tool=$BIN/llama-imatrix
  if [ ! -x "$tool" ]; then
    cmake --build "$(dirname "$BIN")/build" --target llama-imatrix -j "${JOBS:-2}" >&2
    tool=$(dirname "$BIN")/build/bin/llama-imatrix
  fi
  "$tool" -m "$SRC" -f "$ROOT/README.md" -c 128 --chunks 16 -t 2 -o "$work/imatrix.gguf" >"$work/imatrix.log" 2>&1 ||
    { cat "$work/imatrix.log" >&2; exit 1; }
}
for ty in "$@"; do
  name=tiny-llama-$ty
  file=$work/$name.gguf
  if [[ " $GRID " == *" $ty "* ]]; then
    imatrix
    lower=$(echo "$ty" | tr '[:upper:]' '[:lower:]')
    # the first pattern a tensor matches decides its type: the two tensors, then F32 for the rest
    keep=(--pure --imatrix "$work/imatrix.gguf" --token-embedding-type f32 --output-tensor-type f32
          --tensor-type "blk\.0\.ffn_down=$lower" --tensor-type "blk\.1\.attn_q=$lower" --tensor-type ".*=f32")
    "$BIN/llama-quantize" "${keep[@]}" "$SRC" "$file" "$ty" 2 >"$work/quantize.log" 2>&1 || { cat "$work/quantize.log" >&2; exit 1; }
    made="llama-quantize --pure --imatrix imatrix.gguf --token-embedding-type f32 --output-tensor-type f32 --tensor-type blk.0.ffn_down=$lower --tensor-type blk.1.attn_q=$lower --tensor-type .*=f32 tiny-llama-F32.gguf $name.gguf $ty 2"
  else
    # llama-quantize names MXFP4 by the mixture it makes without --pure
    ftype=$ty
    [ "$ty" = MXFP4 ] && ftype=MXFP4_MOE
    "$BIN/llama-quantize" --pure "$SRC" "$file" "$ftype" 2 >"$work/quantize.log" 2>&1 || { cat "$work/quantize.log" >&2; exit 1; }
    made="llama-quantize --pure tiny-llama-F32.gguf $name.gguf $ftype 2"
  fi
  mkdir -p "$work/$name.deq"
  "$BIN/ggml-ref" dequant "$file" "$work/$name.deq" >&2
  PYTHONPATH=$PYDIR python3 - "$file" "$work/$name.deq" "$FIX/$name" "$made" <<'EOF'
import hashlib, json, sys
from gguf import GGUFReader
path, deq, out, made = sys.argv[1:]
tensors, kept = {}, bytearray()
grid = " --imatrix " in made
for t in GGUFReader(path).tensors:
    values = open(f"{deq}/{t.name}.f32", "rb").read()
    entry = {"type": t.tensor_type.name, "sha256_blocks": hashlib.sha256(bytes(t.data)).hexdigest(),
             "sha256_f32": hashlib.sha256(values).hexdigest()}
    if grid and t.tensor_type.name != "F32":
        entry["offset"], entry["bytes"] = len(kept), len(bytes(t.data))
        kept += bytes(t.data)
    if not grid or t.tensor_type.name != "F32":
        tensors[t.name] = entry
index = {"made_with": made, "tensors": tensors}
if grid:
    open(out + ".blocks", "wb").write(kept)
else:
    index["sha256_file"] = hashlib.sha256(open(path, "rb").read()).hexdigest()
json.dump(index, open(out + ".tensors.json", "w"), indent=1, sort_keys=True)
EOF
  # the grid types' goldens keep the two short sequences (their logits are committed per type)
  seqs=("${SEQS[@]}")
  [[ " $GRID " == *" $ty "* ]] && seqs=("${SEQS[@]:0:4}")
  flags=(-m "$file" -c 512 --fa off "${seqs[@]}" --gen 16 --top 10)
  "$BIN/llama-golden" "${flags[@]}" -t 2 --kv f32 -o "$FIX/golden/$name.logits" >&2
  "$BIN/llama-golden" "${flags[@]}" -t 1 --kv f32 -o "$work/t1" >&2
  "$BIN/llama-golden" "${flags[@]}" -t 2 --kv f32 --one-by-one -o "$work/one" >&2
  "$BIN/llama-golden" "${flags[@]}" -t 2 --kv f16 -o "$work/f16" >&2
  python3 - "$FIX/golden/$name.logits" "$work/t1" "$work/one" "$work/f16" <<'EOF'
import array, json, sys
golden, *others = sys.argv[1:]
def read(prefix):
    a = array.array("f")
    a.frombytes(open(prefix + ".bin", "rb").read())
    return a, json.load(open(prefix + ".json"))
def prompt_rows(values, index):
    n = index["n_vocab"]
    for seq in index["sequences"]:
        at, rows = seq["prompt_logits"]["offset"] // 4, seq["prompt_logits"]["rows"]
        yield from values[at:at + rows * n]
want, index = read(golden)
# llama.cpp's own spread on the prompts (greedy continuations may take another token on a tie)
worst = max(max(abs(x - y) for x, y in zip(prompt_rows(want, index), prompt_rows(*read(o)))) for o in others)
# the shared goldens' layout (tests/fixtures/models/golden), which the tests read
for seq in index["sequences"]:
    seq["logits"] = {"offset": seq["prompt_logits"]["offset"], "shape": [seq["prompt_logits"]["rows"], index["n_vocab"]]}
    seq["greedy"], seq["greedy_is_eog"] = seq.pop("gen"), seq.pop("gen_eog")
    seq["greedy_margins"] = [top["logits"][0] - top["logits"][1] for top in seq["gen_top"]]
index["bound"] = round(max(0.01, 2 * worst), 4)
json.dump(index, open(golden + ".json", "w"), indent=1)
print(f"{golden}: llama.cpp's own spread {worst:.3e}, bound {index['bound']}", file=sys.stderr)
EOF
done
