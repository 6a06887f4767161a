package consumer_test

import (
	"context"
	stderrors "errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// KIP-392 fetch from follower on kfake. kfake serves a partition's fetches
// on the brokers SetFollowers names (with the leader's log and high
// watermark) but never names a preferred read replica itself: a Fetch
// control plays the leader's replica.selector.class (selectReplica).

// followerOf lets broker (leader+1)%3 serve partition p's fetches as a
// follower, and returns the leader and that follower.
func followerOf(c *kfake.Cluster, p int32) (leader, follower int32) {
	leader = c.LeaderFor(topic, p)
	follower = (leader + 1) % 3
	c.SetFollowers(topic, p, []int32{follower})
	return leader, follower
}

// selectReplica makes broker leader answer like a Kafka leader with a
// replica.selector.class: a Fetch it receives that names partition 0 (and
// no other partition) is answered, when pick returns a broker for it, the
// way Kafka's leader answers then: no records, no error, and
// PreferredReadReplica set. pick gets the request and how many it
// redirected before; -1 leaves the request to kfake. It returns the number
// of requests redirected so far.
func selectReplica(c *kfake.Cluster, leader int32, pick func(req *kmsg.FetchRequest, n int) int32) func() int {
	var (
		mu sync.Mutex
		n  int
	)
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.FetchRequest)
		if c.CurrentNode() != leader || len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 1 || req.Topics[0].Partitions[0].Partition != 0 {
			return nil, nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		to := pick(req, n)
		if to < 0 {
			return nil, nil, false
		}
		n++
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = req.Topics[0].Topic, req.Topics[0].TopicID
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition = 0
		rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
		rp.PreferredReadReplica = to
		rp.RecordBatches = []byte{}
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		resp.SessionID = 0 // kfake did not see this request: no session
		return resp, nil, true
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// rackAware is Kafka's RackAwareReplicaSelector for a cluster where only
// follower is in rack: a consumer in that rack is sent to it, any other
// consumer is left on the leader.
func rackAware(rack string, follower int32) func(*kmsg.FetchRequest, int) int32 {
	return func(req *kmsg.FetchRequest, _ int) int32 {
		if req.Rack == rack {
			return follower
		}
		return -1
	}
}

// always names replica, whatever the request (a custom selector that does
// not look at racks).
func always(replica int32) func(*kmsg.FetchRequest, int) int32 {
	return func(*kmsg.FetchRequest, int) int32 { return replica }
}

// checkReadReplica requires ReadReplica(topic, 0) to be want, ignoring
// Until unless want sets it.
func checkReadReplica(t *testing.T, cons *consumer.Consumer, want consumer.ReadReplica) consumer.ReadReplica {
	t.Helper()
	got, ok := cons.ReadReplica(topic, 0)
	if !ok {
		t.Fatal("ReadReplica: partition 0 not assigned")
	}
	cmp := got
	if want.Until.IsZero() {
		cmp.Until = time.Time{}
	}
	if cmp != want {
		t.Fatalf("ReadReplica = %+v, want %+v", got, want)
	}
	return got
}

// namedBy returns the requests of log sent to node that name partition 0.
func namedBy(log []fetchSeen, node int32) []fetchSeen {
	var out []fetchSeen
	for _, r := range log {
		if _, ok := r.named[0]; ok && r.node == node {
			out = append(out, r)
		}
	}
	return out
}

// TestFetchFromFollower: a consumer with a rack is redirected by the leader
// to the follower in its rack, and reads every record from it, with the
// fetch fields that keep truncation detection unchanged
// (CurrentLeaderEpoch, LastFetchedEpoch); ListOffsets and
// OffsetForLeaderEpoch still go to the leader, and a seek keeps the
// follower.
func TestFetchFromFollower(t *testing.T) {
	c := newCluster(t, 1)
	log := observeFetches(c)
	lists := nodesOf(c, kmsg.ListOffsets)
	validations := nodesOf(c, kmsg.OffsetForLeaderEpoch)
	leader, follower := followerOf(c, 0)
	redirects := selectReplica(c, leader, rackAware("r2", follower))
	produceRange(t, c, 0, 0, 30)

	start := time.Now()
	cons := newConsumer(t, c, consumer.Rack("r2"))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 30, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 30})
	rr := checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})
	if lo, hi := start.Add(5*time.Minute), time.Now().Add(5*time.Minute); rr.Until.Before(lo) || rr.Until.After(hi) {
		t.Errorf("Until %v, want the default MetadataMaxAge (5m) after the redirect", rr.Until)
	}

	// The leader answered every fetch of partition 0 it got with the
	// redirect: every record came from the follower.
	all := log.all()
	if n := len(namedBy(all, leader)); n == 0 || n != redirects() {
		t.Fatalf("the leader got %d fetches of partition 0 and redirected %d", n, redirects())
	}
	if len(namedBy(all, follower)) == 0 {
		t.Fatal("no fetch reached the follower")
	}

	// A seek with an epoch is validated by the leader, and reading goes on
	// from the follower.
	if err := cons.SeekTo(topic, 0, consumer.AtEpoch(10, 0)); err != nil {
		t.Fatal(err)
	}
	produceRange(t, c, 0, 30, 40)
	recs, evs, errs = pollUntil(t, cons, 30, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("after the seek: events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 10}, map[int32]int64{0: 40})
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})

	// The follower got the fields the leader would have: the rack, the
	// leader's epoch, and the position's epoch once there is one (the
	// start came from ListOffsets; the seek named epoch 0).
	all = log.all()
	if n := len(namedBy(all, leader)); n != redirects() {
		t.Fatalf("the leader got %d fetches of partition 0 and redirected %d", n, redirects())
	}
	past0 := false
	for i, r := range all {
		if r.rack != "r2" {
			t.Errorf("request %d to %d: rack %q, want r2", i, r.node, r.rack)
		}
	}
	for _, r := range namedBy(all, follower) {
		rp := r.named[0]
		if rp.CurrentLeaderEpoch != 0 {
			t.Errorf("fetch from the follower with CurrentLeaderEpoch %d, want 0", rp.CurrentLeaderEpoch)
		}
		if rp.FetchOffset > 0 && rp.LastFetchedEpoch != 0 || rp.FetchOffset == 0 && rp.LastFetchedEpoch != -1 {
			t.Errorf("fetch from the follower at %d with LastFetchedEpoch %d", rp.FetchOffset, rp.LastFetchedEpoch)
		}
		past0 = past0 || rp.FetchOffset > 0
	}
	if !past0 {
		t.Error("the follower was never asked past offset 0 (with a LastFetchedEpoch)")
	}
	for what, nodes := range map[string][]int32{"ListOffsets": lists(), "OffsetForLeaderEpoch": validations()} {
		if len(nodes) == 0 {
			t.Errorf("no %s request", what)
		}
		for _, n := range nodes {
			if n != leader {
				t.Errorf("%s sent to %d, not to the leader %d", what, n, leader)
			}
		}
	}
}

