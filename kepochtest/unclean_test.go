package kepochtest_test

import (
	stderrors "errors"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/kepochtest"
)

// TestUncleanElectionConsumerRewinds: a consumer that read 30 records sees
// the last 10 vanish in an unclean election and 5 new records take their
// offsets. kepoch must report one Diverged break whose divergence point
// is the broker's own OffsetForLeaderEpoch answer, deliver nothing of the
// old lineage after it, and then the new lineage once, in order.
func TestUncleanElectionConsumerRewinds(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("payments", 1))
	produce(t, c, "payments", 0, values("payment", 0, 20)...)
	produce(t, c, "payments", 0, values("payment", 20, 30)...)

	cons := newConsumer(t, c, consumer.TruncationPolicy(consumer.PolicyEarliest))
	if err := cons.Assign(consumer.Assignment{Topic: "payments", Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, consume(t, cons, 30), 0, 0, values("payment", 0, 30))

	tr, err := c.UncleanElection(ctx, "payments", 0, 20)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Divergence != 20 || tr.Lost != (kepochtest.Range{From: 20, To: 30}) || tr.OldEpoch != 0 || tr.NewEpoch != 1 || tr.NewLeader == tr.OldLeader {
		t.Fatalf("truncation %+v", tr)
	}
	if len(tr.LostBatches) != 1 || tr.LostBatches[0].Base != 20 || tr.LostBatches[0].Last != 29 || tr.LostBatches[0].LeaderEpoch != 0 {
		t.Fatalf("lost batches %+v", tr.LostBatches)
	}
	offs := produce(t, c, "payments", 0, values("refund", 0, 5)...)
	if offs[0] != 20 {
		t.Fatalf("the new leader wrote at %v; want 20..24", offs)
	}
	// The broker's log is the new lineage; its own epoch answer.
	held, err := c.Records(ctx, "payments", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := kepochtest.Values(held); len(got) != 25 || got[19] != "payment-19" || got[20] != "refund-0" || held[20].LeaderEpoch != 1 {
		t.Fatalf("broker holds %v", got)
	}
	end, err := c.EpochEnd(ctx, "payments", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if end != (kepochtest.EpochEnd{LeaderEpoch: 0, EndOffset: 20}) {
		t.Fatalf("OffsetForLeaderEpoch(0) = %+v", end)
	}

	p := pollFor(t, cons, 20*time.Second, "the break and the new lineage", func(p *polled) bool { return len(p.records) >= 5 })
	if len(p.errs) != 0 || len(p.events) != 1 || p.eventAt[0] != 0 {
		t.Fatalf("events %v at %v, errors %v", p.events, p.eventAt, p.errs)
	}
	e := p.events[0]
	if e.Kind != consumer.Diverged || e.Consumed != (consumer.Position{Offset: 30, Epoch: 0}) ||
		e.Divergent.Offset != end.EndOffset || e.Divergent.Epoch != end.LeaderEpoch ||
		e.Replaced != (consumer.Range{From: 20, To: 30}) || e.Halted {
		t.Fatalf("event %v (%+v); broker says epoch 0 ends at %d", e, e, end.EndOffset)
	}
	checkRecords(t, p.records, 20, 1, values("refund", 0, 5))
}

// TestUncleanElectionMidBatchHaltsUnderPolicyNone: keep inside a batch cuts
// at the batch's start (a replica holds whole batches), and a PolicyNone
// consumer halts with a LogTruncationError at the broker's divergence
// point, delivering nothing of either lineage until it seeks.
func TestUncleanElectionMidBatchHaltsUnderPolicyNone(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 2))
	produce(t, c, "t", 1, values("a", 0, 10)...)
	produce(t, c, "t", 1, values("a", 10, 20)...)
	produce(t, c, "t", 0, values("other", 0, 3)...)

	cons := newConsumer(t, c, consumer.TruncationPolicy(consumer.PolicyNone))
	if err := cons.Assign(consumer.Assignment{Topic: "t", Partition: 1, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	consume(t, cons, 20)

	tr, err := c.UncleanElection(ctx, "t", 1, 15)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Divergence != 10 || tr.Lost != (kepochtest.Range{From: 10, To: 20}) {
		t.Fatalf("keep 15 inside batch 10..19: %+v", tr)
	}
	// The other partition kept its log and epoch through the restart.
	if s, err := c.Partition(ctx, "t", 0); err != nil || s.LogEnd != 3 || s.LeaderEpoch != 0 {
		t.Fatalf("partition 0 after the restart: %+v, %v", s, err)
	}
	produce(t, c, "t", 1, "b-10")
	end, err := c.EpochEnd(ctx, "t", 1, 0)
	if err != nil {
		t.Fatal(err)
	}

	p := pollFor(t, cons, 20*time.Second, "the halt", func(p *polled) bool { return len(p.errs) > 0 })
	if len(p.records) != 0 || len(p.events) != 1 || len(p.errs) != 1 {
		t.Fatalf("%d records, events %v, errors %v", len(p.records), p.events, p.errs)
	}
	e := p.events[0]
	if e.Kind != consumer.Diverged || !e.Halted || e.Divergent.Offset != end.EndOffset || e.Divergent.Offset != 10 || e.Replaced != (consumer.Range{From: 10, To: 20}) {
		t.Fatalf("event %v; broker says %+v", e, end)
	}
	var lte *errors.LogTruncationError
	if !stderrors.As(p.errs[0], &lte) || !stderrors.Is(p.errs[0], errors.ErrLogTruncation) {
		t.Fatalf("error %v is not a LogTruncationError", p.errs[0])
	}
	if d, ok := lte.For("t", 1); !ok || d.Divergent.Offset != 10 || d.Consumed.Offset != 20 {
		t.Fatalf("divergence %+v", d)
	}
	// The application accepts the broker's answer and resumes there.
	if err := cons.SeekTo("t", 1, consumer.AtEpoch(e.Resume.Offset, end.LeaderEpoch)); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, consume(t, cons, 1), 10, 1, []string{"b-10"})
}

// TestUncleanElectionRefusesWhatIsNotOne: the scenario's preconditions are
// typed errors, and nothing changes when one fails.
func TestUncleanElectionRefusesWhatIsNotOne(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	produce(t, c, "t", 0, values("a", 0, 10)...)
	if _, err := c.DeleteRecords(ctx, "t", 0, 5); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		topic string
		keep  int64
		want  error
	}{
		{"t", 10, kepochtest.ErrNothingLost},
		{"t", 3, kepochtest.ErrBelowLogStart},
		{"t", -1, kepochtest.ErrInvalidArgument},
		{"nope", 0, kepochtest.ErrUnknownPartition},
	} {
		_, err := c.UncleanElection(ctx, tc.topic, 0, tc.keep)
		var he *kepochtest.Error
		if !stderrors.Is(err, tc.want) || !stderrors.As(err, &he) {
			t.Errorf("UncleanElection(%s, keep %d) = %v; want %v", tc.topic, tc.keep, err, tc.want)
		}
	}
	if s, err := c.Partition(ctx, "t", 0); err != nil || s.LogStart != 5 || s.LogEnd != 10 || s.LeaderEpoch != 0 {
		t.Fatalf("after refused scenarios: %+v, %v", s, err)
	}
	c.Close()
	if _, err := c.UncleanElection(ctx, "t", 0, 7); !stderrors.Is(err, kepochtest.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
