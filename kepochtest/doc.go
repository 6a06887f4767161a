// Package kepochtest is a deterministic harness for testing how an
// application reacts when Kafka rewrites or forgets what it acknowledged:
// an in-process Kafka cluster (franz-go's kfake) whose partitions can be put
// through unclean leader elections, clean leader changes, producer-state
// loss, record deletion below a consumer's position, and topic recreation.
// Import it from your own _test.go files; it needs no Docker and no JVM.
//
//	c := kepochtest.New(t, kepochtest.Topic("payments", 1))
//	c.Produce(ctx, "payments", 0, "p0", "p1", "p2")      // one batch: offsets 0..2
//	c.Produce(ctx, "payments", 0, "p3", "p4")            // offsets 3..4
//	// ... the application consumes from c.Seeds() ...
//	tr, _ := c.UncleanElection(ctx, "payments", 0, 3) // offsets 3..4 are gone
//	c.Produce(ctx, "payments", 0, "r3")                  // the new leader's record at offset 3
//	// ... assert the application saw the truncation at tr.Divergence ...
//
// # Faults are the broker's own
//
// No scenario fakes an answer at the client. Each one changes the broker's
// state, and the broker answers from it:
//
//   - UncleanElection: the partition's persisted log is cut at a batch
//     boundary, its producer state rebuilt from what remains, and the
//     cluster restarted on the same ports with leadership moved to another
//     broker in a new epoch; the lost offsets are taken by the next records
//     written. Fetch, ListOffsets and OffsetForLeaderEpoch all answer from
//     the cut log.
//   - CleanElection: leadership moves to another broker in a new epoch;
//     nothing is lost.
//   - DeleteRecords: the log start offset moves up (retention, or an
//     administrator's DeleteRecords).
//   - RecreateTopic: the topic is deleted and created again: a new topic ID,
//     empty logs.
//   - LoseProducerState: the leader forgets the producers' sequence state
//     for the partition (state expiry).
//
// Helpers read the broker's view for assertions: Partition (leader, epoch,
// topic ID, log start and end), Records (the log as the leader holds it,
// with each record's leader epoch and producer identity), EpochEnd (the
// leader's raw OffsetForLeaderEpoch answer, to compare a client's reported
// divergence with), and Produce (raw idempotent Produce requests, exactly one
// batch per call).
//
// # Fidelity to Kafka
//
// kfake locates the end of an old leader epoch only by finding a batch of a
// later epoch in the log; while the new epoch holds no record it answers
// OffsetForLeaderEpoch for an older epoch with -1/-1, where a Kafka broker
// answers from its leader epoch cache at once. So that clients never see
// that answer, after UncleanElection and CleanElection the harness holds
// OffsetForLeaderEpoch requests about older epochs of the partition until
// the new epoch holds a record, then lets the broker answer them: the
// answer is the broker's and correct, only later. Tests should therefore
// write to the partition after an election (Produce, or the application's
// producer), as the examples do. Held requests also delay the other
// requests of their connection.
//
// kfake never sends DivergingEpoch in Fetch answers, so clients find every
// divergence with OffsetForLeaderEpoch.
//
// A restart (UncleanElection, LoseProducerState) restarts every broker:
// clients lose their connections, fetch sessions and in-flight requests,
// as in a full cluster bounce. Group membership and committed offsets
// survive it (kfake persists them).
//
// # Left out
//
//   - UNKNOWN_PRODUCER_ID after producer-state loss: kfake returns it only
//     when emulating brokers before 2.5 (KIP-360), a configuration kepoch's
//     producer does not target; on current brokers, and in kfake, a producer
//     the broker has no state for has its next batch accepted.
//   - A follower lagging behind the high watermark, and acks=1 writes lost
//     by a leader that alone held them: kfake has a single copy of each log
//     and no replication, so "acknowledged by the leader only" cannot be
//     distinguished from "acknowledged by all". UncleanElection produces the
//     same observable result (acknowledged records gone, a new epoch).
//   - Transaction markers cut by UncleanElection: the cut may split a
//     transaction; kfake's view of the open transaction is not rewound.
//     Cut outside transactions.
package kepochtest
