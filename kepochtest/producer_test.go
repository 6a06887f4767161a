package kepochtest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/kepochtest"
	"github.com/kepoch/kepoch/producer"
)

// reports collects what a kepoch producer tells the application besides
// delivery results.
type reports struct {
	mu       sync.Mutex
	lost     []producer.AckedWritesLost
	outcomes []producer.Outcome
}

func (r *reports) Lost() []producer.AckedWritesLost {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lost)
}

func (r *reports) Outcomes() []producer.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outcomes)
}

func newProducer(t *testing.T, c *kepochtest.Cluster) (*producer.Producer, *reports) {
	t.Helper()
	r := &reports{}
	p, err := producer.New(
		producer.SeedBrokers(c.Seeds()...),
		producer.RetryBackoff(20*time.Millisecond),
		producer.MetadataMaxAge(200*time.Millisecond),
		producer.OnAckedWritesLost(func(l producer.AckedWritesLost) {
			r.mu.Lock()
			r.lost = append(r.lost, l)
			r.mu.Unlock()
		}),
		producer.OnOutcome(func(o producer.Outcome) {
			r.mu.Lock()
			r.outcomes = append(r.outcomes, o)
			r.mu.Unlock()
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	return p, r
}

// produceSync writes values with the kepoch producer, failing the test on
// any error, and returns the results.
func produceSync(t *testing.T, p *producer.Producer, topic string, partition int32, vs ...string) []producer.Result {
	t.Helper()
	var rs []*producer.Record
	for _, v := range vs {
		rs = append(rs, &producer.Record{Topic: topic, Partition: partition, ExplicitPartition: true, Value: []byte(v)})
	}
	res, err := p.ProduceSync(testCtx(t), rs...)
	if err != nil {
		t.Fatalf("ProduceSync: %v", err)
	}
	return res
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func outcomeKinds(os []producer.Outcome) []string {
	var ks []string
	for _, o := range os {
		ks = append(ks, fmt.Sprintf("%T", o))
	}
	return ks
}

// TestUncleanElectionProducerReportsAckedWritesLost: writes the brokers
// acknowledged and an unclean election then removed must be reported to
// the producing application, exactly the lost range; the producer then
// writes on, once, after the new leader's records.
func TestUncleanElectionProducerReportsAckedWritesLost(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	p, rep := newProducer(t, c)
	produceSync(t, p, "t", 0, values("a", 0, 20)...)
	res := produceSync(t, p, "t", 0, values("a", 20, 30)...)
	if res[0].Offset != 20 || res[9].Offset != 29 {
		t.Fatalf("acknowledged at %d..%d", res[0].Offset, res[9].Offset)
	}

	tr, err := c.UncleanElection(ctx, "t", 0, 20)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Lost != (kepochtest.Range{From: 20, To: 30}) || tr.LostBatches[0].ProducerID != p.ProducerID().ID {
		t.Fatalf("truncation %+v; producer %v", tr, p.ProducerID())
	}
	produce(t, c, "t", 0, values("new", 20, 25)...) // the new leader's own records

	waitUntil(t, 20*time.Second, "the lost-writes report", func() bool { return len(rep.Lost()) > 0 })
	lost := rep.Lost()
	lb := tr.LostBatches[0]
	if len(lost) != 1 || lost[0].From != 20 || lost[0].To != 30 || lost[0].LeaderEpoch != 0 ||
		lost[0].Producer != (producer.ProducerID{ID: lb.ProducerID, Epoch: lb.ProducerEpoch}) || lost[0].FirstSequence != lb.BaseSequence {
		t.Fatalf("reported lost %+v; want [20,30) of epoch 0 written as %+v", lost, lb)
	}

	after := produceSync(t, p, "t", 0, "after")
	held, err := c.Records(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(values("a", 0, 20), values("new", 20, 25)...), "after")
	if got := kepochtest.Values(held); !slices.Equal(got, want) || after[0].Offset != 25 {
		t.Fatalf("broker holds %v (\"after\" acknowledged at %d); want %v", got, after[0].Offset, want)
	}
	// The new leader rebuilt its producer state from its log, so it
	// refused the producer's next sequence: a proven gap, then one epoch
	// bump and the batch rewritten.
	if ks := outcomeKinds(rep.Outcomes()); !slices.Equal(ks, []string{"producer.ProvenGap", "producer.ResequencedNoLoss"}) || p.Bumps() != 1 {
		t.Fatalf("outcomes %v, %d bumps; want a ProvenGap, then the batch resequenced under one bump", ks, p.Bumps())
	}
}

// TestLoseProducerState: after the leader forgets the partition's producer
// state it no longer recognizes a retried batch as a duplicate (the proof
// that the state is really gone), and kepoch's producer, whose next batch
// such a broker accepts, writes on once, in order, reporting nothing.
func TestLoseProducerState(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 2))

	// A retry of an acknowledged batch, sent as the producer would.
	produce(t, c, "t", 1, values("x", 0, 5)...)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	retryOnce := func() (int64, error) {
		s, err := c.Partition(ctx, "t", 1)
		if err != nil {
			return 0, err
		}
		f := kmsg.NewPtrFetchRequest()
		f.ReplicaID, f.MaxBytes, f.SessionEpoch = -1, 1<<20, -1
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = "t", s.TopicID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = 1, 1<<20, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		f.Topics = append(f.Topics, ft)
		fr, err := f.RequestWith(ctx, cl.Broker(int(s.Leader)))
		if err != nil {
			return 0, err
		}
		var b kmsg.RecordBatch // the first batch, as written (its CRC still holds)
		if err := b.ReadFrom(fr.Topics[0].Partitions[0].RecordBatches); err != nil {
			return 0, err
		}
		b.FirstOffset = 0
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic, pt.TopicID = "t", s.TopicID
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Partition, pp.Records = 1, b.AppendTo(nil)
		pt.Partitions = append(pt.Partitions, pp)
		req.Topics = append(req.Topics, pt)
		pr, err := req.RequestWith(ctx, cl.Broker(int(s.Leader)))
		if err != nil {
			return 0, err
		}
		return pr.Topics[0].Partitions[0].BaseOffset, kerr.ErrorForCode(pr.Topics[0].Partitions[0].ErrorCode)
	}
	// The client's connections die with a restart; resend on transport
	// errors only (a broker's answer is final).
	retry := func() (int64, error) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			base, err := retryOnce()
			var ke *kerr.Error
			if err == nil || errors.As(err, &ke) || time.Now().After(deadline) {
				return base, err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if base, err := retry(); err != nil || base != 0 {
		t.Fatalf("retry before the loss: base offset %d, %v; want the original 0", base, err)
	}
	if s, _ := c.Partition(ctx, "t", 1); s.LogEnd != 5 {
		t.Fatalf("the deduplicated retry was appended: log end %d", s.LogEnd)
	}

	p, rep := newProducer(t, c)
	produceSync(t, p, "t", 0, values("a", 0, 10)...)
	if err := c.LoseProducerState(ctx, "t", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.LoseProducerState(ctx, "t", 0); err != nil {
		t.Fatal(err)
	}
	if base, err := retry(); err != nil || base != 5 {
		t.Fatalf("retry after the loss: base offset %d, %v; want it appended again at 5", base, err)
	}
	if held, err := c.Records(ctx, "t", 1); err != nil || !slices.Equal(kepochtest.Values(held), append(values("x", 0, 5), values("x", 0, 5)...)) {
		t.Fatalf("broker holds %v (%v)", kepochtest.Values(held), err)
	}

	res := produceSync(t, p, "t", 0, values("a", 10, 20)...)
	if res[0].Offset != 10 {
		t.Fatalf("acknowledged at %d", res[0].Offset)
	}
	if held, err := c.Records(ctx, "t", 0); err != nil || !slices.Equal(kepochtest.Values(held), values("a", 0, 20)) {
		t.Fatalf("broker holds %v (%v)", kepochtest.Values(held), err)
	}
	if len(rep.Lost()) != 0 || len(rep.Outcomes()) != 0 || p.Bumps() != 0 {
		t.Fatalf("lost %v, outcomes %v, %d bumps; want none", rep.Lost(), outcomeKinds(rep.Outcomes()), p.Bumps())
	}
}
