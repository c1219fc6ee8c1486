#!/usr/bin/env bash
# A guard scan (the 9 harm risks of one message) by our engine and by llama-server, in
# alternated rounds: ours is `engine-cli guard --scan` (its "9 risks in N ms", the model already
# loaded and repacked); llama-server gets the same nine prompts (`engine-cli guard
# --print-prompts`) one after another on one slot with its prompt cache, a fresh server per
# round (started and healthy before the clock starts), one answer token each. Prints every
# round, the ratio ours / llama-server per round, and the medians.
#
#   tools/guard-scan-side-by-side.sh MODEL.gguf MESSAGE.txt [-t THREADS] [-r ROUNDS] [-f FORMAT]
#   defaults: -t 2 -r 3 -f 3.0
#
# Ours: target/release/engine-cli (cargo build --release -p cli), ENGINE_ISA honoured.
# llama.cpp: $LLAMA_CPP_BIN/llama-server, else the build of ../shared/tools/build-llama-cpp.sh.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,14p' "$0"; exit 2; }
MODEL=$1; MSG=$2; shift 2
T=2; R=3; F=3.0
while [ $# -gt 0 ]; do
  case $1 in
    -t) T=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    -f) F=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OURS=$ROOT/target/release/engine-cli
BIN=${LLAMA_CPP_BIN:-${ENGINE_ASSETS:-$HOME/.cache/engine-assets}/llama.cpp-b11434/bin}
[ -x "$OURS" ] || { echo "no $OURS: run cargo build --release -p cli" >&2; exit 1; }
[ -x "$BIN/llama-server" ] || { echo "no llama-server in $BIN: run ../shared/tools/build-llama-cpp.sh" >&2; exit 1; }
[ -f "$MODEL" ] && [ -f "$MSG" ] || { echo "no such model or message file" >&2; exit 1; }
PORT=${PORT:-18089}

tmp=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
"$OURS" guard -m "$MODEL" -f "$MSG" --scan --format "$F" --print-prompts > "$tmp/prompts.jsonl"
cat > "$tmp/nine.py" <<'EOF'
import http.client, json, sys, time
port, prompts = int(sys.argv[1]), [json.loads(l)["prompt"] for l in open(sys.argv[2])]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
t0 = time.time()
for p in prompts:
    body = {"prompt": p, "n_predict": 1, "cache_prompt": True, "temperature": 0, "n_probs": 2}
    c.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
print(f"{(time.time() - t0) * 1e3:.0f}")
EOF
echo "# $(basename "$MODEL"), $(wc -w < "$MSG")-word message, format $F, -t $T, $R alternated rounds;" \
  "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), ENGINE_ISA=${ENGINE_ISA:-(best)}"
ours=(); theirs=()
for i in $(seq 1 "$R"); do
  "$OURS" guard -m "$MODEL" -f "$MSG" --scan --format "$F" -t "$T" > /dev/null 2> "$tmp/ours.err" || [ $? -eq 1 ]
  ours+=("$(sed -n 's/^[0-9]* risks in \([0-9]*\) ms$/\1/p' "$tmp/ours.err")")
  "$BIN/llama-server" -m "$MODEL" -t "$T" -np 1 -c 4096 --port "$PORT" > "$tmp/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break
    sleep 0.5
  done
  theirs+=("$(python3 "$tmp/nine.py" "$PORT" "$tmp/prompts.jsonl")")
  kill "$server"; wait "$server" 2>/dev/null || true; server=
  echo "round $i: ours ${ours[-1]} ms, llama-server ${theirs[-1]} ms, ratio $(python3 -c "print(f'{${ours[-1]}/${theirs[-1]}:.2f}')")x"
done
python3 - "${ours[*]}" "${theirs[*]}" <<'EOF'
import statistics, sys
o, l = [float(x) for x in sys.argv[1].split()], [float(x) for x in sys.argv[2].split()]
mo, ml = statistics.median(o), statistics.median(l)
print(f"median: ours {mo:.0f} ms, llama-server {ml:.0f} ms, ratio {mo / ml:.2f}x")
EOF
