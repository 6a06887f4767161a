// Package consumer is kepoch's Kafka consumer with KIP-320 semantics: every
// log truncation is detected and reported, and positions never silently move.
//
// The driving loop is Poll → process → commit:
//
//	c, _ := consumer.New(consumer.SeedBrokers(...), consumer.Group("billing"),
//		consumer.TruncationPolicy(consumer.PolicyNone))
//	c.Subscribe("payments") // or c.Assign(...) without a group
//	for {
//		f, err := c.Poll(ctx)
//		// f.Truncations: each break of a partition's lineage, once, before
//		//   any record of the new lineage; f.Errors: halts, typed errors.
//		// process f.Records (each carries its LeaderEpoch)
//		f.Release() // optional: their memory serves the next polls
//		c.CommitSync(ctx, nil) // offsets with their leader epochs
//	}
//
// The consumer sends raw Fetch (with CurrentLeaderEpoch and LastFetchedEpoch,
// in KIP-227 sessions, to each partition's leader or to the replica the
// leader names: KIP-392, see Rack), ListOffsets and OffsetForLeaderEpoch
// requests (always to the leader) through
// a franz-go client used as transport only, and lets package seek decide
// what every answer means: seek is the only place that judges truncation.
// Positions are the delivered positions: a fetched answer is stepped into
// seek only when Poll returns it, so reports, commits and Position all speak
// of what the application received.
//
// Groups (group*.go) speak the classic protocol (range, roundrobin,
// cooperative-sticky, with Java's ConsumerProtocol bytes) or KIP-848, commit
// offsets with their leader epochs, and start every partition from its
// committed (offset, epoch) validated against the leader, so a truncation
// that happened while the group was down is reported too.
package consumer
