// Package producer is kepoch's Kafka producer with KIP-360 semantics:
// idempotent by default, safe producer-epoch bumps, and an explicit outcome
// for every batch affected by a recovery.
//
// The driving loop is Produce → (Flush) → Close. Produce requests are sent raw
// through a franz-go client used as transport only.
package producer
