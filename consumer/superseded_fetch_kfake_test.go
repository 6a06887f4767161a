package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/metadata"
)

// sentFetch is one Fetch a consumer sent, and the broker it went to.
type sentFetch struct {
	broker int32
	req    *kmsg.FetchRequest
}

// fetchHolder stands between a consumer and its transport for Fetch: it
// records every fetch, and holds the first one wants accepts, unsent, until
// release is called (it is then sent) or its context ends (the consumer
// canceled it).
type fetchHolder struct {
	wants    func(broker int32, req *kmsg.FetchRequest) bool
	held     chan struct{} // closed when a fetch is held
	released chan struct{}
	mu       sync.Mutex
	holding  bool
	heldCtx  context.Context
	sent     []sentFetch
}

func newFetchHolder(wants func(int32, *kmsg.FetchRequest) bool) *fetchHolder {
	return &fetchHolder{wants: wants, held: make(chan struct{}), released: make(chan struct{})}
}

func (h *fetchHolder) send(ctx context.Context, broker int32, req *kmsg.FetchRequest, send func(context.Context) (kmsg.Response, error)) (kmsg.Response, error) {
	h.mu.Lock()
	h.sent = append(h.sent, sentFetch{broker, req})
	hold := !h.holding && h.wants(broker, req)
	if hold {
		h.holding, h.heldCtx = true, ctx
	}
	h.mu.Unlock()
	if !hold {
		return send(ctx)
	}
	close(h.held)
	select {
	case <-h.released:
		return send(ctx)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (h *fetchHolder) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no fetch held")
	}
}

func (h *fetchHolder) release() { close(h.released) }

// heldCanceled reports whether the consumer canceled the held fetch.
func (h *fetchHolder) heldCanceled() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.heldCtx.Err() != nil
}

func (h *fetchHolder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sent)
}

// since returns the fetches sent from index i on.
func (h *fetchHolder) since(i int) []sentFetch {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sentFetch(nil), h.sent[i:]...)
}

// waitSent waits until n fetches were sent in all.
func (h *fetchHolder) waitSent(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, "fetches", func() bool { return h.count() >= n })
}

// A fetch the seek machine superseded before it was sent (the partition's
// leader epoch went up: its position is validated with
// OffsetForLeaderEpoch first) is never sent: not when the fetch loop that
// was busy with another request comes back to it, nor when the partition,
// paused meanwhile, is resumed. Sent, it went to the old leader with the
// old CurrentLeaderEpoch, as a wasted request whose answer nobody awaits,
// on every leader change of a partition waiting for its fetch loop. Here
// partition 1's fetch waits behind a fetch of partition 0 alone, held on
// its way out, when partition 1's leader epoch goes up.
func TestSupersededQueuedFetchNotSent(t *testing.T) {
	for _, paused := range []bool{false, true} {
		name := "queued"
		if paused {
			name = "paused"
		}
		t.Run(name, func(t *testing.T) {
			c := newClusterWith(t, 2, kfake.NumBrokers(1))
			produceRange(t, c, 1, 0, 5)
			// OffsetForLeaderEpoch waits for validate: partition 1
			// validates until then.
			validating, validate := make(chan struct{}, 100), make(chan struct{})
			c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				validating <- struct{}{}
				c.SleepControl(func() { <-validate })
				return nil, nil, false
			})
			var (
				mu     sync.Mutex
				seenP1 bool
			)
			// Held: the first fetch of partition 0 alone after one
			// of partition 1 (whose records are buffered then).
			h := newFetchHolder(func(_ int32, req *kmsg.FetchRequest) bool {
				mu.Lock()
				defer mu.Unlock()
				if fetchOffset(req, 1) >= 0 {
					seenP1 = true
					return false
				}
				return seenP1 && fetchOffset(req, 0) >= 0
			})
			cons := newConsumer(t, c, consumer.DisableFetchSessions())
			consumer.InterceptFetches(cons, h.send)
			assignAll(t, cons, 2, consumer.At(0))
			h.waitHeld(t)
			// Partition 1's next fetch (offset 5) waits for the loop.
			recs, evs, errs := pollUntil(t, cons, 5, 10*time.Second)
			if len(recs) != 5 || len(evs)+len(errs) > 0 {
				t.Fatalf("first records: %d, events %v, errors %v", len(recs), evs, errs)
			}
			checkInOrder(t, recs, map[int32]int64{1: 0}, map[int32]int64{1: 5})
			tp1 := consumer.TopicPartition{Topic: topic, Partition: 1}
			if paused {
				if err := cons.Pause(tp1); err != nil {
					t.Fatal(err)
				}
			}
			leader := c.LeaderFor(topic, 1)
			if err := c.MoveTopicPartition(topic, 1, leader); err != nil { // epoch 1
				t.Fatal(err)
			}
			// Records in the new epoch: kfake answers
			// OffsetForLeaderEpoch -1/-1 for an old epoch while the
			// new one holds none, unlike Kafka.
			produceRange(t, c, 1, 5, 10)
			consumer.StepMetadataEvent(cons, metadata.Event{Kind: metadata.LeaderChanged, Topic: topic,
				TopicID: metadata.TopicID(c.TopicInfo(topic).TopicID), Partition: 1,
				PrevLeader: leader, PrevLeaderEpoch: 0, Leader: leader, LeaderEpoch: 1})
			select {
			case <-validating:
			case <-time.After(10 * time.Second):
				t.Fatalf("partition 1 did not validate: %s", consumer.DebugPartition(cons, topic, 1))
			}
			from := h.count()
			h.release()
			h.waitSent(t, from+3)
			if paused {
				if err := cons.Resume(tp1); err != nil {
					t.Fatal(err)
				}
				h.waitSent(t, h.count()+3)
			}
			for i, f := range h.since(from) {
				if o := fetchOffset(f.req, 1); o >= 0 {
					t.Fatalf("fetch %d after the leader change names partition 1 (offset %d), which validates: %+v\n%s",
						i, o, f.req.Topics, consumer.DebugPartition(cons, topic, 1))
				}
			}
			// Validated, partition 1 goes on where it was, nothing
			// skipped or read twice.
			close(validate)
			recs, evs, errs = pollUntil(t, cons, 5, 10*time.Second)
			if len(evs)+len(errs) > 0 {
				t.Fatalf("after the validation: events %v, errors %v", evs, errs)
			}
			checkInOrder(t, recs, map[int32]int64{1: 5}, map[int32]int64{1: 10})
		})
	}
}

