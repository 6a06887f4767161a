package consumer_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// TestGroupSessionExpiresWithoutHeartbeats: a classic member whose
// heartbeats go unanswered (the coordinator is unreachable from it, the
// fetches still work) is evicted by the coordinator after the session
// timeout and its partition given to another member. It must consider the
// partition lost once a session timeout passed without an answer (OnLost)
// and stop returning its records: it went on consuming it, so both members
// owned it.
func TestGroupSessionExpiresWithoutHeartbeats(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	seq := 0
	m1 := startMember(t, c, "m1", "expiry", &seq)
	waitFor(t, 10*time.Second, "m1 owns t[0]", func() bool { return m1.log.ownedCount() == 1 })
	m2 := startMember(t, c, "m2", "expiry", &seq)
	waitFor(t, 10*time.Second, "m2 in the group", func() bool { return m2.cons.GroupMetadata().Generation > 0 })
	waitFor(t, 10*time.Second, "10 records", func() bool { r, _ := m1.got(); return len(r) == 10 })

	// From now on the coordinator does not answer m1's group requests
	// (they break their connection); its fetches still work.
	id := m1.cons.GroupMetadata().MemberID
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup} {
		c.ControlKey(int16(key), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			var member string
			switch r := kr.(type) {
			case *kmsg.HeartbeatRequest:
				member = r.MemberID
			case *kmsg.JoinGroupRequest:
				member = r.MemberID
			case *kmsg.SyncGroupRequest:
				member = r.MemberID
			}
			if member == id {
				return nil, errors.New("coordinator unreachable"), true
			}
			return nil, nil, false
		})
	}
	waitFor(t, 15*time.Second, "m2 owns t[0]", func() bool { return m2.log.ownedCount() == 1 })
	waitFor(t, 10*time.Second, "m1 lost t[0]", func() bool { return slices.Contains(m1.log.log(), "lost [t[0]]") })
	produceRange(t, c, 0, 10, 20)
	waitFor(t, 10*time.Second, "m2 got the new records", func() bool {
		r, _ := m2.got()
		return slices.ContainsFunc(r, func(r consumer.Record) bool { return r.Offset == 19 })
	})
	time.Sleep(300 * time.Millisecond)
	r1, errs := m1.got()
	for _, r := range r1 {
		if r.Offset >= 10 {
			t.Fatalf("m1 returned offset %d, produced after t[0] moved to m2", r.Offset)
		}
	}
	if !slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, consumer.ErrGroupSessionExpired) }) {
		t.Fatalf("m1's errors %v; want ErrGroupSessionExpired", errs)
	}
}

// TestGroupRejoinFailsLosesPartitions: a cooperative member keeps its
// partitions while it rejoins; if its JoinGroup requests go unanswered,
// the coordinator evicts it once the rebalance timeout passes and gives
// its partitions to the others. It must drop them as lost by then rather
// than go on consuming them beside their new owner.
func TestGroupRejoinFailsLosesPartitions(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	seq := 0
	m1 := startMember(t, c, "m1", "rejoin-fails", &seq)
	waitFor(t, 10*time.Second, "m1 owns t[0]", func() bool { return m1.log.ownedCount() == 1 })
	waitFor(t, 10*time.Second, "10 records", func() bool { r, _ := m1.got(); return len(r) == 10 })

	// m1's JoinGroup requests now break their connection; its
	// heartbeats are answered, so it learns of the next rebalance.
	id := m1.cons.GroupMetadata().MemberID
	c.ControlKey(int16(kmsg.JoinGroup), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if kr.(*kmsg.JoinGroupRequest).MemberID == id {
			return nil, errors.New("coordinator unreachable"), true
		}
		return nil, nil, false
	})
	m2 := startMember(t, c, "m2", "rejoin-fails", &seq)
	waitFor(t, 15*time.Second, "m2 owns t[0]", func() bool { return m2.log.ownedCount() == 1 })
	waitFor(t, 5*time.Second, "m1 lost t[0]", func() bool { return slices.Contains(m1.log.log(), "lost [t[0]]") })
	produceRange(t, c, 0, 10, 20)
	waitFor(t, 10*time.Second, "m2 got the new records", func() bool {
		r, _ := m2.got()
		return slices.ContainsFunc(r, func(r consumer.Record) bool { return r.Offset == 19 })
	})
	time.Sleep(300 * time.Millisecond)
	r1, _ := m1.got()
	for _, r := range r1 {
		if r.Offset >= 10 {
			t.Fatalf("m1 returned offset %d, produced after t[0] moved to m2", r.Offset)
		}
	}
}
