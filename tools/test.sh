#!/usr/bin/env bash
# The lint and the test suite, as README's test command and CI run them:
# 1. one build of every target of the workspace with every feature the code has (the CUDA
#    kernels' CPU execution harness and the CUDA backend, which needs no GPU to build or to
#    refuse a missing one), the workspace's crates compiled by clippy-driver with warnings as
#    errors: the lint and the test binaries in one pass (a separate `cargo clippy` would check
#    every crate a second time);
# 2. the large fixtures that are not committed, made with that build's engine-cli;
# 3. every test binary (tools/run-tests.py: each bench once in test mode; the time of each
#    binary and the 10 slowest tests printed at the end).
#
#   tools/test.sh [ARG...]      ARG...: passed to every libtest binary (a filter, --ignored, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
FEATURES=engine/sim,cli/cuda,benches/cuda,engine-tests/cuda,engine-tests/sim
driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)
[ -x "$driver" ] || { echo "tools/test.sh: no clippy-driver (rustup component add clippy)" >&2; exit 1; }
messages=$(mktemp)
trap 'rm -f "$messages"' EXIT
# clippy-driver takes its own arguments from CLIPPY_ARGS, separated as cargo-clippy separates them
RUSTC_WORKSPACE_WRAPPER=$driver CLIPPY_ARGS="-Dwarnings__CLIPPY_HACKERY__" \
    cargo test --workspace --all-targets --features "$FEATURES" --no-run --message-format=json-render-diagnostics >"$messages"
bash tools/make-fixtures.sh --cli "${CARGO_TARGET_DIR:-target}/debug/engine-cli"
python3 tools/run-tests.py "$@" <"$messages"
