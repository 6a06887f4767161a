package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// TestTransactionalProducerStateExpiry lets the partition leader forget a
// transactional producer between two of its transactions
// (producer.id.expiration.ms lowered to 2s), then runs more transactions,
// an empty aborted one among them. Whatever the broker answers the first
// produce of the next transaction (accepted, or UNKNOWN_PRODUCER_ID, which
// makes the transaction abortable: the application aborts and retries), a
// read_committed consumer reads every committed record exactly once, in
// order, and nothing of an aborted attempt. Seen on 4.1.2 (transactions
// V2): every EndTxn answers the next epoch (1/1 → 1/2 → 1/3), so each
// transaction starts at sequence 0 and the broker accepts it without the
// producer state it forgot; the empty abort ends locally, with no epoch.
func TestTransactionalProducerStateExpiry(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := TopicName("txn-expiry")
	if _, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}}, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	c.lowerProducerExpiry(ctx, t)
	var mu sync.Mutex
	var outcomes []producer.Outcome
	p := newProducer(t, producer.TransactionalID(TopicName("txn-expiry-id")),
		producer.OnOutcome(func(o producer.Outcome) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }))
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	var committed []string
	aborts := 0
	// txn runs one transaction of n records (retrying after an abortable
	// error) and commits it.
	txn := func(name string, n int) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			if err := p.BeginTransaction(); err != nil {
				t.Fatalf("%s: begin: %v", name, err)
			}
			var vals []string
			for j := 0; j < n; j++ {
				v := fmt.Sprintf("%s-a%d-r%02d", name, attempt, j)
				vals = append(vals, v)
				if err := p.Produce(ctx, &producer.Record{Topic: topic, Partition: 0, ExplicitPartition: true, Value: []byte(v)}, nil); err != nil {
					t.Fatalf("%s: produce: %v", name, err)
				}
			}
			err := p.CommitTransaction(ctx)
			if err == nil {
				committed = append(committed, vals...)
				return
			}
			if !errors.Is(err, producer.ErrAbortRequired) || attempt > 3 {
				t.Fatalf("%s attempt %d: %v", name, attempt, err)
			}
			t.Logf("%s attempt %d must abort: %v", name, attempt, err)
			if err := p.AbortTransaction(ctx); err != nil {
				t.Fatalf("%s: abort after an abortable error: %v", name, err)
			}
			aborts++
		}
	}
	txn("t1", 20)
	c.waitProducerForgotten(ctx, t, topic, p.ProducerID().ID)
	txn("t2", 20)
	// An empty transaction aborted, then one more after another expiry.
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("aborting an empty transaction: %v", err)
	}
	c.waitProducerForgotten(ctx, t, topic, p.ProducerID().ID)
	txn("t3", 10)

	checkReadCommitted(ctx, t, topic, committed)
	mu.Lock()
	t.Logf("%d committed records, %d aborted attempts, producer %v, %d bumps, outcomes %v", len(committed), aborts, p.ProducerID(), p.Bumps(), outcomes)
	mu.Unlock()
}
