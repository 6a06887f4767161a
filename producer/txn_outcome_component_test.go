package producer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// A record of the transaction that expires while still buffered (its
// partition could not join the transaction in time) fails with
// ErrDeliveryTimeout; the transaction must then be uncommittable
// (Java: Sender.failBatch → TransactionManager.handleFailedBatch →
// abortable error).
func TestTxnCommitRefusedAfterBufferedRecordExpired(t *testing.T) {
	c := newCluster(t, 2)
	p, _ := newTxnProducer(t, c, "txn-expired-buffered",
		producer.RequestTimeout(200*time.Millisecond), producer.DeliveryTimeout(700*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	add := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, Topic: topic, Partitions: []int32{1},
		Err: kerr.ConcurrentTransactions, Count: -1})
	lost := sendAsync(t, ctx, p, prec(1, "z"))
	r := lost.wait(3 * time.Second)[0]
	if !errors.Is(r.Err, producer.ErrDeliveryTimeout) {
		t.Fatalf("buffered record: %v; want ErrDeliveryTimeout", r.Err)
	}
	add.Remove()
	err := p.CommitTransaction(ctx)
	if err == nil {
		t.Fatalf("CommitTransaction succeeded although record %q of the transaction failed: %v", r.Record.Value, r.Err)
	}
}

// Close while CommitTransaction waits for its EndTxn answer ends the
// commit once Close's context ends (with no deadline of its own it would
// wait forever): with ErrClosed and ErrUnknownOutcome, since the
// coordinator may have committed.
func TestTxnCloseDuringCommitEndsIt(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-close")
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	hold := make(chan struct{})
	seen := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case seen <- struct{}{}:
		default:
		}
		c.SleepControl(func() { <-hold })
		return nil, nil, false
	})
	defer close(hold)
	done := make(chan error, 1)
	go func() { done <- p.CommitTransaction(context.Background()) }()
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("no EndTxn")
	}
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.Close(cctx)
	select {
	case err := <-done:
		if !errors.Is(err, errors.ErrClosed) || !errors.Is(err, errors.ErrUnknownOutcome) {
			t.Fatalf("CommitTransaction ended by Close: %v; want ErrClosed and ErrUnknownOutcome", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("CommitTransaction still blocked 3s after Close returned")
	}
}

// CommitTransaction whose context ends while its EndTxn is unanswered:
// the commit goes on, and calling CommitTransaction again (as Java lets a
// timed-out commitTransaction be retried) waits for that commit's outcome
// and says it committed, rather than refusing in a state the application
// cannot read.
func TestTxnCommitRetryAfterContextEndSaysCommitted(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-commit-retry")
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	var once atomicBool
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		if once.set() {
			c.SleepControl(func() { time.Sleep(500 * time.Millisecond) })
		}
		return nil, nil, false
	})
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := p.CommitTransaction(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first CommitTransaction: %v", err)
	}
	time.Sleep(time.Second) // the commit completes in the background meanwhile
	wantCommitted(t, c, "a")
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatalf("the transaction committed, but the retried CommitTransaction says: %v", err)
	}
}

type atomicBool struct{ v atomic.Bool }

func (b *atomicBool) set() bool { return b.v.CompareAndSwap(false, true) }

// An idle transactional producer's loop sleeps: it is woken only when a
// coordinator request waits to be sent (it once woke itself forever,
// spinning a core).
func TestTxnIdleLoopSleeps(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-idle")
	ctx := testCtx(t, 10*time.Second)
	commitTxn(t, ctx, p, prec(0, "a"))
	time.Sleep(50 * time.Millisecond)
	for i := range 200 {
		if producer.TxnWakePending(p) {
			t.Fatalf("sample %d: the idle transaction loop has a wake-up pending", i)
		}
		time.Sleep(time.Millisecond)
	}
}

