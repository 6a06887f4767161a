package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// groupOpts are fast group timings for kfake.
func groupOpts(group string) []consumer.Opt {
	return []consumer.Opt{
		consumer.Group(group),
		consumer.SessionTimeout(6 * time.Second),
		consumer.RebalanceTimeout(5 * time.Second),
		consumer.HeartbeatInterval(100 * time.Millisecond),
		consumer.MetadataMaxAge(500 * time.Millisecond),
	}
}

// rebalanceLog records a member's callbacks, in order.
type rebalanceLog struct {
	mu      sync.Mutex
	entries []string
	owned   map[consumer.TopicPartition]bool
	// revokedAt is, per revoked partition, the callback sequence number
	// at the end of its revoke callback.
	revokedAt map[consumer.TopicPartition]int
	seq       *int
}

func newRebalanceLog(seq *int) *rebalanceLog {
	return &rebalanceLog{owned: map[consumer.TopicPartition]bool{}, revokedAt: map[consumer.TopicPartition]int{}, seq: seq}
}

var seqMu sync.Mutex

func (l *rebalanceLog) opts() []consumer.Opt {
	return []consumer.Opt{
		consumer.OnAssigned(func(_ context.Context, tps []consumer.TopicPartition) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.entries = append(l.entries, fmt.Sprintf("assigned %v", tps))
			for _, tp := range tps {
				if l.owned[tp] {
					panic(fmt.Sprintf("%v assigned twice", tp))
				}
				l.owned[tp] = true
				delete(l.revokedAt, tp)
			}
		}),
		consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) { l.revoked(tps) }),
		consumer.OnLost(func(_ context.Context, tps []consumer.TopicPartition) { l.lost(tps) }),
	}
}

// revoked records a revocation (OnRevoked).
func (l *rebalanceLog) revoked(tps []consumer.TopicPartition) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, fmt.Sprintf("revoked %v", tps))
	seqMu.Lock()
	*l.seq++
	s := *l.seq
	seqMu.Unlock()
	for _, tp := range tps {
		delete(l.owned, tp)
		l.revokedAt[tp] = s
	}
}

// lost records a loss (OnLost).
func (l *rebalanceLog) lost(tps []consumer.TopicPartition) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, fmt.Sprintf("lost %v", tps))
	for _, tp := range tps {
		delete(l.owned, tp)
	}
}

func (l *rebalanceLog) ownedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.owned)
}

func (l *rebalanceLog) ownedList() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for tp := range l.owned {
		out = append(out, tp.String())
	}
	slices.Sort(out)
	return out
}

func (l *rebalanceLog) log() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// member is a group consumer polled by its own goroutine until the test
// ends, collecting records and checking the session boundary: a Poll that
// begins after a partition's revoke callback ended never returns its
// records.
type member struct {
	t    *testing.T
	name string
	cons *consumer.Consumer
	log  *rebalanceLog

	mu      sync.Mutex
	records []consumer.Record
	errs    []error
	events  []consumer.TruncationEvent
	stop    context.CancelFunc
	done    chan struct{}
	// pause is how long the member works on each Poll's records (set
	// before it starts polling).
	pause time.Duration
}

func startMember(t *testing.T, c *kfake.Cluster, name, group string, seq *int, opts ...consumer.Opt) *member {
	t.Helper()
	return startMemberWith(t, c, name, group, seq, func(cons *consumer.Consumer) error { return cons.Subscribe(topic) }, opts...)
}

// startMemberWith is startMember with subscribe in place of the
// subscription to topic.
func startMemberWith(t *testing.T, c *kfake.Cluster, name, group string, seq *int, subscribe func(*consumer.Consumer) error, opts ...consumer.Opt) *member {
	t.Helper()
	return startMemberPausing(t, c, name, group, seq, subscribe, 0, opts...)
}

// startMemberPausing is startMemberWith for a member that works pause on
// each Poll's records.
func startMemberPausing(t *testing.T, c *kfake.Cluster, name, group string, seq *int, subscribe func(*consumer.Consumer) error, pause time.Duration, opts ...consumer.Opt) *member {
	t.Helper()
	m := &member{t: t, name: name, log: newRebalanceLog(seq), done: make(chan struct{}), pause: pause}
	all := append(groupOpts(group), m.log.opts()...)
	m.cons = newConsumer(t, c, append(all, opts...)...)
	if err := subscribe(m.cons); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	go m.poll(ctx)
	t.Cleanup(m.halt)
	return m
}

