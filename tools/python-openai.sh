#!/usr/bin/env bash
# Installs the official `openai` Python package and `prometheus_client` (pinned) from PyPI into a cached folder, once,
# and prints that folder: put it on PYTHONPATH. Needs python3 with pip; no venv required.
set -euo pipefail
VERSION=3.54.0
PROMETHEUS=0.26.0
DIR="${ENGINE_ASSETS:-$HOME/.cache/engine-assets}/python/openai-$VERSION-prometheus-$PROMETHEUS"
PY="${PYTHON:-python3}"
if [ ! -f "$DIR/.complete" ]; then
  rm -rf "$DIR"
  mkdir -p "$DIR"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --target "$DIR" "openai==$VERSION" "prometheus_client==$PROMETHEUS" >&2
  touch "$DIR/.complete"
fi
echo "$DIR"
