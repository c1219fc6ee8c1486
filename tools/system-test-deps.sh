#!/usr/bin/env bash
# Installs the Debian packages the test suite drives the server with, once: nginx (the
# load-balancer test, cli/tests/operations/replicas.rs). Prints the nginx binary's path. Needs root or
# sudo to install; nothing is done when nginx is already there. The package's own service is
# stopped: the test runs nginx itself, on a port of its own.
set -euo pipefail
find_nginx() { command -v nginx 2>/dev/null || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true; }
NGINX=$(find_nginx)
if [ -z "$NGINX" ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends nginx-light >&2
  ($SUDO service nginx stop || $SUDO pkill -x nginx || true) >/dev/null 2>&1
  NGINX=$(find_nginx)
fi
[ -n "$NGINX" ] || { echo "nginx could not be installed" >&2; exit 1; }
echo "$NGINX"
