//go:build race

package producer_test

// raceEnabled: the race detector is on. kfake's SleepControl queue has a
// data race of its own when many slept requests wait at once (kfake
// cluster.go, bsleep.waitQueue), which TestIdempotentChaos provokes; that
// test runs without -race instead (scripts/test.sh).
const raceEnabled = true
