#!/usr/bin/env bash
# The lint and the test suite, as README's test command and CI run them:
# 1. one build of every target of the workspace with every feature the code has (the CUDA
#    kernels' CPU execution harness and the CUDA backend, which needs no GPU to build or to
#    refuse a missing one), the workspace's crates compiled by clippy-driver with warnings as
#    errors (through tools/test-rustc.sh): the lint and the test binaries in one pass (a separate
#    `cargo clippy` would check every crate a second time);
# 2. the large fixtures that are not committed, made with that build's engine-cli as soon as
#    cargo has built it, beside the rest of the build;
# 3. every test binary as cargo finishes it, once the fixtures are there: one at a time beside
#    the build, as many at once as the machine has cores after it (tools/run-tests.py: each
#    bench once in test mode; when the build and the fixtures finished, the time of each binary
#    and the 10 slowest tests printed at the end).
# The build runs at a lower priority than the fixtures and the tests: on a machine of few cores
# it takes what they leave idle, instead of its last crates leaving a core idle while the tests
# wait for them.
#
#   tools/test.sh [ARG...]      ARG...: passed to every libtest binary (a filter, --ignored, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
FEATURES=engine/sim,cli/cuda,benches/cuda,engine-tests/cuda,engine-tests/sim,device-check/cuda,device-check/sim
driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)
[ -x "$driver" ] || { echo "tools/test.sh: no clippy-driver (rustup component add clippy)" >&2; exit 1; }
# clippy-driver takes its own arguments from CLIPPY_ARGS, separated as cargo-clippy separates them;
# tools/test-rustc.sh calls it (the engine's unit tests optimised less: see there)
CLIPPY_DRIVER=$driver RUSTC_WORKSPACE_WRAPPER=$PWD/tools/test-rustc.sh CLIPPY_ARGS="-Dwarnings__CLIPPY_HACKERY__" \
    nice -n 10 cargo test --workspace --all-targets --features "$FEATURES" --no-run --message-format=json-render-diagnostics \
    | python3 tools/run-tests.py --fixtures "bash tools/make-fixtures.sh --cli" "$@"