// readFromFollower starts a consumer (with Rack "r2", and opts) of
// partition 0 at offset 0 redirected to the follower, reads the first n
// records from it, and returns it.
func readFromFollower(t *testing.T, c *kfake.Cluster, leader, follower int32, n int, opts ...consumer.Opt) *consumer.Consumer {
	t.Helper()
	produceRange(t, c, 0, 0, int64(n))
	cons := newConsumer(t, c, append([]consumer.Opt{consumer.Rack("r2")}, opts...)...)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, n, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: int64(n)})
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})
	return cons
}

// TestFollowerErrorBackToLeader: any error from the follower (the retriable
// partition errors Kafka's replicas answer, and a broken connection) sends
// the partition back to its leader, which is asked again (and here
// redirects again); nothing is reported, lost or read twice.
func TestFollowerErrorBackToLeader(t *testing.T) {
	for _, code := range []*kerr.Error{
		kerr.NotLeaderForPartition, kerr.ReplicaNotAvailable, kerr.FencedLeaderEpoch, kerr.UnknownLeaderEpoch,
		kerr.OffsetNotAvailable, kerr.KafkaStorageError, nil, // nil: the connection is cut
	} {
		name := "connection cut"
		if code != nil {
			name = code.Message
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 1)
			log := observeFetches(c)
			lists := countRequests(c, kmsg.ListOffsets)
			leader, follower := followerOf(c, 0)
			redirects := selectReplica(c, leader, rackAware("r2", follower))
			cons := readFromFollower(t, c, leader, follower, 20)
			before := redirects()

			hit := make(chan struct{})
			if code != nil {
				h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Nodes: []int32{follower}, Topic: topic, Partitions: []int32{0}, Err: code})
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if h.Wait(ctx, 1) == nil {
						close(hit)
					}
				}()
			} else {
				c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
					if c.CurrentNode() != follower {
						c.KeepControl()
						return nil, nil, false
					}
					close(hit)
					return nil, stderrors.New("cut"), true
				})
			}
			mark := log.len()
			produceRange(t, c, 0, 20, 40)
			recs, evs, errs := pollUntil(t, cons, 20, 10*time.Second)
			select {
			case <-hit:
			case <-time.After(time.Second):
				t.Fatal("the follower's fetch never failed")
			}
			if len(evs)+len(errs) > 0 {
				t.Fatalf("events %v errors %v", evs, errs)
			}
			checkInOrder(t, recs, map[int32]int64{0: 20}, map[int32]int64{0: 40})
			if redirects() <= before || len(namedBy(log.all()[mark:], leader)) == 0 {
				t.Fatalf("the leader was not asked again after the follower's error (redirects %d → %d)", before, redirects())
			}
			if n := lists(); n != 0 {
				t.Errorf("%d ListOffsets: the position was reset", n)
			}
			checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})
		})
	}
}

