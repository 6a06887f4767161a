package producer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// A record Produce refuses inside a transaction (here above
// MaxRequestBytes) makes the transaction abortable: CommitTransaction
// returns ErrAbortRequired wrapping the refusal, the records after it are
// refused too, and AbortTransaction ends it as usual, after which the next
// transaction commits. Before, an application that logged Produce's error
// and went on committed a transaction silently missing the record.
func TestTxnRecordRefusedByProduceMakesTransactionAbortable(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-record-refused", producer.BatchMaxBytes(1024), producer.MaxRequestBytes(4096))
	ctx := testCtx(t, 15*time.Second)
	big := func() *producer.Record { return prec(0, strings.Repeat("y", 4096)) }
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	if err := p.Produce(ctx, big(), nil); !errors.Is(err, errors.ErrMessageTooLarge) {
		t.Fatalf("Produce of a record above MaxRequestBytes: %v; want ErrMessageTooLarge", err)
	}
	if err := p.Produce(ctx, prec(0, "b"), nil); !errors.Is(err, producer.ErrAbortRequired) {
		t.Fatalf("Produce after the refusal: %v; want ErrAbortRequired", err)
	}
	err := p.CommitTransaction(ctx)
	if !errors.Is(err, producer.ErrAbortRequired) || !errors.Is(err, errors.ErrMessageTooLarge) {
		t.Fatalf("CommitTransaction after a refused record: %v; want ErrAbortRequired wrapping ErrMessageTooLarge", err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("AbortTransaction: %v", err)
	}
	commitTxn(t, ctx, p, prec(0, "c"))
	wantCommitted(t, c, "c")
}

// Refusals that are not about a record of an open transaction change
// nothing: a record refused before any transaction began (too large, or
// by ErrTxnState), and records refused while CommitTransaction flushes
// (ErrTxnState, or too large: it could not have joined the transaction
// under commit either way), whose commit still succeeds.
func TestTxnRefusalOutsideTransactionChangesNothing(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-refused-outside", producer.BatchMaxBytes(1024), producer.MaxRequestBytes(4096))
	ctx := testCtx(t, 15*time.Second)
	big := func() *producer.Record { return prec(0, strings.Repeat("y", 4096)) }
	if err := p.Produce(ctx, big(), nil); !errors.Is(err, errors.ErrMessageTooLarge) {
		t.Fatalf("Produce of a record above MaxRequestBytes: %v; want ErrMessageTooLarge", err)
	}
	if err := p.Produce(ctx, prec(0, "x"), nil); !errors.Is(err, producer.ErrTxnState) {
		t.Fatalf("Produce outside a transaction: %v; want ErrTxnState", err)
	}
	commitTxn(t, ctx, p, prec(0, "a"))

	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	release, held := holdProduceSeen(c, 0)
	defer release()
	pr := sendAsync(t, ctx, p, prec(0, "b"))
	onWire(t, held)
	committed := make(chan error, 1)
	go func() { committed <- p.CommitTransaction(ctx) }()
	eventually(t, 5*time.Second, "CommitTransaction flushing", func() bool { return producer.Flushing(p) > 0 })
	if err := p.Produce(ctx, prec(0, "x"), nil); !errors.Is(err, producer.ErrTxnState) {
		t.Fatalf("Produce while CommitTransaction flushes: %v; want ErrTxnState", err)
	}
	if err := p.Produce(ctx, big(), nil); !errors.Is(err, errors.ErrMessageTooLarge) {
		t.Fatalf("Produce of a record above MaxRequestBytes while CommitTransaction flushes: %v; want ErrMessageTooLarge", err)
	}
	release()
	if err := <-committed; err != nil {
		t.Fatalf("CommitTransaction: %v", err)
	}
	mustOK(t, pr.wait(5*time.Second))
	wantCommitted(t, c, "a", "b")
}
