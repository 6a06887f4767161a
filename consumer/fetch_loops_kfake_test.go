package consumer_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// A fetch loop whose broker no assigned partition routes to any more (its
// partitions' leaders moved away) retires: it leaves the consumer, and the
// others share the buffer it had a share of. A partition led by the broker
// again starts a new loop there, and Close waits for every loop. Kept, a
// loop per broker ever led from stayed for the consumer's life, and each
// shrank every broker's share of MaxBufferedBytes.
func TestFetchLoopRetiresWhenLeadershipMovesAway(t *testing.T) {
	c := newClusterWith(t, 3)
	// kfake answers OffsetForLeaderEpoch -1/-1 for an old epoch while the
	// new one is empty: here each validation finds its epoch whole.
	answerEpochEnds(c, func(rp kmsg.OffsetForLeaderEpochRequestTopicPartition) (int32, int64) {
		return rp.LeaderEpoch, 1 << 40
	})
	const maxBuffered = 120 << 20
	cons := newConsumer(t, c, consumer.MaxBufferedBytes(maxBuffered))
	assignAll(t, cons, 3, consumer.At(0))
	next := int64(0)
	produceAll := func() {
		t.Helper()
		for p := int32(0); p < 3; p++ {
			produceRange(t, c, p, next, next+5)
		}
		recs, evs, errs := pollUntil(t, cons, 15, 10*time.Second)
		if len(recs) != 15 || len(evs)+len(errs) > 0 {
			t.Fatalf("%d records, events %v, errors %v; want 15\n%s", len(recs), evs, errs, consumer.DebugConsumer(cons))
		}
		next += 5
	}
	loopsAre := func(what string, want []int32) {
		t.Helper()
		defer func() {
			if t.Failed() {
				ids, running := consumer.FetchLoops(cons)
				t.Logf("loops %v running %d share %d; want %v\n%s", ids, running, consumer.BufferShare(cons), want, consumer.DebugConsumer(cons))
			}
		}()
		waitFor(t, 10*time.Second, what, func() bool {
			ids, running := consumer.FetchLoops(cons)
			return slices.Equal(ids, want) && running == len(want) && consumer.BufferShare(cons) == maxBuffered/len(want)
		})
	}
	move := func(p, to int32) {
		t.Helper()
		if c.LeaderFor(topic, p) == to {
			return
		}
		if err := c.MoveTopicPartition(topic, p, to); err != nil {
			t.Fatal(err)
		}
	}
	// Partition p led by broker p.
	for p := int32(0); p < 3; p++ {
		move(p, p)
	}
	produceAll()
	loopsAre("a loop per leader", []int32{0, 1, 2})

	// Broker 0 leads no partition any more.
	move(0, 1)
	produceAll()
	loopsAre("broker 0's loop retired", []int32{1, 2})

	// Partition 0 led by broker 0 again: a loop for it again.
	move(0, 0)
	produceAll()
	loopsAre("a loop for broker 0 again", []int32{0, 1, 2})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cons.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, running := consumer.FetchLoops(cons); running != 0 {
		t.Fatalf("%d fetch loops run after Close", running)
	}
}

// Partitions unassigned retire the loops of the brokers they were read
// from.
func TestFetchLoopRetiresWhenUnassigned(t *testing.T) {
	c := newClusterWith(t, 3)
	cons := newConsumer(t, c)
	assignAll(t, cons, 3, consumer.At(0))
	for p := int32(0); p < 3; p++ {
		produceRange(t, c, p, 0, 5)
	}
	if recs, _, _ := pollUntil(t, cons, 15, 10*time.Second); len(recs) != 15 {
		t.Fatalf("%d records; want 15", len(recs))
	}
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(5)}); err != nil {
		t.Fatal(err)
	}
	want := []int32{c.LeaderFor(topic, 0)}
	waitFor(t, 10*time.Second, "only partition 0's leader's loop", func() bool {
		ids, running := consumer.FetchLoops(cons)
		return slices.Equal(ids, want) && running == 1
	})
	if err := cons.Assign(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "no loop", func() bool {
		ids, running := consumer.FetchLoops(cons)
		return len(ids) == 0 && running == 0
	})
}

// A retired fetch loop closes its fetch session as Close does: its ID with
// the final epoch (-1), so that it does not hold a slot of the broker's
// session cache until it ages out.
func TestRetiredFetchLoopClosesItsSession(t *testing.T) {
	c, reqs := sessionWatchedCluster(t)
	cons := newConsumer(t, c)
	assignAll(t, cons, 1, consumer.At(0))
	var session int32
	deadline := time.After(10 * time.Second)
	for session == 0 {
		select {
		case r := <-reqs:
			if r.epoch > 0 {
				session = r.id
			}
		case <-deadline:
			t.Fatal("no incremental fetch")
		}
	}
	if err := cons.Assign(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case r := <-reqs:
			if r.id == session && r.epoch == -1 {
				if ids, _ := consumer.FetchLoops(cons); len(ids) != 0 {
					t.Fatalf("loops %v after the session was closed", ids)
				}
				return
			}
		case <-deadline:
			t.Fatalf("session %d not closed after its loop had no partition left", session)
		}
	}
}