func (m *member) poll(ctx context.Context) {
	defer close(m.done)
	for {
		seqMu.Lock()
		before := 0
		if m.log.seq != nil {
			before = *m.log.seq
		}
		seqMu.Unlock()
		f, err := m.cons.Poll(ctx)
		if err != nil {
			return
		}
		m.log.mu.Lock()
		for _, r := range f.Records {
			tp := consumer.TopicPartition{Topic: r.Topic, Partition: r.Partition}
			if at, ok := m.log.revokedAt[tp]; ok && at <= before {
				m.t.Errorf("%s: Poll begun after %v's revoke callback returned its record at %d", m.name, tp, r.Offset)
			}
		}
		m.log.mu.Unlock()
		m.mu.Lock()
		m.records = append(m.records, f.Records...)
		m.errs = append(m.errs, f.Errors...)
		m.events = append(m.events, f.Truncations...)
		m.mu.Unlock()
		time.Sleep(m.pause)
	}
}

// halt stops polling (the consumer stays open).
func (m *member) halt() {
	m.stop()
	<-m.done
}

func (m *member) got() ([]consumer.Record, []error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.records), slices.Clone(m.errs)
}

func (m *member) closeNow(t *testing.T) {
	t.Helper()
	m.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.cons.Close(ctx); closeFailed(err) {
		t.Fatal(err)
	} else if err != nil {
		t.Logf("%s: close: %v", m.name, err)
	}
}

// waitBetween waits until the members got n records between them.
func waitBetween(t *testing.T, d time.Duration, n int, ms ...*member) {
	t.Helper()
	waitFor(t, d, fmt.Sprintf("%d records between them", n), func() bool {
		got := 0
		for _, m := range ms {
			r, _ := m.got()
			got += len(r)
		}
		return got >= n
	})
}

// checkDelivered checks that m1 and m2 got no error and, between them,
// every offset below end of partitions 0 to partitions-1 at least once; it
// returns how many of those records they got more than once.
func checkDelivered(t *testing.T, m1, m2 *member, partitions int32, end int64) (dups int) {
	t.Helper()
	a, errs1 := m1.got()
	b, errs2 := m2.got()
	if len(errs1)+len(errs2) > 0 {
		t.Fatal(errs1, errs2)
	}
	seen := map[int32]map[int64]int{}
	for _, r := range append(a, b...) {
		if seen[r.Partition] == nil {
			seen[r.Partition] = map[int64]int{}
		}
		seen[r.Partition][r.Offset]++
	}
	for p := int32(0); p < partitions; p++ {
		for o := int64(0); o < end; o++ {
			if seen[p][o] == 0 {
				t.Fatalf("partition %d offset %d never delivered", p, o)
			}
			dups += seen[p][o] - 1
		}
	}
	return dups
}

// TestGroupCommitsAndRestartsFromCommit: a lone member gets every
// partition, consumes, commits positions with their leader epochs; a new
// member of the same group starts exactly after them.
func TestGroupCommitsAndRestartsFromCommit(t *testing.T) {
	c := newCluster(t, 3)
	for p := int32(0); p < 3; p++ {
		produceRange(t, c, p, 0, 20)
	}
	seq := 0
	m := startMember(t, c, "m1", "g1", &seq, consumer.DisableAutoCommit())
	waitFor(t, 10*time.Second, "3 partitions assigned", func() bool { return m.log.ownedCount() == 3 })
	waitFor(t, 10*time.Second, "60 records", func() bool { r, _ := m.got(); return len(r) >= 60 })
	m.halt()
	recs, errs := m.got()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 20, 1: 20, 2: 20})
	consumed := m.cons.Consumed()
	if len(consumed) != 3 {
		t.Fatalf("consumed %v", consumed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.cons.CommitSync(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got, err := m.cons.Committed(ctx, consumer.TopicPartition{Topic: topic, Partition: 0}, consumer.TopicPartition{Topic: topic, Partition: 1})
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		if om := got[consumer.TopicPartition{Topic: topic, Partition: p}]; om.Offset != 20 || om.LeaderEpoch != 0 {
			t.Fatalf("committed %v", got)
		}
	}
	if c := m.cons.Consumed(); len(c) != 0 {
		t.Fatalf("after the commit, Consumed() = %v; want nothing new", c)
	}
	m.closeNow(t)
	if l := m.log.log(); len(l) != 2 || l[1] != "revoked [t[0] t[1] t[2]]" {
		t.Fatalf("callbacks %v", l)
	}

	for p := int32(0); p < 3; p++ {
		produceRange(t, c, p, 20, 25)
	}
	m2 := startMember(t, c, "m2", "g1", &seq)
	waitFor(t, 10*time.Second, "15 records", func() bool { r, _ := m2.got(); return len(r) >= 15 })
	m2.halt()
	recs, errs = m2.got()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 20, 1: 20, 2: 20}, map[int32]int64{0: 25, 1: 25, 2: 25})
}

