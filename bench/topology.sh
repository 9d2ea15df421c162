#!/usr/bin/env bash
# bench/turns on the production topology: a real Temporal server on
# PostgreSQL (scripts/temporal-up.sh, stock dynamic config) started for this
# run on its own port and fresh databases, then `go run ./bench/turns` against
# it with the arguments given (add -replicas N for baesrv as N `baesrv serve`
# processes; without it baesrv runs in the bench process). The server is
# stopped at the end and its databases are left for inspection until the
# next run. See bench/README.md ("On the production topology").
#
#   bench/topology.sh -floor -sessions 50 -rate 40          # latency at 40 turns/s
#   bench/topology.sh -replicas 2 -floor -sessions 50       # capacity, two replicas
#   bench/topology.sh -replicas 1 -sessions 10 -rate 20 -turns 60 -idle 100000 -idle-concurrency 64
#
# Environment: BENCH_TEMPORAL_PORT (7633; membership ports must stay below
# 32768), BENCH_TEMPORAL_DB (temporal_bench; the visibility database gets
# _visibility), TEMPORAL_DYNAMIC_CONFIG (unset = Temporal's stock limits).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
GO=${GO:-go}

export TEMPORAL_DIR=.bench-topology/temporal
export TEMPORAL_PORT=${BENCH_TEMPORAL_PORT:-7633}
export TEMPORAL_DB=${BENCH_TEMPORAL_DB:-temporal_bench}
export TEMPORAL_VISIBILITY_DB=${TEMPORAL_DB}_visibility
PG=${TEMPORAL_PG_ADDR:-127.0.0.1:5432}

./scripts/pg-up.sh >/dev/null
# A fresh server and empty databases, so database growth and workflow
# counts are this run's alone.
./scripts/temporal-down.sh
for db in "$TEMPORAL_DB" "$TEMPORAL_VISIBILITY_DB"; do
  psql -h "${PG%:*}" -p "${PG##*:}" -U "${TEMPORAL_PG_USER:-postgres}" -d postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)"
done
trap './scripts/temporal-down.sh' EXIT
./scripts/temporal-up.sh
if [[ " $* " == *" -replicas "* ]]; then
  $GO build -o bin/baesrv ./cmd/baesrv
fi
$GO run ./bench/turns -temporal "127.0.0.1:$TEMPORAL_PORT" -temporal-pid "$(cat "$TEMPORAL_DIR/pid")" \
  -temporal-dbs "$TEMPORAL_DB,$TEMPORAL_VISIBILITY_DB" "$@"
