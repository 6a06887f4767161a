// Package producer is kepoch's Kafka producer with KIP-360 semantics:
// idempotent by default, safe producer-epoch bumps, and an explicit outcome
// for every batch affected by a recovery.
//
// The driving loop:
//
//	p, _ := producer.New(producer.SeedBrokers(...), producer.OnOutcome(...), producer.OnAckedWritesLost(...))
//	p.Produce(ctx, rec, func(r producer.Result) { ... }) // or ProduceSync
//	p.Flush(ctx)
//	p.Close(ctx)
//
// and, for a transactional producer (TransactionalID):
//
//	p.InitTransactions(ctx)
//	p.BeginTransaction(); p.Produce(...); p.CommitTransaction(ctx) // or AbortTransaction
//
// Produce requests are sent raw through a franz-go client used as transport
// only. The decisions are pure and separately tested: the Sequencer
// (sequences and the KIP-360 decision table), the TxnState (the transaction
// state machine) and the AckLedger (acknowledged ranges and their survival
// across leader changes). The I/O layer feeds them answers and carries out
// their decisions.
package producer
