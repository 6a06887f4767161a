package consumer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
)

// TestEagerSlowRevokeKeepsMembership: an eager member whose revoke
// callback outlasts the session timeout keeps its membership (Java goes on
// heartbeating during onPartitionsRevoked).
func TestEagerSlowRevokeKeepsMembership(t *testing.T) {
	c := newCluster(t, 2)
	seq := 0
	var m1log atomic.Pointer[rebalanceLog]
	var fast atomic.Bool // set when the test is over: the cleanup's Close is bounded
	slow := consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) {
		if !fast.Load() {
			time.Sleep(7500 * time.Millisecond)
		}
		m1log.Load().revoked(tps)
	})
	eager := consumer.Assignors(consumer.RangeAssignor)
	m1 := startMember(t, c, "m1", "eager-slow", &seq, eager, slow, consumer.RebalanceTimeout(20*time.Second))
	m1log.Store(m1.log)
	waitFor(t, 10*time.Second, "m1 assigned", func() bool { return m1.log.ownedCount() == 2 })
	id1 := m1.cons.GroupMetadata().MemberID
	defer fast.Store(true)
	m2 := startMember(t, c, "m2", "eager-slow", &seq, eager)
	waitFor(t, 30*time.Second, "m2 gets a partition", func() bool { return m2.log.ownedCount() == 1 })
	waitFor(t, 30*time.Second, "m1 gets a partition", func() bool { return m1.log.ownedCount() == 1 })
	if id := m1.cons.GroupMetadata().MemberID; id != id1 {
		t.Fatalf("m1 was evicted during its revoke callback: member id %q → %q; log %v", id1, id, m1.log.log())
	}
}
