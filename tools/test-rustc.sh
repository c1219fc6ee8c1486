#!/usr/bin/env bash
# The compiler of the workspace's crates in tools/test.sh's build: clippy-driver (the lint, in
# the same pass as the build), called as cargo calls a RUSTC_WORKSPACE_WRAPPER (`test-rustc.sh
# RUSTC ARGS...`), with one change: the engine's unit-test binary is optimised at opt-level 1.
# Cargo's profiles cannot tell a library's unit tests from the library, and the engine is
# compiled at opt-level 3 (Cargo.toml) for the model runs of the integration tests; its unit tests
# run small cases, and compiling them a second time at opt-level 3 took 175 CPU-s against 113 at
# opt-level 1, which runs them in 33 CPU-s instead of 24.
#
#   CLIPPY_DRIVER=PATH   the clippy-driver to call (tools/test.sh sets it)
set -euo pipefail
driver=${CLIPPY_DRIVER:?tools/test-rustc.sh: CLIPPY_DRIVER is not set}
case " $* " in
    *" --crate-name engine "*" --test "* | *" --test "*" --crate-name engine "*) exec "$driver" "$@" -Copt-level=1 ;;
esac
exec "$driver" "$@"
