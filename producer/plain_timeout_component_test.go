package producer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/producer"
)

// produceWrites counts the Produce requests the client writes.
type produceWrites struct{ n atomic.Int32 }

func (h *produceWrites) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		h.n.Add(1)
	}
}

// A non-idempotent producer's batch whose request goes unanswered past
// RequestTimeout is retried until its delivery deadline, like one whose
// connection broke: the timeout is the producer's own bound on an
// attempt, not the end of the record.
func TestPlainRequestTimeoutRetried(t *testing.T) {
	c := newCluster(t, 1)
	writes := &produceWrites{}
	outcomes := make(chan producer.Outcome, 10)
	p := newProducer(t, c, producer.RequiredAcks(producer.AcksLeader), producer.DisableIdempotence(),
		producer.RequestTimeout(200*time.Millisecond), producer.DeliveryTimeout(20*time.Second),
		producer.TransportOpts(kgo.WithHooks(writes)), producer.OnOutcome(func(o producer.Outcome) { outcomes <- o }))
	ctx := testCtx(t, 20*time.Second)
	if r := sendAll(t, ctx, p, prec(0, "a"))[0]; r.Err != nil || r.Recovery != nil {
		t.Fatalf("a, acknowledged at its first attempt: err %v, recovery %#v", r.Err, r.Recovery)
	}
	release, held := holdProduceSeen(c, 0)
	defer release()
	pr := sendAsync(t, ctx, p, prec(0, "b"))
	onWire(t, held)
	from := writes.n.Load()
	reported := func() bool {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		return pr.n > 0
	}
	eventually(t, 10*time.Second, "b retried after its request timed out", func() bool {
		return reported() || writes.n.Load() >= from+2
	})
	if reported() {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		t.Fatalf("b reported after its first request timed out: %v", pr.results[0].Err)
	}
	release()
	r := pr.wait(10 * time.Second)[0]
	if r.Err != nil {
		t.Fatalf("b: %v", r.Err)
	}
	// The attempt that timed out may have been appended too (here the
	// held request is, once released): the report says b may be in the
	// log twice.
	dup, ok := r.Recovery.(producer.PossibleDuplicate)
	if !ok || dup.Records != 1 || dup.From.Producer != producer.NoProducerID || !errors.Is(dup.Cause.Err, context.DeadlineExceeded) {
		t.Fatalf("b acknowledged after an unanswered attempt: recovery %#v; want a PossibleDuplicate of 1 record caused by the timeout", r.Recovery)
	}
	select {
	case o := <-outcomes:
		if _, ok := o.(producer.PossibleDuplicate); !ok {
			t.Fatalf("OnOutcome got %#v; want the PossibleDuplicate", o)
		}
	default:
		t.Fatal("OnOutcome was not given the PossibleDuplicate before b's report")
	}
}