// A partition's fetch in flight, superseded by a leader change that moves
// the partition to another broker, does not get the request it is in
// canceled when the partition's new fetch is sent to the new leader: that
// request's answer holds the new fetch up on no broker, and a cancel costs
// the other partitions in it their fetch (asked again) and the broker's
// connection (kgo closes a canceled request's). Here partitions 0 and 1
// share a leader and a fetch, held on its way out, when partition 1 moves.
func TestLeaderChangeKeepsOthersFetch(t *testing.T) {
	c := newClusterWith(t, 2)
	from := c.LeaderFor(topic, 0)
	if err := c.MoveTopicPartition(topic, 1, from); err != nil {
		t.Fatal(err)
	}
	to := (from + 1) % 3
	h := newFetchHolder(func(broker int32, req *kmsg.FetchRequest) bool {
		return broker == from && fetchOffset(req, 0) >= 0 && fetchOffset(req, 1) >= 0
	})
	cons := newConsumer(t, c)
	consumer.InterceptFetches(cons, h.send)
	assignAll(t, cons, 2, consumer.At(0))
	h.waitHeld(t)
	epoch := c.PartitionInfo(topic, 1).Epoch
	if err := c.MoveTopicPartition(topic, 1, to); err != nil {
		t.Fatal(err)
	}
	n := h.count()
	consumer.StepMetadataEvent(cons, metadata.Event{Kind: metadata.LeaderChanged, Topic: topic,
		TopicID: metadata.TopicID(c.TopicInfo(topic).TopicID), Partition: 1,
		PrevLeader: from, PrevLeaderEpoch: epoch, Leader: to, LeaderEpoch: epoch + 1})
	waitFor(t, 10*time.Second, "a fetch of partition 1 from its new leader", func() bool {
		for _, f := range h.since(n) {
			if f.broker == to && fetchOffset(f.req, 1) >= 0 {
				return true
			}
		}
		return false
	})
	if h.heldCanceled() {
		t.Fatalf("the fetch of partition 0 in flight at broker %d was canceled by partition 1's move to broker %d", from, to)
	}
	h.release()
	produceRange(t, c, 0, 0, 5)
	produceRange(t, c, 1, 0, 5)
	recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v, errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 5, 1: 5})
}
