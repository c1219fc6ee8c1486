#!/usr/bin/env bash
# Installs the Python packages the test suite uses, pinned, from PyPI into a
# cached folder, once, and prints that folder: put it on PYTHONPATH. Needs python3 with pip; no
# venv required. openai + prometheus_client: cli/tests/python/openai_sdk.py;
# openapi-spec-validator + schemathesis: cli/tests/python/openapi_conformance.py;
# anthropic: cli/tests/python/anthropic_sdk.py; kubernetes-validate: cli/tests/operations/replicas.rs;
# jsonschema: tests/python/json_schema_check.py.
set -euo pipefail
PACKAGES=("openai==3.54.0" "prometheus_client==0.26.0" "openapi-spec-validator==0.9.0" "schemathesis==4.32.5" "anthropic==2.14.0" "kubernetes-validate==1.31.0" "jsonschema==4.26.0" "selenium==4.50.0")
KEY=$(printf '%s\n' "${PACKAGES[@]}" | sha256sum | cut -c1-12)
DIR="${ENGINE_ASSETS:-$HOME/.cache/engine-assets}/python/test-deps-$KEY"
PY="${PYTHON:-python3}"
# one install at a time: tests running in parallel call this at once on a fresh machine
mkdir -p "$(dirname "$DIR")"
exec 9>"$(dirname "$DIR")/.install.lock"
flock 9
if [ ! -f "$DIR/.complete" ]; then
  rm -rf "$DIR"
  mkdir -p "$DIR"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --target "$DIR" "${PACKAGES[@]}" >&2
  touch "$DIR/.complete"
fi
echo "$DIR"
