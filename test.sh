#!/usr/bin/env bash
# Every module's tests, in one command: the service (the root module), then each module of its
# own below it (loadtest/, bench/, api/check/). In each: `go generate ./...` (api/check's
# client is generated from api/openapi.yaml, not committed; the other modules generate
# nothing), then `go test ./...` with this script's arguments — go test's flags, not packages:
#
#   ./test.sh                  # what the README says
#   ./test.sh -race -count=1   # what .ci/run does
#   ./test.sh -short           # integration tests skip, and pass
#
# Every module runs even when one fails; the script fails if any did, and says which. The
# servers are internal/testenv's business (docs/development.md#tests).
set -uo pipefail
cd "$(dirname "$0")"

# Each directory with a go.mod, the root first; hidden directories and testdata are not the
# project's modules.
modules=$(find . -mindepth 1 \( -name '.*' -o -name testdata \) -prune -o -name go.mod -print | sed 's|/go.mod$||' | sort)

failed=()
for mod in $modules; do
  printf '\n== %s\n' "${mod#./}"
  if ! (cd "$mod" && go generate ./... && go test "$@" ./...); then
    failed+=("${mod#./}")
  fi
done

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: FAIL in ${failed[*]}"
  exit 1
fi
echo "test.sh: every module passed:" $modules
