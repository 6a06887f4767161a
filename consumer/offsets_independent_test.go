package consumer_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// TestSlowBrokerDoesNotHoldOthersValidations: an OffsetForLeaderEpoch that
// one broker does not answer (a broker that died with the connection open
// answers nothing until the request timeout) must not hold the validations
// and resets of partitions led by other brokers: those are sent and
// answered meanwhile.
func TestSlowBrokerDoesNotHoldOthersValidations(t *testing.T) {
	c := newCluster(t, 2)
	produceRange(t, c, 0, 0, 10)
	produceRange(t, c, 1, 0, 10)
	if c.LeaderFor(topic, 0) == c.LeaderFor(topic, 1) {
		if err := c.MoveTopicPartition(topic, 1, (c.LeaderFor(topic, 0)+1)%3); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	held := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				if rp.Partition == 1 {
					once.Do(func() { close(held) })
					c.SleepControl(func() { <-release })
				}
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.LeaderEpoch, sp.EndOffset = rp.LeaderEpoch, 1<<40 // nothing truncated
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	cons := newConsumer(t, c, consumer.RequestTimeout(30*time.Second))
	t.Cleanup(func() { close(release) }) // before the consumer's Close
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)},
		consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.AtEpoch(5, 0)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("partition 1 was never validated")
	}
	recs, evs, errs := pollUntil(t, cons, 10, 5*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 10})

	// Partition 0's leader is healthy: its validation is answered while
	// partition 1's leader still holds its own.
	if err := cons.SeekTo(topic, 0, consumer.AtEpoch(5, 0)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	recs, evs, errs = pollUntil(t, cons, 5, 3*time.Second)
	if len(recs) != 5 || len(evs)+len(errs) > 0 {
		t.Fatalf("after %v: %d records of partition 0, events %v, errors %v; partition 0: %s", time.Since(start).Round(time.Millisecond),
			len(recs), evs, errs, consumer.DebugPartition(cons, topic, 0))
	}
	checkInOrder(t, recs, map[int32]int64{0: 5}, map[int32]int64{0: 10})
}
