package producer_test

// Component tests of the transactional producer's answers while its
// transaction loop backs off, and of Close meeting a transaction.

import (
	"context"
	"sync"
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
	seen := holdTxnOffsetCommits(t, c)
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

// Close aborts the transaction left open, as Java's close does: its
// records are aborted at once, not left to the coordinator's transaction
// timeout (holding back every read_committed consumer of the partition
// meanwhile) or to the next producer with the transactional ID.
func TestTxnCloseAbortsOpenTransaction(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-close-abort")
	ctx := testCtx(t, 10*time.Second)
	commitTxn(t, ctx, p, prec(0, "a"))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "open")))
	ends := observe(c, kmsg.EndTxn)
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if ends.Hits() != 1 {
		t.Fatalf("EndTxn sent %d times by Close; want the abort", ends.Hits())
	}
	if lso, hw := endOffset(t, c, 0, true), endOffset(t, c, 0, false); lso != hw {
		t.Fatalf("last stable offset %d, high watermark %d: the transaction is still open", lso, hw)
	}
	wantCommitted(t, c, "a")
}

// Close with its context already ended waits for nothing and aborts
// nothing: it returns at once, saying the transaction was left open, as a
// crash leaves it (for the next producer with the transactional ID to
// abort).
func TestTxnCloseWithEndedContextLeavesTransaction(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-close-ended")
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "open")))
	ends := observe(c, kmsg.EndTxn)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- p.Close(ended) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Close with an ended context and a transaction open: %v; want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close with an ended context still blocked after 5s")
	}
	if ends.Hits() != 0 {
		t.Fatalf("EndTxn sent %d times by a Close whose context had ended", ends.Hits())
	}
	if lso, hw := endOffset(t, c, 0, true), endOffset(t, c, 0, false); lso == hw {
		t.Fatalf("last stable offset %d = high watermark: the transaction was ended", lso)
	}
}

// holdEndTxn holds every EndTxn request at the broker until release is
// called; seen is signalled when the first arrives.
func holdEndTxn(c *kfake.Cluster) (release func(), seen <-chan struct{}) {
	hold := make(chan struct{})
	arrived := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		default:
			c.SleepControl(func() { <-hold })
		}
		return nil, nil, false
	})
	var once sync.Once
	return func() { once.Do(func() { close(hold) }) }, arrived
}

// commitHeldAtCoordinator begins a transaction of p, writes "a" in it and
// starts CommitTransaction (with context.Background), whose EndTxn the
// coordinator holds until release; it returns once the EndTxn arrived.
// committed gets the commit's error.
func commitHeldAtCoordinator(t *testing.T, ctx context.Context, c *kfake.Cluster, p *producer.Producer) (release func(), committed <-chan error) {
	t.Helper()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	release, seen := holdEndTxn(c)
	done := make(chan error, 1)
	go func() { done <- p.CommitTransaction(context.Background()) }()
	select {
	case <-seen:
	case <-ctx.Done():
		release()
		t.Fatal("no EndTxn")
	}
	return release, done
}

// Close waits for a CommitTransaction under way (as Java's close lets the
// transaction manager's requests complete): the commit's EndTxn, held at
// the coordinator while Close begins, is answered, and the commit reports
// that it committed. Close stopped it at once: ErrClosed with
// ErrUnknownOutcome, for a transaction that committed.
func TestTxnCloseWaitsForCommit(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-close-wait")
	ctx := testCtx(t, 10*time.Second)
	release, committed := commitHeldAtCoordinator(t, ctx, c, p)
	defer release()
	closed := make(chan error, 1)
	go func() { closed <- p.Close(ctx) }()
	// Close began once Produce says the producer is closed.
	eventually(t, 5*time.Second, "Close begun", func() bool {
		return errors.Is(p.Produce(ctx, prec(0, "late"), nil), errors.ErrClosed)
	})
	release()
	if err := <-committed; err != nil {
		t.Fatalf("CommitTransaction whose EndTxn was answered while Close waited: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantCommitted(t, c, "a")
}

// Close's wait for an operation under way is bounded by the DeliveryTimeout
// too, not only by its context: with context.Background and a coordinator
// that never answers the commit's EndTxn, Close returns, and the commit
// ends with ErrClosed and ErrUnknownOutcome.
func TestTxnCloseWaitBoundedByDeliveryTimeout(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-close-bound", producer.RequestTimeout(300*time.Millisecond), producer.DeliveryTimeout(time.Second))
	ctx := testCtx(t, 10*time.Second)
	release, committed := commitHeldAtCoordinator(t, ctx, c, p)
	defer release()
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close with context.Background still waiting for an unanswered commit 5s later (DeliveryTimeout 1s)")
	}
	if err := <-committed; !errors.Is(err, errors.ErrClosed) || !errors.Is(err, errors.ErrUnknownOutcome) {
		t.Fatalf("CommitTransaction stopped by Close while its EndTxn was unanswered: %v; want ErrClosed and ErrUnknownOutcome", err)
	}
}

// Close with an ended context while CommitTransaction still flushes its
// records (the records are held at the broker): the commit did not commit,
// and says so as a commit stopped waiting for its records does
// (ErrAbortRequired and ErrClosed). Its flush returned the producer's
// close error and CommitTransaction returned it as it was: ErrClosed
// alone, which says neither that it did not commit nor that it may have.
// TestTxnCloseBeforeEndTxnSaysNotCommitted's "waiting for its records"
// closes as soon as the commit's goroutine starts, mostly before the
// flush began.
func TestTxnCloseDuringCommitFlushSaysNotCommitted(t *testing.T) {
	closedCtx, cancel := context.WithCancel(context.Background())
	cancel()
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-close-flushing")
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	release, held := holdProduceSeen(c, 0)
	defer release()
	sendAsync(t, ctx, p, prec(0, "a"))
	onWire(t, held)
	ends := observe(c, kmsg.EndTxn)
	committed := make(chan error, 1)
	go func() { committed <- p.CommitTransaction(context.Background()) }()
	// Produce is refused once the commit counts as under way, right
	// before its flush.
	eventually(t, 5*time.Second, "CommitTransaction begun", func() bool {
		return errors.Is(p.Produce(ctx, prec(0, "late"), nil), producer.ErrTxnState)
	})
	eventually(t, 5*time.Second, "the commit's flush waiting", func() bool { return producer.Flushing(p) > 0 })
	p.Close(closedCtx)
	select {
	case err := <-committed:
		if !errors.Is(err, producer.ErrAbortRequired) || !errors.Is(err, errors.ErrClosed) || errors.Is(err, errors.ErrUnknownOutcome) {
			t.Fatalf("CommitTransaction stopped by Close while flushing: %v; want ErrAbortRequired and ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CommitTransaction still blocked 5s after Close returned")
	}
	if ends.Hits() != 0 {
		t.Fatalf("EndTxn sent %d times", ends.Hits())
	}
}