// TestFollowerOutOfRangeBackToLeader: OFFSET_OUT_OF_RANGE from the
// follower (its high watermark or log start may lag the leader's) is not a
// reset nor a truncation: no ListOffsets, no OffsetForLeaderEpoch, no
// report; the same position is fetched from the leader, which here serves
// it itself.
func TestFollowerOutOfRangeBackToLeader(t *testing.T) {
	c := newCluster(t, 1)
	log := observeFetches(c)
	lists := countRequests(c, kmsg.ListOffsets)
	validations := countRequests(c, kmsg.OffsetForLeaderEpoch)
	leader, follower := followerOf(c, 0)
	// The leader redirects the first fetch only: the fetch after the
	// follower's refusal is the leader's to serve.
	redirects := selectReplica(c, leader, func(req *kmsg.FetchRequest, n int) int32 {
		if n > 0 {
			return -1
		}
		return rackAware("r2", follower)(req, n)
	})
	cons := readFromFollower(t, c, leader, follower, 20)

	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Nodes: []int32{follower}, Topic: topic, Partitions: []int32{0}, Err: kerr.OffsetOutOfRange})
	mark := log.len()
	produceRange(t, c, 0, 20, 40)
	recs, evs, errs := pollUntil(t, cons, 20, 10*time.Second)
	if h.Hits() != 1 {
		t.Fatalf("the follower refused %d fetches, want 1", h.Hits())
	}
	if len(evs)+len(errs) > 0 {
		t.Fatalf("the follower's OFFSET_OUT_OF_RANGE surfaced: events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 20}, map[int32]int64{0: 40})
	if n, m := lists(), validations(); n+m != 0 {
		t.Fatalf("%d ListOffsets and %d OffsetForLeaderEpoch after the follower's OFFSET_OUT_OF_RANGE", n, m)
	}
	if redirects() != 1 {
		t.Fatalf("%d redirects", redirects())
	}
	// The position the follower refused (20: nothing past it was
	// produced before the fault) is the leader's next fetch.
	atLeader := namedBy(log.all()[mark:], leader)
	if len(atLeader) == 0 || atLeader[0].named[0].FetchOffset != 20 {
		t.Fatalf("the follower refused offset 20; the leader's fetches after: %+v", atLeader)
	}
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: leader, Leader: leader, LastFrom: leader})
}

