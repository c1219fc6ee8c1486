#!/usr/bin/env bash
# Fetch NVIDIA's runtime compiler (NVRTC) from PyPI, the wheel nvidia-cuda-nvrtc-cu12 (pinned),
# and unpack its libraries; prints the folder that holds libnvrtc.so.12 and the
# libnvrtc-builtins library it opens beside itself. Idempotent: an unpacked copy is reused; calls
# at the same time (tests run in parallel) take turns on a lock, so only the first unpacks.
# The kernels' compile check (`cargo test -p kernels`) runs it; no GPU is needed.
#
# Cache: ${ENGINE_ASSETS:-$HOME/.cache/engine-assets}/nvrtc/<version>/lib
# Needs: python3 with pip (only `pip download`; nothing is installed).
set -euo pipefail
VERSION=12.9.86
CACHE=${ENGINE_ASSETS:-$HOME/.cache/engine-assets}
DIR=$CACHE/nvrtc/$VERSION
LIB=$DIR/lib
PY=${PYTHON:-python3}

mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [ ! -f "$LIB/libnvrtc.so.12" ] || [ ! -f "$LIB/.complete" ]; then
  mkdir -p "$DIR/dl"
  "$PY" -m pip download --quiet --no-deps --only-binary :all: -d "$DIR/dl" "nvidia-cuda-nvrtc-cu12==$VERSION" >&2
  wheel=$(ls "$DIR"/dl/nvidia_cuda_nvrtc_cu12-"$VERSION"-*.whl | head -n 1)
  rm -rf "$LIB" "$DIR/unpack"
  "$PY" - "$wheel" "$DIR/unpack" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
  mkdir -p "$LIB"
  # the libraries NVRTC needs (the .alt variants are not used)
  cp "$DIR"/unpack/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 "$DIR"/unpack/nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.* "$LIB"/
  rm -rf "$DIR/unpack" "$DIR/dl"
  touch "$LIB/.complete"
fi
echo "$LIB"
