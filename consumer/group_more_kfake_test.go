package consumer_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// admin sends one raw request to the cluster.
func admin(t *testing.T, c *kfake.Cluster, req kmsg.Request) kmsg.Response {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func createTopic(t *testing.T, c *kfake.Cluster, name string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp := admin(t, c, req).(*kmsg.CreateTopicsResponse)
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatal(err)
	}
}

// TestGroupLostOnFencedGeneration: a heartbeat answered ILLEGAL_GENERATION
// (classic) or FENCED_MEMBER_EPOCH (KIP-848) means the member's partitions
// may already be someone else's: OnLost, not OnRevoked, and nothing is
// committed; the member rejoins and gets them back.
func TestGroupLostOnFencedGeneration(t *testing.T) {
	for _, tc := range []struct {
		name  string
		key   kmsg.Key
		proto consumer.GroupProtocol
	}{
		{"classic", kmsg.Heartbeat, consumer.ProtocolClassic},
		{"consumer", kmsg.ConsumerGroupHeartbeat, consumer.ProtocolConsumer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClusterWith(t, 2, kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
			seq := 0
			m := startMember(t, c, "m", "lost-"+tc.name, &seq, consumer.WithGroupProtocol(tc.proto), consumer.AutoCommitInterval(20*time.Millisecond))
			waitFor(t, 10*time.Second, "2 partitions", func() bool { return m.log.ownedCount() == 2 })
			var once sync.Once
			fenced := make(chan struct{})
			c.ControlKey(int16(tc.key), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				hit := false
				once.Do(func() { hit = true })
				if !hit {
					return nil, nil, false
				}
				if tc.key == kmsg.Heartbeat {
					c.KeepControl()
					resp := kr.ResponseKind().(*kmsg.HeartbeatResponse)
					resp.ErrorCode = kerr.IllegalGeneration.Code
					close(fenced)
					return resp, nil, true
				}
				req := kr.(*kmsg.ConsumerGroupHeartbeatRequest)
				if req.MemberEpoch <= 0 {
					once = sync.Once{}
					c.KeepControl()
					return nil, nil, false
				}
				resp := kr.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
				resp.ErrorCode = kerr.FencedMemberEpoch.Code
				close(fenced)
				return resp, nil, true
			})
			<-fenced
			waitFor(t, 10*time.Second, "partitions back", func() bool {
				l := m.log.log()
				return len(l) >= 3 && m.log.ownedCount() == 2
			})
			l := m.log.log()
			if l[1] != "lost [t[0] t[1]]" || l[2] != "assigned [t[0] t[1]]" {
				t.Fatalf("callbacks %v; want assigned, lost, assigned", l)
			}
		})
	}
}

