package consumer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// parkWatch signals, once armed, the first Fetch sent without partition p
// (not named, and forgotten when its session had it): a fetch the broker
// holds for FetchMaxWait when the partitions it does fetch have no data.
type parkWatch struct {
	p      int32
	mu     sync.Mutex
	armed  bool
	parked chan struct{}
}

func (w *parkWatch) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.parked = true, make(chan struct{})
}

func (w *parkWatch) send(ctx context.Context, _ int32, req *kmsg.FetchRequest, send func(context.Context) (kmsg.Response, error)) (kmsg.Response, error) {
	forgets := false
	for _, ft := range req.ForgottenTopics {
		forgets = forgets || slices.Contains(ft.Partitions, w.p)
	}
	w.mu.Lock()
	if w.armed && fetchOffset(req, w.p) < 0 && (forgets || req.SessionEpoch <= 0) {
		w.armed = false
		close(w.parked)
	}
	w.mu.Unlock()
	return send(ctx)
}

func (w *parkWatch) wait(t *testing.T) {
	t.Helper()
	select {
	case <-w.parked:
	case <-time.After(10 * time.Second):
		t.Fatal("no fetch without the partition was sent")
	}
}

// A partition that becomes fetchable on a broker whose fetch loop has a
// fetch parked there without it (waiting up to FetchMaxWait for data of
// the others) is not held up for FetchMaxWait: the parked fetch is
// canceled and sent again with it. Here partition 1 streams and partition
// 0, on the same broker, is idle: once partition 1's answer is buffered
// the loop parks a fetch of partition 0 alone, and when Poll hands out
// partition 1's records its next fetch waited behind that one, for
// FetchMaxWait every time.
func TestFetchableNotHeldBehindParkedFetch(t *testing.T) {
	c := newClusterWith(t, 2, kfake.NumBrokers(1))
	produceRange(t, c, 1, 0, 5)
	w := &parkWatch{p: 1}
	w.arm()
	cons := newConsumer(t, c, consumer.FetchMaxWait(5*time.Second))
	consumer.InterceptFetches(cons, w.send)
	assignAll(t, cons, 2, consumer.At(0))
	for round := int64(0); round < 3; round++ {
		from := 10 * round
		if round > 0 {
			// Partition 1 was fetchable since the last Poll: a
			// fetch sent from now on without it follows its answer.
			w.arm()
			produceRange(t, c, 1, from, from+5)
		}
		// Partition 1's answer is buffered, and a fetch of partition 0
		// alone is parked.
		w.wait(t)
		recs, evs, errs := pollUntil(t, cons, 5, 10*time.Second)
		if len(recs) != 5 || len(evs)+len(errs) > 0 {
			t.Fatalf("round %d: %d records, events %v, errors %v; want 5", round, len(recs), evs, errs)
		}
		checkInOrder(t, recs, map[int32]int64{1: from}, map[int32]int64{1: from + 5})
		start := time.Now()
		produceRange(t, c, 1, from+5, from+10)
		// Well before FetchMaxWait.
		recs, evs, errs = pollUntil(t, cons, 5, 2*time.Second)
		if len(recs) != 5 || len(evs)+len(errs) > 0 {
			t.Fatalf("round %d: %d records within 2s (FetchMaxWait 5s), events %v, errors %v; want 5\n%s",
				round, len(recs), evs, errs, consumer.DebugConsumer(cons))
		}
		checkInOrder(t, recs, map[int32]int64{1: from + 5}, map[int32]int64{1: from + 10})
		t.Logf("round %d: records after %v", round, time.Since(start).Round(time.Millisecond))
	}
}

// A fetch answering with data is not canceled for a partition that became
// fetchable meanwhile: only a fetch in flight for the admit gap (200ms) may
// be, as one parked at the broker. Here a fetch whose answer carries
// partition 0's records is held 100ms on its way back while partition 1
// is resumed on the same broker; the answer must arrive, not be canceled
// (a cancel throws the answer away and costs the connection).
func TestFetchWithDataNotCanceledForFetchable(t *testing.T) {
	c := newClusterWith(t, 2, kfake.NumBrokers(1))
	cons := newConsumer(t, c, consumer.FetchMaxWait(5*time.Second))
	var (
		mu       sync.Mutex
		hold     bool
		holding  = make(chan struct{})
		canceled int
		held     int
	)
	consumer.InterceptFetches(cons, func(ctx context.Context, _ int32, req *kmsg.FetchRequest, send func(context.Context) (kmsg.Response, error)) (kmsg.Response, error) {
		resp, err := send(ctx)
		if err != nil {
			return resp, err
		}
		data := false
		for _, rt := range resp.(*kmsg.FetchResponse).Topics {
			for _, rp := range rt.Partitions {
				data = data || (rp.Partition == 0 && len(rp.RecordBatches) > 0)
			}
		}
		mu.Lock()
		mine := hold && data
		if mine {
			hold = false
			close(holding)
		}
		mu.Unlock()
		if !mine {
			return resp, err
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			mu.Lock()
			canceled++
			mu.Unlock()
			return nil, ctx.Err()
		}
		mu.Lock()
		held++
		mu.Unlock()
		return resp, nil
	})
	assignAll(t, cons, 2, consumer.At(0))
	if err := cons.Pause(consumer.TopicPartition{Topic: topic, Partition: 1}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	hold = true
	mu.Unlock()
	produceRange(t, c, 0, 0, 5)
	select {
	case <-holding:
	case <-time.After(10 * time.Second):
		t.Fatal("no fetch answered with partition 0's records")
	}
	if err := cons.Resume(consumer.TopicPartition{Topic: topic, Partition: 1}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 5, 10*time.Second)
	if len(recs) != 5 || len(evs)+len(errs) > 0 {
		t.Fatalf("%d records, events %v, errors %v; want 5", len(recs), evs, errs)
	}
	mu.Lock()
	defer mu.Unlock()
	if canceled != 0 || held != 1 {
		t.Fatalf("the fetch answering with data was canceled %d times (delivered %d); want delivered once, never canceled", canceled, held)
	}
}