// TestFollowerDivergingEpoch: a DivergingEpoch from the follower (which
// checks LastFetchedEpoch against its own log) is acted on exactly like
// one from the leader: the same report, the rewind, and the records read
// again, from the follower.
func TestFollowerDivergingEpoch(t *testing.T) {
	const to = 12
	c := newCluster(t, 1)
	leader, follower := followerOf(c, 0)
	selectReplica(c, leader, rackAware("r2", follower))
	cons := readFromFollower(t, c, leader, follower, 30, consumer.DisableFetchSessions())
	pauseIdle(cons)
	answered := make(chan struct{})
	var fromNode int32 = -1
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.FetchRequest)
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rp.Partition != 0 || rp.LastFetchedEpoch != 0 || rp.FetchOffset <= to {
					continue
				}
				fromNode = c.CurrentNode()
				resp := fetchAnswer(req, rp.FetchOffset, nil)
				resp.Topics[0].Topic, resp.Topics[0].TopicID = rt.Topic, rt.TopicID
				resp.Topics[0].Partitions[0].DivergingEpoch.Epoch = 0
				resp.Topics[0].Partitions[0].DivergingEpoch.EndOffset = to
				close(answered)
				return resp, nil, true
			}
		}
		c.KeepControl()
		return nil, nil, false
	})
	cons.Resume(tp0)
	recs, evs, errs := pollUntil(t, cons, 30-to, 10*time.Second)
	select {
	case <-answered:
	case <-time.After(time.Second):
		t.Fatal("the control never answered")
	}
	if fromNode != follower {
		t.Fatalf("DivergingEpoch answered by %d, want the follower %d", fromNode, follower)
	}
	if len(evs) != 1 || len(errs) != 0 {
		t.Fatalf("events %v errors %v; want one truncation", evs, errs)
	}
	// The report TestDivergingEpochInBand gets from the leader.
	ev := evs[0]
	if ev.Kind != consumer.Diverged || ev.Consumed != (consumer.Position{Offset: 30, Epoch: 0}) || ev.Divergent.Offset != to ||
		ev.Replaced != (consumer.Range{From: to, To: 30}) || ev.Halted {
		t.Fatalf("event %v (%+v)", ev, ev)
	}
	checkReplacedBatches(t, ev)
	checkInOrder(t, recs, map[int32]int64{0: to}, map[int32]int64{0: 30})
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})
}

// TestReadReplicaExpires: the follower is read from for MetadataMaxAge
// after the leader named it; then the leader is asked again (and, here,
// names it again).
func TestReadReplicaExpires(t *testing.T) {
	const age = 400 * time.Millisecond
	c := newCluster(t, 1)
	log := observeFetches(c)
	leader, follower := followerOf(c, 0)
	redirects := selectReplica(c, leader, rackAware("r2", follower))
	cons := readFromFollower(t, c, leader, follower, 10, consumer.MetadataMaxAge(age))
	first := checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})
	if d := time.Until(first.Until); d <= 0 || d > age {
		t.Fatalf("Until in %v, want within %v", d, age)
	}
	n := redirects()
	// Nothing is produced: the partition waits at the follower (long
	// polls) until the replica expires.
	waitFor(t, 5*time.Second, "the leader asked again", func() bool { return redirects() > n })
	// The control counts the redirect as the leader answers it; the
	// consumer takes the answer in a moment later.
	waitFor(t, 5*time.Second, "the new redirect taken", func() bool {
		rr, _ := cons.ReadReplica(topic, 0)
		return rr.Preferred && rr.Until.After(first.Until)
	})
	again := checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})
	if !again.Until.After(first.Until) {
		t.Fatalf("the new redirect did not restart the expiry: %v then %v", first.Until, again.Until)
	}
	// Between the two redirects the follower served the partition.
	var atFollower int
	for _, r := range log.all() {
		if _, ok := r.named[0]; ok && r.node == follower {
			atFollower++
		}
	}
	if atFollower == 0 {
		t.Fatal("no fetch to the follower")
	}
	produceRange(t, c, 0, 10, 20)
	recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 10}, map[int32]int64{0: 20})
}

