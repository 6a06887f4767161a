package consumer_test

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kepoch/kepoch/consumer"
)

// Component tests of ValidateInBand. kfake answers Fetch at v12 and above
// but never checks LastFetchedEpoch, so it never answers DivergingEpoch:
// where a test needs the leader's check to fail, a Fetch control gives
// the answer a Kafka leader gives (divergeOnce), and the same broker
// answers OffsetForLeaderEpoch the same way (truncate), so that both paths
// face the same log.

// p0Request is a Fetch naming partition 0 or an OffsetForLeaderEpoch asking
// about it, as a broker received it.
type p0Request struct {
	node     int32
	validate bool  // an OffsetForLeaderEpoch
	epoch    int32 // the epoch it asks about
	fetch    kmsg.FetchRequestTopicPartition
}

func (r p0Request) String() string {
	if r.validate {
		return fmt.Sprintf("validate@%d epoch=%d", r.node, r.epoch)
	}
	return fmt.Sprintf("fetch@%d offset=%d current=%d last-fetched=%d", r.node, r.fetch.FetchOffset, r.fetch.CurrentLeaderEpoch, r.fetch.LastFetchedEpoch)
}

// p0Log is every request about partition 0, in the order the cluster got
// them.
type p0Log struct {
	mu   sync.Mutex
	reqs []p0Request
}

// observeP0 installs the observer; install it before any control that
// answers Fetch or OffsetForLeaderEpoch requests, so that it sees those
// too.
func observeP0(c *kfake.Cluster) *p0Log {
	l := &p0Log{}
	add := func(r p0Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, r)
		l.mu.Unlock()
	}
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range kr.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				if rp.Partition == 0 {
					add(p0Request{node: c.CurrentNode(), fetch: rp})
				}
			}
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range kr.(*kmsg.OffsetForLeaderEpochRequest).Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == topic && rp.Partition == 0 {
					add(p0Request{node: c.CurrentNode(), validate: true, epoch: rp.LeaderEpoch})
				}
			}
		}
		return nil, nil, false
	})
	return l
}

func (l *p0Log) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reqs)
}

func (l *p0Log) since(i int) []p0Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs[i:])
}

func validationsIn(rs []p0Request) (n int) {
	for _, r := range rs {
		if r.validate {
			n++
		}
	}
	return n
}

// firstFetchTo returns the first fetch of rs sent to node.
func firstFetchTo(t *testing.T, rs []p0Request, node int32) (int, p0Request) {
	t.Helper()
	for i, r := range rs {
		if !r.validate && r.node == node {
			return i, r
		}
	}
	t.Fatalf("no fetch of partition 0 reached broker %d: %v", node, rs)
	return 0, p0Request{}
}

// twoLeaders makes partition 1 led by the broker partition 0 will move to,
// so that a consumer of both has had Fetch answers from both brokers before
// the move, and returns partition 0's leader and that broker.
func twoLeaders(t *testing.T, c *kfake.Cluster) (from, to int32) {
	t.Helper()
	from = c.LeaderFor(topic, 0)
	to = (from + 1) % 3
	if c.LeaderFor(topic, 1) != to {
		if err := c.MoveTopicPartition(topic, 1, to); err != nil {
			t.Fatal(err)
		}
	}
	return from, to
}

// readBoth assigns partitions 0 and 1 from the start and reads n0 and n1
// records of them.
func readBoth(t *testing.T, cons *consumer.Consumer, n0, n1 int64) {
	t.Helper()
	assignAll(t, cons, 2, consumer.Earliest())
	recs, evs, errs := pollUntil(t, cons, int(n0+n1), 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: n0, 1: n1})
}

