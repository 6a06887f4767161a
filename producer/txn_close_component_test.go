package producer_test

// Component tests of the transactional producer's answers while its
// transaction loop backs off, and of Close meeting a transaction.

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

// An EndTxn(commit) answered TRANSACTION_ABORTABLE settles the commit at
// once: CommitTransaction says ErrAbortRequired as soon as the answer is
// handled. The transaction loop applied the answer only after sleeping the
// retry backoff (it backed off after every refusal), so the commit waited
// a backoff for an answer it already had, and a Close meanwhile reported
// it with an outcome it no longer had.
func TestTxnAnswerAppliedBeforeBackoff(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-backoff", producer.RetryBackoff(time.Hour))
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: "txn-backoff", Err: kerr.TransactionAbortable})
	err := p.CommitTransaction(ctx)
	if !errors.Is(err, producer.ErrAbortRequired) || !errors.Is(err, kerr.TransactionAbortable) {
		t.Fatalf("CommitTransaction answered TRANSACTION_ABORTABLE: %v; want ErrAbortRequired wrapping it at once", err)
	}
}

// Close while CommitTransaction runs and no EndTxn(commit) can have reached
// the coordinator (the commit waits for its records, or every EndTxn was
// refused unapplied and the next is not sent yet): the transaction did not
// commit, and CommitTransaction says so (ErrAbortRequired and ErrClosed).
// It said ErrClosed with ErrUnknownOutcome, or ErrClosed alone, leaving the
// application to guess.
func TestTxnCloseBeforeEndTxnSaysNotCommitted(t *testing.T) {
	closed, cancel := context.WithCancel(context.Background())
	cancel() // Close gives nothing time: the commit is stopped where it is
	wantNotCommitted := func(t *testing.T, done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			if !errors.Is(err, producer.ErrAbortRequired) || !errors.Is(err, errors.ErrClosed) || errors.Is(err, errors.ErrUnknownOutcome) {
				t.Fatalf("CommitTransaction ended by Close before any EndTxn: %v; want ErrAbortRequired and ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("CommitTransaction still blocked 5s after Close returned")
		}
	}
	t.Run("waiting for its records", func(t *testing.T) {
		c := newCluster(t, 1)
		p, _ := newTxnProducer(t, c, "txn-close-records")
		ctx := testCtx(t, 10*time.Second)
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		release, held := holdProduceSeen(c, 0)
		defer release()
		sendAsync(t, ctx, p, prec(0, "a"))
		onWire(t, held)
		ends := observe(c, kmsg.EndTxn)
		done := make(chan error, 1)
		go func() { done <- p.CommitTransaction(context.Background()) }()
		p.Close(closed)
		wantNotCommitted(t, done)
		if ends.Hits() != 0 {
			t.Fatalf("EndTxn sent %d times", ends.Hits())
		}
	})
	t.Run("every EndTxn refused", func(t *testing.T) {
		c := newCluster(t, 1)
		p, _ := newTxnProducer(t, c, "txn-close-refused", producer.RetryBackoff(time.Hour))
		ctx := testCtx(t, 10*time.Second)
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
		busy := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: "txn-close-refused", Err: kerr.ConcurrentTransactions, Count: -1})
		done := make(chan error, 1)
		go func() { done <- p.CommitTransaction(context.Background()) }()
		if err := busy.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "the refused EndTxn queued to be sent again", func() bool { return producer.TxnResendWaiting(p) })
		p.Close(closed)
		wantNotCommitted(t, done)
	})
}

// BeginTransaction after Close says the producer is closed, as every other
// call does. It opened a transaction no record could join and no commit
// could end.
func TestTxnBeginAfterClose(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-begin-after-close")
	ctx := testCtx(t, 10*time.Second)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("BeginTransaction after Close: %v; want ErrClosed", err)
	}
}

// SendOffsetsToTransaction interrupted by Close (its TxnOffsetCommit
// unanswered) returns ErrClosed, as every call Close interrupts does. It
// reported the closed transport's failure as the transaction's:
// ErrAbortRequired, which tells the application to abort and go on.
func TestTxnSendOffsetsInterruptedByClose(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "offsets-close")
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	hold := make(chan struct{})
	defer close(hold)
	seen := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.TxnOffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case seen <- struct{}{}:
		default:
		}
		c.SleepControl(func() { <-hold })
		return nil, nil, false
	})
	done := make(chan error, 1)
	go func() {
		done <- p.SendOffsetsToTransaction(ctx, producer.GroupMetadata{GroupID: "g", GenerationID: -1}, txnOffsets(map[int32]int64{0: 1}))
	}()
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("no TxnOffsetCommit")
	}
	closed, cancel := context.WithCancel(context.Background())
	cancel()
	p.Close(closed)
	select {
	case err := <-done:
		if !errors.Is(err, errors.ErrClosed) || errors.Is(err, producer.ErrAbortRequired) {
			t.Fatalf("SendOffsetsToTransaction interrupted by Close: %v; want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SendOffsetsToTransaction still blocked 5s after Close returned")
	}
}
