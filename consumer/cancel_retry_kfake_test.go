package consumer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/metadata"
)

// errCxnDied is what kgo answers a request written to a connection as it
// closes (its errChosenBrokerDead).
var errCxnDied = errors.New("the broker connection has died and the request will be retried on a new connection")

// fetchGate stands between a consumer and its transport for Fetch: it
// holds the first fetch that wants (any, when wants is nil), unsent, until
// its context ends (a fetch parked at the broker, canceled by the
// consumer), then fails the next fail fetches with errCxnDied, unsent (the
// connection kgo closes after a canceled fetch), and sends the rest.
// Nothing it holds or fails reaches kgo, so kgo closes no connection of
// its own: what the consumer sees is the gate's alone.
type fetchGate struct {
	parked chan struct{} // closed when a fetch is held
	wants  func(*kmsg.FetchRequest) bool
	mu     sync.Mutex
	held   bool
	calls  int                  // fetches since the held one
	after  []*kmsg.FetchRequest // those fetches
	fail   int                  // how many of them fail
}

func newFetchGate(fail int) *fetchGate { return &fetchGate{parked: make(chan struct{}), fail: fail} }

func (g *fetchGate) send(ctx context.Context, _ int32, req *kmsg.FetchRequest, send func(context.Context) (kmsg.Response, error)) (kmsg.Response, error) {
	g.mu.Lock()
	if !g.held {
		if g.wants != nil && !g.wants(req) {
			g.mu.Unlock()
			return send(ctx)
		}
		g.held = true
		g.mu.Unlock()
		close(g.parked)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	g.calls++
	g.after = append(g.after, req)
	failIt := g.calls <= g.fail
	g.mu.Unlock()
	if failIt {
		return nil, errCxnDied
	}
	return send(ctx)
}

// sent returns how many fetches were sent after the held one.
func (g *fetchGate) sent() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// fetchOffset returns the offset req fetches partition p from (-1: it
// does not name p).
func fetchOffset(req *kmsg.FetchRequest, p int32) int64 {
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition == p {
				return rp.FetchOffset
			}
		}
	}
	return -1
}

// sentAfter returns the fetches sent after the held one.
func (g *fetchGate) sentAfter() []*kmsg.FetchRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.after)
}

// gatedConsumer starts a consumer of partitions [0, n) of a one-broker
// cluster at offset from, behind gate, with a retry backoff no test waits
// out, and its own refresher (returned).
func gatedConsumer(t *testing.T, c *kfake.Cluster, n int32, from int64, gate *fetchGate, opts ...consumer.Opt) (*consumer.Consumer, *metadata.Refresher) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r := metadata.NewRefresher(cl, metadata.MaxAge(time.Hour))
	t.Cleanup(r.Close)
	cons, err := consumer.New(append([]consumer.Opt{consumer.WithClient(cl), consumer.WithMetadata(r), consumer.RetryBackoff(time.Hour)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cons.Close(ctx)
	})
	consumer.InterceptFetches(cons, gate.send)
	assignAll(t, cons, n, consumer.At(from))
	gate.waitHeld(t)
	return cons, r
}

// waitHeld waits for the gate to hold a fetch.
func (g *fetchGate) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-g.parked:
	case <-time.After(10 * time.Second):
		t.Fatal("no fetch held")
	}
}

// settled waits for a metadata round trip that starts now, so that none
// asked for before is still to come, and returns the round trips so far.
func settled(t *testing.T, r *metadata.Refresher) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Refresh(ctx, metadata.ReasonManual); err != nil {
		t.Fatal(err)
	}
	return r.Stats().RoundTrips
}

// A fetch the consumer canceled itself (a seek made it stale) leaves kgo
// closing its connection, and the fetch sent at once after it can fail
// there. That failure is the cancel's: the fetch is sent again at once,
// with no backoff and no metadata refresh. Taken as the broker's, it
// waited out the retry backoff (here an hour) after a metadata refresh.
func TestCanceledFetchConnectionErrorRetriedAtOnce(t *testing.T) {
	c := newClusterWith(t, 1, kfake.NumBrokers(1))
	produceRange(t, c, 0, 0, 10)
	gate := newFetchGate(1)
	cons, r := gatedConsumer(t, c, 1, 10, gate)
	before := settled(t, r)
	if err := cons.Seek(topic, 0, 0); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
	if len(recs) != 10 || len(evs)+len(errs) > 0 {
		t.Fatalf("after the seek: %d records, events %v, errors %v; want 10 at once (%d fetches sent)\n%s",
			len(recs), evs, errs, gate.sent(), consumer.DebugConsumer(cons))
	}
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 10})
	// The records came with the fetch sent again after the failed one
	// (those after it fetch from offset 10).
	if after := gate.sentAfter(); len(after) < 2 || fetchOffset(after[0], 0) != 0 || fetchOffset(after[1], 0) != 0 {
		t.Fatalf("fetches after the canceled one: %d; want the failed one and its retry first, both from offset 0", len(after))
	}
	if rt, st := settled(t, r), r.Stats(); rt != before+1 || st.LastReasons != metadata.ReasonManual {
		t.Fatalf("metadata round trips since the seek: %d (last for %v); want only the test's own", rt-before, st.LastReasons)
	}
}