// divergeOnce answers, once, the first Fetch that node receives naming
// partition 0 at offset at with CurrentLeaderEpoch current and
// LastFetchedEpoch lfe the way a Kafka leader whose epoch lfe ends at end
// does: DivergingEpoch (lfe, end), no records. It returns whether it has
// answered.
func divergeOnce(c *kfake.Cluster, node int32, at int64, current, lfe int32, end int64) func() bool {
	var done sync.Once
	answered := make(chan struct{})
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.FetchRequest)
		if c.CurrentNode() == node {
			for _, rt := range req.Topics {
				for _, rp := range rt.Partitions {
					if rp.Partition != 0 || rp.FetchOffset != at || rp.CurrentLeaderEpoch != current || rp.LastFetchedEpoch != lfe {
						continue
					}
					resp := req.ResponseKind().(*kmsg.FetchResponse)
					st := kmsg.NewFetchResponseTopic()
					st.Topic, st.TopicID = rt.Topic, rt.TopicID
					sp := kmsg.NewFetchResponseTopicPartition()
					sp.Partition = 0
					sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = at, at, 0
					sp.DivergingEpoch.Epoch, sp.DivergingEpoch.EndOffset = lfe, end
					st.Partitions = append(st.Partitions, sp)
					resp.Topics = append(resp.Topics, st)
					resp.SessionID = 0 // kfake did not see this request: no session
					done.Do(func() { close(answered) })
					return resp, nil, true
				}
			}
		}
		c.KeepControl()
		return nil, nil, false
	})
	return func() bool {
		select {
		case <-answered:
			return true
		default:
			return false
		}
	}
}

// normalize clears what differs between two clusters in the batches a
// report lists: the producer ID and the CRC (it covers the timestamps).
func normalize(ev *consumer.TruncationEvent) {
	for i := range ev.ReplacedBatches {
		ev.ReplacedBatches[i].ProducerID, ev.ReplacedBatches[i].CRC = 0, 0
	}
}

// TestValidateInBandLeaderChange: with ValidateInBand, a clean leader
// change to a broker that has answered Fetch v12+ is validated by the
// first fetch from it (here answered empty): no OffsetForLeaderEpoch, a
// fetch with the new
// leader epoch as CurrentLeaderEpoch and the position's epoch as
// LastFetchedEpoch, and the records of the new epoch follow, with the
// position's epoch that of the last record delivered. Without it (today's
// behaviour), the change is validated with OffsetForLeaderEpoch first.
// The consumer learns of the change from the old leader's hint
// (CurrentLeader with its NOT_LEADER_OR_FOLLOWER), or from metadata when
// the old leader refuses without one.
func TestValidateInBandLeaderChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inBand bool
		noHint bool
	}{
		{"ValidateInBand", true, false},
		{"ValidateInBand,from metadata", true, true},
		{"validate first", false, false},
	} {
		inBand := tc.inBand
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2)
			log := observeP0(c)
			fetches := observeFetches(c)
			// kfake answers OffsetForLeaderEpoch(0) with -1/-1 while the
			// new epoch has no record (Kafka answers its end): answer as
			// Kafka does, for the validating-first run.
			truncate(c, 30)
			from, to := twoLeaders(t, c)
			produceRange(t, c, 0, 0, 30)
			produceRange(t, c, 1, 0, 5)
			cons := newConsumer(t, c, consumer.ValidateInBand(inBand))
			readBoth(t, cons, 30, 5)
			if pos, ok := cons.Position(topic, 0); !ok || pos != (consumer.Position{Offset: 30, Epoch: 0}) {
				t.Fatalf("position %v %v", pos, ok)
			}

			mark, fmark := log.len(), fetches.len()
			if tc.noHint {
				c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Nodes: []int32{from}, Topic: topic, Partitions: []int32{0},
					Err: kerr.NotLeaderForPartition, Count: -1})
			}
			if err := c.MoveTopicPartition(topic, 0, to); err != nil {
				t.Fatal(err)
			}
			// The new leader has no record of epoch 1 yet: its first
			// answer is empty, and proves the position as well as
			// records would (the next fetch follows it at once).
			waitFor(t, 10*time.Second, "two fetches from the new leader", func() bool {
				n := 0
				for _, r := range fetches.fetchedSince(fmark) {
					if _, ok := r.named[0]; ok && r.node == to {
						n++
					}
				}
				return n >= 2
			})
			produceRange(t, c, 0, 30, 40)
			recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
			if len(evs)+len(errs) > 0 {
				t.Fatalf("a clean leader change reported %v %v", evs, errs)
			}
			checkInOrder(t, recs, map[int32]int64{0: 30}, map[int32]int64{0: 40})
			checkEpochs(t, recs, 30, 1)
			if pos, ok := cons.Position(topic, 0); !ok || pos != (consumer.Position{Offset: 40, Epoch: 1}) {
				t.Fatalf("position %v %v, want 40@1", pos, ok)
			}

			after := log.since(mark)
			i, first := firstFetchTo(t, after, to)
			if first.fetch.FetchOffset != 30 || first.fetch.CurrentLeaderEpoch != 1 || first.fetch.LastFetchedEpoch != 0 {
				t.Errorf("first fetch from the new leader %v, want offset 30, current epoch 1, last fetched epoch 0", first)
			}
			switch n := validationsIn(after); {
			case inBand && n != 0:
				t.Errorf("%d OffsetForLeaderEpoch requests after the move: %v", n, after)
			case !inBand && (n != 1 || validationsIn(after[:i]) != 1 || after[0].node != from && !after[0].validate && after[0].node != to):
				t.Errorf("want one OffsetForLeaderEpoch before the first fetch from the new leader: %v", after)
			}
		})
	}
}

