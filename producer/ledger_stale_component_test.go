package producer_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/metadata"
	"github.com/kepoch/kepoch/producer"
)

// epochAsk is one OffsetForLeaderEpoch request for a partition, as the
// cluster received it.
type epochAsk struct {
	Partition, Epoch, Current int32
}

// An acked-write check superseded while it was on the wire (the leader
// changed again: its CurrentLeaderEpoch is fenced) is dropped, not retried:
// one OffsetForLeaderEpoch per partition per leader change. Retried, the
// stale question was refused FENCED_LEADER_EPOCH by the new leader up to
// twenty times, each after a backoff spent blocking every other
// partition's checks.
func TestSupersededLedgerCheckIsDropped(t *testing.T) {
	c := newCluster(t, 2)
	// Metadata through a client of its own: kfake holds the requests
	// behind a held one on the same connection, and the producer must
	// learn of the second leader change while its check is held.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	r := metadata.NewRefresher(cl, metadata.MaxAge(100*time.Millisecond))
	t.Cleanup(func() { r.Close(); cl.Close() }) // after the producer's Close (cleanups run last first)
	p, rec := newRecorded(t, c, producer.WithMetadata(r))
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a"), prec(1, "b")))

	var mu sync.Mutex
	var asks []epochAsk
	release := make(chan struct{})
	held := make(chan struct{})
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		mu.Lock()
		first := len(asks) == 0
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rp.LeaderEpoch < rp.CurrentLeaderEpoch {
					// A question (a probe asks for the current
					// epoch's end: kfake answers the question -1/-1
					// while the new epoch is empty).
					asks = append(asks, epochAsk{rp.Partition, rp.LeaderEpoch, rp.CurrentLeaderEpoch})
				}
			}
		}
		mu.Unlock()
		if first {
			// The first check (partition 0, current epoch 1) waits
			// until the leader has moved again: kfake then answers
			// FENCED_LEADER_EPOCH.
			close(held)
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	seen := func() []epochAsk {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asks)
	}
	move := func(part int32) {
		t.Helper()
		if err := c.MoveTopicPartition(topic, part, (c.LeaderFor(topic, part)+1)%3); err != nil {
			t.Fatal(err)
		}
	}
	move(0) // epoch 1
	<-held
	move(0) // epoch 2
	// The check for epoch 2 is queued once the producer sees it.
	eventually(t, 5*time.Second, "the producer never saw epoch 2", func() bool {
		return producer.PartitionLeaderEpoch(p, topic, 0) == 2
	})
	close(release)
	eventually(t, 5*time.Second, "no check under epoch 2", func() bool {
		return slices.Contains(seen(), epochAsk{0, 0, 2})
	})
	// A barrier: partition 1's check, queued after everything partition 0
	// asked so far.
	move(1)
	eventually(t, 5*time.Second, "no check of partition 1", func() bool {
		return slices.Contains(seen(), epochAsk{1, 0, 1})
	})
	if got := seen(); !slices.Equal(got, []epochAsk{{0, 0, 1}, {0, 0, 2}, {1, 0, 1}}) {
		t.Fatalf("OffsetForLeaderEpoch requests %v; want one per partition and leader change", got)
	}
	wantNoLost(t, rec)
}
