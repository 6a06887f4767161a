package consumer_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// TestCooperativeSlowRevokeKeepsMembership: a cooperative member whose
// revocation is still running (a slow OnRevoked, or its commit waiting)
// when another rebalance begins goes on heartbeating until it rejoins, as
// Java's heartbeat thread does until JoinGroup is sent. It stopped at the
// first REBALANCE_IN_PROGRESS answer: once the callback outlasted the
// session timeout the coordinator evicted it and gave the partitions it
// still held to the other members, which consumed them alongside it.
func TestCooperativeSlowRevokeKeepsMembership(t *testing.T) {
	const session = 2 * time.Second
	c := newClusterWith(t, 4, kfake.GroupMinSessionTimeout(time.Second))
	seq := 0
	timing := []consumer.Opt{consumer.SessionTimeout(session), consumer.RebalanceTimeout(20 * time.Second)}
	// The others wait in JoinGroup for m1 meanwhile; kfake, unlike Kafka,
	// expires a member waiting there, so theirs outlasts the wait.
	others := []consumer.Opt{consumer.SessionTimeout(10 * time.Second), consumer.RebalanceTimeout(20 * time.Second)}

	entered, release := make(chan struct{}), make(chan struct{})
	var blocked atomic.Bool
	var m1log atomic.Pointer[rebalanceLog]
	slow := consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) {
		if len(tps) > 0 && blocked.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		m1log.Load().revoked(tps)
	})
	m1 := startMember(t, c, "m1", "coop-slow", &seq, append(timing, slow)...)
	m1log.Store(m1.log)
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	waitFor(t, 10*time.Second, "m1 owns 4", func() bool { return m1.log.ownedCount() == 4 })
	id1 := m1.cons.GroupMetadata().MemberID

	// m1's heartbeats, and when the third member's JoinGroup came.
	var (
		mu       sync.Mutex
		joinedAt time.Time
		lastBeat time.Time
	)
	c.ControlKey(int16(kmsg.Heartbeat), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if kr.(*kmsg.HeartbeatRequest).MemberID == id1 {
			mu.Lock()
			lastBeat = time.Now()
			mu.Unlock()
		}
		return nil, nil, false
	})

	m2 := startMember(t, c, "m2", "coop-slow", &seq, others...)
	select {
	case <-entered: // m1 revokes the two partitions that go to m2
	case <-time.After(15 * time.Second):
		t.Fatal("m1 never revoked")
	}
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		if joinedAt.IsZero() {
			joinedAt = time.Now()
		}
		mu.Unlock()
		return nil, nil, false
	})
	m3 := startMember(t, c, "m3", "coop-slow", &seq, others...)

	// While m1's callback runs, the rebalance m3 began waits for it: it
	// must still be a member two session timeouts later, and nobody else
	// may own what it holds.
	waitFor(t, 15*time.Second, "m1 heartbeating two session timeouts into the rebalance", func() bool {
		if n := m1.log.ownedCount() + m2.log.ownedCount() + m3.log.ownedCount(); n > 4 {
			t.Fatalf("m1 evicted during its revoke callback: %d partitions owned between the members (m1, in the callback, %v; m2 %v; m3 %v)",
				n, m1.log.ownedList(), m2.log.ownedList(), m3.log.ownedList())
		}
		mu.Lock()
		defer mu.Unlock()
		return !joinedAt.IsZero() && lastBeat.Sub(joinedAt) > 2*session
	})
	free()
	waitFor(t, 30*time.Second, "the three members share the partitions", func() bool {
		return m1.log.ownedCount() > 0 && m2.log.ownedCount() > 0 && m3.log.ownedCount() > 0 &&
			m1.log.ownedCount()+m2.log.ownedCount()+m3.log.ownedCount() == 4
	})
	if id := m1.cons.GroupMetadata().MemberID; id != id1 {
		t.Fatalf("m1 was evicted: member id %q → %q; log %v", id1, id, m1.log.log())
	}
	for _, m := range []*member{m1, m2, m3} {
		for _, e := range m.log.log() {
			if len(e) >= 4 && e[:4] == "lost" {
				t.Fatalf("%s: %v", m.name, m.log.log())
			}
		}
	}
}