// TestValidateInBandTruncation: a truncation at a leader change is
// reported identically, with or without ValidateInBand, by a leader that
// answers both ways (OffsetForLeaderEpoch(0) ends at 12, and a Fetch at
// 30 with LastFetchedEpoch 0 is answered DivergingEpoch (0, 12)): the
// same TruncationEvent, the same delivered batches replaced, the same
// rewind. With the option the report comes from the DivergingEpoch of the
// first fetch, without a single OffsetForLeaderEpoch; without it, from
// the OffsetForLeaderEpoch asked first. Nothing past the divergence is
// delivered.
func TestValidateInBandTruncation(t *testing.T) {
	const to0 = 12
	report := map[bool]consumer.TruncationEvent{}
	for _, inBand := range []bool{true, false} {
		t.Run(fmt.Sprintf("ValidateInBand=%v", inBand), func(t *testing.T) {
			c := newCluster(t, 2)
			log := observeP0(c)
			truncate(c, to0)
			from, to := twoLeaders(t, c)
			diverged := divergeOnce(c, to, 30, 1, 0, to0)
			// One record a batch, so that the replaced batches are the
			// same on both clusters.
			produceRange(t, c, 0, 0, 30, kgo.MaxBufferedRecords(1))
			produceRange(t, c, 1, 0, 5)
			cons := newConsumer(t, c, consumer.ValidateInBand(inBand))
			readBoth(t, cons, 30, 5)

			mark := log.len()
			if err := c.MoveTopicPartition(topic, 0, to); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs := pollUntil(t, cons, 30-to0, 10*time.Second)
			if len(evs) != 1 || len(errs) != 0 {
				t.Fatalf("events %v errors %v; want one truncation", evs, errs)
			}
			ev := evs[0]
			if ev.Kind != consumer.Diverged || ev.Consumed != (consumer.Position{Offset: 30, Epoch: 0}) ||
				ev.Divergent != (consumer.Position{Offset: to0, Epoch: 0}) || ev.Resume != ev.Divergent || !ev.Exact ||
				ev.Replaced != (consumer.Range{From: to0, To: 30}) || ev.Halted {
				t.Fatalf("event %v (%+v)", ev, ev)
			}
			checkReplacedBatches(t, ev)
			// kfake did not really truncate: the rewind reads 12..29 again.
			checkInOrder(t, recs, map[int32]int64{0: to0}, map[int32]int64{0: 30})
			normalize(&ev)
			report[inBand] = ev

			after := log.since(mark)
			_, first := firstFetchTo(t, after, to)
			switch n := validationsIn(after); {
			case inBand && (n != 0 || !diverged()):
				t.Errorf("%d OffsetForLeaderEpoch requests after the move, DivergingEpoch answered %v: %v", n, diverged(), after)
			case inBand && (first.fetch.FetchOffset != 30 || first.fetch.CurrentLeaderEpoch != 1 || first.fetch.LastFetchedEpoch != 0):
				t.Errorf("first fetch from the new leader %v", first)
			case !inBand && (n != 1 || diverged() || first.fetch.FetchOffset != to0):
				t.Errorf("want one OffsetForLeaderEpoch, then a fetch from %d: %v (from %d)", to0, after, from)
			}
		})
	}
	if a, b := report[true], report[false]; !reflect.DeepEqual(a, b) {
		t.Fatalf("the two paths disagree:\n  in band  %+v\n  validate %+v", a, b)
	}
}

