#!/usr/bin/env bash
# rustc with libFuzzer's coverage instrumentation (cargo-fuzz's flags, without AddressSanitizer)
# for this repository's crates only: CI's fuzz build (run.sh --ci) passes it as RUSTC_WRAPPER.
# The dependencies are compiled as the main workspace's test build compiles them, so that build's
# artifacts serve again; the repository's crates have other features or profile settings there,
# so cargo compiles them again, here, instrumented.
rustc=$1
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
case "${CARGO_MANIFEST_DIR:-}" in
    "$repo" | "$repo"/*)
        case " $* " in
            *" --crate-name build_script_"*) ;;
            *) exec "$rustc" "$@" --cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
                   -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
                   -Cllvm-args=-sanitizer-coverage-trace-compares ;;
        esac ;;
esac
exec "$rustc" "$@"
