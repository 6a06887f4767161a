package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// TestCommitOfPartitionNotOwned: a member that lost a partition to
// another member in a rebalance (cooperative-sticky, or KIP-848) commits
// it explicitly afterwards. The coordinator checks only the generation
// (member epoch), which is current, and would store the commit over the
// new owner's: m2 committed 30, m1's commit of 10 took the group back to
// 10 (m2's records 10-29 read again after a restart; a commit past 30
// would skip records). The commit is refused for that partition
// (ErrCommitNotOwned) and the owned partitions of the same commit are
// committed; CommitAsync reports the same to its callback. A commit made
// in OnRevoked, of the partitions being revoked, is still the member's.
func TestCommitOfPartitionNotOwned(t *testing.T) {
	incrementalProtocols(t, testCommitNotOwned)
}

func testCommitNotOwned(t *testing.T, opts []consumer.Opt, kopts []kfake.Opt) {
	c := newClusterWith(t, 2, kopts...)
	produceRange(t, c, 0, 0, 40)
	produceRange(t, c, 1, 0, 40)
	seq := 0
	var m1p atomic.Pointer[member]
	revokeErrs := make(chan error, 4)
	// m1 commits what it revokes in OnRevoked (it still owns them there).
	onRevoked := consumer.OnRevoked(func(ctx context.Context, tps []consumer.TopicPartition) {
		m := m1p.Load()
		offs := map[consumer.TopicPartition]consumer.OffsetAndMetadata{}
		for _, tp := range tps {
			offs[tp] = consumer.OffsetAndMetadata{Offset: 7, LeaderEpoch: 0}
		}
		revokeErrs <- m.cons.CommitSync(ctx, offs)
		m.log.revoked(tps)
	})
	opts = append(opts, consumer.DisableAutoCommit())
	m1 := startMember(t, c, "m1", "not-owned", &seq, append(opts, onRevoked)...)
	m1p.Store(m1)
	waitFor(t, 10*time.Second, "m1 owns both partitions", func() bool { return m1.log.ownedCount() == 2 })
	m2 := startMember(t, c, "m2", "not-owned", &seq, opts...)
	waitFor(t, 15*time.Second, "a partition each", func() bool { return m1.log.ownedCount() == 1 && m2.log.ownedCount() == 1 })
	time.Sleep(500 * time.Millisecond) // the group settles: m1's generation (epoch) is current
	if err := <-revokeErrs; err != nil {
		t.Fatalf("m1's commit in OnRevoked: %v", err)
	}
	var p, q consumer.TopicPartition // m2's, m1's
	m2.log.mu.Lock()
	for tp := range m2.log.owned {
		p = tp
	}
	m2.log.mu.Unlock()
	q = consumer.TopicPartition{Topic: topic, Partition: 1 - p.Partition}
	waitConsumed(t, m2, p, 40)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m2.cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{p: {Offset: 30, LeaderEpoch: 0}}); err != nil {
		t.Fatalf("m2's commit of its own %v: %v", p, err)
	}

	err := m1.cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{
		p: {Offset: 10, LeaderEpoch: 0},
		q: {Offset: 5, LeaderEpoch: 0},
	})
	t.Logf("m1 (generation %d) commit of %v and %v: %v", m1.cons.GroupMetadata().Generation, p, q, err)
	got, ferr := m2.cons.Committed(ctx, p, q)
	if ferr != nil {
		t.Fatal(ferr)
	}
	if got[p].Offset != 30 {
		t.Fatalf("m1's commit of %v, owned by m2, took the group's offset from 30 to %d", p, got[p].Offset)
	}
	if got[q].Offset != 5 {
		t.Fatalf("m1's own %v committed at %+v, want 5", q, got[q])
	}
	var pe *errors.PartitionError
	if !errors.Is(err, consumer.ErrCommitNotOwned) || !errors.As(err, &pe) || pe.Partition != p.Partition || pe.Op != "commit" {
		t.Fatalf("m1's commit error %v, want a commit PartitionError of %v matching ErrCommitNotOwned", err, p)
	}

	// CommitAsync: the callback hears the refusal, with the offsets sent.
	type answer struct {
		sent map[consumer.TopicPartition]consumer.OffsetAndMetadata
		err  error
	}
	ans := make(chan answer, 2)
	cb := func(sent map[consumer.TopicPartition]consumer.OffsetAndMetadata, err error) { ans <- answer{sent, err} }
	m1.cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{p: {Offset: 12, LeaderEpoch: 0}, q: {Offset: 6, LeaderEpoch: 0}}, cb)
	m1.cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{p: {Offset: 13, LeaderEpoch: 0}}, cb)
	a1, a2 := <-ans, <-ans
	if _, sent := a1.sent[p]; sent || len(a1.sent) != 1 || !errors.Is(a1.err, consumer.ErrCommitNotOwned) {
		t.Fatalf("CommitAsync of %v and %v answered %v, %v; want %v alone sent and %v refused", p, q, a1.sent, a1.err, q, p)
	}
	if len(a2.sent) != 0 || !errors.Is(a2.err, consumer.ErrCommitNotOwned) {
		t.Fatalf("CommitAsync of %v answered %v, %v; want it refused", p, a2.sent, a2.err)
	}
	if got, err := m2.cons.Committed(ctx, p, q); err != nil || got[p].Offset != 30 || got[q].Offset != 6 {
		t.Fatalf("committed %v (%v), want %v at 30 and %v at 6", got, err, p, q)
	}
}