// TestPreferredReplicaNotInMetadata: a replica the leader names that
// metadata does not list (a broker the consumer cannot reach) is not
// followed: the partition stays on its leader, metadata is refreshed (the
// broker may be new), and the leader is asked again after the retry
// backoff rather than at once.
func TestPreferredReplicaNotInMetadata(t *testing.T) {
	c := newCluster(t, 1)
	log := observeFetches(c)
	leader := c.LeaderFor(topic, 0)
	produceRange(t, c, 0, 0, 20)
	metas := countRequests(c, kmsg.Metadata)
	var (
		mu    sync.Mutex
		times []time.Time
	)
	// The leader names broker 99 three times, then serves the fetches.
	redirects := selectReplica(c, leader, func(_ *kmsg.FetchRequest, n int) int32 {
		if n >= 3 {
			return -1
		}
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return 99
	})
	cons := newConsumer(t, c, consumer.Rack("r2"), consumer.RetryBackoff(100*time.Millisecond))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	m0 := metas()
	recs, evs, errs := pollUntil(t, cons, 20, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 20})
	if redirects() != 3 {
		t.Fatalf("%d redirects", redirects())
	}
	for i, r := range log.all() {
		if _, ok := r.named[0]; ok && r.node != leader {
			t.Fatalf("request %d fetched partition 0 from %d, not its leader %d", i, r.node, leader)
		}
	}
	if metas() <= m0 {
		t.Error("no metadata refresh after the leader named an unknown broker")
	}
	mu.Lock()
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d < 50*time.Millisecond {
			t.Errorf("redirect %d came %v after the one before: the leader was asked again without a backoff", i, d)
		}
	}
	mu.Unlock()
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: leader, Leader: leader, LastFrom: leader})
}

// TestPreferredReplicaUnusableReported: a leader that keeps naming a read
// replica metadata does not list leaves the partition unread; once that has
// lasted MissingPartitionReport it is reported, once, in Poll's Errors (a
// *errors.PartitionError, Op "fetch", matching
// errors.ErrReplicaNotAvailable and naming the broker), and the partition is
// not halted: when the leader stops naming the broker, or the broker joins
// the cluster and metadata lists it, every record is read, with no second
// report. A later run of redirects is a new stall, reported again.
func TestPreferredReplicaUnusableReported(t *testing.T) {
	const bound = 300 * time.Millisecond
	for _, recovery := range []string{"leader stops naming it", "replica becomes known"} {
		t.Run(recovery, func(t *testing.T) {
			c := newCluster(t, 1)
			leader := c.LeaderFor(topic, 0)
			produceRange(t, c, 0, 0, 20)
			var (
				mu    sync.Mutex
				stall = true
			)
			setStall := func(on bool) {
				mu.Lock()
				stall = on
				mu.Unlock()
			}
			pick := func(*kmsg.FetchRequest, int) int32 {
				mu.Lock()
				defer mu.Unlock()
				if stall {
					return 99
				}
				return -1
			}
			// Every broker names 99 while it leads partition 0: adding
			// a broker (below) moves partitions around a while.
			var counts []func() int
			for b := range int32(3) {
				counts = append(counts, selectReplica(c, b, pick))
			}
			redirects := func() (n int) {
				for _, f := range counts {
					n += f()
				}
				return n
			}
			cons := newConsumer(t, c, consumer.MissingPartitionReport(bound))
			start := time.Now()
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
				t.Fatal(err)
			}
			wantReport := func(errs []error, since time.Time) {
				t.Helper()
				if len(errs) != 1 {
					t.Fatalf("errors %v; want one report of the unusable read replica", errs)
				}
				var pe *errors.PartitionError
				if !stderrors.As(errs[0], &pe) || pe.Op != "fetch" || pe.Topic != topic || pe.Partition != 0 ||
					!stderrors.Is(errs[0], errors.ErrReplicaNotAvailable) || !strings.Contains(errs[0].Error(), "broker 99") {
					t.Fatalf("error %#v (%v); want a fetch PartitionError of %s[0] matching ErrReplicaNotAvailable naming broker 99", errs[0], errs[0], topic)
				}
				if d := time.Since(since); d < bound {
					t.Errorf("reported %v after the redirects began, before MissingPartitionReport %v", d, bound)
				}
			}

			// The stall: reported once, nothing read.
			recs, evs, errs := pollUntil(t, cons, 0, 10*time.Second)
			if len(recs)+len(evs) > 0 {
				t.Fatalf("records %d events %v while the leader names broker 99", len(recs), evs)
			}
			wantReport(errs, start)
			recs, evs, errs = pollUntil(t, cons, 1<<30, 3*bound)
			if len(recs)+len(evs)+len(errs) > 0 {
				t.Fatalf("after the report: records %d events %v errors %v; want none", len(recs), evs, errs)
			}
			if n := redirects(); n < 3 {
				t.Fatalf("%d redirects; the leader was not asked again", n)
			}

			// The recovery: every record, no second report.
			want := consumer.ReadReplica{Broker: leader, Leader: leader, LastFrom: leader}
			switch recovery {
			case "leader stops naming it":
				setStall(false)
			case "replica becomes known":
				// kfake reassigns leaders when a broker joins: the
				// partition is moved back to its leader, which names 99.
				c.SetFollowers(topic, 0, []int32{99})
				if _, _, err := c.AddNode(99, 0); err != nil {
					t.Fatal(err)
				}
				if err := c.MoveTopicPartition(topic, 0, leader); err != nil {
					t.Fatal(err)
				}
				want = consumer.ReadReplica{Broker: 99, Leader: leader, Preferred: true, LastFrom: 99}
			}
			recs, evs, errs = pollUntil(t, cons, 20, 10*time.Second)
			if len(evs)+len(errs) > 0 {
				t.Fatalf("events %v errors %v", evs, errs)
			}
			checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 20})
			produceRange(t, c, 0, 20, 25)
			recs, evs, errs = pollUntil(t, cons, 1<<30, 3*bound)
			if len(evs)+len(errs) > 0 {
				t.Fatalf("after the recovery: events %v errors %v; want none", evs, errs)
			}
			checkInOrder(t, recs, map[int32]int64{0: 20}, map[int32]int64{0: 25})
			checkReadReplica(t, cons, want)
			if recovery != "leader stops naming it" {
				return
			}

			// A new run of redirects: reported again, once.
			produceRange(t, c, 0, 25, 30)
			again := time.Now()
			setStall(true)
			recs, evs, errs = pollUntil(t, cons, 0, 10*time.Second)
			if len(evs) > 0 {
				t.Fatalf("events %v", evs)
			}
			wantReport(errs, again)
			if len(recs) > 5 {
				t.Fatalf("%d records: want at most the 5 produced before the redirects", len(recs))
			}
			setStall(false)
			if len(recs) < 5 {
				more, evs, errs := pollUntil(t, cons, 5-len(recs), 10*time.Second)
				if len(evs)+len(errs) > 0 {
					t.Fatalf("events %v errors %v", evs, errs)
				}
				recs = append(recs, more...)
			}
			checkInOrder(t, recs, map[int32]int64{0: 25}, map[int32]int64{0: 30})
		})
	}
}

