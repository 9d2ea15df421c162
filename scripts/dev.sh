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
# The operator console is on by default in dev, on loopback.
export BAE_CONSOLE_ADDR="${BAE_CONSOLE_ADDR:-127.0.0.1:8082}"
export BAE_CONSOLE_TEMPORAL_UI_URL="${BAE_CONSOLE_TEMPORAL_UI_URL:-http://127.0.0.1:${BAE_TEMPORAL_UI_PORT:-8233}}"
echo "dev: starting bin/baesrv dev with config $BAE_CONFIG; it lists where everything is once it serves" >&2
echo "dev: console http://$BAE_CONSOLE_ADDR (password: cat ${BAE_CONSOLE_PASSWORD_FILE:-${BAE_DATA_DIR:-./bae-data}/console-password.pem})" >&2
bin/baesrv dev "$@"