// TestGroupCooperativeRebalance: a second member takes half of the first's
// partitions; the first revokes exactly those (never all), keeps the
// others without a pause in their records, and never returns a record of a
// revoked partition after its callback; together they consume every record.
func TestGroupCooperativeRebalance(t *testing.T) {
	c := newCluster(t, 4)
	for p := int32(0); p < 4; p++ {
		produceRange(t, c, p, 0, 10)
	}
	seq := 0
	m1 := startMember(t, c, "m1", "g2", &seq)
	waitFor(t, 10*time.Second, "m1 owns 4", func() bool { return m1.log.ownedCount() == 4 })
	waitFor(t, 10*time.Second, "40 records", func() bool { r, _ := m1.got(); return len(r) >= 40 })
	m2 := startMember(t, c, "m2", "g2", &seq)
	waitFor(t, 15*time.Second, "2 partitions each", func() bool { return m1.log.ownedCount() == 2 && m2.log.ownedCount() == 2 })
	l1 := m1.log.log()
	if len(l1) != 2 || l1[0] != "assigned [t[0] t[1] t[2] t[3]]" {
		t.Fatalf("m1 callbacks %v; want the first assignment and one revoke of 2 partitions", l1)
	}
	for p := int32(0); p < 4; p++ {
		produceRange(t, c, p, 10, 20)
	}
	waitBetween(t, 10*time.Second, 80, m1, m2)
	m1.halt()
	m2.halt()
	// Every record at least once; duplicates only of partitions that
	// moved, from their last commit on.
	checkDelivered(t, m1, m2, 4, 20)
	t.Logf("m1 %v, m2 %v", l1, m2.log.log())
}

// TestGroupEagerRange: with the (eager) range assignor, every rebalance
// revokes everything first, and partitions are split as Java's range
// assignor splits them.
func TestGroupEagerRange(t *testing.T) {
	c := newCluster(t, 4)
	seq := 0
	m1 := startMember(t, c, "a", "g3", &seq, consumer.Assignors(consumer.RangeAssignor))
	waitFor(t, 10*time.Second, "a owns 4", func() bool { return m1.log.ownedCount() == 4 })
	m2 := startMember(t, c, "b", "g3", &seq, consumer.Assignors(consumer.RangeAssignor))
	waitFor(t, 15*time.Second, "2 each", func() bool { return m1.log.ownedCount() == 2 && m2.log.ownedCount() == 2 })
	l := m1.log.log()
	if len(l) < 3 || l[1] != "revoked [t[0] t[1] t[2] t[3]]" {
		t.Fatalf("eager member callbacks %v; want everything revoked before the rejoin", l)
	}
}

// TestGroupStaticMemberKeepsAssignment: a static member that closes and
// comes back within the session timeout gets its partitions back without
// the other member rebalancing.
func TestGroupStaticMemberKeepsAssignment(t *testing.T) {
	c := newCluster(t, 2)
	seq := 0
	s1 := startMember(t, c, "s1", "g4", &seq, consumer.GroupInstanceID("i1"))
	s2 := startMember(t, c, "s2", "g4", &seq, consumer.GroupInstanceID("i2"))
	waitFor(t, 15*time.Second, "1 each", func() bool { return s1.log.ownedCount() == 1 && s2.log.ownedCount() == 1 })
	before := s2.log.log()
	first := s1.log.ownedList()
	s1.closeNow(t)
	// Not left: the member is still in the group until its session
	// expires, so nothing moved to s2.
	time.Sleep(300 * time.Millisecond)
	s1b := startMember(t, c, "s1b", "g4", &seq, consumer.GroupInstanceID("i1"))
	waitFor(t, 10*time.Second, "s1 back", func() bool { return s1b.log.ownedCount() == 1 })
	time.Sleep(500 * time.Millisecond)
	if l := s2.log.log(); !slices.Equal(l, before) {
		t.Fatalf("the other static member's partitions moved: %v → %v", before, l)
	}
	// (kfake rebalances when the rejoining member's metadata differs, as
	// its owned partitions do; the assignment stays.)
	if again := s1b.log.ownedList(); !slices.Equal(again, first) {
		t.Fatalf("static member got %v, had %v", again, first)
	}
}

