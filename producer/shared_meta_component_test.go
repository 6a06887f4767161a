package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/metadata"
	"github.com/kepoch/kepoch/producer"
)

// A refresher shared with WithMetadata and closed under a running producer
// stops the producer: the records it holds fail with an error matching
// ErrClosed (one waiting for a leader change it can no longer learn of
// would otherwise wait for its delivery timeout), and Produce, ProduceSync
// and Flush return such an error at once.
func TestSharedRefresherClosedUnderProducer(t *testing.T) {
	c := newCluster(t, 1)
	r := sharedRefresher(t, c)
	p := newProducer(t, c, producer.WithMetadata(r), producer.RequestTimeout(time.Second), producer.DeliveryTimeout(time.Minute))
	ctx := testCtx(t, 30*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))

	// From now on every Produce is refused as sent to a follower: the
	// record waits for metadata to name another leader.
	refused := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case refused <- struct{}{}:
		default:
		}
		return answerProduce(kr.(*kmsg.ProduceRequest), kerr.NotLeaderForPartition.Code, -1), nil, true
	})
	done := make(chan error, 1)
	var res []producer.Result
	go func() {
		var err error
		res, err = p.ProduceSync(ctx, prec(0, "b"))
		done <- err
	}()
	<-refused
	r.Close()
	select {
	case err := <-done:
		if !errors.Is(err, errors.ErrClosed) {
			t.Fatalf("ProduceSync under a closed refresher: %v; want ErrClosed", err)
		}
		if !errors.Is(res[0].Err, errors.ErrUnknownOutcome) {
			t.Fatalf("record refused as NOT_LEADER_OR_FOLLOWER reported %v; want ErrUnknownOutcome too", res[0].Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ProduceSync still waiting 5s after its refresher was closed")
	}

	fast := testCtx(t, 5*time.Second)
	wantRefusedClosed(t, fast, p, "stopped")
	if err := p.Close(fast); err != nil {
		t.Fatalf("Close: %v", err)
	}
	noLeak(t)
}

// A producer closed while the refresher it shares stays open refuses
// everything with ErrClosed at once, whether or not the topic is cached.
func TestClosedProducerOnSharedRefresher(t *testing.T) {
	c := newCluster(t, 1)
	r := sharedRefresher(t, c)
	p := newProducer(t, c, producer.WithMetadata(r))
	ctx := testCtx(t, 30*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantRefusedClosed(t, testCtx(t, 5*time.Second), p, "closed")
}

// wantRefusedClosed fails the test unless Produce (to a known topic and to
// an unknown one), ProduceSync and Flush on p, stopped or closed as what
// says, return ErrClosed at once (well before ctx ends).
func wantRefusedClosed(t *testing.T, ctx context.Context, p *producer.Producer, what string) {
	t.Helper()
	if err := p.Produce(ctx, prec(0, "late"), nil); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("Produce to a known topic: %v; want ErrClosed", err)
	}
	if err := p.Produce(ctx, &producer.Record{Topic: "unknown", Value: []byte("late")}, nil); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("Produce to an unknown topic: %v; want ErrClosed", err)
	}
	if _, err := p.ProduceSync(ctx, prec(0, "late")); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("ProduceSync: %v; want ErrClosed", err)
	}
	if err := p.Flush(ctx); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("Flush: %v; want ErrClosed", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("calls on the %s producer waited for their context", what)
	}
}

// A transactional producer stopped by the closing of the refresher it
// shares tells SendOffsetsToTransaction why, as it tells Produce and
// Flush: a call the stop interrupts and a call after it both return an
// error wrapping the stop's (a bare ErrClosed said nothing of the
// refresher, and looked as if the application had closed the producer).
func TestTxnSendOffsetsAfterSharedRefresherClosed(t *testing.T) {
	c := newCluster(t, 1)
	r := sharedRefresher(t, c)
	p, _ := newTxnProducer(t, c, "offsets-refresher-closed", producer.WithMetadata(r))
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	seen := holdTxnOffsetCommits(t, c)
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
	done := make(chan error, 1)
	go func() { done <- p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 1})) }()
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("no TxnOffsetCommit")
	}
	r.Close()
	var interrupted error
	select {
	case interrupted = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("SendOffsetsToTransaction still blocked 5s after its refresher was closed")
	}
	// Flush returns the stop's error itself (it waits for nothing).
	stopErr := p.Flush(ctx)
	if !errors.Is(stopErr, errors.ErrClosed) || stopErr == errors.ErrClosed {
		t.Fatalf("Flush after the refresher closed: %v; want the refresher's stop error", stopErr)
	}
	if !errors.Is(interrupted, stopErr) || errors.Is(interrupted, producer.ErrAbortRequired) {
		t.Fatalf("SendOffsetsToTransaction interrupted by the refresher's close: %v; want it to wrap %q", interrupted, stopErr)
	}
	if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 2})); !errors.Is(err, stopErr) {
		t.Fatalf("SendOffsetsToTransaction after the refresher's close: %v; want it to wrap %q", err, stopErr)
	}
}

// sharedRefresher is a refresher of its own client for c, as an
// application shares one with WithMetadata; both are closed when the test
// ends.
func sharedRefresher(t *testing.T, c *kfake.Cluster) *metadata.Refresher {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r := metadata.NewRefresher(cl, metadata.Backoff(10*time.Millisecond, 50*time.Millisecond))
	t.Cleanup(r.Close)
	return r
}

// holdTxnOffsetCommits holds every TxnOffsetCommit c receives until the test
// ends; the channel it returns is signalled as they arrive.
func holdTxnOffsetCommits(t *testing.T, c *kfake.Cluster) <-chan struct{} {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
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
	return seen
}
