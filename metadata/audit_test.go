package metadata

import (
	"context"
	"testing"
	"time"

	"github.com/kepoch/kepoch/errors"
)

// awaitResult advances the fake clock until res delivers or two seconds of
// real time pass.
func awaitWait[T any](t *testing.T, clock *fakeClock, res <-chan T) (T, bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		clock.Advance(time.Second)
		select {
		case got := <-res:
			return got, true
		case <-time.After(10 * time.Millisecond):
		}
	}
	var zero T
	return zero, false
}

// A topic recreated with fewer partitions while WaitFor waits for one that
// the new incarnation no longer has: the ID changed, so WaitFor must say so
// instead of waiting for a partition of the old incarnation forever.
func TestWaitForRecreatedWithFewerPartitions(t *testing.T) {
	r, fc, clock := newTestRefresher(t)
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 3}, fakePartition{leader: 2, epoch: 3})
	if _, err := r.WaitFor(ctxBg, "t", 1, 3); err != nil {
		t.Fatal(err)
	}
	type result struct {
		p   Partition
		err error
	}
	res := make(chan result, 1)
	ctx, cancel := context.WithCancel(ctxBg)
	defer cancel()
	go func() {
		p, err := r.WaitFor(ctx, "t", 1, 9)
		res <- result{p, err}
	}()
	fc.set("t", id(2), fakePartition{leader: 1, epoch: 0})
	got, ok := awaitWait(t, clock, res)
	if !ok {
		cancel()
		got = <-res
		t.Fatalf("WaitFor across a recreation that dropped the partition never returned (then %v)", got.err)
	}
	if !errors.Is(got.err, errors.ErrTopicIDChanged) {
		t.Fatalf("WaitFor across a recreation that dropped the partition = %+v, %v", got.p, got.err)
	}
}

// After Close the cache is frozen and subscriptions end: a late KIP-951
// hint (a fetch or produce answer arriving during shutdown) must neither
// change what Lookup answers nor queue an event.
func TestApplyHintAfterClose(t *testing.T) {
	r, fc, _ := newTestRefresher(t, Backoff(0, 0))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 3})
	r.Watch("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	sub := r.Subscribe()
	r.Close()
	if r.ApplyHint("t", TopicID{}, 0, 2, 4) {
		t.Error("ApplyHint after Close reported the hint applied")
	}
	if p, _ := r.Lookup("t", 0); p.Leader != 1 || p.LeaderEpoch != 3 {
		t.Errorf("Lookup after Close and a hint = %d@%d, want 1@3", p.Leader, p.LeaderEpoch)
	}
	if evs, err := sub.Next(ctxBg); err == nil || len(evs) != 0 {
		t.Errorf("Next after Close = %v, %v; want ErrClosed and no events", evs, err)
	}
}

// A refusal cached from an earlier answer (TOPIC_AUTHORIZATION_FAILED before
// an ACL was granted) is not the brokers' current word: WaitForTopic asks
// again before returning it, instead of failing every call until the next
// max-age refresh.
func TestWaitForTopicStaleRefusal(t *testing.T) {
	r, fc, _ := newTestRefresher(t, Backoff(0, 0))
	fc.mu.Lock()
	fc.topics["t"] = &fakeTopic{id: id(1), errCode: 29} // TOPIC_AUTHORIZATION_FAILED
	fc.mu.Unlock()
	r.Watch("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.WaitForTopic(ctxBg, "t"); !errors.Is(err, errors.ErrTopicAuthorization) {
		t.Fatalf("WaitForTopic(t) while refused = %v", err)
	}
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0}) // the ACL is granted
	n := fc.callCount()
	ctx, cancel := context.WithTimeout(ctxBg, 2*time.Second)
	defer cancel()
	top, _, err := r.WaitForTopic(ctx, "t")
	if err != nil || len(top.Partitions) != 1 {
		t.Fatalf("WaitForTopic(t) once allowed = %+v, %v (Metadata calls made: %d)", top, err, fc.callCount()-n)
	}
}

// WaitForPartitions waits past a cached count below the one asked for:
// partitions added to the topic (CreatePartitions) are seen in a refresh,
// and it returns once the topic has them; a count never reached ends with
// ctx.
func TestWaitForPartitionsFollowsGrowth(t *testing.T) {
	r, fc, _ := newTestRefresher(t, Backoff(0, 0))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	r.Watch("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctxBg, 50*time.Millisecond)
	defer cancel()
	if top, _, err := r.WaitForPartitions(short, "t", 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForPartitions(t, 2) of a 1-partition topic = %+v, %v", top, err)
	}
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0}, fakePartition{leader: 1, epoch: 0}, fakePartition{leader: 2, epoch: 0})
	ctx, cancel2 := context.WithTimeout(ctxBg, 2*time.Second)
	defer cancel2()
	top, _, err := r.WaitForPartitions(ctx, "t", 3)
	if err != nil || len(top.Partitions) != 3 {
		t.Fatalf("WaitForPartitions(t, 3) after growth = %+v, %v", top, err)
	}
}
