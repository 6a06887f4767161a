#!/usr/bin/env bash
# The whole test run behind `make test`: lint, then the local Kafka cluster,
# then every test with -race (unit and component on kfake first, then the
# real-cluster scenarios of integration/ on their own, so timing-sensitive
# fault tests do not share the two cores with the unit tests), then a short
# fuzz pass over every fuzz target. The cluster is
# stopped on every exit path, so no JVM outlives the run; its logs stay in
# $KEPOCH_KAFKA_STATE (default /tmp/kepoch-kafka) and are printed on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
status=1
cleanup() {
  if [ $status -ne 0 ]; then
    echo "== make test failed; Kafka logs (full logs in ${KEPOCH_KAFKA_STATE:-/tmp/kepoch-kafka}):"
    bash scripts/kafka-local.sh logs 2>/dev/null | tail -n 120 || true
  fi
  bash scripts/kafka-local.sh down || true
}
trap cleanup EXIT
# Each step runs as a job of its own process group (set -m) that the shell
# waits for: bash runs a trap only once the foreground command has ended, so
# a SIGTERM (CI cancelling, make forwarding it) would otherwise wait for the
# whole step (up to 25 minutes of tests), and a runner's SIGKILL after its
# grace period would leave the cluster's JVMs running. `wait` returns at
# once on a trapped signal; the step's whole group (go, test binaries,
# kafka-local.sh) is stopped before the cleanup.
set -m
step=
on_signal() {
  if [ -n "$step" ]; then kill -TERM -- "-$step" 2>/dev/null || true; wait "$step" 2>/dev/null || true; fi
  exit 130
}
trap on_signal INT TERM HUP
run() {
  local rc=0
  "$@" </dev/null &
  step=$!
  wait "$step" || rc=$?
  step=
  return "$rc"
}

echo "== lint"
run make -s lint

echo "== local Kafka cluster"
run bash scripts/kafka-local.sh up

echo "== unit and component tests (-race)"
pkgs=$(go list ./...) # a failing go list stops the run here (set -e)
mapfile -t unit < <(grep -v /integration <<<"$pkgs")
run go test -race -count=1 -timeout 15m "${unit[@]}"

echo "== producer chaos test (without -race: kfake's SleepControl races under it)"
run go test -count=1 -timeout 5m -run '^TestIdempotentChaos$' ./producer/

echo "== real-cluster tests (-race)"
KEPOCH_KAFKA=1 run go test -race -count=1 -timeout 25m ./integration/

echo "== fuzz smoke"
run bash scripts/fuzz-smoke.sh

status=0
echo "== make test passed in $((SECONDS - t0))s"