// TestValidateInBandUnknownLeader: with ValidateInBand, a leader change to
// a broker that has not answered this consumer a Fetch yet is validated
// with OffsetForLeaderEpoch first (the consumer does not know it checks
// LastFetchedEpoch); once it has answered, the next change to it is
// validated by the fetch.
func TestValidateInBandUnknownLeader(t *testing.T) {
	c := newCluster(t, 1)
	log := observeP0(c)
	truncate(c, 30)
	from := c.LeaderFor(topic, 0)
	to := (from + 1) % 3
	produceRange(t, c, 0, 0, 30)
	cons, _ := startAt0(t, c, 30, consumer.ValidateInBand(true))

	mark := log.len()
	if err := c.MoveTopicPartition(topic, 0, to); err != nil {
		t.Fatal(err)
	}
	produceRange(t, c, 0, 30, 40)
	recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 30}, map[int32]int64{0: 40})
	after := log.since(mark)
	if i, _ := firstFetchTo(t, after, to); validationsIn(after[:i]) != 1 {
		t.Fatalf("a move to a broker not known: want one OffsetForLeaderEpoch before the first fetch from it: %v", after)
	}

	// Back to the first broker: it has answered Fetch v12+ already.
	mark = log.len()
	if err := c.MoveTopicPartition(topic, 0, from); err != nil {
		t.Fatal(err)
	}
	produceRange(t, c, 0, 40, 50)
	recs, evs, errs = pollUntil(t, cons, 10, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 40}, map[int32]int64{0: 50})
	after = log.since(mark)
	if _, first := firstFetchTo(t, after, from); validationsIn(after) != 0 ||
		first.fetch.FetchOffset != 40 || first.fetch.CurrentLeaderEpoch != 2 || first.fetch.LastFetchedEpoch != 1 {
		t.Fatalf("a move to a known broker: want no OffsetForLeaderEpoch, a first fetch at 40 in epoch 2 with LastFetchedEpoch 1: %v", after)
	}
}

// TestValidateInBandOlderBroker: with ValidateInBand, against brokers that
// answer Fetch below v12 (Kafka 2.6: no LastFetchedEpoch) a leader change
// is validated with OffsetForLeaderEpoch first, and a truncation is
// reported from its answer.
func TestValidateInBandOlderBroker(t *testing.T) {
	c := newClusterWith(t, 2, kfake.MaxVersions(kversion.V2_6_0()))
	log := observeP0(c)
	truncate(c, 12)
	_, to := twoLeaders(t, c)
	produceRange(t, c, 0, 0, 30)
	produceRange(t, c, 1, 0, 5)
	cons := newConsumer(t, c, consumer.ValidateInBand(true))
	readBoth(t, cons, 30, 5)

	mark := log.len()
	if err := c.MoveTopicPartition(topic, 0, to); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 18, 10*time.Second)
	if len(evs) != 1 || len(errs) != 0 {
		t.Fatalf("events %v errors %v; want one truncation", evs, errs)
	}
	if ev := evs[0]; ev.Kind != consumer.Diverged || ev.Consumed.Offset != 30 || ev.Divergent.Offset != 12 || ev.Replaced != (consumer.Range{From: 12, To: 30}) {
		t.Fatalf("event %v", ev)
	}
	checkInOrder(t, recs, map[int32]int64{0: 12}, map[int32]int64{0: 30})
	after := log.since(mark)
	if i, first := firstFetchTo(t, after, to); validationsIn(after[:i]) != 1 || first.fetch.FetchOffset != 12 {
		t.Fatalf("want one OffsetForLeaderEpoch before the first fetch from the new leader, at 12: %v", after)
	}
}

