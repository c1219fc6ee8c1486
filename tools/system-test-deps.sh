#!/usr/bin/env bash
# Installs the Debian packages the test suite needs, once: nginx (the load-balancer test,
# cli/tests/operations/replicas.rs), espeak-ng (speech synthesized at test time for the
# transcription tests) and chromium with its driver (the playground page's browser test,
# cli/tests/python/webui.py). Prints the path of the binary named by the argument (`nginx`, the
# default, `espeak-ng` or `chromedriver`). Needs root or sudo to install; nothing is done when both are there.
# nginx's own service is stopped: the test runs nginx itself, on a port of its own.
set -euo pipefail
find_nginx() { command -v nginx 2>/dev/null || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true; }
find_espeak() { command -v espeak-ng 2>/dev/null || true; }
find_chromedriver() { { command -v chromedriver && command -v chromium >/dev/null; } 2>/dev/null || true; }
# one install at a time: tests running in parallel call this at once on a fresh machine
LOCK_DIR=${ENGINE_ASSETS:-$HOME/.cache/engine-assets}
mkdir -p "$LOCK_DIR"
exec 9>"$LOCK_DIR/.system-test-deps.lock"
flock 9
missing=()
[ -n "$(find_nginx)" ] || missing+=(nginx-light)
[ -n "$(find_espeak)" ] || missing+=(espeak-ng)
[ -n "$(find_chromedriver)" ] || missing+=(chromium chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  ($SUDO service nginx stop || $SUDO pkill -x nginx || true) >/dev/null 2>&1
fi
case "${1:-nginx}" in
  nginx) path=$(find_nginx) ;;
  espeak-ng) path=$(find_espeak) ;;
  chromedriver) path=$(find_chromedriver) ;;
  *) echo "system-test-deps.sh: no tool $1 (nginx, espeak-ng, chromedriver)" >&2; exit 2 ;;
esac
[ -n "$path" ] || { echo "${1:-nginx} could not be installed" >&2; exit 1; }
echo "$path"
