#!/usr/bin/env bash
# Prompt-processing and generation speed of our engine and llama.cpp on one GGUF, measured in
# alternated rounds (ours, then llama-bench, ROUNDS times) so that both see the same machine
# state; prints every round, the ratio ours / llama.cpp per round, and the medians.
#
#   tools/bench-side-by-side.sh MODEL.gguf [-t THREADS] [-p PP] [-n TG] [-d DEPTH] [-k KV_TYPE] [-r ROUNDS]
#   defaults: -t 2 -p 512 -n 128 -d 0 -k f16 -r 3
#   -d: tokens already in the cache when each test starts; -k: the KV cache's key and value
#   type (f16, q8_0, q4_0; for a quantized one llama.cpp runs with -fa 1, which its quantized
#   value cache needs)
#
# Ours: target/release/engine-cli (build it first: cargo build --release -p cli), with the SIMD
# tier ENGINE_ISA if set. llama.cpp: $LLAMA_CPP_BIN/llama-bench, else the build of
# ../shared/tools/build-llama-cpp.sh under ${ENGINE_ASSETS:-~/.cache/engine-assets}.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,13p' "$0"; exit 2; }
MODEL=$1; shift
T=2; P=512; N=128; D=0; K=f16; R=3
while [ $# -gt 0 ]; do
  case $1 in
    -t) T=$2; shift 2 ;;
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -d) D=$2; shift 2 ;;
    -k) K=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OURS=$ROOT/target/release/engine-cli
BIN=${LLAMA_CPP_BIN:-${ENGINE_ASSETS:-$HOME/.cache/engine-assets}/llama.cpp-b11434/bin}
[ -x "$OURS" ] || { echo "no $OURS: run cargo build --release -p cli" >&2; exit 1; }
[ -x "$BIN/llama-bench" ] || { echo "no llama-bench in $BIN: run ../shared/tools/build-llama-cpp.sh" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "no such model: $MODEL" >&2; exit 1; }

FA=(); [ "$K" = f16 ] || FA=(-fa 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# $(basename "$MODEL"): -t $T -p $P -n $N -d $D, KV cache $K, $R alternated rounds; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "ENGINE_ISA=${ENGINE_ISA:-(best)}"
for i in $(seq 1 "$R"); do
  "$OURS" bench -m "$MODEL" -t "$T" -p "$P" -n "$N" -d "$D" --kv-type "$K" -r 1 --json > "$tmp/ours$i.json" 2> "$tmp/ours$i.err" \
    || { cat "$tmp/ours$i.err" >&2; exit 1; }
  "$BIN/llama-bench" -m "$MODEL" -t "$T" -p "$P" -n "$N" -d "$D" "${FA[@]}" -ctk "$K" -ctv "$K" -r 1 -o json > "$tmp/llama$i.json" 2> "$tmp/llama$i.err" \
    || { cat "$tmp/llama$i.err" >&2; exit 1; }
done
python3 - "$tmp" "$R" <<'EOF'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def speeds(path):
    out = {}
    for t in json.load(open(path)):
        kind = "pp" if t["n_prompt"] > 0 and t["n_gen"] == 0 else "tg"
        out[kind] = t["avg_ts"]
    return out
rows = [(speeds(f"{tmp}/ours{i}.json"), speeds(f"{tmp}/llama{i}.json")) for i in range(1, rounds + 1)]
for kind in ("pp", "tg"):
    if not all(kind in o and kind in l for o, l in rows):
        continue
    print(f"{kind}: " + "  ".join(f"ours {o[kind]:.1f} / llama {l[kind]:.1f} = {o[kind] / l[kind]:.2f}x" for o, l in rows))
    mo, ml = statistics.median(o[kind] for o, _ in rows), statistics.median(l[kind] for _, l in rows)
    print(f"{kind} median: ours {mo:.1f} t/s, llama.cpp {ml:.1f} t/s, ratio {mo / ml:.2f}x "
          f"(per-round ratios {min(o[kind] / l[kind] for o, l in rows):.2f}-{max(o[kind] / l[kind] for o, l in rows):.2f}x)")
EOF
