package consumer_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// TestStaleCorruptAnswerIsNoError: an answer that does not decode, buffered
// while the application was not polling, goes stale when the leader moves
// (the partition validates its position and fetches from the new leader).
// Its decode error is not the partition's any more: no error is reported
// for it, nothing halts, and the new leader's records at the same offsets
// are delivered. (Reported, the error would say the partition halted at
// offset 10 while it goes on, and an application skipping past a corrupt
// batch would skip records the new leader has intact.)
func TestStaleCorruptAnswerIsNoError(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	// The move below ends epoch 0 at 10: the position is consistent.
	answerEpochEnds(c, func(rp kmsg.OffsetForLeaderEpochRequestTopicPartition) (int32, int64) {
		if rp.LeaderEpoch == 0 {
			return 0, 10
		}
		return rp.LeaderEpoch, 1 << 40
	})
	cons, recs := startAt0(t, c, 10, consumer.DisableFetchSessions(), consumer.MetadataMaxAge(100*time.Millisecond))

	answered := make(chan struct{})
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.FetchRequest)
		if len(req.Topics) == 0 || len(req.Topics[0].Partitions) == 0 || req.Topics[0].Partitions[0].FetchOffset != 10 {
			c.KeepControl()
			return nil, nil, false
		}
		b := oneRecordBatch(t, nil, 10, 0)
		b[len(b)-1] ^= 0xff // the CRC no longer matches
		close(answered)
		return fetchAnswer(req, 11, b), nil, true
	})
	<-answered
	waitFor(t, 5*time.Second, "the corrupt answer to be buffered", func() bool {
		return strings.Contains(consumer.DebugPartition(cons, topic, 0), "buffered=true")
	})
	from := c.LeaderFor(topic, 0)
	if err := c.MoveTopicPartition(topic, 0, (from+1)%3); err != nil {
		t.Fatal(err)
	}
	produceRange(t, c, 0, 10, 20)
	waitFor(t, 5*time.Second, "the leader move to be validated", func() bool {
		s := consumer.DebugPartition(cons, topic, 0)
		return strings.Contains(s, "state=fetching") && strings.Contains(s, "leader="+strconv.Itoa(int((from+1)%3))+"@1")
	})

	more, evs, errs := pollUntil(t, cons, 10, 5*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v for a stale answer; partition: %s", evs, errs, consumer.DebugPartition(cons, topic, 0))
	}
	checkInOrder(t, append(recs, more...), map[int32]int64{0: 0}, map[int32]int64{0: 20})
	checkEpochs(t, more, 10, 1)
}