// TestGroupRegexSubscription: a regex subscription picks up a topic
// created later, under both protocols.
func TestGroupRegexSubscription(t *testing.T) {
	for _, proto := range []consumer.GroupProtocol{consumer.ProtocolClassic, consumer.ProtocolConsumer} {
		t.Run(proto.String(), func(t *testing.T) {
			c := newClusterWith(t, 2, kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
			seq := 0
			subscribe := func(cons *consumer.Consumer) error { return cons.SubscribeRegex(`t|t-more\d`) }
			m := startMemberWith(t, c, "re", "regex-"+proto.String(), &seq, subscribe, consumer.WithGroupProtocol(proto))
			waitFor(t, 10*time.Second, "t's 2 partitions", func() bool { return m.log.ownedCount() == 2 })
			createTopic(t, c, "t-more1", 3)
			createTopic(t, c, "t-other", 3)
			waitFor(t, 15*time.Second, "5 partitions", func() bool { return m.log.ownedCount() == 5 })
			time.Sleep(300 * time.Millisecond)
			if got := m.log.ownedList(); !slices.Equal(got, []string{"t-more1[0]", "t-more1[1]", "t-more1[2]", "t[0]", "t[1]"}) {
				t.Fatalf("owned %v", got)
			}
		})
	}
}

// TestGroupPartitionsAdded: the classic leader notices partitions added to
// a subscribed topic and rebalances them in.
func TestGroupPartitionsAdded(t *testing.T) {
	c := newCluster(t, 2)
	seq := 0
	m := startMember(t, c, "m", "grow", &seq)
	waitFor(t, 10*time.Second, "2 partitions", func() bool { return m.log.ownedCount() == 2 })
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, 4
	req.Topics = append(req.Topics, rt)
	if err := kerr.ErrorForCode(admin(t, c, req).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "4 partitions", func() bool { return m.log.ownedCount() == 4 })
}

// TestGroupMalformedAssignment: an assignment no consumer can decode (a
// broken leader) is surfaced by Poll as a GroupError matching
// ErrMalformedGroupData; the member rejoins and recovers.
func TestGroupMalformedAssignment(t *testing.T) {
	c := newCluster(t, 2)
	var once sync.Once
	c.ControlKey(int16(kmsg.SyncGroup), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		hit := false
		once.Do(func() { hit = true })
		if !hit {
			return nil, nil, false
		}
		resp := kr.ResponseKind().(*kmsg.SyncGroupResponse)
		pt, pn := "consumer", consumer.CooperativeStickyAssignor
		resp.ProtocolType, resp.Protocol = &pt, &pn
		resp.MemberAssignment = []byte{0, 1, 0x7f, 0xff, 0xff, 0xff} // a topic array of 2^31-1 entries in 4 bytes
		return resp, nil, true
	})
	seq := 0
	m := startMember(t, c, "m", "garbage", &seq)
	waitFor(t, 15*time.Second, "recovered with 2 partitions", func() bool { return m.log.ownedCount() == 2 })
	waitFor(t, 5*time.Second, "the error", func() bool { _, errs := m.got(); return len(errs) > 0 })
	_, errs := m.got()
	var ge *consumer.GroupError
	var de *consumer.GroupDataError
	if !errors.As(errs[0], &ge) || ge.Op != "sync" || !errors.Is(errs[0], consumer.ErrMalformedGroupData) || !errors.As(errs[0], &de) {
		t.Fatalf("errors %v", errs)
	}
	t.Log(errs[0])
}

// TestCommitHygiene: an epoch-less position is reported when committed, or
// refused; CommitAsync answers arrive in commit order; a commit of an
// unassigned partition and a standalone commit (no Subscribe) work.
func TestCommitHygiene(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	tp := consumer.TopicPartition{Topic: topic, Partition: 0}
	var mu sync.Mutex
	var warned []consumer.OffsetAndMetadata
	warn := consumer.OnCommitWithoutEpoch(func(_ consumer.TopicPartition, om consumer.OffsetAndMetadata) {
		mu.Lock()
		warned = append(warned, om)
		mu.Unlock()
	})
	cons := newConsumer(t, c, consumer.Group("hygiene"), consumer.DisableAutoCommit(), warn)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(10)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitFor(t, 5*time.Second, "position 10", func() bool { _, ok := cons.Position(topic, 0); return ok })
	// Nothing consumed since the seek: the position has no epoch.
	if got := cons.Consumed(); got[tp] != (consumer.OffsetAndMetadata{Offset: 10, LeaderEpoch: -1}) {
		t.Fatalf("consumed %v", got)
	}
	if err := cons.CommitSync(ctx, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(warned) != 1 || warned[0].Offset != 10 {
		t.Fatalf("warned %v", warned)
	}
	mu.Unlock()

	// In order: many async commits, answered in the order made.
	var order []int64
	var done sync.WaitGroup
	for i := int64(1); i <= 30; i++ {
		done.Add(1)
		cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{tp: {Offset: i, LeaderEpoch: 0, Metadata: "m"}},
			func(m map[consumer.TopicPartition]consumer.OffsetAndMetadata, err error) {
				defer done.Done()
				if err != nil {
					t.Errorf("async commit %d: %v", i, err)
				}
				order = append(order, m[tp].Offset) // done callbacks run one at a time
			})
	}
	done.Wait()
	for i, o := range order {
		if o != int64(i+1) {
			t.Fatalf("async commits answered in order %v", order)
		}
	}
	got, err := cons.Committed(ctx, tp)
	if err != nil || got[tp] != (consumer.OffsetAndMetadata{Offset: 30, LeaderEpoch: 0, Metadata: "m"}) {
		t.Fatalf("committed %v %v", got, err)
	}

	// Refusing: an explicit epoch-less commit fails, "all consumed" skips it.
	strict := newConsumer(t, c, consumer.Group("hygiene"), consumer.DisableAutoCommit(), consumer.RefuseCommitsWithoutEpoch())
	err = strict.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{tp: {Offset: 3, LeaderEpoch: -1}})
	var pe *errors.PartitionError
	if !errors.Is(err, consumer.ErrCommitWithoutEpoch) || !errors.As(err, &pe) || pe.Op != "commit" || pe.Offset != 3 {
		t.Fatalf("epoch-less commit with refusal: %v", err)
	}
	if err := strict.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(4)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "position 4", func() bool { _, ok := strict.Position(topic, 0); return ok })
	if got := strict.Consumed(); len(got) != 0 {
		t.Fatalf("refusing consumer offers %v", got)
	}
	if got, _ := strict.Committed(ctx, tp); got[tp].Offset != 30 {
		t.Fatalf("committed %v after refusals", got)
	}
	// A consumer without Group cannot commit.
	plain := newConsumer(t, c)
	if err := plain.CommitSync(ctx, nil); !errors.Is(err, consumer.ErrNoGroup) {
		t.Fatalf("commit without group: %v", err)
	}
	if err := plain.Subscribe(topic); !errors.Is(err, consumer.ErrNoGroup) {
		t.Fatalf("subscribe without group: %v", err)
	}
	// Subscribe and Assign exclude each other.
	if err := cons.Subscribe(topic); !errors.Is(err, consumer.ErrAssignmentMode) {
		t.Fatalf("Subscribe after Assign: %v; want ErrAssignmentMode", err)
	}
}

