package metadata

import (
	"context"
	stderrors "errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kepoch/kepoch/errors"
)

var ctxBg = context.Background()

func TestBackoff(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, time.Second
	tests := []struct {
		streak int
		r      float64
		want   time.Duration
	}{
		{0, 0.5, 100 * time.Millisecond},
		{1, 0.5, 200 * time.Millisecond},
		{2, 0.5, 400 * time.Millisecond},
		{3, 0.5, 800 * time.Millisecond},
		{4, 0.5, time.Second},
		{30, 0.5, time.Second},
		{1000, 0.5, time.Second},
		{0, 0, 80 * time.Millisecond},              // -20%
		{2, 0, 320 * time.Millisecond},             // -20%
		{2, 0.999999, 479999840 * time.Nanosecond}, // just under +20%
		{3, 0.999999, 959999680 * time.Nanosecond},
		{4, 0.999999, time.Second},                                // +20% of the cap is capped
		{4, 0, 800 * time.Millisecond},                            // capped, then -20%
		{0, -3, 80 * time.Millisecond},                            // r clamped to 0
		{0, 7, time.Duration(float64(lo) * (0.8 + 0.4*0.999999))}, // r clamped below 1
	}
	for _, tt := range tests {
		if got := backoff(tt.streak, lo, hi, tt.r); got != tt.want {
			t.Errorf("backoff(%d, r=%v) = %v, want %v", tt.streak, tt.r, got, tt.want)
		}
	}
	if got := backoff(5, 0, hi, 0.5); got != 0 {
		t.Errorf("backoff with lo=0 = %v, want 0", got)
	}
	if got := backoff(5, lo, lo/2, 0.5); got != lo {
		t.Errorf("backoff with hi<lo = %v, want lo", got)
	}
}

func TestReasonFor(t *testing.T) {
	tests := []struct {
		err  error
		want Reason
		ok   bool
	}{
		{nil, 0, false},
		{errors.ErrUnknownLeaderEpoch, ReasonUnknownLeaderEpoch, true},
		{&errors.PartitionError{Op: "fetch", Err: errors.ErrFencedLeaderEpoch}, ReasonFencedLeaderEpoch, true},
		{errors.ErrNotLeader, ReasonNotLeader, true},
		{errors.ErrLeaderNotAvailable, ReasonNotLeader, true},
		{errors.ErrKafkaStorageError, ReasonNotLeader, true},
		{errors.ErrUnknownTopicOrPartition, ReasonUnknownTopicOrPartition, true},
		{errors.ErrUnknownTopicID, ReasonUnknownTopicOrPartition, true},
		{errors.ErrInconsistentTopicID, ReasonUnknownTopicOrPartition, true},
		{errors.ErrOffsetOutOfRange, 0, false},
		{errors.ErrProducerFenced, 0, false},
	}
	for _, tt := range tests {
		got, ok := ReasonFor(tt.err)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ReasonFor(%v) = %v, %v; want %v, %v", tt.err, got, ok, tt.want, tt.ok)
		}
	}
	if s := (ReasonNotLeader | ReasonWait).String(); s != "NOT_LEADER_OR_FOLLOWER|wait" {
		t.Errorf("String = %q", s)
	}
}

