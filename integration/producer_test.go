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
	p := newProducer(t, producer.OnAckedWritesLost(func(l producer.AckedWritesLost) {
		mu.Lock()
		lost = append(lost, l)
		mu.Unlock()
	}))
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
	mu.Lock()
	defer mu.Unlock()
	t.Logf("new leader: epoch %d ends at %d; producer reported lost: %+v", u.OldEpoch, truth.EndOffset, lost)
	var offsets []int64
	for _, l := range lost {
		if l.TP.Topic != u.Topic || l.TP.Partition != 0 || l.LeaderEpoch != u.OldEpoch {
			t.Fatalf("lost report %+v", l)
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

	const n = 3000
	results := make([]producer.Result, n)
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			wg.Add(1)
			r := &producer.Record{Topic: topic, Partition: 0, ExplicitPartition: true, Value: []byte(fmt.Sprintf("v%05d", i))}
			if err := p.Produce(ctx, r, func(res producer.Result) { results[i] = res; wg.Done() }); err != nil {
				wg.Done()
				results[i].Err = err
			}
			time.Sleep(3 * time.Millisecond) // spread the writes over the kills

		}
	}()
	for k := 0; k < 2; k++ {
		time.Sleep(1500 * time.Millisecond)
		st, err := c.WaitPartition(ctx, topic, 0, func(s PartitionState) bool { return s.Leader > 0 && len(s.ISR) == 3 })
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Kill(ctx, st.Leader); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed leader %d (epoch %d)", st.Leader, st.LeaderEpoch)
		time.Sleep(2 * time.Second)
		if err := c.Start(ctx, st.Leader); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	wg.Wait()
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
	seen := map[string]int64{}
	for i, r := range got.records {
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
	resp, err := req.RequestWith(ctx, c.Broker(broker))
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
	mu.Lock()
	t.Logf("after expiry: %d bumps, outcomes %v", p.Bumps(), outcomes)
	mu.Unlock()
}
