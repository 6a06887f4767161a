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
trap 'exit 130' INT TERM

echo "== lint"
make -s lint

echo "== local Kafka cluster"
bash scripts/kafka-local.sh up

echo "== unit and component tests (-race)"
go test -race -count=1 -timeout 15m $(go list ./... | grep -v /integration)

echo "== real-cluster tests (-race)"
KEPOCH_KAFKA=1 go test -race -count=1 -timeout 25m ./integration/

echo "== fuzz smoke"
bash scripts/fuzz-smoke.sh

status=0
echo "== make test passed in $((SECONDS - t0))s"
