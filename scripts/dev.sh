#!/usr/bin/env bash
# `make dev`: the whole system in one process (baesrv + embedded Temporal and
# its Web UI) on the local PostgreSQL. Without BAE_CONFIG it uses
# examples/bae-config/dev.toml and starts the local fake provider it names.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BAE_CONFIG:-}" ]; then
  export BAE_CONFIG=examples/bae-config/dev.toml
  if ! (exec 3<>/dev/tcp/127.0.0.1/9999) 2>/dev/null; then
    bin/fakeprovider -addr 127.0.0.1:9999 &
    FAKE_PID=$!
    trap 'kill $FAKE_PID 2>/dev/null || true' EXIT
  fi
fi
echo "dev: starting bin/baesrv dev with config $BAE_CONFIG; it lists where everything is once it serves" >&2
bin/baesrv dev "$@"