// TestCommitByTopicID: against a coordinator that speaks OffsetCommit and
// OffsetFetch v10 (topics by ID, KIP-848), commits carry the topic ID and
// the leader epoch, and are read back by name.
func TestCommitByTopicID(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 5)
	var mu sync.Mutex
	var seen []kmsg.OffsetCommitRequestTopic
	var version int16
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetCommitRequest)
		mu.Lock()
		version, seen = req.Version, append(seen, req.Topics...)
		mu.Unlock()
		return nil, nil, false
	})
	seq := 0
	m := startMember(t, c, "m", "by-id", &seq, consumer.DisableAutoCommit())
	waitFor(t, 10*time.Second, "5 records", func() bool { r, _ := m.got(); return len(r) == 5 })
	m.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.cons.CommitSync(ctx, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if version < 10 || len(seen) != 1 || seen[0].TopicID == ([16]byte{}) || seen[0].Partitions[0].LeaderEpoch != 0 || seen[0].Partitions[0].Offset != 5 {
		t.Fatalf("OffsetCommit v%d topics %+v", version, seen)
	}
	mu.Unlock()
	tp := consumer.TopicPartition{Topic: topic, Partition: 0}
	if got, err := m.cons.Committed(ctx, tp); err != nil || got[tp] != (consumer.OffsetAndMetadata{Offset: 5, LeaderEpoch: 0}) {
		t.Fatalf("committed %v %v", got, err)
	}
}

// TestGroupConsumerProtocolHeartbeatsDuringCallbacks: a revoke callback
// slower than the session timeout does not get a KIP-848 member fenced:
// heartbeats go on while it runs.
func TestGroupConsumerProtocolHeartbeatsDuringCallbacks(t *testing.T) {
	c := newClusterWith(t, 2, kfake.BrokerConfigs(map[string]string{
		"group.consumer.heartbeat.interval.ms": "100",
		"group.consumer.session.timeout.ms":    "600",
	}))
	seq := 0
	proto := consumer.WithGroupProtocol(consumer.ProtocolConsumer)
	// These callbacks replace m1's log callbacks, so they record into the
	// log themselves (m1 is alone, and revokes nothing, until the log is set).
	var m1log atomic.Pointer[rebalanceLog]
	slow := consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) {
		time.Sleep(1500 * time.Millisecond)
		if l := m1log.Load(); l != nil {
			l.revoked(tps)
		}
	})
	var lostMu sync.Mutex
	lost := 0
	onLost := consumer.OnLost(func(_ context.Context, tps []consumer.TopicPartition) {
		lostMu.Lock()
		lost++
		lostMu.Unlock()
		if l := m1log.Load(); l != nil {
			l.lost(tps)
		}
	})
	m1 := startMember(t, c, "m1", "slow", &seq, proto, slow, onLost)
	m1log.Store(m1.log)
	waitFor(t, 10*time.Second, "m1 assigned", func() bool { return len(m1.log.log()) > 0 })
	m2 := startMember(t, c, "m2", "slow", &seq, proto)
	waitFor(t, 15*time.Second, "m2 gets a partition", func() bool { return m2.log.ownedCount() == 1 })
	lostMu.Lock()
	defer lostMu.Unlock()
	if lost != 0 {
		t.Fatalf("m1 lost its partitions %d times during a slow revoke", lost)
	}
	if gm := m1.cons.GroupMetadata(); gm.Generation <= 0 {
		t.Fatalf("m1 fenced: %+v", gm)
	}
}

