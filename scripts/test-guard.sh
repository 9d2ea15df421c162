#!/usr/bin/env bash
# Usage: scripts/test-guard.sh COMMAND [ARG...]
#
# Runs COMMAND (the test suite) under a run id and fails when a Docker
# container or image the run created is still present when it ends.
#
# Tests build their sandbox images with sandbox.BuildBusyboxImage, which
# labels each image bae.test.run=$BAE_TEST_RUN; every container started from
# such an image (by a test or by a server under test) inherits the label.
# Other runs on the same engine (another checkout, another CI job) carry
# other ids and are never looked at. Leftovers are listed, then removed so
# that a failing run does not leave them behind either. The exit status is
# 1 when the run left something, else COMMAND's.
set -uo pipefail
if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARG...]" >&2
  exit 2
fi
if [ -z "${BAE_TEST_RUN:-}" ]; then
  BAE_TEST_RUN="$(date -u +%Y%m%dT%H%M%S)-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
fi
export BAE_TEST_RUN
label="label=bae.test.run=$BAE_TEST_RUN"

"$@"
status=$?

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "test-guard: no Docker engine reachable; no containers or images to check" >&2
  exit $status
fi
containers=$(docker ps -aq --filter "$label")
images=$(docker images -aq --filter "$label" | sort -u)
if [ -z "$containers" ] && [ -z "$images" ]; then
  echo "test-guard: run $BAE_TEST_RUN left no container and no image"
  exit $status
fi
{
  echo "test-guard: FAIL: run $BAE_TEST_RUN left Docker objects behind (a test did not remove what it started):"
  if [ -n "$containers" ]; then
    docker ps -a --filter "$label" \
      --format 'container {{.ID}}  {{.Status}}  test={{.Label "bae.test.owner"}}  image={{.Label "bae.test.image"}}  session={{.Label "bae.session"}}  created={{.CreatedAt}}' | sed 's/^/  /'
  fi
  if [ -n "$images" ]; then
    for id in $images; do
      docker image inspect --format '  image {{.Id}}  tags={{.RepoTags}}  test={{index .Config.Labels "bae.test.owner"}}  test_image={{index .Config.Labels "bae.test.image"}}  created={{.Created}}' "$id"
    done
  fi
  echo "test-guard: removing them"
} >&2
# shellcheck disable=SC2086 # one id per word
[ -z "$containers" ] || docker rm -f $containers >/dev/null
# shellcheck disable=SC2086
[ -z "$images" ] || docker rmi -f $images >/dev/null
exit 1