func TestRefresherCoalescesConcurrentTriggers(t *testing.T) {
	r, fc, clock := newTestRefresher(t)
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	r.Watch("t")
	fc.waitCalls(t, 1)
	waitFor(t, func() bool { _, err := r.Lookup("t", 0); return err == nil })
	const base = 1

	// The refresher is now inside its 100 ms spacing and the clock is
	// frozen: every trigger lands before the next round trip can start.
	const triggers, refreshes = 64, 8
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
		go func() { errs <- r.Refresh(ctxBg, ReasonManual) }()
	}
	wg.Wait()
	waitFor(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.waiters) == refreshes
	})
	fc.settle(t, base)

	clock.Advance(100 * time.Millisecond)
	for i := 0; i < refreshes; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("Refresh: %v", err)
		}
	}
	fc.settle(t, base+1)
	want := ReasonNotLeader | ReasonFencedLeaderEpoch | ReasonUnknownLeaderEpoch | ReasonUnknownTopicOrPartition | ReasonManual
	if got := r.Stats().LastReasons; got != want {
		t.Fatalf("LastReasons = %v, want %v", got, want)
	}
	if st := r.Stats(); st.RoundTrips != uint64(base+1) || st.Failures != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestRefresherTriggerDuringRoundTripGetsOneMore(t *testing.T) {
	r, fc, clock := newTestRefresher(t)
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	gate := make(chan struct{})
	fc.setGate(gate)
	r.Watch("t") // starts a round trip that blocks in the gate
	fc.waitCalls(t, 1)

	// Asked for while a round trip is in flight: served by the next one.
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() { errs <- r.Refresh(ctxBg, ReasonNotLeader) }()
	}
	for i := 0; i < 10; i++ {
		r.Trigger(ReasonFencedLeaderEpoch)
	}
	waitFor(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.waiters) == 4
	})
	fc.setGate(nil)
	close(gate)
	fc.settle(t, 1) // spacing: the clock has not moved
	select {
	case err := <-errs:
		t.Fatalf("a Refresh asked for during the first round trip returned after it: %v", err)
	default:
	}
	clock.Advance(100 * time.Millisecond)
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	fc.settle(t, 2)
}

func TestRefresherBackoffOnFailure(t *testing.T) {
	r, fc, clock := newTestRefresher(t)
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	boom := stderrors.New("broker unreachable")
	fc.setFail(boom)
	r.Watch("t")
	fc.waitCalls(t, 1)
	// Failed round trips are retried on their own, spaced 200, 400, 800 ms
	// (100 ms doubled per consecutive failure), then 1 s (the cap), with
	// the fixed jitter factor 1.0.
	want := []time.Duration{200, 400, 800, 1000, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		prev := fc.call(i)
		due := clock.timerAfter(t, prev.timers)
		if got := due.Sub(prev.at); got != w {
			t.Fatalf("retry %d scheduled %v after the failure, want %v", i, got, w)
		}
		fc.settle(t, i+1)
		clock.Advance(w)
		fc.waitCalls(t, i+2)
	}
	if st := r.Stats(); st.Failures < uint64(len(want)) || !stderrors.Is(st.LastErr, boom) || st.LastReasons&ReasonRetry == 0 {
		t.Fatalf("Stats = %+v", st)
	}

	// Recovery: the next retry succeeds and adds the topic (a change), so
	// the spacing is back to the minimum.
	fc.setFail(nil)
	n := fc.callCount()
	clock.Advance(time.Second)
	fc.waitCalls(t, n+1)
	waitFor(t, func() bool { _, err := r.Lookup("t", 0); return err == nil })
	last := fc.call(n)
	clock.timerAfter(t, last.timers) // parked until MaxAge
	r.Trigger(ReasonNotLeader)
	due := clock.timerAfter(t, last.timers+1)
	if got := due.Sub(last.at); got != 100*time.Millisecond {
		t.Fatalf("after a productive round trip the spacing is %v, want 100ms", got)
	}
}

func TestRefresherFruitlessTriggersBackOff(t *testing.T) {
	r, fc, clock := newTestRefresher(t)
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	r.Watch("t")
	fc.waitCalls(t, 1)
	waitFor(t, func() bool { _, err := r.Lookup("t", 0); return err == nil })
	// Each trigger that changes nothing doubles the spacing.
	for i, w := range []time.Duration{100, 200, 400, 800, 1000} {
		w *= time.Millisecond
		prev := fc.call(i)
		clock.timerAfter(t, prev.timers) // parked until MaxAge
		r.Trigger(ReasonNotLeader)
		due := clock.timerAfter(t, prev.timers+1)
		if got := due.Sub(prev.at); got != w {
			t.Fatalf("trigger %d: next round trip %v after the last, want %v", i, got, w)
		}
		clock.Advance(w)
		fc.waitCalls(t, i+2)
	}
}