// TestGroupRestartValidatesCommittedEpoch: a commit carries its leader
// epoch; after the log was truncated below it while no member ran, a
// restarted member validates the committed position before fetching and
// reports the truncation: PolicyNone halts with a LogTruncationError.
func TestGroupRestartValidatesCommittedEpoch(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 30)
	seq := 0
	m := startMember(t, c, "m", "g5", &seq, consumer.DisableAutoCommit())
	waitFor(t, 10*time.Second, "30 records", func() bool { r, _ := m.got(); return len(r) >= 30 })
	m.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.cons.CommitSync(ctx, nil); err != nil {
		t.Fatal(err)
	}
	m.closeNow(t)

	truncate(c, 12) // the leader now says epoch 0 ends at 12
	m2 := startMember(t, c, "m2", "g5", &seq, consumer.TruncationPolicy(consumer.PolicyNone))
	waitFor(t, 10*time.Second, "a truncation report", func() bool {
		m2.mu.Lock()
		defer m2.mu.Unlock()
		return len(m2.events) > 0
	})
	m2.halt()
	m2.mu.Lock()
	defer m2.mu.Unlock()
	if len(m2.records) != 0 {
		t.Fatalf("delivered %d records from a truncated position", len(m2.records))
	}
	ev := m2.events[0]
	if ev.Kind != consumer.Diverged || ev.Consumed.Offset != 30 || ev.Consumed.Epoch != 0 || ev.Divergent.Offset != 12 || !ev.Halted {
		t.Fatalf("event %v", ev)
	}
	var lte *errors.LogTruncationError
	if len(m2.errs) != 1 || !errors.As(m2.errs[0], &lte) {
		t.Fatalf("errors %v", m2.errs)
	}
	// Hygiene: the halted partition is not committed past its position.
	err := m2.cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{{Topic: topic, Partition: 0}: {Offset: 31, LeaderEpoch: 0}})
	if !errors.Is(err, consumer.ErrCommitPendingValidation) {
		t.Fatalf("commit past a halted position: %v", err)
	}
}

// TestGroupConsumerProtocol (KIP-848): members join with
// ConsumerGroupHeartbeat and the coordinator assigns; a second member gets
// half the partitions, which the first revokes first (never owned twice,
// no record of a revoked partition after its callback); when the first
// closes (leaving with epoch -1) the second gets everything, starting at
// the first's commits.
func TestGroupConsumerProtocol(t *testing.T) {
	c := newClusterWith(t, 4, kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	for p := int32(0); p < 4; p++ {
		produceRange(t, c, p, 0, 10)
	}
	seq := 0
	o := &owners{t: t, by: map[int32]string{}}
	proto := consumer.WithGroupProtocol(consumer.ProtocolConsumer)
	m1 := startMember(t, c, "m1", "g848", &seq, proto,
		consumer.OnAssigned(func(_ context.Context, tps []consumer.TopicPartition) { o.assigned("m1", partitionsOf(tps)) }),
		consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) { o.revoked("m1", partitionsOf(tps)) }))
	waitFor(t, 10*time.Second, "m1 owns 4", func() bool { return o.count("m1") == 4 })
	waitFor(t, 10*time.Second, "40 records", func() bool { r, _ := m1.got(); return len(r) >= 40 })
	if gm := m1.cons.GroupMetadata(); gm.Group != "g848" || gm.MemberID == "" || gm.Generation <= 0 {
		t.Fatalf("group metadata %+v", gm)
	}
	m2 := startMember(t, c, "m2", "g848", &seq, proto,
		consumer.OnAssigned(func(_ context.Context, tps []consumer.TopicPartition) { o.assigned("m2", partitionsOf(tps)) }),
		consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) { o.revoked("m2", partitionsOf(tps)) }))
	waitFor(t, 15*time.Second, "2 partitions each", func() bool { return o.count("m1") == 2 && o.count("m2") == 2 })
	for p := int32(0); p < 4; p++ {
		produceRange(t, c, p, 10, 20)
	}
	waitBetween(t, 10*time.Second, 80, m1, m2)
	m1.closeNow(t)
	waitFor(t, 15*time.Second, "m2 owns 4", func() bool { return o.count("m2") == 4 })
	for p := int32(0); p < 4; p++ {
		produceRange(t, c, p, 20, 25)
	}
	waitFor(t, 10*time.Second, "the last records", func() bool {
		b, _ := m2.got()
		n := 0
		for _, r := range b {
			if r.Offset >= 20 {
				n++
			}
		}
		return n >= 20
	})
	m2.halt()
	dups := checkDelivered(t, m1, m2, 4, 25)
	// m1 closed after Poll returned everything and committed it on Close.
	if dups > 0 {
		t.Logf("%d records delivered twice (inside the at-least-once window)", dups)
	}
}