// TestFollowerWithoutRack: without Rack, Fetch requests carry no rack, and
// a rack-aware leader (Kafka's RackAwareReplicaSelector) keeps the
// partition on itself, exactly as before follower fetching. A leader whose
// custom selector names a replica anyway is followed (as Java's client
// does): answering the leader's fetches with no records, it would
// otherwise stall the partition.
func TestFollowerWithoutRack(t *testing.T) {
	for _, custom := range []bool{false, true} {
		name := "rack-aware selector"
		if custom {
			name = "custom selector"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 1)
			log := observeFetches(c)
			leader, follower := followerOf(c, 0)
			pick := rackAware("r2", follower)
			if custom {
				pick = always(follower)
			}
			redirects := selectReplica(c, leader, pick)
			produceRange(t, c, 0, 0, 20)
			cons := newConsumer(t, c)
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs := pollUntil(t, cons, 20, 10*time.Second)
			if len(evs)+len(errs) > 0 {
				t.Fatalf("events %v errors %v", evs, errs)
			}
			checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 20})
			for i, r := range log.all() {
				if r.rack != "" {
					t.Fatalf("request %d carries rack %q", i, r.rack)
				}
			}
			if !custom {
				if redirects() != 0 || len(namedBy(log.all(), follower)) != 0 {
					t.Fatalf("%d redirects; partition 0 fetched from the follower", redirects())
				}
				checkReadReplica(t, cons, consumer.ReadReplica{Broker: leader, Leader: leader, LastFrom: leader})
				return
			}
			if redirects() == 0 {
				t.Fatal("no redirect")
			}
			checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})
		})
	}
}

