package producer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/producer"
)

// An acked-write check's OffsetForLeaderEpoch answered about another
// partition (the broker's mistake) is refused and asked again, not applied
// to the partition asked about: its end offset 0 reported partition 0's
// acknowledged records lost.
func TestLedgerEpochEndOfAnotherPartitionRefused(t *testing.T) {
	c := newCluster(t, 2)
	p, rec := newRecorded(t, c, producer.RetryBackoff(50*time.Millisecond))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a"), prec(0, "b")))

	var asked0 atomic.Int32
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		if len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 1 || req.Topics[0].Partitions[0].Partition != 0 {
			return nil, nil, false
		}
		if asked0.Add(1) > 1 {
			return nil, nil, false
		}
		rp := req.Topics[0].Partitions[0]
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = req.Topics[0].Topic
		sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
		// Partition 1's answer: its epoch ended at 0.
		sp.Partition, sp.LeaderEpoch, sp.EndOffset = 1, rp.LeaderEpoch, 0
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "after"))) // the producer learns of the change
	eventually(t, 5*time.Second, "the check of partition 0 neither asked again nor ended", func() bool {
		return asked0.Load() > 1 || len(rec.Lost()) > 0
	})
	wantNoLost(t, rec)
}
