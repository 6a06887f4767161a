package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
)

// preferredReplica asks broker (the leader) with a raw Fetch from offset 0
// which replica a consumer in rack should read topic/partition from: the
// broker's own KIP-392 answer (-1: itself).
func (c *Cluster) preferredReplica(ctx context.Context, broker int32, topic string, id [16]byte, partition int32, rack string) (int32, error) {
	p, err := c.fetchRawIn(ctx, broker, topic, id, partition, 0, rack)
	return p.PreferredReadReplica, err
}

// readFrom polls until the consumer has delivered n more records than p
// holds, and checks that they are want, in order, at consecutive offsets
// from first, and that the last answer with records came from broker from.
func readFrom(ctx context.Context, t *testing.T, c *consumer.Consumer, p *polled, topic string, first int64, want []string, from int32) {
	t.Helper()
	had := len(p.records)
	if err := p.pollFor(ctx, c, func(p *polled) bool { return len(p.records) >= had+len(want) }); err != nil {
		t.Fatal(err)
	}
	got := p.records[had:]
	if vs := values(got); !slices.Equal(vs, want) {
		t.Fatalf("read %v; want %v exactly once, in order", vs, want)
	}
	for i, r := range got {
		if r.Offset != first+int64(i) {
			t.Fatalf("record %q at offset %d; want %d", r.Value, r.Offset, first+int64(i))
		}
	}
	rr, ok := c.ReadReplica(topic, 0)
	if !ok || rr.LastFrom != from {
		t.Fatalf("records read from broker %d (%+v, %v); want broker %d", rr.LastFrom, rr, ok, from)
	}
}

func valuesOf(prefix string, n int) []string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return vs
}

// TestConsumerReadsFromFollower is KIP-392 on the real cluster (brokers in
// racks r1, r2, r3 with Kafka's RackAwareReplicaSelector): a consumer in
// rack r3 reads from broker 3, the follower the leader itself names to a
// raw Fetch; when broker 3 stops answering (SIGSTOP) the records still
// arrive, from the leader; once it is back it is read from again; and a
// clean leader change while reading from the follower reports nothing.
// Every record arrives exactly once, in order, with no event and no error.
func TestConsumerReadsFromFollower(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	topic := TopicName("follower")
	id, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}}, map[string]string{"min.insync.replicas": "1"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.WaitPartition(ctx, topic, 0, func(s PartitionState) bool { return s.Leader == 1 && len(s.ISR) == 3 })
	if err != nil {
		t.Fatal(err)
	}
	a := valuesOf("a", 20)
	if _, err := ProduceValues(ctx, AcksAll, topic, 0, a...); err != nil {
		t.Fatal(err)
	}
	if pref, err := c.preferredReplica(ctx, 1, topic, id, 0, "r3"); err != nil || pref != 3 {
		t.Fatalf("leader 1 names replica %d (%v) to rack r3; the cluster is not rack-aware (scripts/kafka-local.sh sets broker.rack and replica.selector.class)", pref, err)
	}
	logf("%v; leader 1 names replica 3 to a consumer in rack r3", st)

	cons := newConsumer(t, consumer.Rack("r3"))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	var p polled
	readFrom(ctx, t, cons, &p, topic, 0, a, 3)
	if rr, _ := cons.ReadReplica(topic, 0); rr.Broker != 3 || !rr.Preferred || rr.Leader != 1 {
		t.Fatalf("read replica %+v; want broker 3, preferred, leader 1", rr)
	}
	for _, r := range p.records {
		if r.LeaderEpoch != st.LeaderEpoch {
			t.Fatalf("record %q in epoch %d; written in %d", r.Value, r.LeaderEpoch, st.LeaderEpoch)
		}
	}
	logf("read %d records from follower 3", len(a))

	// The follower stops answering: its fetch times out and the records
	// written meanwhile come from the leader.
	if err := c.Pause(ctx, 3); err != nil {
		t.Fatal(err)
	}
	b := valuesOf("b", 10)
	if _, err := ProduceValues(ctx, AcksAll, topic, 0, b...); err != nil {
		t.Fatal(err)
	}
	readFrom(ctx, t, cons, &p, topic, 20, b, 1)
	logf("broker 3 paused: read %d more from leader 1", len(b))
	if err := c.Resume(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if st, err = c.WaitPartition(ctx, topic, 0, func(s PartitionState) bool { return len(s.ISR) == 3 }); err != nil {
		t.Fatal(err)
	}
	// Back in sync, broker 3 is named again once the consumer asks the
	// leader again (MetadataMaxAge is 1 s here).
	if err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		rr, _ := cons.ReadReplica(topic, 0)
		return rr.Broker == 3, nil
	}); err != nil {
		rr, _ := cons.ReadReplica(topic, 0)
		t.Fatalf("broker 3 back in sync, never read from again: %+v", rr)
	}
	cc := valuesOf("c", 10)
	if _, err := ProduceValues(ctx, AcksAll, topic, 0, cc...); err != nil {
		t.Fatal(err)
	}
	readFrom(ctx, t, cons, &p, topic, 30, cc, 3)
	logf("broker 3 back in sync (%v): read %d more from it", st, len(cc))

	// A clean leader change while reading from the follower.
	if st, err = c.MoveLeader(ctx, topic, 0); err != nil {
		t.Fatal(err)
	}
	d := valuesOf("d", 10)
	if _, err := ProduceValues(ctx, AcksAll, topic, 0, d...); err != nil {
		t.Fatal(err)
	}
	readFrom(ctx, t, cons, &p, topic, 40, d, 3)
	for _, r := range p.records[40:] {
		if r.LeaderEpoch != st.LeaderEpoch {
			t.Fatalf("record %q at %d in epoch %d; written in %d", r.Value, r.Offset, r.LeaderEpoch, st.LeaderEpoch)
		}
	}
	if rr, _ := cons.ReadReplica(topic, 0); rr.Leader != st.Leader {
		t.Fatalf("read replica %+v after the leader moved to %d", rr, st.Leader)
	}
	if len(p.events) != 0 || len(p.errs) != 0 {
		t.Fatalf("events %v, errors %v; want none", p.events, p.errs)
	}
	logf("leader moved (%v): read %d more from follower 3, nothing reported", st, len(d))
}