func TestRefresherMaxAge(t *testing.T) {
	r, fc, clock := newTestRefresher(t, MaxAge(time.Minute))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	r.Watch("t")
	fc.waitCalls(t, 1)
	fc.settle(t, 1)
	clock.Advance(59 * time.Second)
	fc.settle(t, 1)
	clock.Advance(time.Second)
	fc.waitCalls(t, 2)
	waitFor(t, func() bool { return r.Stats().LastReasons == ReasonMaxAge })
	clock.Advance(time.Minute)
	fc.waitCalls(t, 3)
	if c := fc.call(2); !reflect.DeepEqual(c.topics, []string{"t"}) {
		t.Fatalf("periodic refresh asked for %v", c.topics)
	}
}

func TestRefresherInterest(t *testing.T) {
	r, fc, _ := newTestRefresher(t, Backoff(0, 0))
	fc.set("a", id(1), fakePartition{leader: 1, epoch: 0})
	fc.set("b", id(2), fakePartition{leader: 2, epoch: 0})
	fc.set("c", id(3), fakePartition{leader: 3, epoch: 0})

	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	if c := fc.call(0); c.all || len(c.topics) != 0 {
		t.Fatalf("with no interest the request must ask for no topic, got %+v", c)
	}
	if len(r.Brokers()) != 3 || r.Brokers()[0].Addr() != "127.0.0.1:9091" {
		t.Fatalf("brokers = %+v", r.Brokers())
	}
	unA1 := r.Watch("b", "a")
	unA2 := r.Watch("a")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	last := func() fakeCall { return fc.call(fc.callCount() - 1) }
	if got := last().topics; !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("topics = %v", got)
	}
	unA1()
	unA1() // idempotent
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	if got := last().topics; !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("after one unwatch topics = %v", got)
	}
	unAll := r.WatchAll()
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	if !last().all {
		t.Fatal("WatchAll did not ask for every topic")
	}
	if _, err := r.Topic("c"); err != nil {
		t.Fatalf("Topic(c) after WatchAll: %v", err)
	}
	unAll()
	unA2()
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	if c := last(); c.all || len(c.topics) != 0 {
		t.Fatalf("after releasing everything the request is %+v", c)
	}
	// Released topics stay cached.
	if _, err := r.Lookup("a", 0); err != nil {
		t.Fatalf("Lookup(a) after unwatch: %v", err)
	}
}

func TestRefresherLookupAndTopic(t *testing.T) {
	r, fc, _ := newTestRefresher(t, Backoff(0, 0))
	fc.set("t", id(9), fakePartition{leader: 2, epoch: 4}, fakePartition{leader: -1, epoch: 4, errCode: 5})
	r.Watch("t", "missing")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	p, err := r.Lookup("t", 0)
	if err != nil || p.Leader != 2 || p.LeaderEpoch != 4 || p.TopicID != id(9) || p.Topic != "t" || p.Partition != 0 {
		t.Fatalf("Lookup(t, 0) = %+v, %v", p, err)
	}
	p, err = r.Lookup("t", 1)
	var pe *errors.PartitionError
	if !errors.As(err, &pe) || pe.Op != "lookup" || !errors.Is(err, errors.ErrLeaderNotAvailable) || p.LeaderEpoch != 4 {
		t.Fatalf("Lookup(t, 1) = %+v, %v", p, err)
	}
	if _, err := r.Lookup("t", 2); !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
		t.Fatalf("Lookup(t, 2) err = %v", err)
	}
	if _, err := r.Lookup("missing", 0); !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
		t.Fatalf("Lookup(missing) err = %v", err)
	}
	top, err := r.Topic("t")
	if err != nil || top.ID != id(9) || len(top.Partitions) != 2 {
		t.Fatalf("Topic(t) = %+v, %v", top, err)
	}
	if _, err := r.Topic("missing"); !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
		t.Fatalf("Topic(missing) err = %v", err)
	}
}

