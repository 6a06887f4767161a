package metadata

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/wire"
)

// countingRequestor counts the requests the refresher sends.
type countingRequestor struct {
	kmsg.Requestor
	n atomic.Int64
}

func (c *countingRequestor) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	c.n.Add(1)
	return c.Requestor.Request(ctx, req)
}

// RequestSharded passes on the client's: the refresher learns which broker
// answered, as it does from a *kgo.Client.
func (c *countingRequestor) RequestSharded(ctx context.Context, req kmsg.Request) []kgo.ResponseShard {
	c.n.Add(1)
	return c.Requestor.(*kgo.Client).RequestSharded(ctx, req)
}

type kfakeEnv struct {
	c      *kfake.Cluster
	cl     *kgo.Client
	req    *countingRequestor
	served atomic.Int64 // Metadata requests that reached a kfake broker
}

func newKfake(t *testing.T, topics ...string) *kfakeEnv {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	env := &kfakeEnv{c: c, cl: cl, req: &countingRequestor{Requestor: cl}}
	c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.served.Add(1)
		return nil, nil, false // observe only
	})
	t.Cleanup(func() {
		cl.Close()
		c.Close()
	})
	return env
}

// newRefresher builds a refresher on env and closes it (checking that its
// goroutine is gone) at the end of the test.
func (env *kfakeEnv) newRefresher(t *testing.T, opts ...Opt) *Refresher {
	t.Helper()
	r := NewRefresher(env.req, opts...)
	t.Cleanup(func() {
		r.Close()
		requireNoRefresherGoroutines(t)
	})
	return r
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// otherBroker returns a broker ID different from id.
func otherBroker(t *testing.T, r *Refresher, id int32) int32 {
	t.Helper()
	for _, b := range r.Brokers() {
		if b.NodeID != id {
			return b.NodeID
		}
	}
	t.Fatal("no other broker")
	return -1
}

// listOffsets sends ListOffsets(latest) for t[p] with the given current
// leader epoch to one broker and returns the partition's error.
func listOffsets(ctx context.Context, t *testing.T, cl *kgo.Client, broker int32, topic string, p, epoch int32) error {
	t.Helper()
	rp, err := wire.ListOffset(ctx, cl.Broker(int(broker)), topic, p, epoch, -1)
	if err != nil {
		t.Fatalf("ListOffsets to %d: %v", broker, err)
	}
	return errors.FromCode(rp.ErrorCode)
}

// nextEvents reads from sub until n events arrived.
func nextEvents(ctx context.Context, t *testing.T, sub *Subscription, n int) []Event {
	t.Helper()
	var out []Event
	for len(out) < n {
		evs, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %v: %v", out, err)
		}
		out = append(out, evs...)
	}
	if len(out) != n {
		t.Fatalf("got %d events, want %d: %v", len(out), n, out)
	}
	return out
}