// The fetch sent again after a connection error its cancel caused is sent
// once: when it fails too, the failure is the broker's or the network's,
// and the partition backs off after a metadata refresh.
func TestCanceledFetchRetriedOnlyOnce(t *testing.T) {
	c := newClusterWith(t, 1, kfake.NumBrokers(1))
	produceRange(t, c, 0, 0, 10)
	gate := newFetchGate(2)
	cons, r := gatedConsumer(t, c, 1, 10, gate)
	before := settled(t, r)
	if err := cons.Seek(topic, 0, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a metadata refresh for the failed fetch", func() bool {
		st := r.Stats()
		return st.RoundTrips > before && st.LastReasons&metadata.ReasonNotLeader != 0
	})
	// The refresh was asked for by the second failure, after which
	// nothing is sent before the backoff (an hour).
	if n := gate.sent(); n != 2 {
		t.Fatalf("%d fetches after the canceled one when the refresh came; want 2 (failed, sent again once, failed)", n)
	}
}

// A partition whose machine moved on from the fetch in flight (a new
// leader epoch: it validates its position with OffsetForLeaderEpoch
// first) is not fetched again when that fetch is canceled (another
// partition of it was sought) or fails on the connection the cancel
// closed: its fetch is over, and sent again it fetched past a position
// not validated yet, with an answer nobody awaits.
func TestSupersededFetchNotSentAgain(t *testing.T) {
	c := newClusterWith(t, 2, kfake.NumBrokers(1))
	produceRange(t, c, 0, 0, 5)
	produceRange(t, c, 1, 0, 5)
	// OffsetForLeaderEpoch is never answered: partition 1 validates
	// for as long as the test runs.
	validations := make(chan struct{}, 100)
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		validations <- struct{}{}
		return nil, nil, true
	})
	names := func(req *kmsg.FetchRequest, p int32) bool { return fetchOffset(req, p) >= 0 }
	gate := newFetchGate(1)
	// Held: the first fetch of both partitions past their records.
	gate.wants = func(req *kmsg.FetchRequest) bool {
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rp.FetchOffset != 5 {
					return false
				}
			}
		}
		return names(req, 0) && names(req, 1)
	}
	cons := newConsumer(t, c, consumer.DisableFetchSessions(), consumer.RetryBackoff(time.Hour), consumer.FetchMaxWait(20*time.Millisecond))
	consumer.InterceptFetches(cons, gate.send)
	assignAll(t, cons, 2, consumer.At(0))
	recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
	if len(recs) != 10 || len(evs)+len(errs) > 0 {
		t.Fatalf("first records: %d, events %v, errors %v", len(recs), evs, errs)
	}
	gate.waitHeld(t)
	info := c.TopicInfo(topic)
	leader := c.LeaderFor(topic, 1)
	// Partition 1's leader epoch goes up: its position (epoch 0) is
	// validated before it is fetched again.
	consumer.StepMetadataEvent(cons, metadata.Event{Kind: metadata.LeaderChanged, Topic: topic, TopicID: metadata.TopicID(info.TopicID),
		Partition: 1, PrevLeader: leader, PrevLeaderEpoch: 0, Leader: leader, LeaderEpoch: 1})
	select {
	case <-validations:
	case <-time.After(10 * time.Second):
		t.Fatalf("partition 1 did not validate: %s", consumer.DebugPartition(cons, topic, 1))
	}
	if err := cons.Seek(topic, 0, 0); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs = pollUntil(t, cons, 5, 10*time.Second)
	if len(recs) != 5 || len(evs)+len(errs) > 0 {
		t.Fatalf("after the seek: %d records, events %v, errors %v; want partition 0's 5 again", len(recs), evs, errs)
	}
	after := gate.sentAfter()
	if len(after) < 2 {
		t.Fatalf("%d fetches after the canceled one; want the failed one and its retry", len(after))
	}
	for i, req := range after {
		if names(req, 1) {
			t.Fatalf("fetch %d after the cancel names partition 1, which validates: %+v", i, req.Topics)
		}
	}
}
