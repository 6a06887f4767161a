package consumer_test

import (
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
)

// TestSeekDoesNotWaitForTheFetchInFlight: after a seek (or a new
// assignment), records come without waiting for the long-polling fetch that
// was in flight for the old position (FetchMaxWait, here 3s), and nothing is
// lost or duplicated for the other partitions of that fetch.
func TestSeekDoesNotWaitForTheFetchInFlight(t *testing.T) {
	c := newCluster(t, 3)
	for p := int32(0); p < 3; p++ {
		produceRange(t, c, p, 0, 10)
	}
	cons := newConsumer(t, c, consumer.FetchMaxWait(3*time.Second))
	assignAll(t, cons, 3, consumer.At(0))
	recs, _, _ := pollUntil(t, cons, 30, 10*time.Second)
	checkInOrder(t, recs, map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 10, 1: 10, 2: 10})
	time.Sleep(100 * time.Millisecond) // the fetches at the log end are parked by the brokers

	for _, how := range []string{"seek", "assign"} {
		start := time.Now()
		if how == "seek" {
			if err := cons.Seek(topic, 0, 5); err != nil {
				t.Fatal(err)
			}
		} else if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(5)},
			consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.At(10)},
			consumer.Assignment{Topic: topic, Partition: 2, Start: consumer.At(10)}); err != nil {
			t.Fatal(err)
		}
		got, _, _ := pollUntil(t, cons, 5, 5*time.Second)
		took := time.Since(start)
		checkInOrder(t, got, map[int32]int64{0: 5}, map[int32]int64{0: 10})
		if took > time.Second {
			t.Errorf("%s: the first records came after %v: the fetch in flight was waited for", how, took)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The other partitions go on from where they were.
	produceRange(t, c, 1, 10, 15)
	produceRange(t, c, 2, 10, 15)
	got, _, _ := pollUntil(t, cons, 10, 10*time.Second)
	checkInOrder(t, got, map[int32]int64{1: 10, 2: 10}, map[int32]int64{1: 15, 2: 15})
}
