package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// resume starts m polling again after halt.
func (m *member) resume() {
	ctx, cancel := context.WithCancel(context.Background())
	m.stop, m.done = cancel, make(chan struct{})
	go m.poll(ctx)
}

// groupTraffic records, per member ID, the OffsetCommit requests (their
// offsets of topic) and when the member left (LeaveGroup, or a KIP-848
// heartbeat with epoch -1 or -2).
type groupTraffic struct {
	mu      sync.Mutex
	commits map[string][]commitSeen
	left    map[string]int32 // member → the epoch it left with (classic: -1)
	beats   map[string]int   // KIP-848 heartbeats after the member left
}

type commitSeen struct {
	offsets   map[int32]int64
	afterLeft bool
}

func watchGroupTraffic(c *kfake.Cluster) *groupTraffic {
	g := &groupTraffic{commits: map[string][]commitSeen{}, left: map[string]int32{}, beats: map[string]int{}}
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetCommitRequest)
		g.mu.Lock()
		_, left := g.left[req.MemberID]
		g.commits[req.MemberID] = append(g.commits[req.MemberID], commitSeen{offsets: commitsOf(req, topic, c.TopicInfo(topic).TopicID), afterLeft: left})
		g.mu.Unlock()
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.LeaveGroup), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.LeaveGroupRequest)
		g.mu.Lock()
		for _, m := range req.Members {
			g.left[m.MemberID] = -1
		}
		if req.MemberID != "" {
			g.left[req.MemberID] = -1
		}
		g.mu.Unlock()
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.ConsumerGroupHeartbeat), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ConsumerGroupHeartbeatRequest)
		g.mu.Lock()
		if req.MemberEpoch < 0 {
			g.left[req.MemberID] = req.MemberEpoch
		} else if _, ok := g.left[req.MemberID]; ok && req.MemberEpoch > 0 {
			g.beats[req.MemberID]++
		}
		g.mu.Unlock()
		return nil, nil, false
	})
	return g
}

func (g *groupTraffic) leftWith(member string) (int32, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.left[member]
	return e, ok
}

// commitsAfterLeft returns member's OffsetCommit requests received after
// it left.
func (g *groupTraffic) commitsAfterLeft(member string) []map[int32]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []map[int32]int64
	for _, cs := range g.commits[member] {
		if cs.afterLeft {
			out = append(out, cs.offsets)
		}
	}
	return out
}

// TestMaxPollIntervalLeavesGroup: a member whose application stops calling
// Poll for MaxPollInterval leaves the group: the other member gets its
// partitions, it drops them as lost (OnLost) without committing what its
// last Poll returned, nothing of it is committed after it left (an
// explicit commit is refused), and its next Poll reports the error once and
// rejoins.
func TestMaxPollIntervalLeavesGroup(t *testing.T) {
	incrementalProtocols(t, testMaxPollIntervalLeavesGroup)
}

