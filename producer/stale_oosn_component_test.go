package producer_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/metadata"
	"github.com/kepoch/kepoch/producer"
)

// b1 is refused before the append (NOT_ENOUGH_REPLICAS) and b2, pipelined
// behind it, is refused out of order by the same leader, whose answer to
// b2 is slow. Leadership moves meanwhile, and b1's retry is acknowledged
// by the new leader before the old one's answer to b2 arrives. That
// answer proves no gap (b2 reached the old leader before b1's retry was
// sent): b2 is resent unchanged, with no outcome and no bump, and the log
// holds every record once, in order.
func TestStaleOutOfOrderAfterLeaderMoveIsNoGap(t *testing.T) {
	c := newCluster(t, 1)
	r := sharedRefresher(t, c)
	ctx := testCtx(t, 30*time.Second)
	if _, _, err := r.WaitForTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}

	// The producer ID is held until a, b1 and b2 are buffered: a goes
	// alone (the partition's first batch), then b1 and b2 in two
	// pipelined requests.
	pidGo := make(chan struct{})
	var pidOnce atomic.Bool
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		if pidOnce.CompareAndSwap(false, true) {
			c.SleepControl(func() { <-pidGo })
		}
		return nil, nil, false
	})
	b2Seen := make(chan struct{})
	b2Go := make(chan struct{})
	var n atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		switch n.Add(1) {
		case 2: // b1
			return answerProduce(req, kerr.NotEnoughReplicas.Code, -1), nil, true
		case 3: // b2: answered late, out of order
			close(b2Seen)
			c.SleepControl(func() { <-b2Go })
			return answerProduce(req, kerr.OutOfOrderSequenceNumber.Code, -1), nil, true
		}
		return nil, nil, false
	})

	p, rec := newRecorded(t, c, producer.WithMetadata(r), producer.BatchMaxBytes(1024), producer.MaxInFlight(5),
		producer.RetryBackoff(time.Second), producer.RequestTimeout(10*time.Second), producer.DeliveryTimeout(30*time.Second))
	pad := strings.Repeat("x", 1100) // each record fills its batch
	var mu sync.Mutex
	reports := map[string]producer.Result{}
	b1Acked := make(chan struct{})
	all := make(chan struct{})
	for _, v := range []string{"a", "b1", "b2"} {
		if err := p.Produce(ctx, prec(0, v+pad), func(res producer.Result) {
			mu.Lock()
			defer mu.Unlock()
			reports[v] = res
			if v == "b1" {
				close(b1Acked)
			}
			if len(reports) == 3 {
				close(all)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	close(pidGo)
	<-b2Seen
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx, metadata.ReasonManual); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b1Acked: // by the new leader
	case <-ctx.Done():
		t.Fatal("b1 not reported")
	}
	close(b2Go)
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatal("not every record reported")
	}
	mu.Lock()
	for v, res := range reports {
		if res.Err != nil {
			t.Fatalf("%s: %v", v, res.Err)
		}
	}
	mu.Unlock()
	if p.Bumps() != 0 || len(rec.Outcomes()) != 0 {
		t.Fatalf("%d bumps, outcomes %s", p.Bumps(), kinds(rec.Outcomes()))
	}
	wantLog(t, c, 0, []string{"a" + pad, "b1" + pad, "b2" + pad})
}
