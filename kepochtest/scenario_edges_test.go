package kepochtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/kepochtest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLoseProducerStateAfterWholeLogCut: an UncleanElection that cuts
// the whole log (keep in the first batch) leaves an empty first segment;
// a later restart (LoseProducerState documents "the log and the leader
// epoch do not change") must keep the leader, epoch, log start and end.
func TestLoseProducerStateAfterWholeLogCut(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	produce(t, c, "t", 0, values("a", 0, 5)...)
	tr, err := c.UncleanElection(ctx, "t", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Divergence != 0 || tr.NewEpoch != 1 {
		t.Fatalf("truncation %+v", tr)
	}
	before, err := c.Partition(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before: %+v", before)
	if err := c.LoseProducerState(ctx, "t", 0); err != nil {
		t.Fatal(err)
	}
	after, err := c.Partition(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after: %+v", after)
	if after.LeaderEpoch != before.LeaderEpoch || after.Leader != before.Leader || after.LogStart != before.LogStart || after.LogEnd != before.LogEnd {
		t.Fatalf("LoseProducerState changed the partition: before %+v, after %+v", before, after)
	}
}

// TestGateAfterRecreate: a CleanElection's OffsetForLeaderEpoch gate
// must not hold requests about the topic recreated under the same name.
func TestGateAfterRecreate(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	produce(t, c, "t", 0, values("a", 0, 5)...)
	if _, err := c.CleanElection(ctx, "t", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RecreateTopic(ctx, "t", 1); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "t", 0, values("b", 0, 5)...)
	s, err := c.Partition(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recreated: %+v", s)
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	end, err := c.EpochEnd(ectx, "t", 0, s.LeaderEpoch)
	if err != nil {
		t.Fatalf("OffsetForLeaderEpoch(%d) on the recreated topic: %v", s.LeaderEpoch, err)
	}
	if end != (kepochtest.EpochEnd{LeaderEpoch: s.LeaderEpoch, EndOffset: 5}) {
		t.Fatalf("OffsetForLeaderEpoch(%d) = %+v", s.LeaderEpoch, end)
	}
}

// TestUncleanElectionCutsAbortMarker: an UncleanElection whose cut
// removes an aborted transaction's abort marker but keeps its data must not
// make that data readable as committed.
func TestUncleanElectionCutsAbortMarker(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...), kgo.TransactionalID("txn"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("aborted-0")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	txn.Close()
	// aborted-0 at 0, abort marker at 1, then a plain batch at 2..4.
	produce(t, c, "t", 0, values("plain", 2, 5)...)
	tr, err := c.UncleanElection(ctx, "t", 0, 1) // cuts the marker and what follows
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("truncation %+v", tr)
	produce(t, c, "t", 0, values("after", 0, 2)...)

	cons := newConsumer(t, c, consumer.ReadCommitted())
	if err := cons.Assign(consumer.Assignment{Topic: "t", Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	p := pollFor(t, cons, 10*time.Second, "records", func(p *polled) bool { return len(p.records) >= 2 })
	for _, r := range p.records {
		if string(r.Value) == "aborted-0" {
			t.Fatalf("read_committed delivered the aborted record %q at %d after the cut (records %d)", r.Value, r.Offset, len(p.records))
		}
	}
}
