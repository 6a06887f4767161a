package producer_test

import (
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
	p := newProducer(t, c, producer.RequiredAcks(producer.AcksLeader), producer.DisableIdempotence(),
		producer.RequestTimeout(200*time.Millisecond), producer.DeliveryTimeout(20*time.Second),
		producer.TransportOpts(kgo.WithHooks(writes)))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
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
	if r := pr.wait(10 * time.Second)[0]; r.Err != nil {
		t.Fatalf("b: %v", r.Err)
	}
}
