package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/producer"
)

func newProducer(t *testing.T, opts ...producer.Opt) *producer.Producer {
	t.Helper()
	opts = append([]producer.Opt{
		producer.SeedBrokers(Seeds...),
		producer.RequestTimeout(5 * time.Second),
		producer.RetryBackoff(50 * time.Millisecond),
		producer.MetadataMaxAge(500 * time.Millisecond),
	}, opts...)
	p, err := producer.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	return p
}

// produceValues writes values to partition 0 one at a time with p and
// returns the acknowledged offsets.
func produceValues(ctx context.Context, p *producer.Producer, topic string, values []string) ([]int64, error) {
	var offs []int64
	for _, v := range values {
		res, err := p.ProduceSync(ctx, &producer.Record{Topic: topic, Partition: 0, ExplicitPartition: true, Value: []byte(v)})
		if err != nil {
			return offs, err
		}
		offs = append(offs, res[0].Offset)
	}
	return offs, nil
}

// TestProducerReportsAckedWritesLost: a kepoch producer writes records that
// the old leader acknowledges alone; an unclean election truncates them. The
// producer, which no client before it does, notices the leader change, asks
// the new leader which of its acknowledged offsets still exist, and reports
// exactly the ones that are gone — checked against the new leader's own
// OffsetForLeaderEpoch answer.
func TestProducerReportsAckedWritesLost(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var lost []producer.AckedWritesLost
	var outcomes []producer.Outcome
	p := newProducer(t, producer.OnAckedWritesLost(func(l producer.AckedWritesLost) {
		mu.Lock()
		lost = append(lost, l)
		mu.Unlock()
	}), producer.OnOutcome(func(o producer.Outcome) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }))
	const before, lostN, after = 10, 10, 5
	u, err := EngineerUncleanElection(ctx, c, UncleanPlan{
		Prefix: "producer-lost", Before: before, Lost: lostN, After: after,
		Log: func(f string, a ...any) { t.Logf(f, a...) },
		Write: func(ctx context.Context, phase string, acks Acks, topic string, values []string) ([]int64, error) {
			if phase == "after" {
				return ProduceValues(ctx, acks, topic, 0, values...)
			}
			// acks=all: with the follower stopped the ISR is the leader
			// alone, so the leader acknowledges "lost" records by itself.
			return produceValues(ctx, p, topic, values)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	truth, err := c.OffsetForLeaderEpoch(ctx, u.NewLeader, u.Topic, 0, u.OldEpoch)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		var covered int64
		for _, l := range lost {
			covered += l.To - l.From
		}
		mu.Unlock()
		if covered >= before+lostN-truth.EndOffset || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	pid := p.ProducerID()
	mu.Lock()
	reported := slices.Clone(lost)
	mu.Unlock()
	t.Logf("new leader: epoch %d ends at %d; producer reported lost: %+v", u.OldEpoch, truth.EndOffset, reported)
	var offsets []int64
	for _, l := range reported {
		if l.TP.Topic != u.Topic || l.TP.Partition != 0 || l.LeaderEpoch != u.OldEpoch {
			t.Fatalf("lost report %+v", l)
		}
		// The records carry the producer's identity and the new leader's
		// log holds other batches there: the loss is provable, so an
		// Unconfirmed ("maybe gone") report would not be the exact
		// report this test claims.
		if l.Unconfirmed || l.Producer.ID != pid.ID {
			t.Fatalf("lost report %+v: want a confirmed loss of producer %v's writes", l, pid)
		}
		for o := l.From; o < l.To; o++ {
			offsets = append(offsets, o)
		}
	}
	slices.Sort(offsets)
	var want []int64
	for o := truth.EndOffset; o < before+lostN; o++ {
		want = append(want, o)
	}
	if !slices.Equal(offsets, want) {
		t.Fatalf("reported lost offsets %v; the new leader lost exactly %v", offsets, want)
	}
	if len(want) == 0 {
		t.Fatalf("the new leader lost nothing (epoch %d ends at %d): the scenario did not truncate", u.OldEpoch, truth.EndOffset)
	}
	lostReports := len(reported)

	// KIP-360 on the real broker: the new leader's producer state ends with
	// the Before records, so the producer's next sequence is a gap it
	// refuses with OUT_OF_ORDER_SEQUENCE_NUMBER (real brokers never answer
	// UNKNOWN_PRODUCER_ID). One epoch bump; the refused batch is resent
	// under the new epoch from sequence 0 and appended after the new
	// leader's records.
	bumps := p.Bumps()
	res, err := p.ProduceSync(ctx, &producer.Record{Topic: u.Topic, Partition: 0, ExplicitPartition: true, Value: []byte("after-gap")})
	if err != nil {
		t.Fatalf("producing after the truncation: %v", err)
	}
	if res[0].Offset != int64(before+after) {
		t.Fatalf("record after the truncation at offset %d; want %d", res[0].Offset, before+after)
	}
	if p.Bumps() != bumps+1 {
		t.Fatalf("%d epoch bumps for the gap; want exactly one", p.Bumps()-bumps)
	}
	if _, ok := res[0].Recovery.(producer.ResequencedNoLoss); !ok {
		t.Fatalf("recovery outcome %#v; want ResequencedNoLoss (the refusal was definite)", res[0].Recovery)
	}
	mu.Lock()
	seen, lostAfter := slices.Clone(outcomes), slices.Clone(lost[lostReports:])
	mu.Unlock()
	var gap *producer.ProvenGap
	for _, o := range seen {
		if g, ok := o.(producer.ProvenGap); ok {
			gap = &g
		}
	}
	if gap == nil || gap.Producer.ID != pid.ID || gap.LastAckedOffset != int64(before+lostN-1) {
		t.Fatalf("outcomes %v; want a ProvenGap of producer %v after its acknowledged offset %d", seen, pid, before+lostN-1)
	}
	if len(lostAfter) != 0 {
		t.Fatalf("acked-write reports after the recovery: %+v", lostAfter)
	}
}

// TestProducerHardKillsLoseNothing writes under acks=all with
// min.insync.replicas=2 while the partition leader is SIGKILLed twice: every
// acknowledged record is in the log exactly once, in production order, and
// the producer reports no acknowledged write lost.
func TestProducerHardKillsLoseNothing(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	topic := TopicName("producer-kills")
	_, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}}, map[string]string{"min.insync.replicas": "2"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lost []producer.AckedWritesLost
	var outcomes []producer.Outcome
	p := newProducer(t, producer.DeliveryTimeout(90*time.Second),
		producer.OnAckedWritesLost(func(l producer.AckedWritesLost) { mu.Lock(); lost = append(lost, l); mu.Unlock() }),
		producer.OnOutcome(func(o producer.Outcome) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }))

	// The writer runs until both kills are over and the second victim is
	// back (not for a fixed count: 3000 records at 3 ms ended before the
	// second kill, which then exercised nothing).
	const maxN = 30000
	results := make([]producer.Result, maxN)
	var wg sync.WaitGroup
	done := make(chan struct{})
	stopWriting := make(chan struct{})
	n := 0 // set by the writer before done is closed
	go func() {
		defer close(done)
		for i := 0; i < maxN; i++ {
			select {
			case <-stopWriting:
				n = i
				return
			default:
			}
			wg.Add(1)
			r := &producer.Record{Topic: topic, Partition: 0, ExplicitPartition: true, Value: []byte(fmt.Sprintf("v%05d", i))}
			if err := p.Produce(ctx, r, func(res producer.Result) { results[i] = res; wg.Done() }); err != nil {
				wg.Done()
				results[i].Err = err
			}
			time.Sleep(3 * time.Millisecond) // spread the writes over the kills
		}
		n = maxN
	}()
	writing := func(when string) {
		t.Helper()
		select {
		case <-done:
			t.Fatalf("the writer ended before %s: the kills would not be under load", when)
		default:
		}
	}
	for k := 0; k < 2; k++ {
		time.Sleep(1500 * time.Millisecond)
		st, err := c.WaitPartition(ctx, topic, 0, func(s PartitionState) bool { return s.Leader > 0 && len(s.ISR) == 3 })
		if err != nil {
			t.Fatal(err)
		}
		writing(fmt.Sprintf("kill %d", k+1))
		if err := c.Kill(ctx, st.Leader); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed leader %d (epoch %d)", st.Leader, st.LeaderEpoch)
		time.Sleep(2 * time.Second)
		if err := c.Start(ctx, st.Leader); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WaitPartition(ctx, topic, 0, func(s PartitionState) bool { return s.Leader > 0 && len(s.ISR) == 3 }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // more writes under the last leader
	writing("the end of the scenario")
	close(stopWriting)
	<-done
	wg.Wait()
	results = results[:n]
	for i, r := range results {
		if r.Err != nil {
			t.Fatalf("record %d failed: %v", i, r.Err)
		}
	}
	// Read everything back with kepoch's consumer.
	cons := newConsumer(t)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	var got polled
	if err := got.pollFor(ctx, cons, func(p *polled) bool { return len(p.records) >= n }); err != nil {
		t.Fatal(err)
	}
	if len(got.records) != n {
		t.Fatalf("read %d records; %d were acknowledged", len(got.records), n)
	}
	// Nothing past them either (a duplicate the consumer had not polled
	// yet): the leader's high watermark is the acknowledged count.
	requireLogEnd(ctx, t, c, topic, int64(n))
	seen := map[string]int64{}
	epochs := map[int32]bool{}
	for i, r := range got.records {
		epochs[r.LeaderEpoch] = true
		v := string(r.Value)
		if prev, dup := seen[v]; dup {
			t.Fatalf("%s at offsets %d and %d: duplicate", v, prev, r.Offset)
		}
		seen[v] = r.Offset
		if want := fmt.Sprintf("v%05d", i); v != want {
			t.Fatalf("offset %d holds %s, want %s: reordered or lost", r.Offset, v, want)
		}
		if results[i].Offset != r.Offset {
			t.Fatalf("%s acknowledged at offset %d, found at %d", v, results[i].Offset, r.Offset)
		}
	}
	// Writes spanned both kills: the records carry the first leader's
	// epoch and those of the two leaders elected after the kills.
	if len(epochs) < 3 {
		t.Fatalf("records carry leader epochs %v; the writes did not span both leader changes", epochs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lost) != 0 || len(got.events) != 0 {
		t.Fatalf("acked writes reported lost %v, truncation events %v", lost, got.events)
	}
	t.Logf("%d records, each once and in order; %d epoch bumps; outcomes %v", n, p.Bumps(), outcomes)
}

// setClusterConfig sets (value non-nil) or deletes a cluster-wide dynamic
// broker config with IncrementalAlterConfigs.
// lowerProducerExpiry sets producer.id.expiration.ms to 2s on every broker
// for the rest of the test.
func (c *Cluster) lowerProducerExpiry(ctx context.Context, t *testing.T) {
	t.Helper()
	ms := "2000"
	if err := c.setClusterConfig(ctx, "producer.id.expiration.ms", &ms); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.setClusterConfig(context.Background(), "producer.id.expiration.ms", nil); err != nil {
			t.Errorf("restoring producer.id.expiration.ms: %v", err)
		}
	})
}

// waitProducerForgotten waits until the leader of partition 0 of topic no
// longer lists producer pid (DescribeProducers).
func (c *Cluster) waitProducerForgotten(ctx context.Context, t *testing.T, topic string, pid int64) {
	t.Helper()
	st, err := c.Describe(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The leader must hold the producer first: otherwise "no longer lists
	// it" holds from the start (a producer without an ID, -1, or a wrong
	// broker or topic) and the wait proves no expiry.
	if pid < 0 {
		t.Fatalf("producer id %d: the producer has no identity for the broker to forget", pid)
	}
	ids, err := c.describeProducers(ctx, st.Leader, topic)
	if err != nil || !slices.Contains(ids, pid) {
		t.Fatalf("leader %d lists producers %v (%v); want %d before waiting for it to expire", st.Leader, ids, err, pid)
	}
	if err := poll(ctx, 250*time.Millisecond, func() (bool, error) {
		ids, err := c.describeProducers(ctx, st.Leader, topic)
		return err == nil && !slices.Contains(ids, pid), nil
	}); err != nil {
		t.Fatalf("the leader never expired producer %d: %v", pid, err)
	}
	t.Logf("leader %d expired producer %d", st.Leader, pid)
}

func (c *Cluster) setClusterConfig(ctx context.Context, name string, value *string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeBroker
	r.ResourceName = ""
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = name
	cfg.Value = value
	if value == nil {
		cfg.Op = kmsg.IncrementalAlterConfigOpDelete
	}
	r.Configs = append(r.Configs, cfg)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, c.Client)
	if err != nil {
		return err
	}
	for _, rr := range resp.Resources {
		if err := errCode(rr.ErrorCode); err != nil {
			return fmt.Errorf("alter %s: %w (%s)", name, err, deref(rr.ErrorMessage))
		}
	}
	return nil
}

// describeProducers returns the producer ids the leader holds state for.
func (c *Cluster) describeProducers(ctx context.Context, broker int32, topic string) ([]int64, error) {
	req := kmsg.NewPtrDescribeProducersRequest()
	rt := kmsg.NewDescribeProducersRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.Reader(broker))
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := errCode(p.ErrorCode); err != nil {
				return nil, err
			}
			for _, ap := range p.ActiveProducers {
				ids = append(ids, ap.ProducerID)
			}
		}
	}
	return ids, nil
}