// TestConsumerFollowerReportsUncleanTruncation: a consumer in rack r1 reads
// the first records from broker 1 while it is a follower, then (broker 1
// stopped) the records the leader, broker 2, acknowledged alone; broker 2
// is killed and broker 1 elected uncleanly. The truncation is reported with
// exactly the divergence point the new leader itself answers, before any
// record of the new lineage, which then arrives exactly once. Broker 2 comes
// back as a truncated follower; a consumer in its rack, started from the
// stored (offset, epoch) with SeekToNearest, reads the new lineage from it.
func TestConsumerFollowerReportsUncleanTruncation(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	cons := newConsumer(t, consumer.Rack("r1"), consumer.TruncationPolicy(consumer.PolicyEarliest))
	var p polled
	const before, lost, after = 10, 10, 5
	u, err := EngineerUncleanElection(ctx, c, UncleanPlan{
		Prefix: "follower-unclean", Before: before, Lost: lost, After: after, Log: logf,
		BeforeStop: func(ctx context.Context, topic string) error {
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
				return err
			}
			readFrom(ctx, t, cons, &p, topic, 0, valuesOf("a", before), 1)
			logf("read offsets 0..%d from follower 1", before-1)
			return nil
		},
		BeforeKill: func(ctx context.Context, topic string) error {
			readFrom(ctx, t, cons, &p, topic, before, valuesOf("b", lost), 2)
			logf("follower 1 stopped: read offsets %d..%d from leader 2", before, before+lost-1)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	truth := u.truth(ctx, t, c, logf)
	delivered := len(p.records)
	readFrom(ctx, t, cons, &p, u.Topic, truth.EndOffset, valuesOf("c", after), u.NewLeader)
	if len(p.events) != 1 || len(p.errs) != 0 || p.eventAt[0] != delivered {
		t.Fatalf("events %v at %v (delivered %d), errors %v; want one event before the new lineage", p.events, p.eventAt, delivered, p.errs)
	}
	ev := p.events[0]
	if ev.Kind != consumer.Diverged || ev.Divergent.Offset != truth.EndOffset || ev.Divergent.Epoch != truth.LeaderEpoch ||
		ev.Consumed.Offset != before+lost || ev.Consumed.Epoch != u.OldEpoch ||
		ev.Replaced.From != truth.EndOffset || ev.Replaced.To != before+lost {
		t.Fatalf("event %v; the new leader says %d@%d, consumed %d@%d", ev, truth.EndOffset, truth.LeaderEpoch, before+lost, u.OldEpoch)
	}
	logf("reported %v; then the new lineage from leader %d", ev, u.NewLeader)

	// The old leader returns, truncates to the new lineage and catches up.
	if err := c.Start(ctx, u.OldLeader); err != nil {
		t.Fatal(err)
	}
	st, err := c.WaitPartition(ctx, u.Topic, 0, func(s PartitionState) bool { return slices.Contains(s.ISR, u.OldLeader) })
	if err != nil {
		t.Fatal(err)
	}
	rack := fmt.Sprintf("r%d", u.OldLeader)
	if pref, err := c.preferredReplica(ctx, u.NewLeader, u.Topic, u.TopicID, 0, rack); err != nil || pref != u.OldLeader {
		t.Fatalf("leader %d names replica %d (%v) to rack %s; want %d", u.NewLeader, pref, err, rack, u.OldLeader)
	}
	fresh := newConsumer(t, consumer.Rack(rack), consumer.TruncationPolicy(consumer.PolicyNone))
	if err := fresh.Assign(consumer.Assignment{Topic: u.Topic, Partition: 0, Start: consumer.Latest()}); err != nil {
		t.Fatal(err)
	}
	pos, err := fresh.SeekToNearest(ctx, u.Topic, 0, consumer.OffsetAndMetadata{Offset: before + lost, LeaderEpoch: u.OldEpoch})
	if err != nil || pos.Offset != truth.EndOffset {
		t.Fatalf("SeekToNearest(%d@%d) = %v, %v; want %d", before+lost, u.OldEpoch, pos, err, truth.EndOffset)
	}
	var fp polled
	readFrom(ctx, t, fresh, &fp, u.Topic, truth.EndOffset, valuesOf("c", after), u.OldLeader)
	if len(fp.events) != 0 || len(fp.errs) != 0 {
		t.Fatalf("fresh consumer: events %v, errors %v", fp.events, fp.errs)
	}
	logf("old leader %d back as a follower (%v): a consumer in %s read the new lineage from it", u.OldLeader, st, rack)
}
