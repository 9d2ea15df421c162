#!/usr/bin/env bash
# Start a real Temporal server (frontend, history, matching and worker in one
# process) on PostgreSQL, built from the go.temporal.io/server module this
# project already depends on: its own temporal-server entry point and its SQL
# schema tool (see the tool lines in go.mod). No image is pulled.
#
# Everything comes from the environment, with defaults for the local
# topology (make topology):
#   TEMPORAL_DIR         state dir: pid file and logs (default .topology/temporal)
#   TEMPORAL_PG_ADDR     PostgreSQL host:port (127.0.0.1:5432), user TEMPORAL_PG_USER (postgres),
#                        password TEMPORAL_PG_PASSWORD (empty)
#   TEMPORAL_DB, TEMPORAL_VISIBILITY_DB   its two databases (temporal_topo, temporal_topo_visibility)
#   TEMPORAL_PORT        frontend gRPC port (7433); the other services use
#                        TEMPORAL_PORT+1..+3, membership +10..+13, HTTP +20 unless set
#   TEMPORAL_NAMESPACE   namespace registered once it is up (default)
#   TEMPORAL_DYNAMIC_CONFIG  a dynamic config file; unset = Temporal's stock limits
# Creates the databases and schemas when missing, upgrades them otherwise.
# Prints the frontend address when the namespace answers. Stop it with
# scripts/temporal-down.sh (same TEMPORAL_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
GO=${GO:-go}
BIN=${BIN:-bin}

export TEMPORAL_DIR=${TEMPORAL_DIR:-.topology/temporal}
export TEMPORAL_PG_ADDR=${TEMPORAL_PG_ADDR:-127.0.0.1:5432}
export TEMPORAL_PG_USER=${TEMPORAL_PG_USER:-postgres}
export TEMPORAL_PG_PASSWORD=${TEMPORAL_PG_PASSWORD:-}
export TEMPORAL_DB=${TEMPORAL_DB:-temporal_topo}
export TEMPORAL_VISIBILITY_DB=${TEMPORAL_VISIBILITY_DB:-temporal_topo_visibility}
export TEMPORAL_PORT=${TEMPORAL_PORT:-7433}
p=$TEMPORAL_PORT
export TEMPORAL_HISTORY_PORT=${TEMPORAL_HISTORY_PORT:-$((p + 1))}
export TEMPORAL_MATCHING_PORT=${TEMPORAL_MATCHING_PORT:-$((p + 2))}
export TEMPORAL_WORKER_PORT=${TEMPORAL_WORKER_PORT:-$((p + 3))}
export TEMPORAL_FRONTEND_MEMBERSHIP_PORT=${TEMPORAL_FRONTEND_MEMBERSHIP_PORT:-$((p + 10))}
export TEMPORAL_HISTORY_MEMBERSHIP_PORT=${TEMPORAL_HISTORY_MEMBERSHIP_PORT:-$((p + 11))}
export TEMPORAL_MATCHING_MEMBERSHIP_PORT=${TEMPORAL_MATCHING_MEMBERSHIP_PORT:-$((p + 12))}
export TEMPORAL_WORKER_MEMBERSHIP_PORT=${TEMPORAL_WORKER_MEMBERSHIP_PORT:-$((p + 13))}
export TEMPORAL_HTTP_PORT=${TEMPORAL_HTTP_PORT:-$((p + 20))}
NAMESPACE=${TEMPORAL_NAMESPACE:-default}

mkdir -p "$TEMPORAL_DIR" "$BIN"
if [ -f "$TEMPORAL_DIR/pid" ] && kill -0 "$(cat "$TEMPORAL_DIR/pid")" 2>/dev/null; then
  echo "temporal-up: already running (pid $(cat "$TEMPORAL_DIR/pid")) on 127.0.0.1:$TEMPORAL_PORT" >&2
  exit 0
fi

# The binaries come from the module versions go.mod pins; go build is a
# no-op when they are current.
$GO build -o "$BIN/temporal-server" go.temporal.io/server/cmd/server
$GO build -o "$BIN/temporal-sql-tool" go.temporal.io/server/cmd/tools/sql
$GO build -o "$BIN/temporalns" ./scripts/temporalns

host=${TEMPORAL_PG_ADDR%:*}
port=${TEMPORAL_PG_ADDR##*:}
sqltool() {
  SQL_PASSWORD=$TEMPORAL_PG_PASSWORD "$BIN/temporal-sql-tool" --quiet --plugin postgres12 \
    --ep "$host" -p "$port" -u "$TEMPORAL_PG_USER" "$@" >>"$TEMPORAL_DIR/schema.log" 2>&1 ||
    { echo "temporal-up: temporal-sql-tool $* failed; see $TEMPORAL_DIR/schema.log" >&2; return 1; }
}
schema() { # db schema-name
  if ! PGPASSWORD=$TEMPORAL_PG_PASSWORD psql -h "$host" -p "$port" -U "$TEMPORAL_PG_USER" -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$1'" | grep -q 1; then
    sqltool --db "$1" create-database
    sqltool --db "$1" setup-schema -v 0.0
  fi
  sqltool --db "$1" update-schema --schema-name "$2"
}
schema "$TEMPORAL_DB" postgresql/v12/temporal
schema "$TEMPORAL_VISIBILITY_DB" postgresql/v12/visibility

"$BIN/temporal-server" --allow-no-auth --config-file scripts/temporal/config.yaml start \
  >"$TEMPORAL_DIR/server.log" 2>&1 &
pid=$!
echo $pid >"$TEMPORAL_DIR/pid"
# Register the namespace once the frontend answers; give up when the server exits.
for _ in $(seq 1 60); do
  if "$BIN/temporalns" -wait 5s -address "127.0.0.1:$TEMPORAL_PORT" -namespace "$NAMESPACE" 2>/dev/null; then
    break
  fi
  if ! kill -0 $pid 2>/dev/null; then
    echo "temporal-up: temporal-server exited; its log:" >&2
    tail -n 40 "$TEMPORAL_DIR/server.log" >&2
    rm -f "$TEMPORAL_DIR/pid"
    exit 1
  fi
done
"$BIN/temporalns" -wait 5s -address "127.0.0.1:$TEMPORAL_PORT" -namespace "$NAMESPACE"
echo "temporal-up: Temporal on 127.0.0.1:$TEMPORAL_PORT (namespace $NAMESPACE, databases $TEMPORAL_DB and $TEMPORAL_VISIBILITY_DB, log $TEMPORAL_DIR/server.log)" >&2