// TestRefresherVersion: Version stays equal while nothing is stored, TopicAt
// returns the Version of the view it read, and an answer that changes the
// topic changes the Version.
func TestRefresherVersion(t *testing.T) {
	r, fc, _ := newTestRefresher(t, Backoff(0, 0))
	fc.set("t", id(9), fakePartition{leader: 2, epoch: 4})
	r.Watch("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	v := r.Version()
	if v != r.Version() {
		t.Fatal("Version changed with no answer in between")
	}
	top, tv, err := r.TopicAt("t")
	if err != nil || len(top.Partitions) != 1 || tv != v {
		t.Fatalf("TopicAt(t) = %+v, %v, %v (Version equal: %v)", top, tv, err, tv == v)
	}
	fc.set("t", id(9), fakePartition{leader: 2, epoch: 4}, fakePartition{leader: 3, epoch: 1})
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	if r.Version() == v {
		t.Fatal("Version unchanged after an answer that added a partition")
	}
	top, tv, err = r.TopicAt("t")
	if err != nil || len(top.Partitions) != 2 || tv != r.Version() {
		t.Fatalf("TopicAt(t) after growth = %+v, %v", top, err)
	}
	if _, _, err := r.TopicAt("missing"); !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
		t.Fatalf("TopicAt(missing) err = %v", err)
	}
}

func TestRefresherSubscription(t *testing.T) {
	r, fc, _ := newTestRefresher(t, Backoff(0, 0))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0}, fakePartition{leader: 2, epoch: 0})
	fc.set("u", id(2), fakePartition{leader: 3, epoch: 0})
	all := r.Subscribe()
	onlyU := r.Subscribe("u")
	never := r.Subscribe() // never read until the end: must not block anything
	r.Watch("t", "u")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	evs, err := all.Next(ctxBg)
	if err != nil || len(evs) != 3 {
		t.Fatalf("Next = %v, %v", evs, err)
	}
	for _, e := range evs {
		if e.Kind != PartitionAdded {
			t.Fatalf("first events must be PartitionAdded: %v", evs)
		}
	}
	select {
	case <-onlyU.C():
	case <-time.After(5 * time.Second):
		t.Fatal("C not signalled")
	}
	if evs := onlyU.Events(); len(evs) != 1 || evs[0].Topic != "u" {
		t.Fatalf("filtered events = %v", evs)
	}

	// 200 epoch bumps: every one is delivered, in order, and the unread
	// subscription holds all of them without slowing the refresher.
	const bumps = 200
	for e := int32(1); e <= bumps; e++ {
		fc.setEpoch("t", 0, 1+e%3, e)
		if err := r.Refresh(ctxBg, 0); err != nil {
			t.Fatal(err)
		}
	}
	var got []Event
	for len(got) < bumps {
		evs, err := all.Next(ctxBg)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, evs...)
	}
	for i, e := range got {
		want := int32(i + 1)
		if e.Kind != LeaderChanged || e.Partition != 0 || e.LeaderEpoch != want || e.PrevLeaderEpoch != want-1 || e.Leader != 1+want%3 {
			t.Fatalf("event %d = %v", i, e)
		}
	}
	if evs := onlyU.Events(); len(evs) != 0 {
		t.Fatalf("u got events of t: %v", evs)
	}
	if evs := never.Events(); len(evs) != 3+bumps {
		t.Fatalf("unread subscription holds %d events, want %d", len(evs), 3+bumps)
	}

	// Close: no more events, Next reports ErrClosed.
	never.Close()
	never.Close()
	fc.setEpoch("t", 0, 1, bumps+1)
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := never.Next(ctxBg); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("Next after Close = %v", err)
	}
	ctx, cancel := context.WithTimeout(ctxBg, 10*time.Millisecond)
	defer cancel()
	if _, err := onlyU.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next without events = %v", err)
	}
	// Events queued before the refresher closes are still delivered.
	r.Close()
	if evs, err := all.Next(ctxBg); err != nil || len(evs) != 1 {
		t.Fatalf("Next after refresher Close = %v, %v", evs, err)
	}
	if _, err := all.Next(ctxBg); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("second Next after refresher Close = %v", err)
	}
}

