#!/usr/bin/env bash
# Runs every fuzz target in the module for a short time (FUZZTIME, default
# 10s each), so a regression in a byte parser shows up in every test run.
# Long runs (millions of executions) are done by hand: see DESIGN.md.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
n=0
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "fuzz $pkg $target ($FUZZTIME)"
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" -parallel=2 "$pkg" >/tmp/kepoch-fuzz.log 2>&1 ||
      { cat /tmp/kepoch-fuzz.log; echo "fuzz target $target failed"; exit 1; }
    n=$((n + 1))
  done
done
echo "fuzz smoke: $n targets"
