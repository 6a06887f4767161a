// Package consumer is kepoch's Kafka consumer with KIP-320 semantics: every
// log truncation is detected and reported, and positions never silently move.
//
// The driving loop is Poll → process → (commit). The consumer sends raw Fetch,
// ListOffsets and OffsetForLeaderEpoch requests through a franz-go client used
// as transport only, and lets package seek decide what every answer means.
package consumer
