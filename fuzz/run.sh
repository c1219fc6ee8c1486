#!/usr/bin/env bash
# Runs the fuzz targets (cargo-fuzz, libFuzzer, AddressSanitizer, debug assertions) and prints
# one line per target: executions, executions per second, coverage (edges and features), corpus
# size, findings. Stable Rust serves: RUSTC_BOOTSTRAP=1 lets it take cargo-fuzz's
# -Zsanitizer=address.
#
#   fuzz/run.sh [--seconds S] [--runs N] [--jobs J] [TARGET...]
#       each target for S seconds (default 60) or N executions, whichever ends first, J targets at
#       a time (default 1); the corpus grows in fuzz/corpus/TARGET (seeded by fuzz/seeds.py),
#       findings land in fuzz/artifacts/TARGET
#   fuzz/run.sh --ci
#       what CI runs: the targets built without AddressSanitizer, beside the test build (below),
#       every saved finding in fuzz/regressions/ replayed, then each target 5 s on its seeds alone
#       (a fresh corpus in a temporary folder), two at a time
#   fuzz/run.sh [--ci] --build-only
#       the build alone
#
# Exits 1 when a target crashed, hung, ran out of memory or a regression input fails again.
set -euo pipefail
cd "$(dirname "$0")"

TARGETS_ALL=(gguf tokenizer_spm tokenizer_bpe tokenizer_wpm chat_template json_schema http_requests multipart audio image)
CARGO_FUZZ_VERSION=0.13.2
seconds=60 runs=0 jobs=1 ci=0 build_only=0 targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --ci) ci=1; seconds=5; jobs=2; shift ;;
        --build-only) build_only=1; shift ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        -*) echo "fuzz/run.sh: unknown option $1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${TARGETS_ALL[@]}")
for t in "${targets[@]}"; do
    [[ " ${TARGETS_ALL[*]} " == *" $t "* ]] || { echo "fuzz/run.sh: no target $t (targets: ${TARGETS_ALL[*]})" >&2; exit 2; }
done

# The work, in a function: bash reads it whole before running it, so editing this file while a
# long run goes on cannot break that run.
main() {
    if [ $ci = 1 ]; then
        # CI: the same libFuzzer binaries with cargo-fuzz's coverage instrumentation, without
        # AddressSanitizer (its build, and installing cargo-fuzz, cost CI minutes and gigabytes it
        # does not have), debug assertions and overflow checks on. Built in the main workspace's
        # target folder with its test profile and features (Cargo.toml), after its test build:
        # only this repository's crates are compiled again, instrumented (sancov-rustc.sh).
        export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/../target}
        RUSTC_WRAPPER=$PWD/sancov-rustc.sh cargo build --profile test --bins >build.log 2>&1 || { cat build.log >&2; exit 1; }
        bin=$CARGO_TARGET_DIR/debug
    else
        if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "$CARGO_FUZZ_VERSION" ]; then
            cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
        fi
        export RUSTC_BOOTSTRAP=1
        # -O: optimised; -a: debug assertions and overflow checks on, so an arithmetic overflow
        # is a finding. Every target at once (one `cargo build --bins`).
        cargo fuzz build -O -a >build.log 2>&1 || { cat build.log >&2; exit 1; }
        bin=target/x86_64-unknown-linux-gnu/release
    fi
    [ $build_only = 0 ] || exit 0

    dict_of() {
        case "$1" in
            gguf) echo dicts/gguf.dict ;;
            multipart) echo dicts/multipart.dict ;;
            audio) echo dicts/audio.dict ;;
            chat_template|json_schema|http_requests) echo dicts/json.dict ;;
            *) echo "" ;;
        esac
    }

    failed=0
    stamp=$(mktemp)
    if [ -d regressions ]; then
        for t in "${targets[@]}"; do
            [ -d "regressions/$t" ] || continue
            inputs=(regressions/"$t"/*)
            [ -e "${inputs[0]}" ] || continue
            if "$bin/$t" "${inputs[@]}" >"regressions-$t.log" 2>&1; then
                echo "$t: ${#inputs[@]} saved findings replayed, none fails"
            else
                echo "$t: a saved finding fails again:" >&2; tail -30 "regressions-$t.log" >&2; failed=1
            fi
            rm -f "regressions-$t.log"
        done
    fi

    if [ $ci = 1 ]; then
        corpus_root=$(mktemp -d)
        trap 'rm -rf "$corpus_root" "$stamp"' EXIT
    else
        corpus_root=corpus
        trap 'rm -f "$stamp"' EXIT
    fi
    python3 seeds.py "$corpus_root"
    mkdir -p logs

    run_one() {
        local t=$1 dict opts
        dict=$(dict_of "$t")
        mkdir -p "artifacts/$t" "$corpus_root/$t"
        opts=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1
              -artifact_prefix="artifacts/$t/" -close_fd_mask=1)
        [ "$runs" -gt 0 ] && opts+=(-runs="$runs")
        [ -n "$dict" ] && opts+=(-dict="$dict")
        ASAN_OPTIONS=detect_odr_violation=0:detect_leaks=0 "$bin/$t" "${opts[@]}" "$corpus_root/$t" >"logs/$t.log" 2>&1
    }

    summary() {
        local t=$1 status=$2 log="logs/$1.log"
        local execs rate cov ft corp findings
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
        cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
        ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | awk '{print $2}')
        corp=$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -1 | awk '{print $2}')
        findings=$(find "artifacts/$t" -type f -newer "$stamp" | wc -l)
        printf '%-14s %12s execs %8s/s   cov %6s  ft %7s  corpus %-12s findings %s%s\n' \
            "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$findings" \
            "$([ "$status" = 0 ] || echo "   FAILED (see fuzz/logs/$t.log)")"
    }

    pids=() names=()
    wait_one() {
        local status=0
        wait "${pids[0]}" || status=$?
        summary "${names[0]}" $status
        [ $status = 0 ] || { failed=1; grep -E '^(==[0-9]+==ERROR|thread .* panicked|SUMMARY|ERROR: libFuzzer)' "logs/${names[0]}.log" | head -5 >&2; }
        pids=("${pids[@]:1}") names=("${names[@]:1}")
    }
    for t in "${targets[@]}"; do
        run_one "$t" & pids+=($!) names+=("$t")
        [ ${#pids[@]} -lt "$jobs" ] || wait_one
    done
    while [ ${#pids[@]} -gt 0 ]; do wait_one; done
    exit $failed
}

main