// A commit whose EndTxn got no answer is sent again; if the retry is
// refused (INVALID_TXN_STATE: the coordinator has moved on, perhaps by
// completing the very commit whose answer was lost), the commit may have
// happened: CommitTransaction must say the outcome is unknown rather than
// report a plain failure. The answer is lost either by coming after the
// client gave up, or with a dropped connection: the transport then resends
// the EndTxn by itself, and the first attempt was written all the same.
func TestTxnCommitRetryRefusedOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		name, id string
		opts     []producer.Opt
		first    func(c *kfake.Cluster) (kmsg.Response, error, bool)
	}{
		// RequestTimeout leaves the requests before the commit room on a
		// loaded machine (at 200ms one of them timed out once under the
		// whole suite); the EndTxn's answer comes well after it.
		{"answered late", "txn-commit-refused", []producer.Opt{producer.RequestTimeout(time.Second)},
			func(c *kfake.Cluster) (kmsg.Response, error, bool) {
				// Applied, but answered after the client gave up.
				c.SleepControl(func() { time.Sleep(2 * time.Second) })
				return nil, nil, false
			}},
		{"resent by the transport", "txn-commit-dropped", nil,
			func(*kfake.Cluster) (kmsg.Response, error, bool) {
				return nil, errors.New("connection lost before the answer"), true
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1)
			p, _ := newTxnProducer(t, c, tc.id, tc.opts...)
			ctx := testCtx(t, 10*time.Second)
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
			var n atomic.Int32
			c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				switch n.Add(1) {
				case 1:
					return tc.first(c)
				case 2:
					resp := req.ResponseKind().(*kmsg.EndTxnResponse)
					resp.ErrorCode = kerr.InvalidTxnState.Code
					return resp, nil, true
				}
				return nil, nil, false
			})
			err := p.CommitTransaction(ctx)
			if n.Load() < 2 {
				t.Fatalf("EndTxn sent %d times: %v", n.Load(), err)
			}
			if !errors.Is(err, errors.ErrUnknownOutcome) {
				t.Fatalf("commit whose EndTxn answer was lost (%s), retry refused: %v; want ErrUnknownOutcome", tc.name, err)
			}
		})
	}
}

// A commit left running by its caller's context, then an AbortTransaction
// (refused: the commit is still under way): the commit's outcome must still
// reach the next CommitTransaction. The refused abort once discarded it,
// and the retried commit said only that no transaction was open.
func TestTxnCommitOutcomeSurvivesRefusedAbort(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-commit-abort")
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	var once atomicBool
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		if once.set() {
			c.SleepControl(func() { time.Sleep(500 * time.Millisecond) })
		}
		return nil, nil, false
	})
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := p.CommitTransaction(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first CommitTransaction: %v", err)
	}
	if err := p.AbortTransaction(ctx); err == nil {
		t.Fatal("AbortTransaction succeeded while the commit was under way")
	}
	time.Sleep(time.Second) // the commit completes in the background meanwhile
	wantCommitted(t, c, "a")
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatalf("the transaction committed, but the retried CommitTransaction says: %v", err)
	}
}

// A commit that must end with an epoch bump (here: a TxnOffsetCommit of
// the transaction answered REQUEST_TIMED_OUT, so a copy may still arrive)
// committed once EndTxn is answered NONE. The bump's refusal (a new
// instance fenced this one meanwhile) does not undo it: CommitTransaction
// says it committed, and the producer is fatal from then on. It returned
// the refusal, so the application took a committed transaction for a
// failed one.
func TestTxnCommitStandsWhenItsBumpIsFenced(t *testing.T) {
	c := newCluster(t, 2)
	p, _ := newTxnProducer(t, c, "txn-bump-fenced", tv1())
	ctx := testCtx(t, 10*time.Second)
	beginWithUncertainOffsets(t, ctx, c, p)
	bump := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.ProducerFenced})
	err := p.CommitTransaction(ctx)
	if bump.Hits() == 0 {
		t.Fatal("no epoch bump after the commit")
	}
	if err != nil {
		t.Fatalf("the transaction committed, but CommitTransaction says: %v", err)
	}
	wantCommitted(t, c, "a")
	if err := p.BeginTransaction(); !errors.Is(err, producer.ErrProducerFatal) {
		t.Fatalf("BeginTransaction after the fenced bump: %v; want ErrProducerFatal", err)
	}
}

// Close while the epoch bump after a committed EndTxn is unanswered: the
// transaction committed, and CommitTransaction says so (it said the
// outcome was unknown, as for an EndTxn still unanswered).
func TestTxnCloseDuringBumpAfterCommitSaysCommitted(t *testing.T) {
	c := newCluster(t, 2)
	p, _ := newTxnProducer(t, c, "txn-close-bump", tv1())
	ctx := testCtx(t, 10*time.Second)
	beginWithUncertainOffsets(t, ctx, c, p)
	hold := make(chan struct{})
	defer close(hold)
	seen := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case seen <- struct{}{}:
		default:
		}
		c.SleepControl(func() { <-hold })
		return nil, nil, false
	})
	done := make(chan error, 1)
	go func() { done <- p.CommitTransaction(context.Background()) }()
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("no epoch bump after the commit")
	}
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.Close(cctx)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the transaction committed, but CommitTransaction ended by Close says: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("CommitTransaction still blocked 3s after Close returned")
	}
	wantCommitted(t, c, "a")
}

// beginWithUncertainOffsets begins a transaction of p, writes record "a" to
// partition 0 in it, and sends offsets to it whose TxnOffsetCommit is
// answered REQUEST_TIMED_OUT (a copy may still arrive: the commit must end
// with an epoch bump).
func beginWithUncertainOffsets(t *testing.T, ctx context.Context, c *kfake.Cluster, p *producer.Producer) {
	t.Helper()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.RequestTimedOut})
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
	if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{1: 100})); err != nil {
		t.Fatal(err)
	}
}
