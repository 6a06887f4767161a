package kepochtest_test

import (
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
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