// TestFollowerFetchSessions: KIP-227 sessions are per broker. Partition 0
// moves from its leader into the session its follower already holds for
// partition 1 (which that broker leads), is read there, and when its
// replica expires moves back: the follower's session forgets it
// explicitly, and the broker no longer fetches it there, while partition
// 1 goes on in the same session.
func TestFollowerFetchSessions(t *testing.T) {
	c := newCluster(t, 2)
	log := observeFetches(c)
	leader, follower := followerOf(c, 0)
	if c.LeaderFor(topic, 1) != follower {
		if err := c.MoveTopicPartition(topic, 1, follower); err != nil {
			t.Fatal(err)
		}
	}
	// The leader redirects the first fetch only: after the expiry,
	// partition 0 stays on it.
	selectReplica(c, leader, func(req *kmsg.FetchRequest, n int) int32 {
		if n > 0 {
			return -1
		}
		return follower
	})
	produceRange(t, c, 0, 0, 20)
	produceRange(t, c, 1, 0, 20)
	cons := newConsumer(t, c, consumer.Rack("r2"), consumer.MetadataMaxAge(time.Second))
	assignAll(t, cons, 2, consumer.At(0))
	recs, evs, errs := pollUntil(t, cons, 40, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 20, 1: 20})
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})

	// Once expired, the fetch in flight at the follower still counts (it
	// may bring records); the next goes to the leader.
	mark := log.len()
	waitFor(t, 5*time.Second, "partition 0 fetched from its leader again", func() bool {
		return len(namedBy(log.all()[mark:], leader)) > 0
	})
	produceRange(t, c, 0, 20, 30)
	produceRange(t, c, 1, 20, 30)
	recs, evs, errs = pollUntil(t, cons, 20, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 20, 1: 20}, map[int32]int64{0: 30, 1: 30})
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: leader, Leader: leader, LastFrom: leader})
	// Let partition 1's fetches go on a little at the follower.
	produceRange(t, c, 1, 30, 35)
	if recs, _, _ := pollUntil(t, cons, 5, 10*time.Second); len(recs) != 5 {
		t.Fatalf("partition 1: %d records of 5", len(recs))
	}

	reqs := log.fetchedSince(0)
	// The last request of the follower that covered partition 0 (named,
	// or held in its session), and the next one there.
	last, next := -1, -1
	for i, r := range reqs {
		if _, ok := r.named[0]; ok && r.node == follower {
			last = i
		}
	}
	for i := last + 1; i < len(reqs) && last >= 0; i++ {
		if reqs[i].node == follower {
			next = i
			break
		}
	}
	if last < 0 || next < 0 {
		t.Fatalf("partition 0 last fetched at the follower by request %d, next request there %d", last, next)
	}
	// The next one forgets it explicitly, in the same session: the
	// session goes on for partition 1.
	lr, nr := reqs[last], reqs[next]
	if !slices.Contains(nr.forgotten, 0) || nr.sessionEpoch <= 0 || nr.sessionID != lr.sessionID || lr.sessionID == 0 {
		t.Fatalf("after request %d (session %d epoch %d) the follower got %+v", last, lr.sessionID, lr.sessionEpoch, nr)
	}
	for _, r := range reqs[next:] {
		if r.node == follower {
			if _, ok := r.named[1]; !ok {
				t.Fatalf("the follower's session lost partition 1: %+v", r)
			}
		}
	}
	// And the leader fetched it again once it came back.
	back := false
	for _, r := range reqs[last+1:] {
		if _, ok := r.named[0]; ok && r.node == leader {
			back = true
		}
	}
	if !back {
		t.Error("the leader never fetched partition 0 after it came back")
	}
}

