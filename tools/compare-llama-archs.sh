#!/usr/bin/env bash
# Compares the engine with llama.cpp on the tiny random-weight models llama.cpp's own
# tests/test-llama-archs writes (`-a ARCH -s SEED -o DIR`; dense and MoE variants, tokenizer model
# "test"): for each file, the same 32 token ids through llama-golden (llama.cpp's logits at every
# position, f32 KV cache) and `engine-cli logits --tokens` (every logit), and prints per file the
# largest |difference| and whether the best token agrees at every position. A development check
# beside the suite's own (tests/fixtures/archs/, which needs no llama.cpp); exits 1 when a file
# differs by more than BOUND (default 1e-4) or a best token differs.
#
#   tools/compare-llama-archs.sh [--cli PATH] ARCH_REGEX [SEED...]     (default seeds: 1 2)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLI=$ROOT/target/debug/engine-cli
if [ "${1:-}" = --cli ]; then CLI=$2; shift 2; fi
[ $# -ge 1 ] || { echo "usage: tools/compare-llama-archs.sh [--cli PATH] ARCH_REGEX [SEED...]" >&2; exit 2; }
regex=$1; shift
seeds=("$@"); [ ${#seeds[@]} -gt 0 ] || seeds=(1 2)
BIN=$(bash "$ROOT/../shared/tools/build-llama-cpp.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for seed in "${seeds[@]}"; do
  mkdir -p "$work/s$seed"
  "$BIN/test-llama-archs" -a "$regex" -s "$seed" -o "$work/s$seed" >/dev/null 2>&1
  for file in "$work/s$seed"/*.gguf; do
    name="$(basename "$file" .gguf) seed $seed"
    ids=$(python3 -c 'import random, sys
r = random.Random(sys.argv[1])
print(",".join(str(r.randrange(128)) for _ in range(32)))' "$name")
    if ! "$BIN/llama-golden" -m "$file" -t 2 -c 256 --fa off --kv f32 --seq "$ids" -o "$work/golden" >/dev/null 2>&1; then
      echo "$name: llama.cpp could not run it"; continue
    fi
    if ! "$CLI" logits -m "$file" --tokens "$ids" --top 1000000 --json >"$work/ours.json" 2>"$work/ours.err"; then
      echo "$name: $(tail -1 "$work/ours.err")"; status=1; continue
    fi
    python3 - "$work/golden.json" "$work/golden.bin" "$work/ours.json" "$name" "${BOUND:-1e-4}" <<'PY' || status=1
import json, struct, sys
golden, ours, name, bound = json.load(open(sys.argv[1])), json.load(open(sys.argv[3])), sys.argv[4], float(sys.argv[5])
n = golden["n_vocab"]
raw = open(sys.argv[2], "rb").read()
rows = [struct.unpack_from(f"<{n}f", raw, 4 * n * r) for r in range(len(ours["top"]))]
worst, same = 0.0, True
for want, top in zip(rows, ours["top"]):
    got = dict(top)
    worst = max(worst, max(abs(got[i] - want[i]) for i in range(n)))
    same &= top[0][0] == max(range(n), key=lambda i: (want[i], -i))
print(f"{name}: {len(rows)} positions, max |ours - llama.cpp| = {worst:.3e}, best tokens {'equal' if same else 'DIFFER'}")
sys.exit(0 if worst <= bound and same else 1)
PY
  done
done
exit $status