func TestRefresherWaitFor(t *testing.T) {
	r, fc, clock := newTestRefresher(t)
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 3})

	// Already satisfied once the topic is fetched.
	p, err := r.WaitFor(ctxBg, "t", 0, 2)
	if err != nil || p.LeaderEpoch != 3 {
		t.Fatalf("WaitFor(2) = %+v, %v", p, err)
	}

	// Waiting for an epoch the cluster has not reached: WaitFor keeps
	// asking (spaced by the backoff) until it appears.
	type result struct {
		p   Partition
		err error
	}
	res := make(chan result, 1)
	go func() {
		p, err := r.WaitFor(ctxBg, "t", 0, 5)
		res <- result{p, err}
	}()
	n := fc.callCount()
	for i := 0; i < 3; i++ {
		clock.Advance(time.Second)
		fc.waitCalls(t, n+i+1)
	}
	select {
	case got := <-res:
		t.Fatalf("WaitFor returned early: %+v", got)
	default:
	}
	fc.setEpoch("t", 0, 2, 5)
	clock.Advance(time.Second)
	got := <-res
	if got.err != nil || got.p.Leader != 2 || got.p.LeaderEpoch != 5 {
		t.Fatalf("WaitFor(5) = %+v", got)
	}
	if st := r.Stats(); st.LastReasons&ReasonWait == 0 {
		t.Fatalf("WaitFor refreshes carry %v", st.LastReasons)
	}

	// A hint wakes a waiter without a round trip.
	go func() {
		p, err := r.WaitFor(ctxBg, "t", 0, 6)
		res <- result{p, err}
	}()
	waitFor(t, func() bool { // the waiter has asked for a refresh the frozen clock holds back
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.pending&ReasonWait != 0
	})
	if !r.ApplyHint("t", TopicID{}, 0, 3, 6) {
		t.Fatal("hint not applied")
	}
	if got := <-res; got.err != nil || got.p.Leader != 3 || got.p.LeaderEpoch != 6 {
		t.Fatalf("WaitFor(6) after a hint = %+v", got)
	}

	// The topic is recreated while waiting: the old epoch will never come.
	go func() {
		p, err := r.WaitFor(ctxBg, "t", 0, 9)
		res <- result{p, err}
	}()
	fc.set("t", id(2), fakePartition{leader: 1, epoch: 0})
	for {
		clock.Advance(time.Second)
		select {
		case got := <-res:
			if !errors.Is(got.err, errors.ErrTopicIDChanged) || got.p.TopicID != id(2) {
				t.Fatalf("WaitFor across a recreation = %+v", got)
			}
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}

	// Context and Close.
	ctx, cancel := context.WithTimeout(ctxBg, 20*time.Millisecond)
	defer cancel()
	if _, err := r.WaitFor(ctx, "t", 0, 100); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor with a deadline = %v", err)
	}
	go func() {
		p, err := r.WaitFor(ctxBg, "t", 0, 100)
		res <- result{p, err}
	}()
	time.Sleep(10 * time.Millisecond)
	r.Close()
	if got := <-res; !errors.Is(got.err, errors.ErrClosed) {
		t.Fatalf("WaitFor across Close = %v", got.err)
	}
}

func TestRefresherClose(t *testing.T) {
	r, fc, _ := newTestRefresher(t)
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	gate := make(chan struct{}) // never opened: the round trip hangs until cancelled
	fc.setGate(gate)
	errs := make(chan error, 1)
	go func() { errs <- r.Refresh(ctxBg, 0) }()
	fc.waitCalls(t, 1)
	sub := r.Subscribe()

	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not cancel the round trip in flight")
	}
	if err := <-errs; !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("Refresh across Close = %v", err)
	}
	requireNoRefresherGoroutines(t)

	r.Close() // idempotent
	r.Trigger(ReasonNotLeader)
	if err := r.Refresh(ctxBg, 0); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("Refresh after Close = %v", err)
	}
	if _, err := r.WaitFor(ctxBg, "t", 0, 0); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("WaitFor after Close = %v", err)
	}
	if _, err := sub.Next(ctxBg); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("Next after Close = %v", err)
	}
	if fc.callCount() != 1 {
		t.Fatalf("calls after Close: %d", fc.callCount())
	}
}

