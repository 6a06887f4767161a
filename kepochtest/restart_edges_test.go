package kepochtest_test

import (
	"context"
	stderrors "errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/kepochtest"
)

// A partition that was never written keeps its leader and epoch through a
// restart made for another partition (UncleanElection: "other partitions
// keep their logs, leaders and epochs").
func TestEmptyPartitionSurvivesRestart(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 4))
	produce(t, c, "t", 0, values("a", 0, 10)...)
	if _, err := c.CleanElection(ctx, "t", 1); err != nil { // empty partition: epoch 1
		t.Fatal(err)
	}
	before, err := c.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.UncleanElection(ctx, "t", 0, 5); err != nil {
		t.Fatal(err)
	}
	after, err := c.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for p := 1; p < 4; p++ {
		b, a := before.Partitions[p], after.Partitions[p]
		if a.Leader != b.Leader || a.LeaderEpoch != b.LeaderEpoch {
			t.Errorf("untouched empty partition %d: leader %d epoch %d before, leader %d epoch %d after UncleanElection on partition 0",
				p, b.Leader, b.LeaderEpoch, a.Leader, a.LeaderEpoch)
		}
	}
}

// A partition whose records were all deleted keeps its log start and end
// through a restart (LoseProducerState: "the log and the leader epoch do
// not change").
func TestFullyDeletedPartitionSurvivesRestart(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	produce(t, c, "t", 0, values("a", 0, 5)...)
	if start, err := c.DeleteRecords(ctx, "t", 0, 5); err != nil || start != 5 {
		t.Fatalf("DeleteRecords: %d, %v", start, err)
	}
	before, err := c.Partition(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoseProducerState(ctx, "t", 0); err != nil {
		t.Fatal(err)
	}
	after, err := c.Partition(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if after.LogStart != before.LogStart || after.LogEnd != before.LogEnd || after.LeaderEpoch != before.LeaderEpoch {
		t.Errorf("LoseProducerState changed the log: before %+v, after %+v", before, after)
	}
	offs := produce(t, c, "t", 0, "b")
	if offs[0] != 5 {
		t.Errorf("next record written at offset %d; want 5 (offsets 0..4 were acknowledged before)", offs[0])
	}
}

// The OffsetForLeaderEpoch gate of an election holds until the new epoch is
// written, even when another scenario restarts the cluster in between.
func TestGateSurvivesLaterRestart(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 2))
	produce(t, c, "t", 0, values("a", 0, 10)...)
	produce(t, c, "t", 1, values("b", 0, 10)...)
	if _, err := c.CleanElection(ctx, "t", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.LoseProducerState(ctx, "t", 1); err != nil { // a restart for the other partition
		t.Fatal(err)
	}
	// Asked on a connection of its own (a consumer's), as a client
	// validating its position after the election does.
	s, err := c.Partition(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, -1, 0
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ectx, cl.Broker(int(s.Leader)))
	if err == nil {
		p := resp.Topics[0].Partitions[0]
		t.Fatalf("OffsetForLeaderEpoch(0) answered epoch %d end %d (error %d) before the new epoch was written: the gate is gone", p.LeaderEpoch, p.EndOffset, p.ErrorCode)
	}
	t.Logf("OffsetForLeaderEpoch(0) before the write: %v (held, as documented)", err)
	produce(t, c, "t", 0, "c")
	if end, err := c.EpochEnd(ctx, "t", 0, 0); err != nil || end != (kepochtest.EpochEnd{LeaderEpoch: 0, EndOffset: 10}) {
		t.Fatalf("after the write: OffsetForLeaderEpoch(0) = %+v, %v", end, err)
	}
}

// Produce takes "at most 10000 values of at most 1 MB in all" as one batch
// (after the fix: whose batch is at most 1 MiB; ErrInvalidArgument
// otherwise, never the broker's MESSAGE_TOO_LARGE).
func TestProduceWithinDocumentedLimits(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	vs := make([]string, 10000)
	for i := range vs {
		vs[i] = strings.Repeat("x", 98) // 980,000 bytes in all
	}
	if _, err := c.Produce(ctx, "t", 0, vs...); err != nil && !stderrors.Is(err, kepochtest.ErrInvalidArgument) {
		t.Errorf("10000 values, 980000 bytes: %v", err)
	}
	for i := range vs {
		vs[i] = strings.Repeat("x", 90)
	}
	if _, err := c.Produce(ctx, "t", 0, vs...); err != nil {
		t.Errorf("10000 values, 900000 bytes: %v", err)
	}
	one := strings.Repeat("y", 1_000_000)
	if _, err := c.Produce(ctx, "t", 0, one); err != nil {
		t.Errorf("one value of 1,000,000 bytes: %v (ErrInvalidArgument: %v)", err, stderrors.Is(err, kepochtest.ErrInvalidArgument))
	}
	held, err := c.Records(ctx, "t", 0)
	if err != nil || len(held) != 10001 {
		t.Errorf("broker holds %d records, %v", len(held), err)
	}
}
