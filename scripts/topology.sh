#!/usr/bin/env bash
# `make topology`: bae-go laid out as in production, on this machine.
#   PostgreSQL (scripts/pg-up.sh), a real Temporal server on it with stock
#   dynamic config (scripts/temporal-up.sh), and two `baesrv serve` replicas
#   on one database and one task queue, and the Temporal Web UI
#   (scripts/temporalui, TOPOLOGY_UI_ADDR). Without BAE_CONFIG the replicas
#   use examples/bae-config/dev.toml and the local fake provider it names.
# Runs in the foreground; Ctrl-C stops everything it started, as does
# `scripts/topology.sh down` (make topology-down) from another shell.
# State (pids, logs, the shared admin key) lives in .topology/.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
STATE=.topology
export TEMPORAL_DIR=$STATE/temporal
export TEMPORAL_PORT=${TEMPORAL_PORT:-7433}
DB=${TOPOLOGY_DB:-bae_topology}
PG=${TOPOLOGY_PG:-postgres://postgres@127.0.0.1:5432}
PORTS=(${TOPOLOGY_PORTS:-8180 8181}) # client API ports of replicas a and b; admin is +10
UI_ADDR=${TOPOLOGY_UI_ADDR:-127.0.0.1:8280}

down() {
  for f in "$STATE"/*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$f"
  done
  ./scripts/temporal-down.sh
}
if [ "${1:-}" = down ]; then
  down
  echo "topology: stopped" >&2
  exit 0
fi

mkdir -p "$STATE/data"
trap 'down; echo "topology: stopped" >&2' EXIT
trap 'exit 130' INT TERM

./scripts/pg-up.sh
./scripts/temporal-up.sh
go build -o bin/temporalui ./scripts/temporalui
bin/temporalui -temporal "127.0.0.1:$TEMPORAL_PORT" -listen "$UI_ADDR" >"$STATE/temporalui.log" 2>&1 &
echo $! >"$STATE/temporalui.pid"

if ! psql "$PG/postgres" -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
  psql "$PG/postgres" -qc "CREATE DATABASE $DB"
fi

if [ -z "${BAE_CONFIG:-}" ]; then
  export BAE_CONFIG=examples/bae-config/dev.toml
  if ! (exec 3<>/dev/tcp/127.0.0.1/9999) 2>/dev/null; then
    bin/fakeprovider -addr 127.0.0.1:9999 >"$STATE/fakeprovider.log" 2>&1 &
    echo $! >"$STATE/fakeprovider.pid"
  fi
fi

export BAE_DATABASE_URL="$PG/$DB?sslmode=disable"
export BAE_TEMPORAL_ADDR=127.0.0.1:$TEMPORAL_PORT
export BAE_DATA_DIR=$STATE/data # shared: both replicas read the one admin key
names=(a b)
for i in 0 1; do
  n=${names[$i]}
  BAE_ADDR=127.0.0.1:${PORTS[$i]} BAE_ADMIN_ADDR=127.0.0.1:$((PORTS[$i] + 10)) \
    bin/baesrv serve >"$STATE/baesrv-$n.log" 2>&1 &
  echo $! >"$STATE/baesrv-$n.pid"
  # One at a time: the first replica migrates the database and writes the
  # admin key the second one reads.
  for _ in $(seq 1 300); do
    curl -fsS "http://127.0.0.1:${PORTS[$i]}/readyz" >/dev/null 2>&1 && break
    kill -0 "$(cat "$STATE/baesrv-$n.pid")" 2>/dev/null || { echo "topology: baesrv $n exited:" >&2; tail -n 30 "$STATE/baesrv-$n.log" >&2; exit 1; }
    sleep 0.2
  done
done

cat >&2 <<INFO
topology: up
  PostgreSQL        127.0.0.1:5432 (bae database $DB; Temporal's: temporal_topo, temporal_topo_visibility)
  Temporal          $BAE_TEMPORAL_ADDR, namespace default, stock dynamic config (log $TEMPORAL_DIR/server.log)
  Temporal UI       http://$UI_ADDR
  baesrv a          client http://127.0.0.1:${PORTS[0]}  admin http://127.0.0.1:$((PORTS[0] + 10))  (log $STATE/baesrv-a.log)
  baesrv b          client http://127.0.0.1:${PORTS[1]}  admin http://127.0.0.1:$((PORTS[1] + 10))  (log $STATE/baesrv-b.log)
  admin key         $BAE_DATA_DIR/admin-key.pem (BAE_ADMIN_KEY_FILE for baectl)
  config            $BAE_CONFIG
Ctrl-C (or make topology-down) stops everything.
INFO
wait -n
echo "topology: a process exited; stopping the rest" >&2