// A consumer's loop, end to end against kfake: a partition moves, the old
// leader answers NOT_LEADER_OR_FOLLOWER, the error maps to a reason, the
// trigger refreshes, the subscriber sees the change, and the new leader
// (reached through kgo's Broker(id), fed by the refresher's Metadata)
// accepts the new epoch and fences the old one.
func TestKfakeLeaderMove(t *testing.T) {
	env := newKfake(t, "t")
	ctx := testCtx(t)
	r := env.newRefresher(t)
	sub := r.Subscribe("t")
	r.Watch("t")

	p0, err := r.WaitFor(ctx, "t", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := env.c.LeaderFor("t", 0); p0.Leader != want || p0.LeaderEpoch != 0 {
		t.Fatalf("t[0] = leader %d epoch %d, kfake says leader %d epoch 0", p0.Leader, p0.LeaderEpoch, want)
	}
	top, err := r.Topic("t")
	if err != nil || top.ID.IsZero() || len(top.Partitions) != 3 {
		t.Fatalf("Topic(t) = %+v, %v", top, err)
	}
	for _, e := range nextEvents(ctx, t, sub, 3) {
		if e.Kind != PartitionAdded || e.TopicID != top.ID {
			t.Fatalf("first events: %v", e)
		}
	}
	if len(r.Brokers()) != 3 {
		t.Fatalf("brokers: %+v", r.Brokers())
	}

	to := otherBroker(t, r, p0.Leader)
	if err := env.c.MoveTopicPartition("t", 0, to); err != nil {
		t.Fatal(err)
	}
	// The old leader no longer leads: NOT_LEADER_OR_FOLLOWER.
	lerr := listOffsets(ctx, t, env.cl, p0.Leader, "t", 0, -1)
	reason, ok := ReasonFor(lerr)
	if !ok || reason != ReasonNotLeader {
		t.Fatalf("old leader answered %v, reason %v", lerr, reason)
	}
	r.Trigger(reason)
	evs := nextEvents(ctx, t, sub, 1)
	want := Event{Kind: LeaderChanged, Source: FromMetadata, Topic: "t", TopicID: top.ID, Partition: 0,
		PrevLeader: p0.Leader, PrevLeaderEpoch: 0, Leader: to, LeaderEpoch: 1}
	if evs[0] != want {
		t.Fatalf("event %v, want %v", evs[0], want)
	}
	p, err := r.Lookup("t", 0)
	if err != nil || p.Leader != to || p.LeaderEpoch != 1 {
		t.Fatalf("Lookup after the move = %+v, %v", p, err)
	}
	if err := listOffsets(ctx, t, env.cl, to, "t", 0, 1); err != nil {
		t.Fatalf("new leader with the new epoch: %v", err)
	}
	fenced := listOffsets(ctx, t, env.cl, to, "t", 0, 0)
	if reason, _ := ReasonFor(fenced); reason != ReasonFencedLeaderEpoch {
		t.Fatalf("new leader with the old epoch answered %v", fenced)
	}
	unknown := listOffsets(ctx, t, env.cl, to, "t", 0, 2)
	if reason, _ := ReasonFor(unknown); reason != ReasonUnknownLeaderEpoch {
		t.Fatalf("new leader with a future epoch answered %v", unknown)
	}
}

// N concurrent triggers cost exactly one Metadata round trip, counted both
// at the requestor and at the kfake brokers.
func TestKfakeConcurrentTriggersOneRoundTrip(t *testing.T) {
	env := newKfake(t, "t")
	ctx := testCtx(t)
	clock := newFakeClock()
	r := env.newRefresher(t, WithClock(clock), WithJitter(func() float64 { return 0.5 }), MaxAge(time.Hour))
	r.Watch("t")
	waitFor(t, func() bool { _, err := r.Lookup("t", 2); return err == nil })

	sent, served := env.req.n.Load(), env.served.Load()
	if sent != 1 || served != 1 {
		t.Fatalf("initial round trips: sent %d, served %d", sent, served)
	}
	const triggers, refreshes = 100, 10
	reasons := []Reason{ReasonNotLeader, ReasonFencedLeaderEpoch, ReasonUnknownLeaderEpoch, ReasonUnknownTopicOrPartition}
	var wg sync.WaitGroup
	for i := 0; i < triggers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Trigger(reasons[i%len(reasons)])
		}()
	}
	errs := make(chan error, refreshes)
	for i := 0; i < refreshes; i++ {
		go func() { errs <- r.Refresh(ctx, ReasonManual) }()
	}
	wg.Wait()
	waitFor(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.waiters) == refreshes
	})
	clock.Advance(100 * time.Millisecond)
	for i := 0; i < refreshes; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if s, v := env.req.n.Load()-sent, env.served.Load()-served; s != 1 || v != 1 {
		t.Fatalf("%d triggers and %d refreshes cost %d requests (%d served), want 1", triggers, refreshes, s, v)
	}
	if got := r.Stats().LastReasons; got != ReasonNotLeader|ReasonFencedLeaderEpoch|ReasonUnknownLeaderEpoch|ReasonUnknownTopicOrPartition|ReasonManual {
		t.Fatalf("LastReasons = %v", got)
	}
}

// Errors injected with kfake's Fault API map to reasons, and a refresh that
// finds nothing new changes nothing; a partition-level
// LEADER_NOT_AVAILABLE in Metadata (leader -1, epoch -1) is never adopted.
func TestKfakeFaults(t *testing.T) {
	env := newKfake(t, "t")
	ctx := testCtx(t)
	r := env.newRefresher(t, Backoff(time.Millisecond, 10*time.Millisecond))
	sub := r.Subscribe()
	r.Watch("t")
	p0, err := r.WaitFor(ctx, "t", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	nextEvents(ctx, t, sub, 3)

	for _, tc := range []struct {
		err    *kerr.Error
		reason Reason
	}{
		{kerr.NotLeaderForPartition, ReasonNotLeader},
		{kerr.UnknownLeaderEpoch, ReasonUnknownLeaderEpoch},
		{kerr.FencedLeaderEpoch, ReasonFencedLeaderEpoch},
		{kerr.UnknownTopicOrPartition, ReasonUnknownTopicOrPartition},
	} {
		h := env.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: "t", Partitions: []int32{0}, Err: tc.err})
		got := listOffsets(ctx, t, env.cl, p0.Leader, "t", 0, p0.LeaderEpoch)
		if got != error(tc.err) || h.Hits() != 1 {
			t.Fatalf("fault %v: answer %v, hits %d", tc.err, got, h.Hits())
		}
		reason, ok := ReasonFor(got)
		if !ok || reason != tc.reason {
			t.Fatalf("ReasonFor(%v) = %v", got, reason)
		}
		if err := r.Refresh(ctx, reason); err != nil {
			t.Fatal(err)
		}
		if st := r.Stats(); st.LastReasons&reason == 0 {
			t.Fatalf("round trip served %v, want %v", st.LastReasons, reason)
		}
	}

	h := env.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "t", Partitions: []int32{1}, Err: kerr.LeaderNotAvailable, Count: 3})
	p1, _ := r.Lookup("t", 1)
	for i := 0; i < 3; i++ {
		if err := r.Refresh(ctx, ReasonManual); err != nil {
			t.Fatal(err)
		}
	}
	if h.Hits() != 3 {
		t.Fatalf("Metadata fault hit %d times", h.Hits())
	}
	if got, err := r.Lookup("t", 1); err != nil || got.Leader != p1.Leader || got.LeaderEpoch != p1.LeaderEpoch {
		t.Fatalf("t[1] after leaderless answers = %+v, %v; want %+v", got, err, p1)
	}
	if evs := sub.Events(); len(evs) != 0 {
		t.Fatalf("events without any change: %v", evs)
	}
}