func TestRefresherRefreshContext(t *testing.T) {
	r, fc, _ := newTestRefresher(t)
	gate := make(chan struct{})
	fc.setGate(gate)
	ctx, cancel := context.WithCancel(ctxBg)
	cancel()
	if err := r.Refresh(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Refresh with a cancelled context = %v", err)
	}
	ctx, cancel = context.WithTimeout(ctxBg, 20*time.Millisecond)
	defer cancel()
	if err := r.Refresh(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Refresh past its deadline = %v", err)
	}
	close(gate)
}

func TestRefresherRequestTimeout(t *testing.T) {
	r, fc, _ := newTestRefresher(t, RequestTimeout(20*time.Millisecond))
	fc.setGate(make(chan struct{})) // hangs until the request's own timeout
	if err := r.Refresh(ctxBg, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Refresh of a hung round trip = %v", err)
	}
}

// RequestTimeout(0) is no bound, as MaxAge(0) is no periodic refresh and
// Backoff(0, 0) no spacing: taken as a deadline, every round trip failed
// before it was sent (context deadline exceeded), so the refresher never
// refreshed again and every WaitFor waited for its ctx.
func TestRefresherRequestTimeoutZero(t *testing.T) {
	r, fc, _ := newTestRefresher(t, RequestTimeout(0), Backoff(0, 0))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	gate := make(chan struct{})
	fc.setGate(gate) // answers come a little later, as a broker's do
	time.AfterFunc(20*time.Millisecond, func() { close(gate) })
	r.Watch("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatalf("Refresh with RequestTimeout(0) = %v", err)
	}
	if p, err := r.Lookup("t", 0); err != nil || p.Leader != 1 {
		t.Fatalf("Lookup after the refresh = %+v, %v", p, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Close leaves no goroutine behind, counted with runtime.NumGoroutine, even
// with waiters, subscribers and a round trip in flight.
func TestRefresherCloseGoroutineDelta(t *testing.T) {
	before := runtime.NumGoroutine()
	clock := newFakeClock()
	fc := newFakeCluster(clock)
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	r := NewRefresher(fc, WithClock(clock))
	sub := r.Subscribe()
	r.Watch("t")
	if _, err := r.WaitFor(ctxBg, "t", 0, 0); err != nil {
		t.Fatal(err)
	}
	fc.setGate(make(chan struct{}))
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(3)
		go func() { defer wg.Done(); _, _ = r.WaitFor(ctxBg, "t", 0, 99) }()
		go func() { defer wg.Done(); _ = r.Refresh(ctxBg, 0) }()
		go func() { defer wg.Done(); _, _ = sub.Next(ctxBg) }()
	}
	clock.Advance(time.Second)
	fc.waitCalls(t, 2) // a round trip hangs in the gate
	r.Close()
	wg.Wait()
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}

// TestRefresherWaitForTopic: WaitForTopic needs the topic's partitions, not
// their leaders (a leaderless partition 0 does not hold it up); it keeps
// asking for an unknown topic until it appears, and returns on ctx and on
// Close.
func TestRefresherWaitForTopic(t *testing.T) {
	r, fc, clock := newTestRefresher(t)
	fc.set("t", id(1), fakePartition{leader: -1, epoch: 3}, fakePartition{leader: 2, epoch: 3})
	tp, _, err := r.WaitForTopic(ctxBg, "t")
	if err != nil || len(tp.Partitions) != 2 {
		t.Fatalf("WaitForTopic(t) with partition 0 leaderless = %+v, %v", tp, err)
	}

	res := make(chan error, 1)
	go func() {
		tp, _, err := r.WaitForTopic(ctxBg, "u")
		if err == nil && len(tp.Partitions) != 1 {
			err = fmt.Errorf("%d partitions", len(tp.Partitions))
		}
		res <- err
	}()
	asking := func() bool { // the waiter has asked for a refresh the frozen clock holds back
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.pending&ReasonWait != 0
	}
	n := fc.callCount()
	for i := 0; i < 2; i++ {
		waitFor(t, asking)
		clock.Advance(time.Second)
		fc.waitCalls(t, n+i+1)
	}
	select {
	case err := <-res:
		t.Fatalf("WaitForTopic(u) returned before u existed: %v", err)
	default:
	}
	fc.set("u", id(2), fakePartition{leader: 1, epoch: 0})
	waitFor(t, asking)
	clock.Advance(time.Second)
	if err := <-res; err != nil {
		t.Fatalf("WaitForTopic(u) = %v", err)
	}

	ctx, cancel := context.WithCancel(ctxBg)
	go func() {
		_, _, err := r.WaitForTopic(ctx, "v")
		res <- err
	}()
	cancel()
	if err := <-res; err != context.Canceled {
		t.Fatalf("WaitForTopic(v) after its ctx ended = %v", err)
	}
	go func() {
		_, _, err := r.WaitForTopic(ctxBg, "v")
		res <- err
	}()
	r.Close()
	if err := <-res; !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("WaitForTopic(v) after Close = %v", err)
	}
}

// An answer naming a topic ID the cache cannot place yet (no broker shown
// moving to it; the fake names no broker) is held back, and the refresher
// asks again by itself, spaced by the backoff, until Confirmations answers
// in a row adopted it: a recreation seen once is not left waiting for the
// next trigger or MaxAge.
func TestRefresherUnsettledIDAsksAgain(t *testing.T) {
	r, fc, clock := newTestRefresher(t, Confirmations(3))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 4})
	// The watch's own round trip is sent at once. (A Refresh here could
	// miss it, starting just after, and wait for the next one, which the
	// backoff on the fake clock holds back for good: the test hung.)
	r.Watch("t")
	waitFor(t, func() bool { _, err := r.Topic("t"); return err == nil })
	fc.set("t", id(2), fakePartition{leader: 2, epoch: 0})
	n := fc.callCount()
	r.Trigger(ReasonManual)
	for i := 0; ; i++ {
		if top, _ := r.Topic("t"); top.ID == id(2) {
			break
		}
		if i > 100 {
			t.Fatalf("the new ID was not adopted; %d Metadata calls after the trigger", fc.callCount()-n)
		}
		clock.Advance(time.Second)
		time.Sleep(2 * time.Millisecond)
	}
	if got := fc.callCount() - n; got != 3 {
		t.Fatalf("%d Metadata calls to adopt the new ID, want 3 (Confirmations)", got)
	}
	if st := r.Stats(); st.LastReasons != ReasonUnsettled {
		t.Fatalf("last round trip's reasons %v", st.LastReasons)
	}
	clock.Advance(time.Second)
	fc.settle(t, n+3) // settled: no more asking
}

