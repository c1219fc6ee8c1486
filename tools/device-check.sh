#!/usr/bin/env bash
# The GPU check, prepared on a CPU machine and run on a GPU machine that has the NVIDIA driver
# and nothing else (no Rust, no CUDA toolkit, no network).
#
#   tools/device-check.sh prepare   (here) builds .device/: the device-check program (CUDA and
#                                   the CPU execution harness built in), every kernel compiled
#                                   by NVRTC to CUBINs for sm_90 (the lent H100 / H200; sm_80's
#                                   are made and reported, then left out: an A100 takes the
#                                   PTX) and PTX for compute_80 (each gzipped)
#                                   with ptxas's register and spill report, the tiny models' two
#                                   F32 bases (every other weight type is made there),
#                                   llama.cpp's goldens, and the vocabularies (files without
#                                   tensors) of Whisper tiny.en and the tiny Guardian 3.3; prints
#                                   the bundle's and the tree's size
#   tools/device-check.sh run       (there) runs the check on GPU 0 with the prepared kernels;
#                                   writes everything it prints to device-check.log too, in $OUT
#                                   when that is set (else in .device/)
#   tools/device-check.sh check     (here) the same bundle and the same checks through the CPU
#                                   execution harness: proves the check works end to end
#   run and check take --sections ops,logits,invariance,speed,end-to-end (default: all), to rerun
#   some after a fix; decoding steps are replayed as graphs (kernels/src/steps.rs), and
#   `ENGINE_GRAPHS=0 bash tools/device-check.sh run --sections end-to-end` gives the end-to-end
#   figures with every launch issued on its own, to set beside them
#
# Copy the repository with .device/ in it (git ignores .device/) to the GPU machine, then run
# `bash tools/device-check.sh run` in its root. The last line printed is PASS or FAIL.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=$ROOT/.device
LIMIT_MIB=60

prepare() {
  cd "$ROOT"
  local nvrtc bases guardian bin
  nvrtc=$(bash tools/fetch-nvrtc.sh)
  bases=$(bash tools/make-fixtures.sh --bases)
  guardian=$(bash tools/make-fixtures.sh --guardian)
  echo "building device-check (test profile: optimised, debug assertions on)" >&2
  cargo build --quiet --profile test -p device-check --features cuda,sim
  cargo build --quiet --profile test -p kernels --bin prepare-kernels
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/fixtures/models/golden"
  ENGINE_NVRTC=$nvrtc target/debug/prepare-kernels "$BUNDLE/kernels" >&2
  # the machines lent are Hopper: sm_80's images would only crowd the 60 MiB
  rm -f "$BUNDLE"/kernels/*.sm_80.cubin.gz
  cp target/debug/device-check "$BUNDLE/bin/"
  strip "$BUNDLE/bin/device-check"
  cp "$bases"/tiny-llama-base-f32.gguf "$bases"/tiny-granite-base-f32.gguf "$BUNDLE/fixtures/models/"
  cp tests/fixtures/models/index.json tests/fixtures/models/tolerance.json "$BUNDLE/fixtures/models/"
  # the vocabularies: Whisper tiny.en's and the tiny Guardian 3.3's files without their tensors
  target/debug/device-check --write-vocabulary "$(bash tools/fetch-models.sh whisper-tiny.en-q8_0 | tail -1)" \
    "$BUNDLE/fixtures/whisper-vocabulary.gguf"
  target/debug/device-check --write-vocabulary "$guardian" "$BUNDLE/fixtures/guardian-vocabulary.gguf"
  cp tests/fixtures/models/golden/tiny-* "$BUNDLE/fixtures/models/golden/"
  local bundle tree
  bundle=$(du -sb "$BUNDLE" | cut -f1)
  tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  awk -v b="$bundle" -v t="$tree" -v l="$LIMIT_MIB" \
    'BEGIN { printf "bundle %.1f MiB + tree %.1f MiB = %.1f MiB (limit %d MiB)\n", b / 1048576, t / 1048576, (b + t) / 1048576, l }'
  if [ $((bundle + tree)) -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "device-check: the bundle and the tree are over $LIMIT_MIB MiB" >&2
    exit 1
  fi
}

# the check on BACKEND (then the program's own options, e.g. --sections speed,end-to-end), its
# output on the terminal and in the log
check_on() {
  local backend=$1 log_dir=${OUT:-$BUNDLE}
  shift
  [ -x "$BUNDLE/bin/device-check" ] || { echo "device-check: no bundle: run 'tools/device-check.sh prepare' first" >&2; exit 2; }
  mkdir -p "$log_dir"
  # the device images keep the driver here, where ldconfig may not look
  export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  set -o pipefail
  {
    echo "device-check on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ), backend $backend"
    if [ "$backend" = cuda ] && command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
    fi
    "$BUNDLE/bin/device-check" --backend "$backend" --fixtures "$BUNDLE/fixtures" --modules "$BUNDLE/kernels" \
      --guardian "$BUNDLE/fixtures/guardian-vocabulary.gguf" \
      --whisper-vocabulary "$BUNDLE/fixtures/whisper-vocabulary.gguf" "$@" 2>&1
  } | tee "$log_dir/device-check.log"
}

case ${1:-} in
  prepare) prepare ;;
  run) shift; check_on cuda "$@" ;;
  check)
    shift
    # the tiny models it makes go into the bundle's fixtures: removed after, so that the bundle
    # carried to a GPU machine is what `prepare` sized
    trap 'find "$BUNDLE/fixtures/models" -name "tiny-*.gguf" ! -name "*-base-f32.gguf" -delete 2>/dev/null || true' EXIT
    check_on sim "$@"
    ;;
  *) echo "usage: tools/device-check.sh prepare | run [--sections LIST] | check [--sections LIST]  (LIST: ops,logits,invariance,speed,end-to-end)" >&2; exit 2 ;;
esac
