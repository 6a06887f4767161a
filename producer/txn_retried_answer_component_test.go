package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// The transport sends a coordinator request again by itself when the
// coordinator answers NOT_COORDINATOR (as COORDINATOR_NOT_AVAILABLE and
// COORDINATOR_LOAD_IN_PROGRESS), and returns the last attempt's answer
// alone. Kafka's coordinator may give that answer after appending the
// attempt to its log (its partition moved meanwhile), and the next
// coordinator then completes it: the attempt may have been applied. Here
// an EndTxn(commit) answered so, then CONCURRENT_TRANSACTIONS by the
// transport's retry, waits to be sent again when Close stops the commit:
// its outcome is unknown. It said ErrAbortRequired, not committed (kepoch
// saw only the CONCURRENT_TRANSACTIONS, a refusal before anything is
// applied).
func TestTxnRetriedAnswerMayHaveCommitted(t *testing.T) {
	c := newCluster(t, 1)
	id := "txn-retried-endtxn"
	p, _ := newTxnProducer(t, c, id, producer.RetryBackoff(time.Hour))
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	moved := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: id, Err: kerr.NotCoordinator})
	busy := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: id, Err: kerr.ConcurrentTransactions, Count: -1})
	done := make(chan error, 1)
	go func() { done <- p.CommitTransaction(context.Background()) }()
	if err := busy.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if moved.Hits() != 1 {
		t.Fatalf("EndTxn answered NOT_COORDINATOR %d times", moved.Hits())
	}
	eventually(t, 5*time.Second, "the refused EndTxn queued to be sent again", func() bool { return producer.TxnResendWaiting(p) })
	closed, cancel := context.WithCancel(context.Background())
	cancel()
	p.Close(closed)
	select {
	case err := <-done:
		if !errors.Is(err, errors.ErrClosed) || !errors.Is(err, errors.ErrUnknownOutcome) || errors.Is(err, producer.ErrAbortRequired) {
			t.Fatalf("CommitTransaction stopped after an EndTxn answered NOT_COORDINATOR and retried: %v; want ErrClosed and ErrUnknownOutcome", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CommitTransaction still blocked 5s after Close returned")
	}
}

// An AddOffsetsToTxn answered NOT_COORDINATOR and retried by the transport
// may have added the group's offsets partition to the transaction (the
// next coordinator loads the append): when the call then fails (every
// retry refused CONCURRENT_TRANSACTIONS until its context ended), the
// transaction may have started, and its abort must send EndTxn. It was
// taken for not started, and the abort ended locally a transaction the
// coordinator may hold open.
func TestTxnRetriedAnswerMayHaveAddedOffsets(t *testing.T) {
	c := newCluster(t, 1)
	id := "txn-retried-offsets"
	p, _ := newTxnProducer(t, c, id)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	moved := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddOffsetsToTxn}, TxnID: id, Err: kerr.NotCoordinator})
	busy := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddOffsetsToTxn}, TxnID: id, Err: kerr.ConcurrentTransactions, Count: -1})
	ctx := testCtx(t, time.Second)
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
	if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 5})); !errors.Is(err, producer.ErrAbortRequired) {
		t.Fatalf("SendOffsetsToTransaction refused until its context ended: %v; want ErrAbortRequired", err)
	}
	if moved.Hits() != 1 || busy.Hits() == 0 {
		t.Fatalf("AddOffsetsToTxn answered NOT_COORDINATOR %d times, CONCURRENT_TRANSACTIONS %d", moved.Hits(), busy.Hits())
	}
	if !producer.TxnMayHaveStarted(p) {
		t.Fatal("the transaction is held not started after an AddOffsetsToTxn answered NOT_COORDINATOR")
	}
}
