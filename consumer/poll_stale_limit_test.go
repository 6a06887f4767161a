package consumer_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// TestPollLimitNotSpentOnAStaleAnswer: two partitions have answers buffered,
// partition 0's first. Partition 0's leader then moves, so its buffered
// answer is stale (the partition validates its position against the new
// leader, which cannot answer yet: UNKNOWN_LEADER_EPOCH, as a leader that
// has not caught up with its election answers). A Poll with MaxPollRecords
// must still return partition 1's records: counting partition 0's stale
// records against the limit left partition 1's answer for a later Poll,
// and the Poll, having returned nothing, waited for news that only
// partition 0's recovery brought. An unanswering leader held another
// leader's partition.
func TestPollLimitNotSpentOnAStaleAnswer(t *testing.T) {
	c := newCluster(t, 2)
	var refuse atomic.Bool
	answerEpochs(c, refuse.Load, func(kmsg.OffsetForLeaderEpochRequestTopicPartition) (int16, int32, int64) {
		return kerr.UnknownLeaderEpoch.Code, -1, -1
	})
	cons := newConsumer(t, c, consumer.MaxPollRecords(5), consumer.MetadataMaxAge(100*time.Millisecond))
	assignAll(t, cons, 2, consumer.At(0))
	buffered := func(p int32) func() bool {
		return func() bool { return strings.Contains(consumer.DebugPartition(cons, topic, p), "buffered=true") }
	}
	// Positions with an epoch (a leader change validates them).
	produceRange(t, c, 0, 0, 5)
	produceRange(t, c, 1, 0, 5)
	if recs, evs, errs := pollUntil(t, cons, 10, 5*time.Second); len(recs) != 10 || len(evs)+len(errs) > 0 {
		t.Fatalf("first records: %d, events %v, errors %v", len(recs), evs, errs)
	}
	// Partition 0's answer first, then partition 1's: Poll goes through
	// them in that order.
	produceRange(t, c, 0, 5, 15)
	waitFor(t, 5*time.Second, "partition 0's answer", buffered(0))
	produceRange(t, c, 1, 5, 15)
	waitFor(t, 5*time.Second, "partition 1's answer", buffered(1))

	refuse.Store(true)
	from := c.LeaderFor(topic, 0)
	if err := c.MoveTopicPartition(topic, 0, (from+1)%3); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "partition 0 to validate against its new leader", func() bool {
		s := consumer.DebugPartition(cons, topic, 0)
		return strings.Contains(s, "state=awaiting-validation") && strings.Contains(s, "leader="+strconv.Itoa(int((from+1)%3))+"@1")
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	f, err := cons.Poll(ctx)
	if err != nil {
		t.Fatalf("Poll: %v, with partition 1's answer buffered; consumer: %s", err, consumer.DebugConsumer(cons))
	}
	defer f.Release()
	if len(f.Truncations)+len(f.Errors) > 0 {
		t.Fatalf("events %v errors %v", f.Truncations, f.Errors)
	}
	if len(f.Records) == 0 {
		t.Fatal("Poll returned no records")
	}
	for i, r := range f.Records {
		if r.Partition != 1 || r.Offset != 5+int64(i) {
			t.Fatalf("record %d of the Poll is %d/%d; want partition 1's from offset 5 on", i, r.Partition, r.Offset)
		}
	}
}