func testMaxPollIntervalLeavesGroup(t *testing.T, opts []consumer.Opt, kopts []kfake.Opt) {
	const partitions, end = 2, 20
	c := newClusterWith(t, partitions, kopts...)
	for p := int32(0); p < partitions; p++ {
		produceRange(t, c, p, 0, end)
	}
	traffic := watchGroupTraffic(c)
	var seq int
	m1 := startMember(t, c, "m1", "mpi", &seq, append(slices.Clone(opts),
		consumer.MaxPollInterval(300*time.Millisecond), consumer.AutoCommitInterval(20*time.Millisecond))...)
	tps := []consumer.TopicPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}
	for _, tp := range tps {
		waitConsumed(t, m1, tp, end)
	}
	// m1's application is stuck from here on; its last Poll returned
	// nothing beyond end, so what it may commit is at most end.
	id1 := m1.cons.GroupMetadata().MemberID // a classic member that left forgets it
	m1.halt()
	waitFor(t, 10*time.Second, "m1 leaving", func() bool { _, ok := traffic.leftWith(id1); return ok })
	if epoch, _ := traffic.leftWith(id1); epoch != -1 {
		t.Fatalf("m1 left with epoch %d, want -1", epoch)
	}
	m2 := startMember(t, c, "m2", "mpi", &seq, opts...)
	waitFor(t, 15*time.Second, "m2 owns both partitions", func() bool { return m2.log.ownedCount() == partitions })
	waitFor(t, 5*time.Second, "m1's partitions lost", func() bool { return m1.log.ownedCount() == 0 })
	for _, e := range m1.log.log() {
		if len(e) >= 7 && e[:7] == "revoked" {
			t.Fatalf("m1 revoked partitions (%v); left for MaxPollInterval, they are lost", m1.log.log())
		}
	}
	if !slices.ContainsFunc(m1.log.log(), func(e string) bool { return len(e) >= 4 && e[:4] == "lost" }) {
		t.Fatalf("OnLost never ran: %v", m1.log.log())
	}
	// The stuck application commits what it processed: refused.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m1.cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{tps[0]: {Offset: end, LeaderEpoch: 0}})
	if !errors.Is(err, consumer.ErrCommitNotOwned) {
		t.Fatalf("commit after leaving: %v, want ErrCommitNotOwned", err)
	}
	if got := traffic.commitsAfterLeft(id1); len(got) > 0 {
		t.Fatalf("m1's commits after it left: %v", got)
	}
	_, errs1 := m1.got()
	if len(errs1) > 0 {
		t.Fatalf("m1 was told before it polled again: %v", errs1)
	}

	m1.resume()
	waitFor(t, 10*time.Second, "m1 told it left", func() bool { _, errs := m1.got(); return len(errs) > 0 })
	waitFor(t, 15*time.Second, "m1 rejoined and owns a partition", func() bool { return m1.log.ownedCount() > 0 })
	_, errs1 = m1.got()
	if len(errs1) != 1 {
		t.Fatalf("m1's errors: %v, want one", errs1)
	}
	var pe *consumer.PollIntervalError
	var ge *consumer.GroupError
	if !errors.Is(errs1[0], consumer.ErrMaxPollIntervalExceeded) || !errors.As(errs1[0], &pe) || !errors.As(errs1[0], &ge) || ge.Op != "poll" {
		t.Fatalf("m1's error %v (%T), want a *GroupError (poll) wrapping a *PollIntervalError", errs1[0], errs1[0])
	}
	if !slices.Equal(pe.Lost, tps) || pe.Since < 300*time.Millisecond {
		t.Fatalf("PollIntervalError %+v: want Lost %v and Since ≥ 300ms", pe, tps)
	}
	if got := traffic.commitsAfterLeft(id1); len(got) > 0 {
		t.Fatalf("m1's commits after it left: %v", got)
	}
	_, errs2 := m2.got()
	if len(errs2) > 0 {
		t.Fatalf("m2's errors: %v", errs2)
	}
}

// TestMaxPollIntervalStaticMember: a static member past MaxPollInterval
// sends no LeaveGroup (classic; its session expires) or leaves with
// epoch -2 (KIP-848), drops its partitions as lost, and reports it at its
// next Poll.
func TestMaxPollIntervalStaticMember(t *testing.T) {
	incrementalProtocols(t, func(t *testing.T, opts []consumer.Opt, kopts []kfake.Opt) {
		c := newClusterWith(t, 1, kopts...)
		produceRange(t, c, 0, 0, 5)
		traffic := watchGroupTraffic(c)
		var seq int
		m := startMember(t, c, "static", "mpi-static", &seq, append(slices.Clone(opts),
			consumer.GroupInstanceID("i1"), consumer.MaxPollInterval(300*time.Millisecond))...)
		waitConsumed(t, m, consumer.TopicPartition{Topic: topic, Partition: 0}, 5)
		id := m.cons.GroupMetadata().MemberID
		m.halt()
		waitFor(t, 10*time.Second, "the partition lost", func() bool { return m.log.ownedCount() == 0 })
		kip848 := len(opts) > 0
		if kip848 {
			waitFor(t, 5*time.Second, "the leave", func() bool { _, ok := traffic.leftWith(id); return ok })
		}
		epoch, left := traffic.leftWith(id)
		switch {
		case !kip848 && left:
			t.Fatal("a static classic member sent LeaveGroup")
		case kip848 && epoch != -2:
			t.Fatalf("the static KIP-848 member left with epoch %d, want -2", epoch)
		}
		m.resume()
		waitFor(t, 10*time.Second, "told", func() bool { _, errs := m.got(); return len(errs) > 0 })
		_, errs := m.got()
		if !errors.Is(errs[0], consumer.ErrMaxPollIntervalExceeded) {
			t.Fatalf("errors %v", errs)
		}
		waitFor(t, 15*time.Second, "rejoined", func() bool { return m.log.ownedCount() == 1 })
	})
}

// TestMaxPollIntervalValidation: MaxPollInterval must be positive.
func TestMaxPollIntervalValidation(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := consumer.New(consumer.SeedBrokers("127.0.0.1:1"), consumer.Group("g"), consumer.MaxPollInterval(d))
		if !errors.Is(err, errors.ErrInvalidOption) {
			t.Fatalf("MaxPollInterval(%v): %v; want ErrInvalidOption", d, err)
		}
		if want := fmt.Sprintf("option MaxPollInterval: %v", d); !contains(err.Error(), want) {
			t.Fatalf("MaxPollInterval(%v): %v", d, err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
