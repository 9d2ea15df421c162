#!/usr/bin/env bash
# Idempotently installs what the test suite needs beyond Go and PostgreSQL:
# a static busybox, from which Docker tests build their own image (no
# registry is needed). Skips quietly where apt-get is unavailable; the
# Docker tests then fail with a message naming the missing package.
set -euo pipefail
if [ -x /bin/busybox ] || command -v busybox >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: apt-get not found; install busybox-static yourself for the Docker tests" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
echo "test-deps: installing busybox-static" >&2
$SUDO apt-get update -qq || true
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq busybox-static >/dev/null
