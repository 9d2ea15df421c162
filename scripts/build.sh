#!/usr/bin/env bash
# `make build`: every command and example into bin/, with progress. A cold
# build compiles ~1,500 packages (the embedded Temporal server and UI of
# `baesrv dev` are most of them), which takes minutes; go build -v names each
# package as it compiles, and this script counts them against the number
# that are out of date so the wait is visible and has an end.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=${BIN:-bin}
TAGS=${TAGS:-dev}
PKGS=(./cmd/... ./examples/...)
REV=$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
LDFLAGS="-X github.com/bae-go/bae-go/internal/lib/version.Revision=$REV"

echo "build: checking what is out of date (the first run also downloads modules)…" >&2
stale=$("$GO" list -tags "$TAGS" -deps -f '{{if .Stale}}{{.ImportPath}}{{end}}' "${PKGS[@]}" | grep -c . || true)
if [ "$stale" -gt 100 ]; then
  cpus=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
  # ~1.2 CPU-seconds a package: 1,561 packages took 15 minutes on a busy
  # 2-core machine.
  mins=$(( (stale * 12 / 10 / cpus + 59) / 60 ))
  echo "build: compiling $stale packages; a first build takes about $mins minutes on $cpus CPUs (later builds take seconds)" >&2
fi

tty=false
[ -t 2 ] && tty=true
progress() {
  local n=0 line
  while IFS= read -r line; do
    if [[ $line =~ ^[A-Za-z0-9._~/-]+$ ]]; then
      n=$((n + 1))
      if $tty; then
        printf '\r\033[Kbuild: [%d/%d] %s' "$n" "$stale" "$line" >&2
      elif [ $((n % 100)) -eq 0 ]; then
        echo "build: $n/$stale packages compiled" >&2
      fi
    else
      if $tty; then printf '\r\033[K' >&2; fi
      echo "$line" >&2
    fi
  done
  if $tty; then printf '\r\033[K' >&2; fi
  echo "build: $n packages compiled" >&2
}

set +e
"$GO" build -v -tags "$TAGS" -ldflags "$LDFLAGS" -o "$BIN/" "${PKGS[@]}" 2>&1 | progress
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "build: go build failed (exit $rc)" >&2
  exit "$rc"
fi
echo "build: $BIN/: $(cd "$BIN" && ls | tr '\n' ' ')" >&2
