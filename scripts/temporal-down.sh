#!/usr/bin/env bash
# Stop the Temporal server scripts/temporal-up.sh started (same TEMPORAL_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${TEMPORAL_DIR:-.topology/temporal}
[ -f "$dir/pid" ] || exit 0
pid=$(cat "$dir/pid")
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
fi
rm -f "$dir/pid"
