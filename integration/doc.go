// Package integration holds the real Apache Kafka harness and the
// real-cluster scenarios that prove kepoch's claims about truncation, fencing
// and producer recovery.
//
// The cluster is one KRaft controller (node 100) and three brokers (nodes 1,
// 2, 3) on 127.0.0.1, started by scripts/kafka-local.sh from jars fetched with
// Maven. Tests here need KEPOCH_KAFKA=1 (set by make test); without it they
// skip, and in CI (CI set) they fail instead of skipping.
package integration
