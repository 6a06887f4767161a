package integration

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// groupConsumerOpts are group timings for the local cluster. The session
// timeout outlasts a coordinator failover on two loaded cores (a member
// that hears nothing from the coordinator for a session timeout drops its
// partitions as lost, ErrGroupSessionExpired: with 10 s, the killed
// coordinator's group moved in 10–20 s under -race).
func groupConsumerOpts(group string) []consumer.Opt {
	return []consumer.Opt{
		consumer.Group(group),
		consumer.SessionTimeout(30 * time.Second),
		consumer.RebalanceTimeout(30 * time.Second),
		consumer.HeartbeatInterval(300 * time.Millisecond),
		consumer.AutoCommitInterval(300 * time.Millisecond),
	}
}

// TestGroupRestartReportsUncleanTruncation is KIP-320 across a group
// restart: a group member reads records the old leader acknowledged alone
// and commits its position with the leader epoch of the last record; it
// stops; an unclean election truncates those records; a restarted member
// of the group reads the commit (offset and epoch), validates it against
// the new leader before fetching anything, and reports the truncation with
// exactly the divergence point the new leader itself gives. PolicyNone
// halts with a LogTruncationError; PolicyEarliest (a second group, its
// position committed by hand as a standalone commit) continues with the new
// lineage from the divergence point.
func TestGroupRestartReportsUncleanTruncation(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	haltGroup, rewindGroup, group848 := TopicName("group-halt"), TopicName("group-rewind"), TopicName("group-848")
	const before, lost, after = 10, 10, 5
	var committed consumer.OffsetAndMetadata

	u, err := EngineerUncleanElection(ctx, c, UncleanPlan{
		Prefix: "group-unclean", Before: before, Lost: lost, After: after, Log: logf,
		BeforeKill: func(ctx context.Context, topic string) error {
			m := newConsumer(t, append(groupConsumerOpts(haltGroup), consumer.DisableAutoCommit())...)
			if err := m.Subscribe(topic); err != nil {
				return err
			}
			var got polled
			if err := got.pollFor(ctx, m, func(p *polled) bool { return len(p.records) >= before+lost }); err != nil {
				return err
			}
			if err := m.CommitSync(ctx, nil); err != nil {
				return err
			}
			tp := consumer.TopicPartition{Topic: topic, Partition: 0}
			cm, err := m.Committed(ctx, tp)
			if err != nil {
				return err
			}
			committed = cm[tp]
			logf("group %s member read offsets 0..%d and committed %+v", haltGroup, before+lost-1, committed)
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			if err := m.Close(cctx); err != nil {
				return err
			}
			// The same position, committed by hand for two more groups
			// (standalone commits: no membership).
			for _, g := range []string{rewindGroup, group848} {
				s := newConsumer(t, consumer.Group(g))
				if err := s.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{tp: committed}); err != nil {
					return err
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if committed.Offset != before+lost || committed.LeaderEpoch != u.OldEpoch {
		t.Fatalf("committed %+v; want %d with the epoch of the records, %d", committed, before+lost, u.OldEpoch)
	}
	// What the coordinator stored, read with a raw OffsetFetch (not
	// through kepoch's own decoding of its own commit).
	for _, g := range []string{haltGroup, rewindGroup, group848} {
		off, epoch, err := c.committedOffset(ctx, g, u.Topic)
		if err != nil || off != before+lost || epoch != u.OldEpoch {
			t.Fatalf("group %s: the coordinator holds %d@%d (%v); want %d@%d", g, off, epoch, err, before+lost, u.OldEpoch)
		}
	}
	truth := u.truth(ctx, t, c, logf)
	check := func(name string, ev consumer.TruncationEvent) {
		t.Helper()
		if ev.Kind != consumer.Diverged || ev.Topic != u.Topic || ev.Partition != 0 {
			t.Fatalf("%s: event %v", name, ev)
		}
		if ev.Divergent.Offset != truth.EndOffset || ev.Divergent.Epoch != truth.LeaderEpoch {
			t.Fatalf("%s: reported divergence %v; the new leader says %d@%d", name, ev.Divergent, truth.EndOffset, truth.LeaderEpoch)
		}
		if ev.Consumed.Offset != committed.Offset || ev.Consumed.Epoch != committed.LeaderEpoch {
			t.Fatalf("%s: consumed %v; want the commit %+v", name, ev.Consumed, committed)
		}
		// The replaced records were delivered before the restart: this
		// process has no digest of them, and says so.
		if ev.ReplacedBatchesComplete || len(ev.ReplacedBatches) != 0 {
			t.Fatalf("%s: replaced batches %+v complete %v after a restart", name, ev.ReplacedBatches, ev.ReplacedBatchesComplete)
		}
	}

	// PolicyNone: the restarted member halts before delivering anything.
	halt := newConsumer(t, append(groupConsumerOpts(haltGroup), consumer.TruncationPolicy(consumer.PolicyNone))...)
	if err := halt.Subscribe(u.Topic); err != nil {
		t.Fatal(err)
	}
	var hl polled
	if err := hl.pollFor(ctx, halt, func(p *polled) bool { return len(p.events) > 0 }); err != nil {
		t.Fatal(err)
	}
	check("halt", hl.events[0])
	var lte *errors.LogTruncationError
	if len(hl.records) != 0 || len(hl.errs) != 1 || !errors.As(hl.errs[0], &lte) {
		t.Fatalf("restarted member: %d records, errors %v; want none and one LogTruncationError", len(hl.records), hl.errs)
	}
	if d, _ := lte.For(u.Topic, 0); d.Divergent.Offset != truth.EndOffset {
		t.Fatalf("LogTruncationError %+v", d)
	}
	logf("PolicyNone restart: %v", hl.events[0])

	// The same with a KIP-848 member: the coordinator assigns, the
	// committed position is validated all the same.
	h848 := newConsumer(t, append(groupConsumerOpts(group848), consumer.TruncationPolicy(consumer.PolicyNone),
		consumer.WithGroupProtocol(consumer.ProtocolConsumer))...)
	if err := h848.Subscribe(u.Topic); err != nil {
		t.Fatal(err)
	}
	var h8 polled
	if err := h8.pollFor(ctx, h848, func(p *polled) bool { return len(p.events) > 0 }); err != nil {
		t.Fatal(err)
	}
	check("KIP-848 halt", h8.events[0])
	if len(h8.records) != 0 || len(h8.errs) != 1 || !errors.As(h8.errs[0], &lte) {
		t.Fatalf("KIP-848 member: %d records, errors %v", len(h8.records), h8.errs)
	}
	logf("PolicyNone restart, KIP-848 member: %v", h8.events[0])

	// PolicyEarliest: report, then exactly the new lineage.
	rewind := newConsumer(t, append(groupConsumerOpts(rewindGroup), consumer.TruncationPolicy(consumer.PolicyEarliest))...)
	if err := rewind.Subscribe(u.Topic); err != nil {
		t.Fatal(err)
	}
	var rw polled
	if err := rw.pollFor(ctx, rewind, func(p *polled) bool { return len(p.records) >= after }); err != nil {
		t.Fatal(err)
	}
	if len(rw.events) != 1 || rw.eventAt[0] != 0 {
		t.Fatalf("rewinding member: events %v at %v", rw.events, rw.eventAt)
	}
	check("rewind", rw.events[0])
	var want []string
	for i := 0; i < after; i++ {
		want = append(want, fmt.Sprintf("c%d", i))
	}
	if got := values(rw.records); !slices.Equal(got, want) || rw.records[0].Offset != truth.EndOffset {
		t.Fatalf("new lineage %v from %d; want %v from %d", got, rw.records[0].Offset, want, truth.EndOffset)
	}
	// Its autocommit now stores the new lineage's position and epoch.
	tp := consumer.TopicPartition{Topic: u.Topic, Partition: 0}
	if err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		if _, err := rewind.Poll(shortCtx(ctx, 50*time.Millisecond)); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return false, err
		}
		cm, err := rewind.Committed(ctx, tp)
		return err == nil && cm[tp].Offset == int64(before+after) && cm[tp].LeaderEpoch == u.NewEpoch, nil
	}); err != nil {
		t.Fatalf("autocommit of the new lineage: %v", err)
	}
	logf("PolicyEarliest restart: %v; then %v; autocommitted %d@%d", rw.events[0], want, before+after, u.NewEpoch)
}

func shortCtx(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	_ = cancel // ends by its deadline
	return c
}

// delivery is one record a group member returned, stamped with a global
// sequence of Poll returns.
type delivery struct {
	member    string
	partition int32
	offset    int64
	stamp     int64
	batch     int // records of this partition in the same Poll
}

// groupMember polls a group consumer in its own goroutine, like an
// application that processes records between Polls.
type groupMember struct {
	name  string
	cons  *consumer.Consumer
	stop  context.CancelFunc
	done  chan struct{}
	mu    sync.Mutex
	errs  []error
	trunc []consumer.TruncationEvent
}

// TestGroupRebalancesUnderLoad: three members join and leave a
// cooperative-sticky (classic protocol) group one after another, and the
// group coordinator is killed and restarted, while a producer writes to six
// partitions (acks=all, min.insync.replicas 2). Every record is delivered;
// per partition each owner delivers a contiguous run of offsets; a new
// owner starts no later than where the previous owner stopped (nothing
// skipped) and at most the previous owner's last Poll of that partition
// earlier (the documented at-least-once window); no truncation is reported
// (the leader changes the kill causes are clean).
func TestGroupRebalancesUnderLoad(t *testing.T) {
	rebalanceUnderLoad(t, consumer.ProtocolClassic, 4*time.Second)
}

// TestGroupConsumerProtocolRebalancesUnderLoad is the same scenario with
// the KIP-848 protocol: the coordinator assigns (its heartbeat interval is
// 5 s on Kafka 4.1, so members are given longer between changes).
func TestGroupConsumerProtocolRebalancesUnderLoad(t *testing.T) {
	rebalanceUnderLoad(t, consumer.ProtocolConsumer, 8*time.Second)
}

func rebalanceUnderLoad(t *testing.T, proto consumer.GroupProtocol, step time.Duration) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	topic := TopicName("group-load")
	const parts = 6
	var assignment [][]int32
	for p := 0; p < parts; p++ {
		assignment = append(assignment, []int32{Brokers[p%3], Brokers[(p+1)%3], Brokers[(p+2)%3]})
	}
	if _, err := c.CreateTopic(ctx, topic, assignment, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	group := TopicName("group-load")

	// The producer: about 1000 records a second until stopped.
	var produced sync.Map // partition → *atomic.Int64 (end offset)
	prodCtx, stopProd := context.WithCancel(ctx)
	prodDone := make(chan error, 1)
	go func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(Seeds...), kgo.ProducerLinger(5*time.Millisecond),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		if err != nil {
			prodDone <- err
			return
		}
		defer cl.Close()
		var first atomic.Value
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; prodCtx.Err() == nil; i++ {
			for j := 0; j < 10; j++ {
				r := &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d-%d", i, j)}
				cl.Produce(ctx, r, func(r *kgo.Record, err error) {
					if err != nil {
						first.CompareAndSwap(nil, err)
						return
					}
					v, _ := produced.LoadOrStore(r.Partition, new(atomic.Int64))
					end := v.(*atomic.Int64)
					for {
						cur := end.Load()
						if r.Offset+1 <= cur || end.CompareAndSwap(cur, r.Offset+1) {
							break
						}
					}
				})
			}
			select {
			case <-prodCtx.Done():
			case <-tick.C:
			}
		}
		err = cl.Flush(ctx)
		if e, _ := first.Load().(error); e != nil {
			err = e
		}
		prodDone <- err
	}()

	var (
		stamp atomic.Int64
		dmu   sync.Mutex
		all   []delivery
	)
	startMember := func(name string) *groupMember {
		m := &groupMember{name: name, done: make(chan struct{})}
		m.cons = newConsumer(t, append(groupConsumerOpts(group), consumer.TruncationPolicy(consumer.PolicyNone), consumer.WithGroupProtocol(proto))...)
		if err := m.cons.Subscribe(topic); err != nil {
			t.Fatal(err)
		}
		pctx, stop := context.WithCancel(ctx)
		m.stop = stop
		go func() {
			defer close(m.done)
			for {
				f, err := m.cons.Poll(pctx)
				if err != nil {
					return
				}
				s := stamp.Add(1)
				n := map[int32]int{}
				for _, r := range f.Records {
					n[r.Partition]++
				}
				dmu.Lock()
				for _, r := range f.Records {
					all = append(all, delivery{member: name, partition: r.Partition, offset: r.Offset, stamp: s, batch: n[r.Partition]})
				}
				dmu.Unlock()
				m.mu.Lock()
				m.errs = append(m.errs, f.Errors...)
				m.trunc = append(m.trunc, f.Truncations...)
				m.mu.Unlock()
				time.Sleep(2 * time.Millisecond) // "processing"
			}
		}()
		logf("%s started", name)
		return m
	}
	closeMember := func(m *groupMember) {
		m.stop()
		<-m.done
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		if err := m.cons.Close(cctx); err != nil {
			t.Errorf("%s close: %v", m.name, err)
		}
		logf("%s closed", m.name)
	}

	pause := func() { time.Sleep(step) }
	a := startMember("a")
	pause()
	b := startMember("b")
	pause()
	cc := startMember("c")
	pause()
	// The group coordinator dies and comes back under load.
	coord, err := groupCoordinator(ctx, c, group)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(ctx, coord); err != nil {
		t.Fatal(err)
	}
	logf("coordinator %d killed", coord)
	pause()
	if err := c.Start(ctx, coord); err != nil {
		t.Fatal(err)
	}
	logf("broker %d back", coord)
	closeMember(a)
	pause()
	a2 := startMember("a2")
	pause()
	closeMember(b)
	pause()
	stopProd()
	if err := <-prodDone; err != nil {
		t.Fatal(err)
	}
	ends := map[int32]int64{}
	produced.Range(func(k, v any) bool {
		ends[k.(int32)] = v.(*atomic.Int64).Load()
		return true
	})
	total := int64(0)
	for _, e := range ends {
		total += e
	}
	logf("producer stopped: %d records, ends %v", total, ends)
	if len(ends) != parts {
		t.Fatalf("produced to %d partitions; want %d", len(ends), parts)
	}
	// Wait until every produced offset was delivered.
	covered := func() bool {
		dmu.Lock()
		defer dmu.Unlock()
		seen := map[int32]map[int64]bool{}
		for _, d := range all {
			if seen[d.partition] == nil {
				seen[d.partition] = map[int64]bool{}
			}
			seen[d.partition][d.offset] = true
		}
		for p, end := range ends {
			if int64(len(seen[p])) < end {
				return false
			}
		}
		return true
	}
	if err := poll(ctx, 200*time.Millisecond, func() (bool, error) { return covered(), nil }); err != nil {
		t.Fatalf("not every record delivered: %v", err)
	}
	closeMember(cc)
	closeMember(a2)

	for _, m := range []*groupMember{a, b, cc, a2} {
		if len(m.errs) > 0 || len(m.trunc) > 0 {
			t.Fatalf("%s: errors %v, truncations %v", m.name, m.errs, m.trunc)
		}
	}
	dmu.Lock()
	defer dmu.Unlock()
	byPart := map[int32][]delivery{}
	for _, d := range all {
		byPart[d.partition] = append(byPart[d.partition], d)
	}
	dups, handovers := 0, 0
	for p := int32(0); p < parts; p++ {
		ds := byPart[p]
		sort.SliceStable(ds, func(i, j int) bool { return ds[i].stamp < ds[j].stamp })
		// Runs of one owner.
		type run struct {
			member      string
			first, next int64
			lastBatch   int
		}
		var runs []run
		for _, d := range ds {
			if n := len(runs); n > 0 && runs[n-1].member == d.member {
				r := &runs[n-1]
				if d.offset != r.next {
					t.Fatalf("partition %d: %s delivered %d after %d (gap or reorder)", p, d.member, d.offset, r.next-1)
				}
				r.next++
				r.lastBatch = d.batch
				continue
			}
			runs = append(runs, run{member: d.member, first: d.offset, next: d.offset + 1, lastBatch: d.batch})
		}
		if len(runs) == 0 || runs[0].first != 0 {
			t.Fatalf("partition %d: first delivery %+v; want offset 0", p, runs)
		}
		for i := 1; i < len(runs); i++ {
			prev, cur := runs[i-1], runs[i]
			handovers++
			if cur.first > prev.next {
				t.Fatalf("partition %d: %s started at %d after %s stopped at %d: offsets skipped", p, cur.member, cur.first, prev.member, prev.next)
			}
			dup := int(prev.next - cur.first)
			if dup > prev.lastBatch {
				t.Fatalf("partition %d: %s re-delivered %d records of %s, more than its last Poll (%d)", p, cur.member, dup, prev.member, prev.lastBatch)
			}
			dups += dup
		}
		if last := runs[len(runs)-1]; last.next != ends[p] {
			t.Fatalf("partition %d: delivered to %d; produced to %d", p, last.next, ends[p])
		}
	}
	logf("%d deliveries of %d records; %d handovers; %d re-delivered inside the window", len(all), total, handovers, dups)
	if handovers < parts {
		t.Fatalf("only %d handovers: the members did not rebalance", handovers)
	}
}

// groupCoordinator asks the cluster which broker coordinates group.
func groupCoordinator(ctx context.Context, c *Cluster, group string) (int32, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = group
	req.CoordinatorKeys = []string{group}
	resp, err := req.RequestWith(ctx, c.Client)
	if err != nil {
		return -1, err
	}
	node, code := resp.NodeID, resp.ErrorCode
	for _, co := range resp.Coordinators {
		node, code = co.NodeID, co.ErrorCode
	}
	return node, errCode(code)
}
