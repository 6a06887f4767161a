package producer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/producer"
)

// One partition's acked-write check failing and waiting for its retry
// does not hold up another partition's check: the retry waits on a timer,
// not in the loop that sends every partition's checks (which slept the
// backoff, up to twenty times longer each try, before anything else was
// sent).
func TestLedgerRetryDoesNotBlockOtherPartitions(t *testing.T) {
	c := newCluster(t, 2)
	const backoff = 5 * time.Second
	p, _ := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond), producer.RetryBackoff(backoff))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a"), prec(1, "b")))

	var failed0, asked1 atomic.Int32
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		if len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 1 {
			return nil, nil, false
		}
		rp := req.Topics[0].Partitions[0]
		if rp.Partition == 1 {
			asked1.Add(1)
			return nil, nil, false
		}
		failed0.Add(1)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = req.Topics[0].Topic
		sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
		sp.Partition, sp.ErrorCode = rp.Partition, kerr.UnknownServerError.Code
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
	move := func(part int32) {
		t.Helper()
		if err := c.MoveTopicPartition(topic, part, (c.LeaderFor(topic, part)+1)%3); err != nil {
			t.Fatal(err)
		}
	}
	move(0)
	eventually(t, 5*time.Second, "no check of partition 0", func() bool { return failed0.Load() > 0 })
	move(1)
	// Within well under the backoff partition 0's retry waits.
	eventually(t, backoff/2, "partition 1's check waited for partition 0's retry", func() bool { return asked1.Load() > 0 })
}
