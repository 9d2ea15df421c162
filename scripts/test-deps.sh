#!/usr/bin/env bash
# Idempotently installs what the test suite needs beyond Go and PostgreSQL,
# so that no test skips (`make test` fails on a skip):
#   - a static busybox, from which Docker tests build their own image (no
#     registry is needed), the static libc tests/compose links its stand-in
#     programs with, and chromium for the console's browser tests (Debian
#     packages; where apt-get is unavailable this says what to install and
#     those tests then fail naming the missing package), and curl and jq,
#     with which docs/walk_test.go runs the README's documented steps;
#   - Docker Compose v2 (`docker compose`), which the `baectl setup` tests
#     run as `docker compose config`, and tests/compose runs on the
#     repository's compose files (config, and docker-compose.yml end to
#     end). Debian ships only the old docker-compose 1.x, so it is built
#     from its Go module (github.com/docker/compose/v5, the current major
#     version of the Compose v2 CLI) and installed as the Docker CLI plugin
#     ~/.docker/cli-plugins/docker-compose. A cold build takes about 4
#     minutes on 2 cores; a failed build fails this script.
set -euo pipefail
need=()
if ! [ -x /bin/busybox ] && ! command -v busybox >/dev/null 2>&1; then need+=(busybox-static); fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then need+=(chromium); fi
for c in curl jq; do command -v "$c" >/dev/null 2>&1 || need+=("$c"); done
# tests/compose links its stand-in images' programs statically (no libc in
# them) through the C linker: that needs the static libc.
if command -v gcc >/dev/null 2>&1 && [ "$(gcc -print-file-name=libc.a)" = libc.a ]; then need+=(libc6-dev); fi
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "test-deps: apt-get not found; install ${need[*]} yourself" >&2
  else
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    echo "test-deps: installing ${need[*]}" >&2
    $SUDO apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

# Docker Compose v2, unless `docker compose` already works.
COMPOSE_MODULE=github.com/docker/compose/v5
COMPOSE_VERSION=v5.6.0
if ! docker compose version >/dev/null 2>&1; then
  GO=${GO:-go}
  export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3} GOFLAGS=-buildvcs=false
  plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
  echo "test-deps: building docker compose $COMPOSE_VERSION from $COMPOSE_MODULE into $plugins (about 4 minutes the first time)" >&2
  # `go install module@version` refuses a module whose go.mod has exclude
  # directives, as compose's has: build a copy of the module as the main
  # module instead, which honours them.
  src=$("$GO" mod download -json "$COMPOSE_MODULE@$COMPOSE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [ -z "$src" ] || [ ! -f "$src/go.mod" ]; then
    echo "test-deps: could not download $COMPOSE_MODULE@$COMPOSE_VERSION" >&2
    exit 1
  fi
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  cp -r "$src" "$work/compose"
  chmod -R u+w "$work/compose"
  mkdir -p "$plugins"
  (cd "$work/compose" && "$GO" build -trimpath \
    -ldflags "-s -w -X $COMPOSE_MODULE/internal.Version=$COMPOSE_VERSION" \
    -o "$work/docker-compose" ./cmd)
  install -m 0755 "$work/docker-compose" "$plugins/docker-compose"
  if ! docker compose version >/dev/null 2>&1; then
    echo "test-deps: installed $plugins/docker-compose, but \`docker compose version\` still fails (is the docker CLI installed?)" >&2
    exit 1
  fi
  echo "test-deps: $(docker compose version)" >&2
fi
