#!/usr/bin/env bash
# bench-real.sh [ROUNDS] [BENCH-REGEXP]: the real-cluster benchmarks, kepoch
# and franz-go side by side, with the bound (the same work without any
# client's overhead) and the paired runs (the clients in turns within one
# benchmark; x-kgo is kepoch's throughput as a multiple of kgo's), as
# ROUNDS separate runs (default 6) that alternate which client goes first
# in each configuration, then benchstat.
# Needs the local cluster (make kafka-up) and a quiet machine: on 2 cores
# the brokers and the clients share the CPU, and anything else running
# shows up as noise.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-6}
filter=${2:-'BenchmarkConsume|BenchmarkProduce'}
out=${BENCH_OUT:-/tmp/kepoch-bench}
mkdir -p "$out"
bin=$out/integration.test
go test -c -o "$bin" ./integration/
: > "$out/raw.txt"
for i in $(seq 1 "$rounds"); do
  order=kepoch-first
  if [ $((i % 2)) = 0 ]; then order=kgo-first; fi
  echo "round $i/$rounds ($order)" >&2
  (cd integration && KEPOCH_KAFKA=1 KEPOCH_BENCH_ORDER=$order "$bin" -test.run '^$' -test.bench "$filter" -test.count 1) >> "$out/raw.txt"
done
# Name the parts of a sub-benchmark so that benchstat can put the clients
# in columns: Benchmark<X>/<codec>/<size>/<client>; the bound and paired
# benchmarks (Benchmark<X>Bound/.../bound, Benchmark<X>Paired/.../paired)
# become columns of Benchmark<X>.
sed -E -e 's#^(Benchmark[A-Za-z]+)(Bound|Paired)/#\1/#' \
  -e 's#^(Benchmark[A-Za-z]+)/([a-z0-9]+)/([0-9A-Za-z]+)/([a-z0-9-]+)-([0-9]+)#\1/codec=\2/size=\3/client=\4-\5#' "$out/raw.txt" > "$out/named.txt"
(cd /tmp && go run golang.org/x/perf/cmd/benchstat@latest -col '/client@(kepoch kgo kepoch-release kgo-pooled bound paired pooled-paired reserve0-paired bound-paired kepoch-parallel)' -row .name,/codec,/size \
  -filter '.unit:(records/s OR cpu-ns/record OR kB/request OR x-kgo)' "$out/named.txt")