// TestAutocommitWindow: autocommit stores what the application had been
// given when its latest Poll began, so records are committed only once
// the application asked for more after them.
func TestAutocommitWindow(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	cons := newConsumer(t, c, append(groupOpts("window"), consumer.AutoCommitInterval(20*time.Millisecond))...)
	if err := cons.Subscribe(topic); err != nil {
		t.Fatal(err)
	}
	tp := consumer.TopicPartition{Topic: topic, Partition: 0}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var recs []consumer.Record
	for len(recs) < 10 {
		f, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, f.Records...)
	}
	// The application "processes" the 10 records: nothing of them is
	// committed meanwhile.
	time.Sleep(200 * time.Millisecond)
	if got, err := cons.Committed(ctx, tp); err != nil || got[tp].Offset > 0 {
		t.Fatalf("committed %v %v while the records were being processed", got, err)
	}
	// The next Poll says they were processed.
	pctx, pcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _ = cons.Poll(pctx)
	pcancel()
	waitFor(t, 5*time.Second, "the autocommit of 10", func() bool {
		got, err := cons.Committed(ctx, tp)
		return err == nil && got[tp] == consumer.OffsetAndMetadata{Offset: 10, LeaderEpoch: 0}
	})
}

// TestGroupConsumerProtocolStaticMember: a KIP-848 static member closes
// with member epoch -2 (it will come back) and its successor under the same
// instance id gets the same partitions, while the other member keeps its
// own.
func TestGroupConsumerProtocolStaticMember(t *testing.T) {
	c := newClusterWith(t, 4, kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	leaves := map[int32]int{}
	var mu sync.Mutex
	c.ControlKey(int16(kmsg.ConsumerGroupHeartbeat), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if e := kr.(*kmsg.ConsumerGroupHeartbeatRequest).MemberEpoch; e < 0 {
			mu.Lock()
			leaves[e]++
			mu.Unlock()
		}
		return nil, nil, false
	})
	seq := 0
	proto := consumer.WithGroupProtocol(consumer.ProtocolConsumer)
	s1 := startMember(t, c, "s1", "static848", &seq, proto, consumer.GroupInstanceID("i1"))
	s2 := startMember(t, c, "s2", "static848", &seq, proto, consumer.GroupInstanceID("i2"))
	waitFor(t, 15*time.Second, "2 each", func() bool { return s1.log.ownedCount() == 2 && s2.log.ownedCount() == 2 })
	had, other := s1.log.ownedList(), s2.log.log()
	s1.closeNow(t)
	s1b := startMember(t, c, "s1b", "static848", &seq, proto, consumer.GroupInstanceID("i1"))
	waitFor(t, 10*time.Second, "s1 back with 2", func() bool { return s1b.log.ownedCount() == 2 })
	if got := s1b.log.ownedList(); !slices.Equal(got, had) {
		t.Fatalf("static member came back with %v, had %v", got, had)
	}
	if l := s2.log.log(); !slices.Equal(l, other) {
		t.Fatalf("the other member's partitions moved: %v → %v", other, l)
	}
	mu.Lock()
	defer mu.Unlock()
	if leaves[-2] != 1 || leaves[-1] != 0 {
		t.Fatalf("leaves by epoch %v; want one static leave (-2)", leaves)
	}
}