// TestCommitQueuedBeforeRevocation: a commit the application made while it
// owned both partitions, queued behind a commit the coordinator is slow to
// answer, must not be stored over the next owner's commit of a partition
// revoked meanwhile. Without autocommit the revocation used not to wait
// for it; sent after the partition went to m2 (and m2 committed 30), it
// went with the member epoch it was made in, which a KIP-1251 coordinator
// accepts for a partition the member no longer holds, and took the
// group's offset back to 10. Now the revocation completes only once the
// commits queued before it are answered (the partition then goes to m2
// with m1's commit stored), and a commit still unsent when its partition
// is revoked is refused (ErrCommitNotOwned).
func TestCommitQueuedBeforeRevocation(t *testing.T) {
	incrementalProtocols(t, testCommitQueuedBeforeRevocation)
}

func testCommitQueuedBeforeRevocation(t *testing.T, opts []consumer.Opt, kopts []kfake.Opt) {
	c := newClusterWith(t, 2, kopts...)
	produceRange(t, c, 0, 0, 40)
	produceRange(t, c, 1, 0, 40)
	seq := 0
	opts = append(opts, consumer.DisableAutoCommit())
	m1 := startMember(t, c, "m1", "queued", &seq, opts...)
	waitFor(t, 10*time.Second, "m1 owns both partitions", func() bool { return m1.log.ownedCount() == 2 })
	time.Sleep(300 * time.Millisecond)
	m1id := m1.cons.GroupMetadata().MemberID
	release := make(chan struct{})
	// m1's first commit is answered COORDINATOR_LOAD_IN_PROGRESS (the
	// transport retries it) until released: held without holding the
	// connection m1's heartbeats share.
	var held, released atomic.Bool
	var first atomic.Pointer[kmsg.OffsetCommitRequest]
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetCommitRequest)
		if req.MemberID != m1id || released.Load() {
			return nil, nil, false
		}
		if first.CompareAndSwap(nil, req) || first.Load() == req || len(req.Topics) == 1 && len(req.Topics[0].Partitions) == 1 {
			held.Store(true)
			return refuseCommit(req, kerr.CoordinatorLoadInProgress.Code), nil, true
		}
		return nil, nil, false
	})
	go func() { <-release; released.Store(true) }()
	tp0, tp1 := consumer.TopicPartition{Topic: topic, Partition: 0}, consumer.TopicPartition{Topic: topic, Partition: 1}
	ans := make(chan error, 2)
	cb := func(_ map[consumer.TopicPartition]consumer.OffsetAndMetadata, err error) { ans <- err }
	m1.cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{tp0: {Offset: 1, LeaderEpoch: 0}}, cb) // held
	m1.cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{tp0: {Offset: 10, LeaderEpoch: 0}, tp1: {Offset: 10, LeaderEpoch: 0}}, cb)
	waitFor(t, 5*time.Second, "m1's first commit held", held.Load)

	m2 := startMember(t, c, "m2", "queued", &seq, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// m2 gets its partition while m1's commits wait (before), or m1's
	// revocation waits for them (after): release once m1 revoked.
	waitFor(t, 15*time.Second, "m1 revoked a partition", func() bool { return m1.log.ownedCount() == 1 || m2.log.ownedCount() == 1 })
	time.Sleep(500 * time.Millisecond)
	m2early := m2.log.ownedCount() == 1
	// While m1's revocation waits for the commits queued before it, m1
	// commits the partition it revoked: queued behind the wait, the
	// commit is refused when reached.
	late := make(chan error, 1)
	if !m2early {
		var r consumer.TopicPartition
		m1.log.mu.Lock()
		for tp := range m1.log.revokedAt {
			r = tp
		}
		m1.log.mu.Unlock()
		m1.cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{r: {Offset: 20, LeaderEpoch: 0}},
			func(_ map[consumer.TopicPartition]consumer.OffsetAndMetadata, err error) { late <- err })
	}
	committed2 := false
	commit2 := func() consumer.TopicPartition {
		var p consumer.TopicPartition
		m2.log.mu.Lock()
		for tp := range m2.log.owned {
			p = tp
		}
		m2.log.mu.Unlock()
		waitConsumed(t, m2, p, 40)
		if err := m2.cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{p: {Offset: 30, LeaderEpoch: 0}}); err != nil {
			t.Fatalf("m2's commit of its own %v: %v", p, err)
		}
		committed2 = true
		return p
	}
	var p consumer.TopicPartition
	if m2early {
		p = commit2()
	}
	close(release)
	err1, err2 := <-ans, <-ans
	t.Logf("m2 owned its partition before the release: %v; m1's commits: %v | %v", m2early, err1, err2)
	if !m2early {
		if err := <-late; !errors.Is(err, consumer.ErrCommitNotOwned) {
			t.Fatalf("m1's commit made during its revocation's wait, of the partition revoked: %v, want ErrCommitNotOwned", err)
		}
	}
	waitFor(t, 15*time.Second, "a partition each", func() bool { return m1.log.ownedCount() == 1 && m2.log.ownedCount() == 1 })
	if !committed2 {
		p = commit2()
	}
	time.Sleep(300 * time.Millisecond)
	got, err := m2.cons.Committed(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got[p].Offset != 30 {
		t.Fatalf("m2 committed %v at 30 and the group stores %+v: m1's commit, made before the revocation, overwrote it", p, got[p])
	}
}

// waitConsumed waits until m was given p's records up to end (exclusive):
// its position is validated, so it commits past it.
func waitConsumed(t *testing.T, m *member, p consumer.TopicPartition, end int64) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%s consumed %v to %d", m.name, p, end), func() bool {
		rs, _ := m.got()
		for _, r := range rs {
			if r.Topic == p.Topic && r.Partition == p.Partition && r.Offset == end-1 {
				return true
			}
		}
		return false
	})
}

// incrementalProtocols runs test under the two protocols that revoke
// partitions one by one: classic cooperative-sticky and KIP-848.
func incrementalProtocols(t *testing.T, test func(*testing.T, []consumer.Opt, []kfake.Opt)) {
	for _, tc := range []struct {
		name  string
		opts  []consumer.Opt
		kfake []kfake.Opt
	}{
		{name: "cooperative"},
		{name: "kip848", opts: []consumer.Opt{consumer.WithGroupProtocol(consumer.ProtocolConsumer)},
			kfake: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"})}},
	} {
		t.Run(tc.name, func(t *testing.T) { test(t, tc.opts, tc.kfake) })
	}
}