// TestValidateInBandUncheckedAnswerWithheld: the answer to the validating
// fetch proves nothing when the leader did not check LastFetchedEpoch:
// here the leader names a preferred read replica (a Kafka leader then
// reads nothing; this one sends a record too, which a broker that checked
// nothing may). That record is not delivered while the position is
// validated with OffsetForLeaderEpoch (held here); once it is, reading
// goes on from the replica the leader named.
func TestValidateInBandUncheckedAnswerWithheld(t *testing.T) {
	c := newCluster(t, 2)
	log := observeP0(c)
	from, to := twoLeaders(t, c)
	third := 3 - from - to
	c.SetFollowers(topic, 0, []int32{third})
	truncate(c, 30)
	produceRange(t, c, 0, 0, 30)
	produceRange(t, c, 1, 0, 5)
	redirected := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.FetchRequest)
		if c.CurrentNode() == to {
			for _, rt := range req.Topics {
				for _, rp := range rt.Partitions {
					if rp.Partition != 0 || rp.FetchOffset != 30 {
						continue
					}
					resp := req.ResponseKind().(*kmsg.FetchResponse)
					st := kmsg.NewFetchResponseTopic()
					st.Topic, st.TopicID = rt.Topic, rt.TopicID
					sp := kmsg.NewFetchResponseTopicPartition()
					sp.Partition = 0
					sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = 31, 31, 0
					sp.PreferredReadReplica = third
					sp.RecordBatches = oneRecordBatch(t, nil, 30, 1)
					st.Partitions = append(st.Partitions, sp)
					resp.Topics = append(resp.Topics, st)
					resp.SessionID = 0
					once.Do(func() { close(redirected) })
					return resp, nil, true
				}
			}
		}
		c.KeepControl()
		return nil, nil, false
	})
	cons := newConsumer(t, c, consumer.ValidateInBand(true))
	readBoth(t, cons, 30, 5)

	held := holdValidations(c)
	mark := log.len()
	if err := c.MoveTopicPartition(topic, 0, to); err != nil {
		t.Fatal(err)
	}
	select {
	case <-redirected:
	case <-time.After(10 * time.Second):
		t.Fatal("the validating fetch never reached the new leader")
	}
	// The answer's record is not delivered: the position is being
	// validated (the OffsetForLeaderEpoch is held).
	expectQuiet(t, cons, 500*time.Millisecond)
	waitFor(t, 5*time.Second, "an OffsetForLeaderEpoch", func() bool { return validationsIn(log.since(mark)) > 0 })
	if pos, ok := cons.Position(topic, 0); !ok || pos != (consumer.Position{Offset: 30, Epoch: 0}) {
		t.Fatalf("position %v %v while validating, want 30@0", pos, ok)
	}
	close(held)
	produceRange(t, c, 0, 30, 35)
	recs, evs, errs := pollUntil(t, cons, 5, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 30}, map[int32]int64{0: 35})
	after := log.since(mark)
	i, first := firstFetchTo(t, after, to)
	if validationsIn(after[:i]) != 0 || validationsIn(after) != 1 || first.fetch.CurrentLeaderEpoch != 1 || first.fetch.LastFetchedEpoch != 0 {
		t.Fatalf("want the validating fetch first, then one OffsetForLeaderEpoch: %v", after)
	}
	if _, f := firstFetchTo(t, after[i+1:], third); f.fetch.FetchOffset != 30 {
		t.Fatalf("after the validation: first fetch from the replica %v", f)
	}
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: third, Leader: to, Preferred: true, LastFrom: third})
}