// TestProducerStateExpiry lets the brokers forget the producer
// (producer.id.expiration.ms lowered to 2s) while it idles, then produces
// again: the producer continues without an error surfaced and without a
// duplicate, in order.
func TestProducerStateExpiry(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := TopicName("producer-expiry")
	if _, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}}, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	c.lowerProducerExpiry(ctx, t)
	var mu sync.Mutex
	var outcomes []producer.Outcome
	p := newProducer(t, producer.OnOutcome(func(o producer.Outcome) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }))
	vals := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		return out
	}
	if _, err := produceValues(ctx, p, topic, vals("a", 20)); err != nil {
		t.Fatal(err)
	}
	c.waitProducerForgotten(ctx, t, topic, p.ProducerID().ID)
	if _, err := produceValues(ctx, p, topic, vals("b", 20)); err != nil {
		t.Fatalf("producing after expiry: %v", err)
	}
	cons := newConsumer(t)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	var got polled
	if err := got.pollFor(ctx, cons, func(p *polled) bool { return len(p.records) >= 40 }); err != nil {
		t.Fatal(err)
	}
	want := append(vals("a", 20), vals("b", 20)...)
	if g := values(got.records); !slices.Equal(g, want) {
		t.Fatalf("log %v; want %v", g, want)
	}
	requireLogEnd(ctx, t, c, topic, int64(len(want)))
	mu.Lock()
	t.Logf("after expiry: %d bumps, outcomes %v", p.Bumps(), outcomes)
	mu.Unlock()
}

// requireLogEnd requires the high watermark of partition 0 of topic, as its
// leader answers, to be want: no record beyond the expected ones (a
// duplicate after the last one a consumer waited for).
func requireLogEnd(ctx context.Context, t *testing.T, c *Cluster, topic string, want int64) {
	t.Helper()
	st, err := c.Describe(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.ReplicaOffsets(ctx, st.Leader, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if o.HighWater != want {
		t.Fatalf("%s/0 high watermark %d on leader %d; want %d (records beyond the expected ones)", topic, o.HighWater, st.Leader, want)
	}
}