// A cached topic answered unknown (deleted) is asked about again by the
// refresher itself, spaced by the backoff, until Confirmations answers in
// a row removed its partitions: not n periodic refreshes (MaxAge each)
// later, while a producer takes records for it that can only time out.
// Once removed, the refresher stops asking.
func TestRefresherDeletedTopicAsksAgainUntilRemoved(t *testing.T) {
	r, fc, clock := newTestRefresher(t, Confirmations(3))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 4})
	r.Watch("t")
	waitFor(t, func() bool { _, err := r.Topic("t"); return err == nil })
	fc.mu.Lock()
	delete(fc.topics, "t")
	fc.mu.Unlock()
	n := fc.callCount()
	r.Trigger(ReasonManual)
	for i := 0; ; i++ {
		if _, err := r.Topic("t"); errors.Is(err, errors.ErrUnknownTopicOrPartition) {
			break
		}
		if i > 100 {
			t.Fatalf("the deleted topic was not removed; %d Metadata calls after the trigger", fc.callCount()-n)
		}
		clock.Advance(time.Second)
		time.Sleep(2 * time.Millisecond)
	}
	if got := fc.callCount() - n; got != 3 {
		t.Fatalf("%d Metadata calls to remove the topic, want 3 (Confirmations)", got)
	}
	clock.Advance(time.Second)
	fc.settle(t, n+3) // removed: no more asking
}
