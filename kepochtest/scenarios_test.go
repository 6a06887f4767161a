package kepochtest_test

import (
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/kepochtest"
)

// TestCleanElectionNothingDiverges: a leader change that loses nothing
// must not be reported; the consumer validates its position against the
// new leader and reads on, each record once.
func TestCleanElectionNothingDiverges(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	produce(t, c, "t", 0, values("a", 0, 10)...)
	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: "t", Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	consume(t, cons, 10)

	el, err := c.CleanElection(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if el.OldEpoch != 0 || el.NewEpoch != 1 || el.NewLeader == el.OldLeader {
		t.Fatalf("election %+v", el)
	}
	s, err := c.Partition(ctx, "t", 0)
	if err != nil || s.Leader != el.NewLeader || s.LeaderEpoch != 1 || s.LogEnd != 10 {
		t.Fatalf("after the election: %+v, %v", s, err)
	}
	produce(t, c, "t", 0, values("b", 10, 15)...)
	if end, err := c.EpochEnd(ctx, "t", 0, 0); err != nil || end != (kepochtest.EpochEnd{LeaderEpoch: 0, EndOffset: 10}) {
		t.Fatalf("OffsetForLeaderEpoch(0) = %+v, %v", end, err)
	}
	checkRecords(t, consume(t, cons, 5), 10, 1, values("b", 10, 15))
	if pos, _ := cons.Position("t", 0); pos != (consumer.Position{Offset: 15, Epoch: 1}) {
		t.Fatalf("position %v", pos)
	}
}

// TestDeleteRecordsBelowLogStart: a consumer restarting from a committed
// position that retention deleted must get a BelowLogStart break naming
// the offsets it will never read, then continue at the log start.
func TestDeleteRecordsBelowLogStart(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	for i := 0; i < 3; i++ {
		produce(t, c, "t", 0, values("a", 10*i, 10*i+10)...)
	}
	start, err := c.DeleteRecords(ctx, "t", 0, 20)
	if err != nil || start != 20 {
		t.Fatalf("DeleteRecords: log start %d, %v", start, err)
	}
	if held, err := c.Records(ctx, "t", 0); err != nil || len(held) != 10 || held[0].Offset != 20 {
		t.Fatalf("broker holds %d records (%v)", len(held), err)
	}

	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: "t", Partition: 0, Start: consumer.AtEpoch(10, 0)}); err != nil {
		t.Fatal(err)
	}
	p := pollFor(t, cons, 20*time.Second, "the break and the rest", func(p *polled) bool { return len(p.records) >= 10 })
	if len(p.errs) != 0 || len(p.events) != 1 || p.eventAt[0] != 0 {
		t.Fatalf("events %v at %v, errors %v", p.events, p.eventAt, p.errs)
	}
	if e := p.events[0]; e.Kind != consumer.BelowLogStart || e.Consumed.Offset != 10 || e.Skipped != (consumer.Range{From: 10, To: 20}) || !e.Replaced.Empty() {
		t.Fatalf("event %v", e)
	}
	checkRecords(t, p.records, 20, 0, values("a", 20, 30))
}

// TestRecreateTopicReported: a topic deleted and created again under the
// same name must be reported as Recreated (not as a truncation), and the
// new topic read from its start.
func TestRecreateTopicReported(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	produce(t, c, "t", 0, values("old", 0, 10)...)
	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: "t", Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	consume(t, cons, 10)

	r, err := c.RecreateTopic(ctx, "t", 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.NewID == r.OldID || r.NewID == (kepochtest.TopicID{}) {
		t.Fatalf("recreation %+v", r)
	}
	produce(t, c, "t", 0, values("new", 0, 5)...)

	p := pollFor(t, cons, 20*time.Second, "the new topic", func(p *polled) bool { return len(p.records) >= 5 })
	if len(p.errs) != 0 || len(p.events) != 1 || p.eventAt[0] != 0 {
		t.Fatalf("events %v at %v, errors %v", p.events, p.eventAt, p.errs)
	}
	if e := p.events[0]; e.Kind != consumer.Recreated || e.Consumed.Offset != 10 {
		t.Fatalf("event %v", e)
	}
	checkRecords(t, p.records, 0, -1, values("new", 0, 5))
}