// TestFollowerLeaderChange: a replica is the choice of one leader in one
// epoch. When metadata shows a new leader, the position is validated
// against it and the partition is read from it; the old leader's choice is
// not followed any more.
func TestFollowerLeaderChange(t *testing.T) {
	c := newCluster(t, 1)
	log := observeFetches(c)
	validations := nodesOf(c, kmsg.OffsetForLeaderEpoch)
	leader, follower := followerOf(c, 0)
	selectReplica(c, leader, rackAware("r2", follower))
	cons := readFromFollower(t, c, leader, follower, 20, consumer.MetadataMaxAge(200*time.Millisecond))
	third := 3 - leader - follower
	// Paused while the leader moves and writes in its new epoch: kfake
	// answers OffsetForLeaderEpoch(0) with -1/-1 until the new epoch
	// holds a record (see "kfake fidelity" in DESIGN.md).
	pauseIdle(cons)
	if err := c.MoveTopicPartition(topic, 0, third); err != nil {
		t.Fatal(err)
	}
	produceRange(t, c, 0, 20, 40)
	waitFor(t, 5*time.Second, "the new leader in metadata", func() bool {
		rr, _ := cons.ReadReplica(topic, 0)
		return rr.Leader == third
	})
	mark := log.len()
	cons.Resume(tp0)
	recs, evs, errs := pollUntil(t, cons, 20, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 20}, map[int32]int64{0: 40})
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: third, Leader: third, LastFrom: third})
	// (A fetch the machine wanted before the pause, now stale, may still
	// go to the old leader, as it would without a replica: its answer is
	// ignored.)
	for _, r := range log.fetchedSince(mark) {
		if rp, ok := r.named[0]; ok && (r.node == follower || rp.CurrentLeaderEpoch > 0 && r.node != third) {
			t.Fatalf("partition 0 fetched from %d (epoch %d) after the leader moved to %d", r.node, rp.CurrentLeaderEpoch, third)
		}
	}
	if v := validations(); len(v) == 0 || v[len(v)-1] != third {
		t.Fatalf("OffsetForLeaderEpoch sent to %v; want the new leader %d last", v, third)
	}
}

// TestUnreachableReadReplicaReported: a leader that keeps naming a replica
// metadata lists but the consumer cannot read from (every Fetch to it
// fails: a broker advertising a listener this client cannot reach, a
// firewall between racks) leaves the partition unread, each round being a
// redirect by the leader and a failure at the replica. That must not be
// silent: the run is reported once, as for a replica metadata does not
// list, and the partition is read as soon as the replica answers.
func TestUnreachableReadReplicaReported(t *testing.T) {
	const bound = 300 * time.Millisecond
	c := newCluster(t, 1)
	leader, follower := followerOf(c, 0)
	redirects := selectReplica(c, leader, rackAware("r2", follower))
	var (
		mu  sync.Mutex
		cut = true
		n   int
	)
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		if c.CurrentNode() != follower || !cut {
			return nil, nil, false
		}
		n++
		return nil, stderrors.New("cut"), true
	})
	produceRange(t, c, 0, 0, 20)
	cons := newConsumer(t, c, consumer.Rack("r2"), consumer.MissingPartitionReport(bound))
	start := time.Now()
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}

	recs, evs, errs := pollUntil(t, cons, 0, 10*time.Second)
	if len(recs)+len(evs) > 0 {
		t.Fatalf("records %d events %v while the replica cannot be reached", len(recs), evs)
	}
	if len(errs) != 1 {
		t.Fatalf("errors %v; want one report of the unreachable read replica (redirects %d)", errs, redirects())
	}
	var pe *errors.PartitionError
	if !stderrors.As(errs[0], &pe) || pe.Op != "fetch" || pe.Partition != 0 || !stderrors.Is(errs[0], errors.ErrReplicaNotAvailable) ||
		!strings.Contains(errs[0].Error(), fmt.Sprintf("broker %d", follower)) {
		t.Fatalf("error %v; want a fetch PartitionError matching ErrReplicaNotAvailable naming broker %d", errs[0], follower)
	}
	if d := time.Since(start); d < bound {
		t.Errorf("reported after %v, before MissingPartitionReport %v", d, bound)
	}
	mu.Lock()
	failed := n
	cut = false
	mu.Unlock()
	if failed < 2 || redirects() < 2 {
		t.Fatalf("%d failed fetches from the replica, %d redirects: want a run of both", failed, redirects())
	}

	recs, evs, errs = pollUntil(t, cons, 20, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("after the replica came back: events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 20})
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})
}