// A stale broker answers with an older epoch: rejected until Confirmations
// answers in a row say so, then adopted (EpochRewound); the next real
// answer moves forward again.
func TestKfakeStaleBroker(t *testing.T) {
	env := newKfake(t, "t")
	ctx := testCtx(t)
	r := env.newRefresher(t, Confirmations(3), Backoff(0, 0))
	sub := r.Subscribe()
	r.Watch("t")
	if err := r.Refresh(ctx, 0); err != nil {
		t.Fatal(err)
	}
	nextEvents(ctx, t, sub, 3)

	// Keep the epoch-0 answer, then move t[0] twice (epoch 2).
	old := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("t")
	old.Topics = append(old.Topics, rt)
	stale, err := old.RequestWith(ctx, env.cl)
	if err != nil {
		t.Fatal(err)
	}
	p0, _ := r.Lookup("t", 0)
	a := otherBroker(t, r, p0.Leader)
	for _, to := range []int32{a, p0.Leader} {
		if err := env.c.MoveTopicPartition("t", 0, to); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Refresh(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.Lookup("t", 0); p.LeaderEpoch != 2 {
		t.Fatalf("epoch after two moves = %d", p.LeaderEpoch)
	}
	evs := nextEvents(ctx, t, sub, 1) // one refresh saw epoch 2 directly
	if evs[0].Kind != LeaderChanged || evs[0].LeaderEpoch != 2 {
		t.Fatalf("event %v", evs[0])
	}

	var staleOn atomic.Bool
	staleOn.Store(true)
	env.c.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		env.c.KeepControl()
		if !staleOn.Load() {
			return nil, nil, false
		}
		resp := *stale
		resp.Version = kr.GetVersion()
		return &resp, nil, true
	})
	for i := 0; i < 2; i++ {
		if err := r.Refresh(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if p, _ := r.Lookup("t", 0); p.LeaderEpoch != 2 {
			t.Fatalf("stale answer %d adopted: epoch %d", i+1, p.LeaderEpoch)
		}
	}
	if evs := sub.Events(); len(evs) != 0 {
		t.Fatalf("events from stale answers: %v", evs)
	}
	if err := r.Refresh(ctx, 0); err != nil {
		t.Fatal(err)
	}
	evs = nextEvents(ctx, t, sub, 1)
	if e := evs[0]; e.Kind != EpochRewound || e.PrevLeaderEpoch != 2 || e.LeaderEpoch != 0 || e.Leader != p0.Leader {
		t.Fatalf("after 3 stale answers: %v", e)
	}
	staleOn.Store(false)
	if err := r.Refresh(ctx, 0); err != nil {
		t.Fatal(err)
	}
	evs = nextEvents(ctx, t, sub, 1)
	if e := evs[0]; e.Kind != LeaderChanged || e.LeaderEpoch != 2 {
		t.Fatalf("back to the real epoch: %v", e)
	}
}

// A topic deleted and recreated under the same name: the new topic ID is a
// new incarnation, adopted at once although its epochs restarted, and a
// WaitFor for an epoch of the old incarnation ends with ErrTopicIDChanged.
func TestKfakeTopicRecreated(t *testing.T) {
	env := newKfake(t, "t")
	ctx := testCtx(t)
	r := env.newRefresher(t, Backoff(time.Millisecond, 20*time.Millisecond))
	sub := r.Subscribe("t")
	r.Watch("t")
	p0, err := r.WaitFor(ctx, "t", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	nextEvents(ctx, t, sub, 3)
	for i := 0; i < 3; i++ { // epoch 3 on the old incarnation
		if err := env.c.MoveTopicPartition("t", 0, otherBroker(t, r, p0.Leader)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.WaitFor(ctx, "t", 0, 3); err != nil {
		t.Fatal(err)
	}
	nextEvents(ctx, t, sub, 1)
	oldTop, _ := r.Topic("t")

	waitErr := make(chan error, 1)
	go func() {
		_, err := r.WaitFor(ctx, "t", 0, 4) // an epoch the old incarnation would have reached
		waitErr <- err
	}()
	adm := kadm.NewClient(env.cl)
	if _, err := adm.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	if err := <-waitErr; !errors.Is(err, errors.ErrTopicIDChanged) {
		t.Fatalf("WaitFor across the recreation = %v", err)
	}
	newTop, err := r.Topic("t")
	if err != nil || newTop.ID == oldTop.ID || newTop.ID.IsZero() || len(newTop.Partitions) != 2 {
		t.Fatalf("Topic(t) after recreation = %+v, %v (old ID %v)", newTop, err, oldTop.ID)
	}
	evs := nextEvents(ctx, t, sub, 3)
	kinds := map[EventKind]int{}
	for _, e := range evs {
		kinds[e.Kind]++
		if e.TopicID != newTop.ID {
			t.Fatalf("event %v does not carry the new ID", e)
		}
	}
	if kinds[TopicRecreated] != 2 || kinds[PartitionRemoved] != 1 {
		t.Fatalf("events after recreation: %v", evs)
	}
	if p, err := r.Lookup("t", 0); err != nil || p.LeaderEpoch != 0 || p.TopicID != newTop.ID {
		t.Fatalf("t[0] of the new incarnation = %+v, %v", p, err)
	}
}

// A topic deleted and recreated, then a lagging broker answers with the old
// incarnation (its ID and its higher epochs), again and again: the cache
// must stay on the new incarnation, with no event, however many times the
// stale answer comes. (Every broker answered for the old incarnation before
// the recreation, so the first answer naming the new ID came from a broker
// seen moving from the old ID to the new one.)
func TestKfakeStaleIncarnation(t *testing.T) {
	env := newKfake(t, "t")
	ctx := testCtx(t)
	r := env.newRefresher(t, Confirmations(3), Backoff(0, 0))
	sub := r.Subscribe("t")
	r.Watch("t")
	for i := 0; i < 8; i++ { // every broker answers for the first incarnation
		if err := r.Refresh(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	nextEvents(ctx, t, sub, 3)
	p0, _ := r.Lookup("t", 0)
	if err := env.c.MoveTopicPartition("t", 0, otherBroker(t, r, p0.Leader)); err != nil { // epoch 1
		t.Fatal(err)
	}
	if _, err := r.WaitFor(ctx, "t", 0, 1); err != nil {
		t.Fatal(err)
	}
	nextEvents(ctx, t, sub, 1)
	oldTop, _ := r.Topic("t")
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("t")
	req.Topics = append(req.Topics, rt)
	stale, err := req.RequestWith(ctx, env.cl)
	if err != nil {
		t.Fatal(err)
	}

	adm := kadm.NewClient(env.cl)
	if _, err := adm.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i > 20 {
			t.Fatal("the new incarnation was never adopted")
		}
		if err := r.Refresh(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if top, _ := r.Topic("t"); top.ID != oldTop.ID && !top.ID.IsZero() {
			break
		}
	}
	nextEvents(ctx, t, sub, 3) // TopicRecreated
	newTop, _ := r.Topic("t")

	var staleOn atomic.Bool
	staleOn.Store(true)
	env.c.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		env.c.KeepControl()
		if !staleOn.Load() {
			return nil, nil, false
		}
		resp := *stale
		resp.Version = kr.GetVersion()
		return &resp, nil, true
	})
	for i := 0; i < 6; i++ {
		if err := r.Refresh(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if top, _ := r.Topic("t"); top.ID != newTop.ID {
			t.Fatalf("stale answer %d took the cache back to the old incarnation %v (new %v)", i+1, top.ID, newTop.ID)
		}
	}
	if evs := sub.Events(); len(evs) != 0 {
		t.Fatalf("events from stale answers: %v", evs)
	}
	staleOn.Store(false)
	if err := r.Refresh(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if p, err := r.Lookup("t", 0); err != nil || p.TopicID != newTop.ID || p.LeaderEpoch != 0 {
		t.Fatalf("t[0] after the stale answers = %+v, %v", p, err)
	}

	// A second recreation is seen as such.
	if _, err := adm.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i > 20 {
			t.Fatal("the third incarnation was never adopted")
		}
		if err := r.Refresh(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if top, _ := r.Topic("t"); top.ID != newTop.ID {
			if top.ID == oldTop.ID || top.ID.IsZero() || len(top.Partitions) != 2 {
				t.Fatalf("after the second recreation: %+v", top)
			}
			break
		}
	}
}