// TestValidateInBandSeekTo: with ValidateInBand, a SeekTo with an epoch on
// a partition whose leader has answered Fetch v12+ is validated by the
// first fetch (LastFetchedEpoch the seek's epoch), and a divergence it
// finds is reported as OffsetForLeaderEpoch's answer would have it; a
// start with an epoch on a new consumer, whose leader has not answered yet,
// is validated with OffsetForLeaderEpoch first.
func TestValidateInBandSeekTo(t *testing.T) {
	report := map[bool]consumer.TruncationEvent{}
	for _, inBand := range []bool{true, false} {
		t.Run(fmt.Sprintf("ValidateInBand=%v", inBand), func(t *testing.T) {
			c := newCluster(t, 1)
			log := observeP0(c)
			// Epoch 0 ends at 30 until the log is truncated to 12.
			var mu sync.Mutex
			end := int64(30)
			answerEpochEnds(c, func(rp kmsg.OffsetForLeaderEpochRequestTopicPartition) (int32, int64) {
				mu.Lock()
				defer mu.Unlock()
				return 0, end
			})
			leader := c.LeaderFor(topic, 0)
			diverged := divergeOnce(c, leader, 25, 0, 0, 12)
			produceRange(t, c, 0, 0, 30, kgo.MaxBufferedRecords(1))
			// A committed (20, 0), on a consumer whose leader has not
			// answered a Fetch yet: OffsetForLeaderEpoch first.
			cons := newConsumer(t, c, consumer.ValidateInBand(inBand))
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.AtEpoch(20, 0)}); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
			if len(evs)+len(errs) > 0 {
				t.Fatalf("events %v errors %v", evs, errs)
			}
			checkInOrder(t, recs, map[int32]int64{0: 20}, map[int32]int64{0: 30})
			if all := log.since(0); len(all) == 0 || !all[0].validate {
				t.Fatalf("the committed start was not validated first: %v", all)
			}

			// The log is truncated to 12; a seek with an epoch is
			// validated by the fetch, with the option.
			mu.Lock()
			end = 12
			mu.Unlock()
			mark := log.len()
			if err := cons.SeekTo(topic, 0, consumer.AtEpoch(25, 0)); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs = pollUntil(t, cons, 18, 10*time.Second)
			if len(evs) != 1 || len(errs) != 0 {
				t.Fatalf("events %v errors %v; want one truncation", evs, errs)
			}
			ev := evs[0]
			if ev.Kind != consumer.Diverged || ev.Consumed != (consumer.Position{Offset: 25, Epoch: 0}) || ev.Divergent.Offset != 12 || ev.Halted {
				t.Fatalf("event %v (%+v)", ev, ev)
			}
			checkInOrder(t, recs, map[int32]int64{0: 12}, map[int32]int64{0: 30})
			normalize(&ev)
			report[inBand] = ev
			// (A fetch at 30 in flight before the seek may come in
			// after it.)
			after := slices.DeleteFunc(log.since(mark), func(r p0Request) bool { return !r.validate && r.fetch.FetchOffset == 30 })
			switch n := validationsIn(after); {
			case inBand && (n != 0 || !diverged() || after[0].fetch.FetchOffset != 25 || after[0].fetch.LastFetchedEpoch != 0):
				t.Errorf("want the seek validated by its first fetch (at 25, last fetched epoch 0), no OffsetForLeaderEpoch: %v", after)
			case !inBand && (n != 1 || !after[0].validate || diverged()):
				t.Errorf("want one OffsetForLeaderEpoch first: %v", after)
			}
		})
	}
	if a, b := report[true], report[false]; !reflect.DeepEqual(a, b) {
		t.Fatalf("the two paths disagree:\n  in band  %+v\n  validate %+v", a, b)
	}
}

// TestValidateInBandSeekWhileReadingFollower: with ValidateInBand, the
// fetch that validates a SeekTo with an epoch goes to the leader, not to
// the follower the partition is read from: the check is the leader's.
// This leader answers it by naming the follower again (it reads nothing,
// so it checked nothing): the position is validated with
// OffsetForLeaderEpoch, and reading goes on from the follower.
func TestValidateInBandSeekWhileReadingFollower(t *testing.T) {
	c := newCluster(t, 1)
	log := observeP0(c)
	leader, follower := followerOf(c, 0)
	selectReplica(c, leader, rackAware("r2", follower))
	cons := readFromFollower(t, c, leader, follower, 30, consumer.ValidateInBand(true))

	mark := log.len()
	if err := cons.SeekTo(topic, 0, consumer.AtEpoch(10, 0)); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 20, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 10}, map[int32]int64{0: 30})
	checkReadReplica(t, cons, consumer.ReadReplica{Broker: follower, Leader: leader, Preferred: true, LastFrom: follower})
	// (A fetch at 30 in flight before the seek may come in after it.)
	after := slices.DeleteFunc(log.since(mark), func(r p0Request) bool { return !r.validate && r.fetch.FetchOffset == 30 })
	if len(after) < 3 || after[0].validate || after[0].node != leader || after[0].fetch.FetchOffset != 10 || after[0].fetch.LastFetchedEpoch != 0 ||
		!after[1].validate || after[1].node != leader || after[2].validate || after[2].node != follower {
		t.Fatalf("want the validating fetch to the leader %d, its OffsetForLeaderEpoch, then the follower %d: %v", leader, follower, after)
	}
}
