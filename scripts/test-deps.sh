#!/usr/bin/env bash
# Idempotently installs what the test suite needs beyond Go and PostgreSQL:
# a static busybox, from which Docker tests build their own image (no
# registry is needed), and chromium for the console's browser tests. Skips
# quietly where apt-get is unavailable; those tests then fail with a message
# naming the missing package.
set -euo pipefail
need=()
if ! [ -x /bin/busybox ] && ! command -v busybox >/dev/null 2>&1; then need+=(busybox-static); fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then need+=(chromium); fi
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: apt-get not found; install ${need[*]} yourself" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
echo "test-deps: installing ${need[*]}" >&2
$SUDO apt-get update -qq || true
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
