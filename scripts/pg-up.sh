#!/usr/bin/env bash
# Idempotently install and start a local PostgreSQL for development and tests.
# Safe to run repeatedly: it installs only when missing and starts only when stopped.
set -euo pipefail

need_sudo() { if [ "$(id -u)" -ne 0 ]; then echo sudo; fi; }
SUDO=$(need_sudo)

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  echo "pg-up: installing postgresql" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi

VER=$(ls /usr/lib/postgresql | sort -V | tail -1)
CLUSTER=main
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^${VER} ${CLUSTER}$"; then
  $SUDO pg_createcluster "$VER" "$CLUSTER" >/dev/null
fi

CONF=/etc/postgresql/$VER/$CLUSTER
# Local development trusts loopback connections so the default URL
# postgres://postgres@127.0.0.1:5432/bae works without a password.
if ! grep -q "bae-go trust" "$CONF/pg_hba.conf"; then
  $SUDO sed -i '1i host all all 127.0.0.1/32 trust # bae-go trust\nhost all all ::1/128 trust # bae-go trust\nlocal all all trust # bae-go trust' "$CONF/pg_hba.conf"
  if pg_lsclusters -h | awk -v v="$VER" -v c="$CLUSTER" '$1==v && $2==c {print $4}' | grep -q online; then
    $SUDO pg_ctlcluster "$VER" "$CLUSTER" reload
  fi
fi
if ! grep -q "^max_connections = 300" "$CONF/postgresql.conf"; then
  echo "max_connections = 300" | $SUDO tee -a "$CONF/postgresql.conf" >/dev/null
  if pg_lsclusters -h | awk -v v="$VER" -v c="$CLUSTER" '$1==v && $2==c {print $4}' | grep -q online; then
    $SUDO pg_ctlcluster "$VER" "$CLUSTER" restart
  fi
fi

if ! pg_lsclusters -h | awk -v v="$VER" -v c="$CLUSTER" '$1==v && $2==c {print $4}' | grep -q online; then
  $SUDO pg_ctlcluster "$VER" "$CLUSTER" start
fi

for _ in $(seq 1 50); do
  if pg_isready -q -h 127.0.0.1 -p 5432; then echo "pg-up: postgresql $VER ready on 127.0.0.1:5432" >&2; exit 0; fi
  sleep 0.2
done
echo "pg-up: postgresql did not become ready" >&2
exit 1
