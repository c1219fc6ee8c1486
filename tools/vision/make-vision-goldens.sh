#!/usr/bin/env bash
# Writes tests/fixtures/vision/: the tiny random-weight language model and projectors
# (make-tiny-vision.py), the test images, and llama.cpp's outputs for them (mtmd-golden.cpp,
# built against the reference llama.cpp of ../shared/tools/build-llama-cpp.sh plus its `mtmd`
# library). Not run by CI: the outputs are committed.
#
#   tools/vision/make-vision-goldens.sh [OUTDIR]     (default tests/fixtures/vision)
# Needs: cmake, g++, python3 with gguf==0.19.0 numpy pillow.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${1:-$REPO/tests/fixtures/vision}
BIN=$("$REPO/../shared/tools/build-llama-cpp.sh")
ROOT=$(cd "$BIN/.." && pwd)
cmake --build "$ROOT/build" -j"${JOBS:-2}" --target mtmd >&2
libs=("$ROOT/build/tools/mtmd/libmtmd.a" "$ROOT/build/src/libllama.a" "$ROOT/build/ggml/src/libggml.a"
      "$ROOT/build/ggml/src/libggml-cpu.a" "$ROOT/build/ggml/src/libggml-base.a")
mapfile -t vendor < <(find "$ROOT/build/vendor" -name '*.a')
g++ -O2 -std=c++17 "$HERE/mtmd-golden.cpp" -I"$ROOT/src/include" -I"$ROOT/src/ggml/include" -I"$ROOT/src/tools/mtmd" \
  -Wl,--start-group "${libs[@]}" "${vendor[@]}" -Wl,--end-group -fopenmp -lpthread -ldl -o "$ROOT/bin/mtmd-golden" >&2

python3 "$HERE/make-tiny-vision.py" "$OUT" >&2
PROMPT='User: Look at this: <__media__> What is it?<end_of_utterance>
Assistant:'
cd "$OUT"
for projector in idefics3 gemma3; do
  for image in grid-64 tile-32; do
    "$ROOT/bin/mtmd-golden" -m tiny-vlm.gguf --mmproj "tiny-$projector-mmproj.gguf" --image "$image.png" \
      -p "$PROMPT" -t 2 -o "$projector-$image" 2> >(grep mtmd-golden >&2)
  done
done
printf '%s' "$PROMPT" > prompt.txt
ls -l "$OUT" >&2
